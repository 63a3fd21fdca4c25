//! Naming a sampled address no symbol covers: `module+0xOFFSET`, the file name of the
//! object it lies in and the address of its enclosing function in that file.
//!
//! A stripped binary (Debian's, a release build with `strip`), a library without its
//! debug file, a function the symbol table leaves out: blazesym finds no symbol, but the
//! address still lies in a file and, on x86-64, in a function that `.eh_frame` describes
//! (the unwinder needs it, so strip keeps it). The start of the frame description entry
//! (FDE) that covers the address is the start of that function, so every sample in one
//! stripped function reads as one name, not one per sampled instruction; and the offset is
//! the one `addr2line -e FILE 0xOFFSET` and `objdump --start-address` take (the file's own
//! virtual address: the load bias of the mapping taken off, see [`maps::load_bias`]).
//! Without an FDE (Go's binaries carry none; hand-written assembly) the address itself is
//! the offset.
//!
//! What is not a file keeps a name of its own: code made at run time is its object
//! (`[anon-exec]`), the vDSO is `[vdso]`, and an address in no executable mapping is
//! [`UNMAPPED_OBJECT`] (code unmapped since it was sampled, or a return address the walk
//! got wrong: the profiler counts those samples).

use std::collections::HashMap;

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use object::{Object as _, ObjectSection as _};

use crate::upstream::profile::maps::{self, Mapping, Segment};

/// The object of an address outside every mapping (code unmapped since it was sampled):
/// the one place name this file gives that no mapping backs.
pub const UNMAPPED_OBJECT: &str = "[unmapped]";

/// The functions of one file as `.eh_frame` describes them, and its segments.
#[derive(Debug, Default)]
struct FileFunctions {
    /// `[start, end)` of each FDE, sorted by start.
    ranges: Vec<(u64, u64)>,
    segments: Vec<Segment>,
}

/// The files read so far, by path; a file that cannot be read is remembered as `None`.
#[derive(Debug, Default)]
pub struct Unnamed {
    files: HashMap<String, Option<FileFunctions>>,
}

impl Unnamed {
    /// The name of `addr`, which no symbol covers: `object+0xOFFSET` in a file mapped by
    /// `mapping` (whose object name is `object`), else the special names above.
    pub fn name(&mut self, pid: u32, addr: u64, mapping: Option<&Mapping>, object: &str) -> String {
        let Some(mapping) = mapping else {
            return UNMAPPED_OBJECT.to_owned();
        };
        if !mapping.is_file() {
            return object.to_owned();
        }
        let file = self
            .files
            .entry(mapping.path.clone())
            .or_insert_with(|| {
                let data = maps::read_file(pid, mapping)?;
                FileFunctions::parse(&data)
            })
            .as_ref();
        // Unreadable, or no segment holds the mapping: the offset in the mapping's file
        // still lets one find the code (`objdump -F`).
        let Some((file, bias)) =
            file.and_then(|f| Some((f, maps::load_bias(&f.segments, mapping)?)))
        else {
            let offset = addr - mapping.start + mapping.offset;
            return format!("{object}+0x{offset:x}");
        };
        let svma = addr.wrapping_sub(bias);
        format!("{object}+0x{:x}", file.function_start(svma).unwrap_or(svma))
    }
}

impl FileFunctions {
    fn parse(data: &[u8]) -> Option<FileFunctions> {
        let file = object::File::parse(data).ok()?;
        let segments = maps::segments(&file);
        let mut ranges = Vec::new();
        if let Some(section) = file.section_by_name(".eh_frame") {
            let eh_frame = EhFrame::new(section.data().ok()?, LittleEndian);
            let address = |name: &str| file.section_by_name(name).map(|s| s.address());
            // Pointers in .eh_frame are mostly relative to themselves (pcrel) or to
            // .eh_frame_hdr/.text/.got (datarel/textrel): give gimli every base it may need.
            let mut bases = BaseAddresses::default().set_eh_frame(section.address());
            if let Some(a) = address(".eh_frame_hdr") {
                bases = bases.set_eh_frame_hdr(a);
            }
            if let Some(a) = address(".text") {
                bases = bases.set_text(a);
            }
            if let Some(a) = address(".got") {
                bases = bases.set_got(a);
            }
            let mut entries = eh_frame.entries(&bases);
            // A malformed entry ends the table: what was read before it stays.
            while let Ok(Some(entry)) = entries.next() {
                let CieOrFde::Fde(partial) = entry else {
                    continue;
                };
                if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                    let start = fde.initial_address();
                    if fde.len() > 0 {
                        ranges.push((start, start.saturating_add(fde.len())));
                    }
                }
            }
        }
        ranges.sort_unstable();
        Some(FileFunctions { ranges, segments })
    }

    /// The start of the innermost FDE that covers `svma`. FDEs do not nest in practice;
    /// should two overlap, the later-starting one is the closer fit.
    fn function_start(&self, svma: u64) -> Option<u64> {
        let after = self.ranges.partition_point(|&(start, _)| start <= svma);
        self.ranges[..after]
            .iter()
            .rev()
            .take(8)
            .find(|&&(_, end)| svma < end)
            .map(|&(start, _)| start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own functions: blazesym would name them, but the name given
    /// when it does not is the function's start as its symbol table gives it.
    #[test]
    fn an_address_reads_as_its_function_start_in_the_file() {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let functions = FileFunctions::parse(&data).unwrap();
        assert!(functions.ranges.len() > 100, "{}", functions.ranges.len());
        // A function of this file, by its symbol: its start and an address inside it.
        let symbol = object::Object::symbols(&file)
            .find(|s| {
                object::ObjectSymbol::name(s).is_ok_and(|n| n.contains("function_start"))
                    && object::ObjectSymbol::size(s) > 8
            })
            .expect("the test binary has a symbol table");
        let start = object::ObjectSymbol::address(&symbol);
        let size = object::ObjectSymbol::size(&symbol);
        assert_eq!(functions.function_start(start + size / 2), Some(start));
        assert_eq!(functions.function_start(start), Some(start));

        let pid = std::process::id();
        let maps = maps::parse(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let exe_name = exe.to_string_lossy().into_owned();
        let code = maps
            .iter()
            .find(|m| m.path == exe_name && m.executable)
            .unwrap();
        let base = maps.iter().find(|m| m.path == exe_name).unwrap().start;
        let live = FileFunctions::function_start as *const () as u64;
        let mut unnamed = Unnamed::default();
        let name = unnamed.name(pid, live + 3, Some(code), "me");
        // The test binary is a PIE whose first segment is at address 0: its file
        // addresses are the run-time ones less the load base.
        assert_eq!(name, format!("me+0x{:x}", live - base), "{code:?}");
    }

    #[test]
    fn what_is_not_a_file_keeps_its_own_name() {
        let mut unnamed = Unnamed::default();
        assert_eq!(unnamed.name(1, 0x10, None, "x"), UNMAPPED_OBJECT);
        let jit = Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            executable: true,
            path: String::new(),
        };
        assert_eq!(
            unnamed.name(1, 0x1010, Some(&jit), "[anon-exec]"),
            "[anon-exec]"
        );
    }
}
