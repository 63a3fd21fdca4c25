//! A borrowed view of one client command: its name and its arguments, without copying.
//!
//! The tap labels each command by name and the Webdis correlator compares arguments, both
//! while the request is still in the read buffer; neither needs the values decoded into
//! owned strings, so the view hands out slices of the message itself.

use memchr::memchr;

use super::{known_command, RespError};

/// A complete client command, as [`command`] found it.
#[derive(Debug, Clone, Copy)]
pub struct Command<'a> {
    name: &'a [u8],
    argc: usize,
    form: Form,
    /// The message after the name: the remaining bulk strings, or the rest of the line.
    rest: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Multibulk,
    Inline,
}

/// Reads the command in `msg`, which must be exactly one complete request message as a
/// request-side [`Scanner`](super::Scanner) framed it: a multibulk array of bulk strings
/// (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or an inline line (`GET k\r\n`).
///
/// The message is checked whole here (a walk over its headers, skipping payloads), so the
/// accessors and the argument iterator cannot fail later. An error for a message the
/// scanner framed (an inline line with unbalanced quotes) is one Redis answers with a
/// protocol error reply before it closes the connection.
pub fn command(msg: &[u8]) -> Result<Command<'_>, RespError> {
    match msg.first() {
        None => Err(RespError::Incomplete),
        Some(b'*') => multibulk(msg),
        Some(_) => inline(msg),
    }
}

/// The command name at the start of a request that may not be complete yet, once the
/// bytes hold all of it: for a multibulk command, its first bulk string; for an inline
/// command, the first word of a complete line. Lets a tap label a request whose body is
/// still arriving (a large SET) without holding the whole message.
pub fn command_name(prefix: &[u8]) -> Option<&[u8]> {
    match prefix.first()? {
        b'*' => {
            let (count, rest) = decimal(prefix, 1).ok()?;
            if count < 1 {
                return None;
            }
            bulk(rest, 0).ok().map(|(name, _)| name)
        }
        _ => {
            let end = memchr(b'\n', prefix)?;
            inline(&prefix[..=end]).ok().map(|c| c.name)
        }
    }
}

impl<'a> Command<'a> {
    /// The command name as sent, in the client's case. Empty for an empty command.
    pub fn name(&self) -> &'a [u8] {
        self.name
    }

    /// Whether the name is `upper` (given in upper case), ignoring ASCII case.
    pub fn name_is(&self, upper: &str) -> bool {
        self.name.eq_ignore_ascii_case(upper.as_bytes())
    }

    /// The canonical upper-case name if Redis knows the command, else `None` (route
    /// label `other`).
    pub fn known_name(&self) -> Option<&'static str> {
        known_command(self.name)
    }

    /// The name in upper case, written into `buf`; `None` when it does not fit.
    pub fn upper_name<'b>(&self, buf: &'b mut [u8]) -> Option<&'b [u8]> {
        let out = buf.get_mut(..self.name.len())?;
        for (o, b) in out.iter_mut().zip(self.name) {
            *o = b.to_ascii_uppercase();
        }
        Some(out)
    }

    /// Words in the command, the name included.
    pub fn argc(&self) -> usize {
        self.argc
    }

    /// A command with no words (`*0\r\n`, `*-1\r\n`, or a blank inline line): Redis
    /// executes nothing and sends no reply, so no reply must be waited for.
    pub fn is_empty(&self) -> bool {
        self.argc == 0
    }

    /// Whether the command came as an inline line rather than a multibulk array.
    pub fn is_inline(&self) -> bool {
        self.form == Form::Inline
    }

    /// The arguments after the name. For multibulk commands these are the exact bulk
    /// string payloads. For inline commands a double- or single-quoted word yields the
    /// bytes between its quotes with escapes left as sent, and a word that mixes quoted
    /// and bare parts yields its raw bytes.
    pub fn args(&self) -> Args<'a> {
        Args {
            form: self.form,
            rest: self.rest,
            left: self.argc.saturating_sub(1),
        }
    }
}

/// Iterator over a command's arguments; see [`Command::args`].
#[derive(Debug, Clone)]
pub struct Args<'a> {
    form: Form,
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        // The message was checked by `command`, so errors here cannot happen; if they
        // did, the iteration would just end.
        let (arg, rest) = match self.form {
            Form::Multibulk => bulk(self.rest, 0).ok()?,
            Form::Inline => word(self.rest).ok()??,
        };
        self.rest = rest;
        self.left -= 1;
        Some(arg)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Args<'_> {}

fn multibulk(msg: &[u8]) -> Result<Command<'_>, RespError> {
    let (count, mut rest) = decimal(msg, 1)?;
    let mut name: &[u8] = &[];
    let mut after_name = rest;
    let argc = usize::try_from(count).unwrap_or(0);
    for i in 0..argc {
        let (arg, next) = bulk(rest, 0)?;
        if i == 0 {
            name = arg;
            after_name = next;
        }
        rest = next;
    }
    if !rest.is_empty() {
        return Err(RespError::TrailingBytes);
    }
    Ok(Command {
        name,
        argc,
        form: Form::Multibulk,
        rest: after_name,
    })
}

/// One `$len\r\n<payload>\r\n` at `buf[at..]`: the payload and what follows it.
fn bulk(buf: &[u8], at: usize) -> Result<Split<'_>, RespError> {
    match buf.get(at) {
        None => return Err(RespError::Incomplete),
        Some(b'$') => {}
        Some(&byte) => return Err(RespError::ExpectedBulk { byte }),
    }
    let (len, rest) = decimal(buf, at + 1)?;
    let len = usize::try_from(len).map_err(|_| RespError::NegativeLength)?;
    let payload = rest.get(..len).ok_or(RespError::Incomplete)?;
    match rest.get(len..len.saturating_add(2)) {
        Some(b"\r\n") => {}
        Some(_) => return Err(RespError::BadPayloadEnd),
        None => return Err(RespError::Incomplete),
    }
    Ok((payload, &rest[len + 2..]))
}

/// A decimal line at `buf[at..]`, ending in CRLF, with Redis's rules (optional `-`, no
/// leading zeros): its value and the bytes after the CRLF.
fn decimal(buf: &[u8], at: usize) -> Result<(i64, &[u8]), RespError> {
    let line = buf.get(at..).ok_or(RespError::Incomplete)?;
    let end = memchr(b'\r', line).ok_or(RespError::Incomplete)?;
    match line.get(end + 1) {
        Some(b'\n') => {}
        Some(_) => return Err(RespError::BadLineEnd),
        None => return Err(RespError::Incomplete),
    }
    let digits = &line[..end];
    let (neg, digits) = match digits.split_first() {
        Some((b'-', d)) => (true, d),
        _ => (false, digits),
    };
    let valid = match digits {
        [] => false,
        [b'0'] => !neg,
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
    };
    if !valid {
        return Err(RespError::BadNumber);
    }
    let mut val: i64 = 0;
    for d in digits {
        let d = i64::from(d - b'0');
        val = val
            .checked_mul(10)
            .and_then(|v| {
                if neg {
                    v.checked_sub(d)
                } else {
                    v.checked_add(d)
                }
            })
            .ok_or(RespError::IntegerOverflow)?;
    }
    Ok((val, &line[end + 2..]))
}

fn inline(msg: &[u8]) -> Result<Command<'_>, RespError> {
    let end = memchr(b'\n', msg).ok_or(RespError::Incomplete)?;
    if end + 1 != msg.len() {
        return Err(RespError::TrailingBytes);
    }
    let mut line = &msg[..end];
    // Redis splits the line as a C string: a NUL byte ends it.
    if let Some(nul) = memchr(0, line) {
        line = &line[..nul];
    }
    let (name, after_name, mut argc) = match word(line)? {
        Some((name, rest)) => (name, rest, 1),
        None => (&line[..0], &line[..0], 0),
    };
    let mut rest = after_name;
    while let Some((_, next)) = word(rest)? {
        argc += 1;
        rest = next;
    }
    Ok(Command {
        name,
        argc,
        form: Form::Inline,
        rest: after_name,
    })
}

/// A word (or bulk payload) and the bytes after it.
type Split<'a> = (&'a [u8], &'a [u8]);

/// Blanks skipped before a word (C's `isspace`).
fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Bytes that end a bare word (Redis's `sdssplitargs` stops only at these).
fn ends_word(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The next word of an inline line, split as Redis's `sdssplitargs` does, and the rest of
/// the line. `None` when only blanks are left.
fn word(line: &[u8]) -> Result<Option<Split<'_>>, RespError> {
    let start = match line.iter().position(|&b| !is_blank(b)) {
        Some(s) => s,
        None => return Ok(None),
    };
    let mut i = start;
    let mut quote: Option<u8> = None;
    loop {
        let Some(&c) = line.get(i) else {
            if quote.is_some() {
                return Err(RespError::UnbalancedQuotes);
            }
            break;
        };
        match quote {
            Some(q) => {
                let escaped = c == b'\\' && (q == b'"' || line.get(i + 1) == Some(&b'\''));
                if escaped && i + 1 < line.len() {
                    i += 2;
                    continue;
                }
                if c == q {
                    // A closing quote must end the word.
                    if line.get(i + 1).is_some_and(|&n| !is_blank(n)) {
                        return Err(RespError::UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                }
                i += 1;
            }
            None => {
                if ends_word(c) {
                    break;
                }
                if c == b'"' || c == b'\'' {
                    quote = Some(c);
                }
                i += 1;
            }
        }
    }
    // A word that starts with a quote ends at its closing quote: yield what is between.
    let word = if matches!(line[start], b'"' | b'\'') {
        &line[start + 1..i - 1]
    } else {
        &line[start..i]
    };
    Ok(Some((word, &line[i..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args<'a>(c: &Command<'a>) -> Vec<&'a [u8]> {
        c.args().collect()
    }

    #[test]
    fn multibulk_name_and_args() {
        let c = command(b"*3\r\n$3\r\nsEt\r\n$1\r\nk\r\n$5\r\na\r\nbc\r\n").unwrap();
        assert_eq!(c.name(), b"sEt");
        assert!(c.name_is("SET"));
        assert!(!c.name_is("GET"));
        assert_eq!(c.known_name(), Some("SET"));
        assert_eq!(c.argc(), 3);
        assert!(!c.is_inline());
        assert_eq!(args(&c), vec![&b"k"[..], b"a\r\nbc"]);
        assert_eq!(c.args().len(), 2);
        let mut buf = [0u8; 8];
        assert_eq!(c.upper_name(&mut buf), Some(&b"SET"[..]));
        let mut small = [0u8; 2];
        assert_eq!(c.upper_name(&mut small), None);
    }

    #[test]
    fn empty_multibulk_commands_have_no_words() {
        for msg in [&b"*0\r\n"[..], b"*-1\r\n", b"*-7\r\n"] {
            let c = command(msg).unwrap();
            assert!(c.is_empty());
            assert_eq!(c.name(), b"");
            assert_eq!(c.args().count(), 0);
        }
    }

    #[test]
    fn malformed_multibulk_is_an_error() {
        let cases: [(&[u8], RespError); 8] = [
            (b"*1\r\n$3\r\nGET\r\n$1\r\nk\r\n", RespError::TrailingBytes),
            (b"*2\r\n$3\r\nGET\r\n", RespError::Incomplete),
            (b"*1\r\n:3\r\n", RespError::ExpectedBulk { byte: b':' }),
            (b"*1\r\n$-1\r\n", RespError::NegativeLength),
            (b"*1\r\n$3\r\nGETxx", RespError::BadPayloadEnd),
            (b"*01\r\n$3\r\nGET\r\n", RespError::BadNumber),
            (b"*1\n$3\r\nGET\r\n", RespError::BadNumber),
            (b"*99999999999999999999\r\n", RespError::IntegerOverflow),
        ];
        for (msg, want) in cases {
            assert_eq!(
                command(msg).unwrap_err(),
                want,
                "{:?}",
                String::from_utf8_lossy(msg)
            );
        }
    }

    #[test]
    fn inline_words_split_like_redis() {
        let c = command(b"set  a\t\"b c\" 'd\\'e' f\"g h\"\r\n").unwrap();
        assert!(c.is_inline());
        assert_eq!(c.known_name(), Some("SET"));
        assert_eq!(c.argc(), 5);
        assert_eq!(args(&c), vec![&b"a"[..], b"b c", b"d\\'e", b"f\"g h\""]);
    }

    #[test]
    fn inline_without_cr_and_blank_lines() {
        let c = command(b"PING\n").unwrap();
        assert_eq!(c.name(), b"PING");
        assert_eq!(c.argc(), 1);
        for blank in [&b"\r\n"[..], b"\n", b"   \t \r\n"] {
            assert!(command(blank).unwrap().is_empty());
        }
    }

    #[test]
    fn inline_quoted_name_and_empty_quoted_argument() {
        let c = command(b"\"GET\" \"\"\r\n").unwrap();
        assert_eq!(c.name(), b"GET");
        assert_eq!(c.argc(), 2);
        assert_eq!(args(&c), vec![&b""[..]]);
    }

    #[test]
    fn inline_quote_errors() {
        for msg in [
            &b"SET \"a\r\n"[..],
            b"SET 'a\r\n",
            b"SET \"a\"b\r\n",
            b"SET \"a\\\"\r\n",
        ] {
            assert_eq!(
                command(msg).unwrap_err(),
                RespError::UnbalancedQuotes,
                "{:?}",
                String::from_utf8_lossy(msg)
            );
        }
    }

    #[test]
    fn inline_must_be_one_line() {
        assert_eq!(command(b"PING").unwrap_err(), RespError::Incomplete);
        assert_eq!(
            command(b"PING\r\nPING\r\n").unwrap_err(),
            RespError::TrailingBytes
        );
        assert_eq!(command(b"").unwrap_err(), RespError::Incomplete);
    }

    #[test]
    fn name_of_an_incomplete_request() {
        let full = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
        // The name is known from the end of its bulk string on.
        assert_eq!(command_name(&full[..13]), Some(&b"SET"[..]));
        assert_eq!(command_name(&full[..12]), None);
        assert_eq!(command_name(full), Some(&b"SET"[..]));
        assert_eq!(command_name(b"get k\r\n"), Some(&b"get"[..]));
        assert_eq!(command_name(b"get k"), None);
        assert_eq!(command_name(b"*0\r\n"), None);
        assert_eq!(command_name(b"*1\r\n:1\r\n"), None);
        assert_eq!(command_name(b""), None);
    }

    #[test]
    fn inline_line_ends_at_nul() {
        let c = command(b"GET k\0ignored words\r\n").unwrap();
        assert_eq!(c.argc(), 2);
        assert_eq!(args(&c), vec![&b"k"[..]]);
    }
}
