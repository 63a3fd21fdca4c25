//! Reading the PHP process's memory with process_vm_readv: no ptrace stop, so the
//! interpreter never pauses for a sample, and what is read can be torn (the VM moves on
//! while we read). Every caller treats a value as a claim to check, never as a fact.
//!
//! Frames (`zend_execute_data`) live on the VM stack, a few hundred bytes apart, callers
//! below callees; a walk reads a window that ends at the current frame and so usually
//! finds the callers' frames in the bytes it already has: one system call for a whole
//! stack instead of one per frame.

use std::io;

/// Bytes of VM stack one window read brings: ten to thirty frames of ordinary functions.
const WINDOW: usize = 4096;

/// Reads from one process; owns the window buffer so that a sample allocates nothing.
pub struct Memory {
    pid: libc::pid_t,
    window: Vec<u8>,
    /// Address of `window[0]`, and how many bytes of it are valid (0: no window).
    window_start: u64,
    window_len: usize,
    /// System calls made, for the cost figures.
    pub reads: u64,
}

impl Memory {
    pub fn new(pid: u32) -> Memory {
        Memory {
            pid: pid as libc::pid_t,
            window: vec![0; WINDOW],
            window_start: 0,
            window_len: 0,
            reads: 0,
        }
    }

    /// Forgets the window: the next sample must not trust bytes read during the last one.
    pub fn reset(&mut self) {
        self.window_len = 0;
    }

    /// Fills `buf` from `addr`, all of it or an error (a short read is an error: the
    /// range crossed into unmapped memory).
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        self.reads += 1;
        read_exact(self.pid, addr, buf)
    }

    pub fn read_u64(&mut self, addr: u64) -> io::Result<u64> {
        let mut bytes = [0u8; 8];
        self.read(addr, &mut bytes)?;
        Ok(u64::from_ne_bytes(bytes))
    }

    /// `N` bytes at `addr` from the window, reading a new window that ends at `addr + N`
    /// when they are not in it. Falls back to reading the bytes alone when the window's
    /// lower part is not mapped (a VM stack page at the bottom of a mapping).
    pub fn read_stack<const N: usize>(&mut self, addr: u64) -> io::Result<[u8; N]> {
        let mut out = [0u8; N];
        let end = addr.checked_add(N as u64).ok_or_else(bad_address)?;
        if let Some(offset) = self.in_window(addr, end) {
            out.copy_from_slice(&self.window[offset..offset + N]);
            return Ok(out);
        }
        let start = end.saturating_sub(WINDOW as u64);
        let len = (end - start) as usize;
        self.reads += 1;
        if read_exact(self.pid, start, &mut self.window[..len]).is_ok() {
            self.window_start = start;
            self.window_len = len;
            let offset = (addr - start) as usize;
            out.copy_from_slice(&self.window[offset..offset + N]);
            return Ok(out);
        }
        self.window_len = 0;
        self.read(addr, &mut out)?;
        Ok(out)
    }

    fn in_window(&self, addr: u64, end: u64) -> Option<usize> {
        let window_end = self.window_start + self.window_len as u64;
        (self.window_len > 0 && addr >= self.window_start && end <= window_end)
            .then(|| (addr - self.window_start) as usize)
    }
}

fn bad_address() -> io::Error {
    io::Error::from_raw_os_error(libc::EFAULT)
}

fn read_exact(pid: libc::pid_t, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(bad_address());
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` covers exactly `buf`, which we borrow mutably; the remote range is
    // only read by the kernel, which checks it against the other process's mappings.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != buf.len() {
        return Err(bad_address());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_through_a_window() {
        let data: Vec<u64> = (0..2048).collect();
        let base = data.as_ptr() as u64;
        let mut memory = Memory::new(std::process::id());
        let word = |bytes: [u8; 8]| u64::from_ne_bytes(bytes);
        assert_eq!(word(memory.read_stack::<8>(base + 8 * 1000).unwrap()), 1000);
        let reads = memory.reads;
        // A lower address in the same window costs no read.
        assert_eq!(word(memory.read_stack::<8>(base + 8 * 700).unwrap()), 700);
        assert_eq!(memory.reads, reads);
        // Above the window: a new read.
        assert_eq!(word(memory.read_stack::<8>(base + 8 * 1500).unwrap()), 1500);
        assert_eq!(memory.reads, reads + 1);
        assert_eq!(memory.read_u64(base + 8 * 3).unwrap(), 3);
        assert!(memory.read_u64(0).is_err());
        assert!(memory.read_stack::<8>(u64::MAX - 3).is_err());
    }
}
