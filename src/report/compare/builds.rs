//! Two builds of one server: when A and B run binaries of different file names
//! (`webdis-parent_http_parser` against `webdis-llhttp`), the server's own code is named
//! after each binary's file (its functions' `object`, its component), and a function
//! matched by (name, object) is two one-sided rows, one per build. Here each side's own
//! code is renamed [`OWN_CODE`] before the rows are made, so that `json_reply` of one
//! build is `json_reply` of the other, as `go tool pprof -diff_base` matches functions by
//! name whatever the binary; a library (`libc.so.6`, `[kernel]`) keeps its name, which is
//! the same on both sides already.

use serde::Serialize;

use crate::snapshot::{Snapshot, UpstreamSnapshot};

/// What a row calls the server's own code when the two sides' binaries differ.
pub const OWN_CODE: &str = "own code";

/// The two binaries of a tap whose sides run different builds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Builds {
    /// The tap (with `--vs-tap`, A's tap name).
    pub tap: String,
    /// The file name of each side's binary, its own code's component.
    pub a: String,
    pub b: String,
}

impl Builds {
    /// The builds of `tap` when both sides name their binary and the names differ.
    pub fn of(a: &[Snapshot], b: &[Snapshot], tap: &str) -> Option<Builds> {
        let (fa, fb) = (own_file(a, tap)?, own_file(b, tap)?);
        (fa != fb).then(|| Builds {
            tap: tap.to_owned(),
            a: fa,
            b: fb,
        })
    }

    /// The own code's file name on side A (`false`) or B (`true`).
    pub fn file(&self, b: bool) -> &str {
        if b {
            &self.b
        } else {
            &self.a
        }
    }

    /// The header's sentence, saying both builds' names once.
    pub fn sentence(&self) -> String {
        format!(
            "tap {}: two builds, A {} and B {}: their own code is matched by function name \
             (rows say {OWN_CODE})",
            self.tap, self.a, self.b
        )
    }
}

/// `name` as a row reads it on a side whose own code is the file `own`: [`OWN_CODE`] for
/// the binary's own file, else unchanged.
pub fn renamed<'n>(name: &'n str, own: Option<&str>) -> &'n str {
    match own {
        Some(own) if name == own => OWN_CODE,
        _ => name,
    }
}

/// The file name of the binary `tap`'s server runs on a side: its own code's component
/// (the profiler names what no rule names after its object's file).
fn own_file(runs: &[Snapshot], tap: &str) -> Option<String> {
    runs.iter()
        .filter_map(|s| s.taps.get(tap)?.upstream.as_ref())
        .find_map(file_of)
}

/// The file name of the binary a watched process runs.
pub fn file_of(u: &UpstreamSnapshot) -> Option<String> {
    let exe = u.exe.as_deref()?;
    std::path::Path::new(exe)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_own_file_is_renamed() {
        assert_eq!(renamed("webdis-llhttp", Some("webdis-llhttp")), OWN_CODE);
        assert_eq!(renamed("libc.so.6", Some("webdis-llhttp")), "libc.so.6");
        assert_eq!(renamed("webdis-llhttp", None), "webdis-llhttp");
    }
}
