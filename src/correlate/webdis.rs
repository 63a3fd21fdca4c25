//! The Redis command Webdis sends for an HTTP request, as a [`CommandKey`].
//!
//! Webdis 0.1.9 (`cmd_run`): the URI after the leading `/` (or, for POST, the body) up to
//! any `?` names a command by the Webdis URL rule ([`crate::routes::webdis`], shared with
//! the `webdis` route rule); every segment after the command is an argument,
//! percent-decoded with `+` as a space; a PUT body is appended as the last argument.

use super::key::CommandKey;
use crate::http1::Method;
use crate::routes::webdis;

/// The key of the command Webdis runs for `method target` (with `body`, when the whole
/// body is at hand). `None` when Webdis runs no command for it.
pub fn command_key(method: Method, target: &[u8], body: Option<&[u8]>) -> Option<u64> {
    let (uri, put_body) = match method {
        Method::Get => (target.strip_prefix(b"/")?, None),
        Method::Put => (target.strip_prefix(b"/")?, Some(body?)),
        Method::Post => (body?, None),
        _ => return None,
    };
    let uri = match memchr::memchr(b'?', uri) {
        Some(q) => &uri[..q],
        None => uri,
    };
    let command = webdis::command(uri)?;
    let mut key = CommandKey::new().name(command.name);
    for arg in command.args() {
        key = key.arg_bytes(Decoded { raw: arg, at: 0 });
    }
    if let Some(body) = put_body.filter(|b| !b.is_empty()) {
        key = key.arg(body);
    }
    Some(key.finish())
}

/// `%xx` decoding with `+` as a space, byte by byte, as Webdis's `decode_uri` does.
struct Decoded<'a> {
    raw: &'a [u8],
    at: usize,
}

impl Iterator for Decoded<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        let b = *self.raw.get(self.at)?;
        self.at += 1;
        match b {
            b'+' => Some(b' '),
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (
                    self.raw.get(self.at).copied().and_then(hex),
                    self.raw.get(self.at + 1).copied().and_then(hex),
                ) {
                    (Some(hi), Some(lo)) => {
                        self.at += 2;
                        Some((hi * 16 + lo) as u8)
                    }
                    _ => Some(b'%'),
                }
            }
            _ => Some(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parts: &[&[u8]]) -> u64 {
        let mut k = CommandKey::new().name(parts[0]);
        for p in &parts[1..] {
            k = k.arg(p);
        }
        k.finish()
    }

    #[test]
    fn urls_become_the_commands_webdis_sends() {
        let get = |t: &str| command_key(Method::Get, t.as_bytes(), None);
        assert_eq!(get("/GET/k"), Some(key(&[b"GET", b"k"])));
        assert_eq!(get("/get/k.json"), Some(key(&[b"GET", b"k"])));
        assert_eq!(get("/GET/k.unknown"), Some(key(&[b"GET", b"k.unknown"])));
        assert_eq!(get("/SET/k/a%20b+c"), Some(key(&[b"SET", b"k", b"a b c"])));
        assert_eq!(get("/7/GET/k"), Some(key(&[b"GET", b"k"])));
        assert_eq!(get("/PING"), Some(key(&[b"PING"])));
        assert_eq!(get("/PING.raw"), Some(key(&[b"PING"])));
        assert_eq!(get("/GET/k?type=text/plain"), Some(key(&[b"GET", b"k"])));
        assert_eq!(get("/SET/k/"), Some(key(&[b"SET", b"k", b""])));
        assert_eq!(get("/"), None);
        // What the route rule labels `root` names no command, so it has no key.
        assert_eq!(get("/.json"), None);
        assert_eq!(get("/7/"), None);
        assert_eq!(command_key(Method::Head, b"/GET/k", None), None);
    }

    #[test]
    fn put_appends_the_body_and_post_carries_the_command() {
        assert_eq!(
            command_key(Method::Put, b"/SET/k", Some(b"value")),
            Some(key(&[b"SET", b"k", b"value"]))
        );
        assert_eq!(
            command_key(Method::Post, b"/", Some(b"SET/k/v")),
            Some(key(&[b"SET", b"k", b"v"]))
        );
        assert_eq!(command_key(Method::Put, b"/SET/k", None), None);
    }
}
