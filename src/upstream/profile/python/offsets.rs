//! CPython's struct layouts, per version: where the walk finds the interpreters, their
//! thread states, each thread's current frame, a frame's code object and caller, and a
//! code object's names. A new version is one row of [`OFFSETS`].
//!
//! How the rows are checked: the 3.11 row is `offsetof` of each field, printed by a C
//! program built against that version's headers with `Py_BUILD_CORE` (the internal
//! headers declare `_PyRuntimeState`, `_PyInterpreterFrame` and the rest; Debian's
//! `python3.11-dev` ships them), the program is in docs/deploy.md's Python section; and the
//! tests read the stacks of a running `/usr/bin/python3` against the functions it runs.

/// Byte offsets of the fields the walk reads (x86-64).
#[derive(Debug, PartialEq, Eq)]
pub struct Offsets {
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interpreters_head: u64,
    /// `PyInterpreterState.next`.
    pub interpreter_next: u64,
    /// `PyInterpreterState.threads.head`.
    pub interpreter_threads_head: u64,
    /// `PyThreadState.next`.
    pub thread_next: u64,
    /// `PyThreadState.cframe`.
    pub thread_cframe: u64,
    /// `PyThreadState.native_thread_id`: the Linux thread id.
    pub thread_native_id: u64,
    /// `_PyCFrame.current_frame`.
    pub cframe_current_frame: u64,
    /// `_PyInterpreterFrame.f_code`.
    pub frame_code: u64,
    /// `_PyInterpreterFrame.previous`.
    pub frame_previous: u64,
    /// `_PyInterpreterFrame.owner` (a `char`).
    pub frame_owner: u64,
    /// `_PyInterpreterFrame.prev_instr`: the code unit of the instruction the frame
    /// started last (its call, in a caller).
    pub frame_prev_instr: u64,
    /// `_PyInterpreterFrame.is_entry` (a `bool`): the first frame a call of
    /// `_PyEval_EvalFrameDefault` runs; the frames above it up to the next entry ran in
    /// the same native call of the eval loop.
    pub frame_is_entry: u64,
    /// `PyCodeObject.co_firstlineno` (an `int`).
    pub code_firstlineno: u64,
    /// `PyCodeObject.co_filename`.
    pub code_filename: u64,
    /// `PyCodeObject.co_qualname`.
    pub code_qualname: u64,
    /// `PyCodeObject.co_linetable`: a `bytes` of the location table ([`super::lines`]).
    pub code_linetable: u64,
    /// `PyCodeObject.co_code_adaptive`: where the code units start, inside the object.
    pub code_adaptive: u64,
    /// `PyBytesObject.ob_size` and `ob_sval`: a bytes object's length and first byte.
    pub bytes_size: u64,
    pub bytes_data: u64,
    /// `PyASCIIObject.length`.
    pub unicode_length: u64,
    /// `PyASCIIObject.state` (the bit field: interned 2, kind 3, compact 1, ascii 1).
    pub unicode_state: u64,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub unicode_ascii_data: u64,
    /// `sizeof(PyCompactUnicodeObject)`: where another compact string's characters start.
    pub unicode_compact_data: u64,
}

impl Offsets {
    /// Bytes of a frame the walk reads at once (every field it needs).
    pub fn frame_bytes(&self) -> usize {
        (self
            .frame_code
            .max(self.frame_previous)
            .max(self.frame_owner)
            .max(self.frame_is_entry)
            .max(self.frame_prev_instr)
            + 8) as usize
    }

    /// Bytes of a thread state the walk reads at once.
    pub fn thread_bytes(&self) -> usize {
        (self
            .thread_next
            .max(self.thread_cframe)
            .max(self.thread_native_id)
            + 8) as usize
    }

    /// Bytes of a code object the walk reads at once.
    pub fn code_bytes(&self) -> usize {
        (self
            .code_filename
            .max(self.code_qualname)
            .max(self.code_firstlineno)
            .max(self.code_linetable)
            + 8) as usize
    }
}

/// (major, minor) → layout. Patch releases keep the layout within a minor version
/// (CPython's ABI rule for these internal structs in practice, and what the tools that
/// read them rely on).
pub const OFFSETS: &[((u8, u8), Offsets)] = &[(
    (3, 11),
    Offsets {
        runtime_interpreters_head: 40,
        interpreter_next: 0,
        interpreter_threads_head: 16,
        thread_next: 8,
        thread_cframe: 56,
        thread_native_id: 160,
        cframe_current_frame: 8,
        frame_code: 32,
        frame_previous: 48,
        frame_owner: 69,
        frame_is_entry: 68,
        frame_prev_instr: 56,
        code_firstlineno: 72,
        code_filename: 112,
        code_qualname: 128,
        code_linetable: 136,
        code_adaptive: 184,
        bytes_size: 16,
        bytes_data: 32,
        unicode_length: 16,
        unicode_state: 32,
        unicode_ascii_data: 48,
        unicode_compact_data: 72,
    },
)];

/// A CPython version, from `Py_Version` (`PY_VERSION_HEX`: 0x030B02F0 is 3.11.2 final).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
    pub micro: u8,
}

impl Version {
    pub fn from_hex(hex: u64) -> Version {
        Version {
            major: (hex >> 24) as u8,
            minor: (hex >> 16) as u8,
            micro: (hex >> 8) as u8,
        }
    }

    pub fn offsets(self) -> Option<&'static Offsets> {
        OFFSETS
            .iter()
            .find(|(version, _)| *version == (self.major, self.minor))
            .map(|(_, offsets)| offsets)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_hex_and_rows() {
        let v = Version::from_hex(0x030B_02F0);
        assert_eq!(v.to_string(), "3.11.2");
        assert!(v.offsets().is_some());
        assert!(Version::from_hex(0x030A_0CF0).offsets().is_none(), "3.10");
        let row = v.offsets().unwrap();
        assert_eq!(row.frame_bytes(), 77);
        assert_eq!(row.code_bytes(), 144);
    }
}
