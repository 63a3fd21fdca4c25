//! The Webdis URL rule: which Redis command Webdis runs for a request path.
//!
//! Written once, for the two that need it: the `webdis` route rule labels a request by the
//! command's name, and the correlator (`correlate::webdis`) hashes the name and arguments
//! to find the command on the RESP tap. Mirrors Webdis 0.1.9 (`cmd_run`,
//! `cmd_select_format`): a known reply-format extension on the last segment is stripped; a
//! numeric first segment followed by another segment is a database number and is skipped;
//! the next segment is the command, sent as is (not percent-decoded); the segments after
//! it are the arguments. docs/metrics.md ("Routes") is the contract.

/// Extensions Webdis 0.1.9 strips from the last path segment to choose a reply format. Any
/// other extension stays part of the segment (so `/PING.foo` runs `PING.foo`).
pub const EXTENSIONS: [&[u8]; 13] = [
    b"json", b"raw", b"msg", b"bin", b"txt", b"html", b"xhtml", b"xml", b"png", b"jpg", b"jpeg",
    b"js", b"css",
];

/// The command a Webdis URI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command<'a> {
    /// The command segment as written: neither decoded nor upper-cased; its extension
    /// stripped when it is the last segment.
    pub name: &'a [u8],
    /// What follows the command's `/`, as received. `None` when the command is the last
    /// segment.
    rest: Option<&'a [u8]>,
}

impl<'a> Command<'a> {
    /// The arguments: the segments after the command, still percent-encoded, the
    /// extension stripped from the last. Worked out only when asked, so that the route
    /// rule, which needs the name alone, pays nothing for them.
    pub fn args(&self) -> impl Iterator<Item = &'a [u8]> {
        self.rest
            .map(|rest| {
                let last = memchr::memrchr(b'/', rest).map_or(0, |s| s + 1);
                &rest[..last + strip_extension(&rest[last..]).len()]
            })
            .into_iter()
            .flat_map(|rest| rest.split(|&b| b == b'/'))
    }
}

/// The command of `uri`, the path after its leading `/` with the query already cut off.
/// `None` when it names none: `/`, `/.json`, `/7/` (the `root` route).
pub fn command(uri: &[u8]) -> Option<Command<'_>> {
    let (first, rest) = split_segment(uri);
    let (name, rest) = match rest {
        Some(rest) if !first.is_empty() && first.iter().all(u8::is_ascii_digit) => {
            split_segment(rest)
        }
        _ => (first, rest),
    };
    // The extension is on the last segment: the name's only when nothing follows it.
    let name = match rest {
        None => strip_extension(name),
        Some(_) => name,
    };
    (!name.is_empty()).then_some(Command { name, rest })
}

fn split_segment(p: &[u8]) -> (&[u8], Option<&[u8]>) {
    match memchr::memchr(b'/', p) {
        Some(i) => (&p[..i], Some(&p[i + 1..])),
        None => (p, None),
    }
}

/// A segment without its reply-format extension, if it has a known one.
fn strip_extension(segment: &[u8]) -> &[u8] {
    match memchr::memrchr(b'.', segment) {
        Some(dot) if EXTENSIONS.contains(&&segment[dot + 1..]) => &segment[..dot],
        _ => segment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name and the arguments, as text.
    fn cmd(uri: &str) -> Option<(String, Vec<String>)> {
        let c = command(uri.as_bytes())?;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        Some((text(c.name), c.args().map(text).collect()))
    }

    fn want(name: &str, args: &[&str]) -> Option<(String, Vec<String>)> {
        Some((name.into(), args.iter().map(|a| (*a).into()).collect()))
    }

    #[test]
    fn the_command_is_the_first_segment() {
        assert_eq!(cmd("GET/key"), want("GET", &["key"]));
        assert_eq!(cmd("get/k/a%20b"), want("get", &["k", "a%20b"]));
        assert_eq!(cmd("PING"), want("PING", &[]));
        assert_eq!(cmd("SET/k/"), want("SET", &["k", ""]));
        // Webdis does not decode the command segment.
        assert_eq!(cmd("%50ING"), want("%50ING", &[]));
    }

    #[test]
    fn a_numeric_first_segment_is_a_database_when_more_follows() {
        assert_eq!(cmd("7/GET/key"), want("GET", &["key"]));
        assert_eq!(cmd("0/PING"), want("PING", &[]));
        // A lone number is a command, not a database.
        assert_eq!(cmd("7"), want("7", &[]));
        assert_eq!(cmd("7/"), None);
        assert_eq!(cmd("7x/GET"), want("7x", &["GET"]));
    }

    #[test]
    fn known_extensions_are_stripped_from_the_last_segment_only() {
        for ext in EXTENSIONS {
            let uri = format!("PING.{}", std::str::from_utf8(ext).unwrap());
            assert_eq!(cmd(&uri), want("PING", &[]), "{uri}");
        }
        assert_eq!(cmd("PING.foo"), want("PING.foo", &[]));
        assert_eq!(cmd("GET/k.json"), want("GET", &["k"]));
        assert_eq!(cmd("GET/k.unknown"), want("GET", &["k.unknown"]));
        assert_eq!(cmd("JSON.GET/key.json"), want("JSON.GET", &["key"]));
        assert_eq!(cmd("0/PING.txt"), want("PING", &[]));
        assert_eq!(cmd("7.json"), want("7", &[]));
    }

    #[test]
    fn no_command_is_none() {
        assert_eq!(cmd(""), None);
        assert_eq!(cmd(".json"), None);
        assert_eq!(cmd("7/.json"), None);
    }
}
