//! Request smuggling and malformed framing, table-driven.
//!
//! Every request case is either
//!
//! - **rejected**: the proxy answers 400, 431 or 501 with `Connection: close`, closes the
//!   connection, counts the error with the right kind, and the upstream is never even
//!   connected to (so it receives zero bytes); or
//! - **forwarded** as exactly one unambiguous request: the client sends the case's bytes
//!   and a probe request in one write; the upstream receives exactly the case's bytes
//!   before it answers (the proxy framed the request where it ends, no more and no less),
//!   then exactly the probe's bytes, so the next request is framed where the upstream
//!   would frame it.
//!
//! Each case says why, citing RFC 9112 (and RFC 9110 where the field is defined there).
//! docs/security.md has the same tables (the last two tests hold them to these cases).
//! The response side follows: a malformed upstream response gives the client a 502 and a
//! counted `bad_response`, or, once part of the response was forwarded, a closed
//! connection and never a second response.

mod fake;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake::{read_n, upstream};
use phasescope::recorder::ErrorKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
const PROBE: &[u8] = b"GET /probe HTTP/1.1\r\nHost: a\r\n\r\n";
/// The limits every case runs with (small, so that the size cases stay small).
const MAX_HEAD: usize = 4096;
const MAX_HEADERS: usize = 10;
/// A case that takes longer than this has hung: the proxy misframed and waits.
const CASE_TIMEOUT: Duration = Duration::from_secs(8);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Forward,
    Reject(u16),
    /// Refused in a part of the body that arrived after the request began streaming:
    /// the upstream received a strict prefix of the request (never a complete one) and
    /// then its connection closed.
    RejectStreamed(u16),
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    expect: Expect,
    why: &'static str,
}

fn fwd(name: &'static str, bytes: impl Into<Vec<u8>>, why: &'static str) -> Case {
    Case {
        name,
        bytes: bytes.into(),
        expect: Expect::Forward,
        why,
    }
}

fn rej(name: &'static str, status: u16, bytes: impl Into<Vec<u8>>, why: &'static str) -> Case {
    Case {
        name,
        bytes: bytes.into(),
        expect: Expect::Reject(status),
        why,
    }
}

/// A POST head with the given extra field lines and a trailing body.
fn post(fields: &str, body: &str) -> Vec<u8> {
    format!("POST /p HTTP/1.1\r\nHost: a\r\n{fields}\r\n{body}").into_bytes()
}

/// A chunked POST with the given body.
fn chunked(body: &[u8]) -> Vec<u8> {
    let mut v = b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    v.extend_from_slice(body);
    v
}

fn get_with(fields: &str) -> Vec<u8> {
    format!("GET / HTTP/1.1\r\nHost: a\r\n{fields}\r\n").into_bytes()
}

fn request_cases() -> Vec<Case> {
    let long_ext = format!("5;{}\r\nhello\r\n0\r\n\r\n", "e".repeat(5000));
    let trailers = |n: usize| -> String {
        let fields: String = (0..n).map(|i| format!("T-{i}: v\r\n")).collect();
        format!("0\r\n{fields}\r\n")
    };
    let (many_trailers, trailers_at_limit) = (trailers(MAX_HEADERS + 1), trailers(MAX_HEADERS));
    let hidden = "GET /admin HTTP/1.1\r\nHost: a\r\n\r\n";
    let connect_with = |field: &str, body: &str| -> Vec<u8> {
        let value = if field == "Content-Length" {
            body.len().to_string()
        } else {
            "chunked".into()
        };
        format!("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n{field}: {value}\r\n\r\n{body}").into_bytes()
    };
    let many: String = (0..MAX_HEADERS + 5)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect();
    vec![
        // --- CL.TE and TE.CL -----------------------------------------------------------
        rej("cl_then_te", 400, post("Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\nX"),
            "§6.1/§6.3: both fields is the smuggling signature; an intermediary must drop CL before forwarding, which we cannot do without rewriting"),
        rej("te_then_cl", 400, post("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", "5c\r\nGPOST / HTTP/1.1\r\n\r\n0\r\n\r\n"),
            "§6.1/§6.3: same, TE.CL order"),
        rej("cl0_with_te", 400, post("Content-Length: 0\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            "§6.1: any CL with TE"),
        rej("obfuscated_te_with_cl", 400, post("Content-Length: 5\r\nTransfer-Encoding: xchunked\r\n", "hello"),
            "§6.1: TE present at all with CL; an upstream ignoring the odd TE would use CL"),
        rej("te_space_before_colon_with_cl", 400, post("Content-Length: 5\r\nTransfer-Encoding : chunked\r\n", "hello"),
            "§5.1: whitespace between name and colon MUST be rejected with 400"),
        // --- obfuscated Transfer-Encoding ------------------------------------------------
        fwd("te_value_mixed_case", post("Transfer-Encoding: Chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
            "§7: coding names are case-insensitive; unambiguous"),
        fwd("te_name_lower_case", post("transfer-encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
            "§5.1: field names are case-insensitive"),
        fwd("te_space_padded", post("Transfer-Encoding:   chunked  \r\n", "5\r\nhello\r\n0\r\n\r\n"),
            "§5.1: SP as OWS around a value is ordinary"),
        rej("te_tab_before_value", 400, post("Transfer-Encoding:\tchunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
            "RFC 9110 §5.6.3 allows HTAB as OWS, but it is the classic obfuscation: an upstream trimming only SP ignores the field. Stricter on purpose"),
        rej("te_tab_after_value", 400, post("Transfer-Encoding: chunked\t\r\n", "5\r\nhello\r\n0\r\n\r\n"),
            "as above, trailing HTAB"),
        rej("te_duplicate_fields", 400, post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            "§6.1: recipients that take the first or the last field disagree; refused"),
        rej("te_chunked_then_identity_field", 400, post("Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", "0\r\n\r\n"),
            "§6.1: two fields combine to `chunked, identity`: final coding not chunked"),
        rej("te_chunked_identity", 400, post("Transfer-Encoding: chunked, identity\r\n", "0\r\n\r\n"),
            "§6.3 item 4: final coding not chunked in a request: 400 and close"),
        rej("te_identity_chunked", 501, post("Transfer-Encoding: identity, chunked\r\n", "0\r\n\r\n"),
            "§6.1: a coding we will not vouch for: 501 (identity is not even registered any more)"),
        rej("te_gzip_chunked", 501, post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
            "§6.1: only a bare chunked is forwarded; the upstream may not know gzip"),
        rej("te_gzip_only", 400, post("Transfer-Encoding: gzip\r\n", "hello"),
            "§6.3 item 4: a request whose final coding is not chunked has no determinable length"),
        rej("te_chunked_twice", 400, post("Transfer-Encoding: chunked, chunked\r\n", "0\r\n\r\n"),
            "§7: chunked MUST NOT be applied more than once"),
        rej("te_quoted_value", 400, post("Transfer-Encoding: \"chunked\"\r\n", "0\r\n\r\n"),
            "§7: a transfer coding is a token; a quoted string is not one"),
        rej("te_with_parameter", 400, post("Transfer-Encoding: chunked;q=1\r\n", "0\r\n\r\n"),
            "§7: chunked takes no parameters; readers differ on what follows `;`"),
        rej("te_trailing_token", 400, post("Transfer-Encoding: chunked x\r\n", "0\r\n\r\n"),
            "§7: `chunked x` is not a token list"),
        rej("te_trailing_comma", 400, post("Transfer-Encoding: chunked,\r\n", "0\r\n\r\n"),
            "RFC 9110 §5.6.1 lets recipients skip empty list elements; we refuse them in TE, stricter on purpose"),
        rej("te_empty", 400, post("Transfer-Encoding: \r\n", ""),
            "§6.1: TE with no coding"),
        rej("te_underscore_lookalike", 400, post("Content-Length: 5\r\nTransfer_Encoding: chunked\r\n", "hello"),
            "a different field to us, but CGI-style servers map `_` to `-` (HTTP_TRANSFER_ENCODING) and see TE"),
        rej("te_nul_in_name", 400, post("Transfer-Encoding\0: chunked\r\n", "0\r\n\r\n"),
            "§5.1: a field name is a token; NUL is not in it"),
        rej("te_hidden_by_obs_fold", 400, post("X-A: b\r\n Transfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            "§5.2: obs-fold in a request MUST be rejected (or replaced, which we cannot)"),
        rej("te_hidden_by_bare_lf", 400, post("X-A: b\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            "§2.2 lets a recipient accept bare LF; an upstream that does not sees one field where we saw two"),
        rej("te_on_http10", 400, b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            "§6.1: TE in an HTTP/1.0 message means faulty framing"),
        // --- Content-Length ------------------------------------------------------------
        fwd("cl_plain", post("Content-Length: 5\r\n", "hello"), "RFC 9110 §8.6: the ordinary case"),
        fwd("cl_duplicate_equal", post("Content-Length: 5\r\nContent-Length: 5\r\n", "hello"),
            "RFC 9110 §8.6: identical duplicates may be accepted; every reading gives 5"),
        rej("cl_duplicate_different", 400, post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"),
            "§6.3 item 5: differing lengths are unrecoverable: 400"),
        rej("cl_list", 400, post("Content-Length: 5, 5\r\n", "hello"),
            "RFC 9110 §8.6 allows accepting a list of equal values; we refuse lists, stricter on purpose"),
        rej("cl_plus_sign", 400, post("Content-Length: +5\r\n", "hello"),
            "RFC 9110 §8.6: 1*DIGIT, no sign"),
        rej("cl_minus_sign", 400, post("Content-Length: -5\r\n", "hello"),
            "RFC 9110 §8.6: no sign"),
        fwd("cl_space_padded", post("Content-Length:   5   \r\n", "hello"),
            "§5.1: SP as OWS is ordinary"),
        rej("cl_tab_padded", 400, post("Content-Length:\t5\r\n", "hello"),
            "HTAB OWS around a framing field is refused, stricter on purpose (see te_tab_before_value)"),
        rej("cl_hex", 400, post("Content-Length: 0x5\r\n", "hello"),
            "RFC 9110 §8.6: decimal digits only"),
        rej("cl_two_numbers", 400, post("Content-Length: 5 5\r\n", "hello"),
            "RFC 9110 §8.6: one number"),
        rej("cl_overflow", 400, post("Content-Length: 99999999999999999999\r\n", "hello"),
            "RFC 9110 §8.6: a length that overflows must not wrap to a small one"),
        rej("cl_2_pow_63", 400, post("Content-Length: 9223372036854775808\r\n", "hello"),
            "RFC 9110 §8.6: fits u64 but not i64; upstreams keeping a signed length overflow (HAProxy and nginx refuse it)"),
        rej("cl_u64_max", 400, post("Content-Length: 18446744073709551615\r\n", "hello"),
            "as above: every size ≥ 2^63 is refused"),
        rej("cl_empty", 400, post("Content-Length: \r\n", "hello"),
            "§6.3 item 5: an invalid length is unrecoverable"),
        rej("cl_underscore_lookalike", 400, post("Content_Length: 5\r\n", "hello"),
            "CGI-style servers read it as Content-Length; to us it is no length at all"),
        fwd("cl_leading_zeros", post("Content-Length: 005\r\n", "hello"),
            "RFC 9110 §8.6: 1*DIGIT allows leading zeros; every decimal reading gives 5"),
        fwd("cl_on_get", b"GET /g HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
            "§6.3: a body is framed by CL whatever the method"),
        // --- chunked bodies ------------------------------------------------------------
        fwd("chunked_ext_and_trailer", chunked(b"5;a=b;c=\"d e\"\r\nhello\r\n0;last\r\nX-T: 1\r\n\r\n"),
            "§7.1.1, §7.1.2: extensions and trailers are valid and forwarded untouched"),
        fwd("chunked_upper_hex", chunked(b"A\r\n0123456789\r\n0\r\n\r\n"), "§7.1: HEXDIG is case-insensitive"),
        rej("chunk_size_overflow", 400, chunked(b"10000000000000000\r\nx\r\n0\r\n\r\n"),
            "§7.1: a size past 64 bits must not wrap; more than 16 digits is refused"),
        rej("chunk_size_2_pow_63", 400, chunked(b"8000000000000005\r\nhello\r\n0\r\n\r\n"),
            "§7.1: 16 digits but ≥ 2^63: a reader keeping a signed size sees a negative one (HAProxy and nginx refuse it)"),
        rej("chunk_size_u64_max", 400, chunked(b"ffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
            "§7.1: as above"),
        rej("chunk_size_minus", 400, chunked(b"-5\r\nhello\r\n0\r\n\r\n"), "§7.1: 1*HEXDIG, no sign"),
        rej("chunk_size_plus", 400, chunked(b"+5\r\nhello\r\n0\r\n\r\n"), "§7.1: no sign"),
        rej("chunk_size_0x", 400, chunked(b"0x5\r\nhello\r\n0\r\n\r\n"),
            "§7.1: was read as size 0 with extension `x5` (end of body) while strtol-style readers see 5"),
        rej("chunk_size_trailing_space", 400, chunked(b"5 \r\nhello\r\n0\r\n\r\n"),
            "§7.1.1 BWS is refused after the size, stricter on purpose: readers disagree on it"),
        rej("chunk_size_leading_space", 400, chunked(b" 5\r\nhello\r\n0\r\n\r\n"), "§7.1: the line starts with HEXDIG"),
        rej("chunk_ext_bare_lf_in_quotes", 400, chunked(b"5;a=\"x\ny\"\r\nhello\r\n0\r\n\r\n"),
            "§7.1.1: qdtext has no LF; a reader ending the line there desyncs"),
        Case {
            name: "chunk_ext_too_long",
            bytes: chunked(long_ext.as_bytes()),
            expect: Expect::RejectStreamed(400),
            why: "§7.1.1: a recipient limits extension length (ours: 4 KiB per line). Found after the body began to stream: the upstream gets an incomplete request, then the close",
        },
        rej("chunk_ext_nul", 400, chunked(b"5;a\0\r\nhello\r\n0\r\n\r\n"), "§7.1.1: extension names are tokens"),
        rej("chunk_ext_no_name", 400, chunked(b"5;\r\nhello\r\n0\r\n\r\n"), "§7.1.1: `;` must be followed by a name"),
        rej("chunk_size_bare_lf", 400, chunked(b"5\nhello\r\n0\r\n\r\n"), "§7.1: chunk lines end in CRLF"),
        rej("chunk_data_without_crlf", 400, chunked(b"5\r\nhelloXX\r\n0\r\n\r\n"),
            "§7.1: chunk-data is followed by CRLF; extra data means a wrong size"),
        rej("chunk_data_bare_lf", 400, chunked(b"5\r\nhello\n0\r\n\r\n"), "§7.1: CRLF after chunk-data"),
        rej("trailer_bare_lf", 400, chunked(b"0\r\nX-T: 1\n\r\n"), "§7.1.2, §2.2: trailer lines end in CRLF"),
        rej("trailer_is_a_request_line", 400, chunked(b"0\r\nGET /x HTTP/1.1\r\n\r\n"),
            "§7.1.2: trailers are field lines; a reader without trailer support would see a request"),
        fwd("chunked_last_chunk_ext", chunked(b"0;a=b\r\n\r\n"), "§7.1.1: the last chunk may carry extensions"),
        // --- chunk-line and trailer terminators (TERM.EXT, EXT.TERM, TRAIL.TERM) --------
        // One reader ends a chunk line, extension or trailer at a bare LF or CR, another
        // reads on: the chunk sizes after it differ, and a request hides in the body.
        rej("term_ext_bare_lf_in_ext", 400, chunked(b"2;a\nxx\r\n45\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: a\r\nX: \r\n0\r\n\r\n"),
            "§7.1.1: an extension ends at CRLF; a reader ending it at the LF reads `xx` as data (TERM.EXT)"),
        rej("ext_term_bare_cr_in_ext", 400, chunked(b"2;a\rxx\r\n0\r\n\r\n"),
            "§7.1.1, §2.2: a bare CR in an extension (EXT.TERM)"),
        rej("chunk_size_bare_cr", 400, chunked(b"2\rxx\r\n0\r\n\r\n"),
            "§7.1, §2.2: a size line ended by a bare CR"),
        rej("chunk_ext_bare_lf_after_value", 400, chunked(b"2;a=b\nxx\r\n0\r\n\r\n"),
            "§7.1.1: as `term_ext_bare_lf_in_ext`, after a value"),
        rej("chunk_data_bare_cr", 400, chunked(b"2\r\nxx\r0\r\n\r\n"),
            "§7.1: chunk-data is followed by CRLF, not a bare CR"),
        rej("trail_term_bare_lf_end", 400, chunked(b"0\r\n\nGET /admin HTTP/1.1\r\nHost: a\r\n\r\n"),
            "§7.1.2: the trailer section ends with CRLF; a reader taking the bare LF as its end sees the next bytes as a request (TRAIL.TERM)"),
        rej("trail_term_bare_cr_in_trailer", 400, chunked(b"0\r\nX-T: a\rb\r\n\r\n"),
            "§7.1.2, §2.2: a bare CR in a trailer field"),
        rej("trail_term_last_chunk_bare_lf", 400, chunked(b"0\n\r\n"),
            "§7.1: the last-chunk line ends in CRLF"),
        rej("trailer_without_colon", 400, chunked(b"0\r\nX-T\r\n\r\n"),
            "§7.1.2: trailer lines are field lines"),
        rej("trailer_obs_fold", 400, chunked(b"0\r\nX-T: a\r\n b\r\n\r\n"),
            "§5.2: obs-fold is refused in trailers as in heads"),
        fwd("trailer_plain", chunked(b"0\r\nX-T: a\r\n\r\n"),
            "§7.1.2: an ordinary trailer field"),
        rej("trailer_too_many_fields", 400, chunked(many_trailers.as_bytes()),
            "§7.1.2: trailer fields count against max_headers as head fields do; a merging upstream would take them for head fields"),
        fwd("trailer_fields_at_the_limit", chunked(trailers_at_limit.as_bytes()),
            "§7.1.2: as many trailer fields as max_headers allows in a head"),
        // --- Expect --------------------------------------------------------------------
        // Framing never depends on Expect: the body is the body whatever the upstream
        // answers (an early final response is the relay's business, tests/relay_desync.rs).
        fwd("expect_100_continue_with_body", post("Expect: 100-continue\r\nContent-Length: 5\r\n", "hello"),
            "RFC 9110 §10.1.1: the body follows whether or not a 100 came"),
        fwd("expect_mixed_case", post("Expect: 100-Continue\r\nContent-Length: 5\r\n", "hello"),
            "RFC 9110 §10.1.1: the expectation is case-insensitive; framing is unchanged"),
        fwd("expect_unknown", post("Expect: y 100-continue\r\nContent-Length: 5\r\n", "hello"),
            "RFC 9110 §10.1.1: an unknown expectation is the upstream's to refuse (417); framing is unchanged"),
        fwd("expect_on_get_without_body", get_with("Expect: 100-continue\r\n"),
            "RFC 9110 §10.1.1: no content: nothing to wait for, nothing to frame"),
        rej("expect_with_cl_and_te", 400, post("Expect: 100-continue\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            "§6.1: Expect does not soften CL with TE"),
        rej("expect_obs_fold", 400, post("Expect:\r\n 100-continue\r\nContent-Length: 5\r\n", "hello"),
            "§5.2: an obs-folded Expect (read by some as 100-continue, by others as empty)"),
        // --- line endings, control bytes, field syntax ----------------------------------
        rej("bare_lf_request_line", 400, b"GET / HTTP/1.1\nHost: a\r\n\r\n".to_vec(),
            "§2.2: bare LF refused in requests (see te_hidden_by_bare_lf)"),
        rej("bare_lf_everywhere", 400, b"GET / HTTP/1.1\nHost: a\n\n".to_vec(), "§2.2: as above"),
        rej("cr_without_lf_in_value", 400, get_with("X-A: a\rb\r\n"), "§2.2: a bare CR MUST be rejected or replaced by SP"),
        rej("cr_without_lf_in_line", 400, b"GET /\r HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§2.2: as above"),
        rej("obs_fold", 400, get_with("X-A: a\r\n b\r\n"), "§5.2: obs-fold in a request: 400"),
        rej("nul_in_value", 400, get_with("X-A: a\0b\r\n"), "RFC 9110 §5.5: NUL MUST be rejected or replaced"),
        rej("nul_in_name", 400, get_with("X\0A: b\r\n"), "§5.1: names are tokens"),
        rej("nul_in_target", 400, b"GET /a\0b HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3.2: a target is a URI"),
        rej("del_in_value", 400, get_with("X-A: a\x7fb\r\n"), "RFC 9110 §5.5: DEL is not field-vchar"),
        rej("ctl_in_value", 400, get_with("X-A: a\x01b\r\n"), "RFC 9110 §5.5: CTLs are not field-vchar"),
        fwd("obs_text_in_value", get_with("X-A: caf\u{e9}\r\n"),
            "RFC 9110 §5.5: obs-text is allowed in values and plays no part in framing"),
        rej("space_before_colon", 400, get_with("Host : b\r\n"), "§5.1: MUST be rejected with 400"),
        rej("tab_before_colon", 400, get_with("X-A\t: b\r\n"), "§5.1: same"),
        rej("line_without_colon", 400, get_with("X-A\r\n"), "§5.1: not a field line"),
        rej("empty_field_name", 400, get_with(": b\r\n"), "§5.1: field-name is 1*tchar"),
        // --- methods and request lines -------------------------------------------------
        rej("method_not_token", 400, b"G@T / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3.1 / RFC 9110 §9.1: method is a token"),
        fwd("method_lower_case", b"get / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
            "RFC 9110 §9.1: methods are case-sensitive tokens; `get` is a valid unknown method, the upstream decides"),
        rej("tab_separator", 400, b"GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3: the request line's separators are single SP"),
        rej("double_space", 400, b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3: single SP; lenient readers split differently"),
        rej("leading_space", 400, b" GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§2.2: whitespace before the request line is refused"),
        rej("trailing_space_after_version", 400, b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n".to_vec(), "§3: HTTP-version then CRLF"),
        fwd("one_leading_crlf", b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
            "§2.2: a server SHOULD ignore at least one empty line before the request line"),
        // --- request targets -----------------------------------------------------------
        rej("absolute_form_userinfo", 400, b"GET http://a@evil.example/ HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
            "RFC 9110 §4.2.4: a sender MUST NOT generate userinfo in an http(s) URI, and a recipient SHOULD treat it as an error: readers disagree on which host is meant"),
        rej("absolute_form_userinfo_password", 400, b"GET https://user:pw@a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n".to_vec(),
            "RFC 9110 §4.2.4: as above"),
        fwd("absolute_form_at_in_path", b"GET http://a.example/x@y HTTP/1.1\r\nHost: a.example\r\n\r\n".to_vec(),
            "RFC 3986 §3.2: an `@` after the authority is part of the path, not userinfo"),
        fwd("absolute_form", b"GET http://a.example/x?y HTTP/1.1\r\nHost: a.example\r\n\r\n".to_vec(),
            "§3.2.2: a server MUST accept absolute-form"),
        fwd("asterisk_form_options", b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3.2.4: asterisk-form with OPTIONS"),
        rej("asterisk_form_get", 400, b"GET * HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3.2.4: asterisk-form is only for OPTIONS"),
        rej("authority_form_get", 400, b"GET a.example:80 HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3.2.3: authority-form is only for CONNECT"),
        rej("connect_with_content_length", 400, connect_with("Content-Length", hidden),
            "RFC 9110 §9.3.6: a CONNECT request has no content; an upstream answers it and reads the \"body\" as the next request (nginx answers 400 too)"),
        rej("connect_with_content_length_0", 400, connect_with("Content-Length", ""),
            "RFC 9110 §9.3.6: as above; any Content-Length on CONNECT is refused"),
        rej("connect_chunked", 400, connect_with("Transfer-Encoding", &format!("{:x}\r\n{hidden}\r\n0\r\n\r\n", hidden.len())),
            "RFC 9110 §9.3.6: as above, with a chunked body"),
        rej("connect_origin_form", 400, b"CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3.2.3: CONNECT takes authority-form"),
        rej("relative_target", 400, b"GET x/y HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3.2: none of the four forms"),
        rej("space_in_target", 400, b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), "§3.2: SP ends the target; the rest is no version"),
        rej("invalid_utf8_target", 400, b"GET /caf\x80 HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
            "§3.2: a target is ASCII (RFC 3986); httparse lets through only valid UTF-8"),
        fwd("utf8_target", b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
            "§3.2 wants ASCII, but raw UTF-8 (curl sends it as typed) ends at the same SP for every reader: no framing question, the upstream decides"),
        // --- versions and other protocols ----------------------------------------------
        rej("http09_request_line", 400, b"GET /\r\n".to_vec(),
            "§2.3: HTTP/0.9 is not supported; refused when the line ends, not after the head timeout"),
        rej("http2_preface", 400, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(), "§2.3 / RFC 9113 §3.4: not HTTP/1.x"),
        rej("http12", 400, b"GET / HTTP/1.2\r\nHost: a\r\n\r\n".to_vec(), "§2.3: only 1.0 and 1.1 are spoken here (a 505 would also do)"),
        rej("http_name_lower_case", 400, b"GET / http/1.1\r\nHost: a\r\n\r\n".to_vec(), "§2.3: HTTP-name is case-sensitive"),
        rej("tls_client_hello", 400, b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03".to_vec(),
            "§3: not a method token; refused at the first byte instead of at the head timeout"),
        // --- sizes ---------------------------------------------------------------------
        rej("oversized_head", 431, get_with(&format!("X-Big: {}\r\n", "x".repeat(MAX_HEAD))),
            "RFC 6585 §5: the head exceeds max_head_bytes"),
        rej("too_many_fields", 431, get_with(&many), "RFC 6585 §5: more fields than max_headers"),
        rej("request_line_too_long", 431, format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD)).into_bytes(),
            "§3: a line longer than we parse (414 would also do; 431 because the head limit is what was hit)"),
        // --- hop-by-hop nominations of framing fields ------------------------------------
        rej("connection_transfer_encoding", 400, post("Connection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            "RFC 9110 §7.6.1: a proxy behind us removes the fields Connection names; without Transfer-Encoding the upstream frames no body and reads the chunks as a request"),
        rej("connection_content_length", 400, post("Connection: keep-alive, Content-Length\r\nContent-Length: 5\r\n", "hello"),
            "RFC 9110 §7.6.1: as above; without Content-Length the body is read as the next request"),
        rej("connection_host", 400, get_with("Connection: host\r\n"),
            "RFC 9110 §7.6.1: a proxy removing Host routes the request differently from the upstream"),
        fwd("connection_other_field", get_with("Connection: x-trace\r\nX-Trace: 1\r\n"),
            "RFC 9110 §7.6.1: nominating an ordinary field changes no framing"),
        // --- Host ----------------------------------------------------------------------
        fwd("duplicate_host", get_with("Host: b\r\n"),
            "§3.2 asks the origin to 400; framing is unambiguous and we never route by Host, so the upstream sees the same bytes and decides"),
        fwd("http11_without_host", b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n".to_vec(), "§3.2: the same; left to the upstream"),
    ]
}

/// Polls `f` until it returns Some, for up to two seconds.
async fn eventually<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..200 {
        if let Some(v) = f() {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// A short printable view of bytes for failure messages.
fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut out: String = s.chars().take(160).collect();
    if s.chars().count() > 160 {
        out.push_str("...");
    }
    format!("{out:?} ({} bytes)", b.len())
}

fn status_of(resp: &[u8]) -> Option<u16> {
    std::str::from_utf8(resp.get(9..12)?).ok()?.parse().ok()
}

async fn read_until_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn run_request_case(case: Case) -> Result<(), String> {
    let len = case.bytes.len();
    // How many bytes the upstream held when it had the whole first request.
    let first_batch = Arc::new(Mutex::new(None::<usize>));
    let fb = first_batch.clone();
    let (up, received) = upstream(move |mut c| {
        let fb = fb.clone();
        async move {
            c.read_at_least(len).await;
            *fb.lock().unwrap() = Some(c.buf.len());
            c.write(OK).await;
            c.read_at_least(len + PROBE.len()).await;
            c.write(OK).await;
            c.read_at_least(usize::MAX).await;
        }
    })
    .await;
    let p = fake::proxy_with(up, |t| {
        t.limits.max_head_bytes = MAX_HEAD;
        t.limits.max_headers = MAX_HEADERS;
    })
    .await;
    let mut s = TcpStream::connect(p.addr)
        .await
        .map_err(|e| e.to_string())?;
    match case.expect {
        Expect::Forward => {
            s.write_all(&[case.bytes.as_slice(), PROBE].concat())
                .await
                .map_err(|e| e.to_string())?;
            let got = read_n(&mut s, 2 * OK.len()).await;
            if got != [OK, OK].concat() {
                return Err(format!("expected two answers, got {:?}", show(&got)));
            }
            let batch = *first_batch.lock().unwrap();
            if batch != Some(len) {
                return Err(format!(
                    "the upstream held {batch:?} bytes before answering, not the request's {len}"
                ));
            }
            let all = received.all();
            if all != vec![[case.bytes.as_slice(), PROBE].concat()] {
                return Err(format!("the upstream received {}", show(&all.concat())));
            }
            if !p.capture.errors().is_empty() {
                return Err(format!("errors counted: {:?}", p.capture.errors()));
            }
        }
        Expect::Reject(status) | Expect::RejectStreamed(status) => {
            // The client may be cut off mid-write when the proxy answers early.
            let _ = s.write_all(&case.bytes).await;
            let resp = read_until_close(&mut s).await;
            if status_of(&resp) != Some(status) {
                return Err(format!("expected {status}, got {:?}", show(&resp)));
            }
            if !String::from_utf8_lossy(&resp).contains("\r\nConnection: close\r\n") {
                return Err("the answer does not say Connection: close".into());
            }
            let kind = if status == 431 {
                ErrorKind::HeaderTooLarge
            } else {
                ErrorKind::BadRequest
            };
            let errors = eventually(|| {
                let e = p.capture.errors();
                (!e.is_empty()).then_some(e)
            })
            .await;
            if errors != Some(vec![kind]) {
                return Err(format!("expected the error {kind:?}, got {errors:?}"));
            }
            if matches!(case.expect, Expect::RejectStreamed(_)) {
                // The upstream got the start of the body; its accept may trail our check.
                let _ = eventually(|| (received.connections() == 1).then_some(())).await;
            }
            let all = received.all();
            let clean = match case.expect {
                Expect::RejectStreamed(_) => {
                    all.len() == 1 && all[0].len() < len && case.bytes.starts_with(&all[0])
                }
                _ => all.is_empty(),
            };
            if !clean {
                return Err(format!("the upstream received {}", show(&all.concat())));
            }
        }
    }
    Ok(())
}

/// Runs every case concurrently, each against its own proxy and upstream, and reports
/// all the failures at once.
async fn run_all<F, Fut>(cases: Vec<(String, String, F)>)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let total = cases.len();
    let mut tasks = Vec::new();
    for (name, why, run) in cases {
        let task = tokio::spawn(tokio::time::timeout(CASE_TIMEOUT, run()));
        tasks.push((name, why, task));
    }
    let mut failures = Vec::new();
    for (name, why, task) in tasks {
        let outcome = match task.await {
            Ok(Ok(Ok(()))) => continue,
            Ok(Ok(Err(e))) => e,
            Ok(Err(_)) => "hung (the proxy or the upstream waits for bytes that never come)".into(),
            Err(e) => format!("panicked: {e}"),
        };
        failures.push(format!("{name}: {outcome}\n    why: {why}"));
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_corpus() {
    let cases = request_cases();
    assert!(cases.len() >= 60, "the corpus has {} cases", cases.len());
    let mut names: Vec<_> = cases.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be unique");
    run_all(
        cases
            .into_iter()
            .map(|c| {
                (c.name.to_owned(), c.why.to_owned(), move || {
                    run_request_case(c)
                })
            })
            .collect(),
    )
    .await;
}

// --- the response side -------------------------------------------------------------------

/// What the client sees for a response case.
#[derive(Debug, Clone, Copy)]
enum RespExpect {
    /// Nothing was forwarded yet: a 502 and `bad_response`.
    BadGateway,
    /// The response is forwarded as it is.
    Forward,
    /// The first `n` bytes were forwarded; then the connection closes, without a second
    /// response, and the error of this kind is counted.
    CutAfter(usize, ErrorKind),
}

struct RespCase {
    name: &'static str,
    /// What the upstream sends first; with `CutAfter`, the rest follows only once the
    /// client has received this much.
    first: &'static [u8],
    rest: &'static [u8],
    /// The upstream closes after sending.
    close: bool,
    expect: RespExpect,
    why: &'static str,
}

const fn bad(name: &'static str, first: &'static [u8], why: &'static str) -> RespCase {
    RespCase {
        name,
        first,
        rest: b"",
        close: false,
        expect: RespExpect::BadGateway,
        why,
    }
}

const CHUNKED_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";

fn response_cases() -> Vec<RespCase> {
    vec![
        bad("status_line_garbage", b"HTTX/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "§4: HTTP-version first"),
        bad("status_four_digits", b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok", "§4: status-code is 3DIGIT"),
        bad("status_not_digits", b"HTTP/1.1 abc OK\r\nContent-Length: 2\r\n\r\nok", "§4: status-code is 3DIGIT"),
        bad("no_version", b"200 OK\r\nContent-Length: 2\r\n\r\nok", "§4: status-line = HTTP-version SP status-code"),
        bad("http2_frame", b"\x00\x00\x12\x04\x00\x00\x00\x00\x00", "§4: not HTTP/1.x; refused at the first byte, not at the response timeout"),
        bad("redis_reply", b"-ERR unknown command 'GET'\r\n", "§4: a RESP server behind an HTTP tap; refused at once"),
        bad("cl_negative", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "RFC 9110 §8.6; §6.3 item 5: 502"),
        bad("cl_2_pow_63", b"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\nok",
            "RFC 9110 §8.6: a size ≥ 2^63 overflows a signed length in the client: 502"),
        bad("chunk_size_2_pow_63", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000005\r\nhello\r\n",
            "§7.1: as above, for a chunk size"),
        bad("bare_cr_line_ends", b"HTTP/1.1 200 OK\rContent-Length: 2\r\rok",
            "§2.2: a bare CR is invalid; refused when seen, not at the response timeout (no LF ever comes)"),
        bad("bare_cr_in_value", b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nok",
            "§2.2: a bare CR inside a field value"),
        bad("bare_cr_in_status_line", b"HTTP/1.1 200\rOK\r\nContent-Length: 2\r\n\r\nok",
            "§2.2: a bare CR in the status line"),
        bad("cl_list_different", b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nok", "§6.3 item 5: invalid length: 502"),
        bad("cl_duplicate_different", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok", "§6.3 item 5"),
        bad("cl_and_te", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "§6.3 item 3: an intermediary must remove CL before forwarding, which we cannot"),
        bad("te_on_http10", b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "§6.1: faulty framing"),
        bad("te_chunked_twice", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", "§7"),
        bad("space_before_colon", b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
            "§5.1: a proxy MUST remove it before forwarding; we cannot, so 502"),
        bad("obs_fold", b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
            "§5.2: a proxy MUST replace obs-fold or answer 502"),
        bad("nul_in_value", b"HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 2\r\n\r\nok", "RFC 9110 §5.5"),
        bad("interim_then_garbage", b"HTTP/1.1 100 Continue\r\n\r\nHTTX/1.1 200 OK\r\n\r\n",
            "§4: the final response is garbage; the 100 was not forwarded yet"),
        bad("bad_chunk_in_first_read", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "§7.1: nothing forwarded yet, so a clean 502"),
        RespCase {
            name: "bare_lf_response",
            first: b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
            rest: b"",
            close: false,
            expect: RespExpect::Forward,
            why: "§2.2: accepted in responses on purpose (only the asking client reads it, and clients accept it)",
        },
        RespCase {
            name: "bad_chunk_size_mid_body",
            first: CHUNKED_HEAD,
            rest: b"zz\r\nhello\r\n0\r\n\r\n",
            close: false,
            expect: RespExpect::CutAfter(CHUNKED_HEAD.len(), ErrorKind::BadResponse),
            why: "§7.1: part of the response is out; the only honest end is to close, never a 502 after it",
        },
        RespCase {
            name: "chunk_data_overrun_mid_body",
            first: CHUNKED_HEAD,
            rest: b"3\r\nabcdef\r\n0\r\n\r\n",
            close: false,
            expect: RespExpect::CutAfter(CHUNKED_HEAD.len(), ErrorKind::BadResponse),
            why: "§7.1: chunk data longer than its size",
        },
        RespCase {
            name: "chunk_size_0x_mid_body",
            first: CHUNKED_HEAD,
            rest: b"0x5\r\nhello\r\n0\r\n\r\n",
            close: false,
            expect: RespExpect::CutAfter(CHUNKED_HEAD.len(), ErrorKind::BadResponse),
            why: "§7.1: was read as the last chunk before the fix",
        },
        RespCase {
            name: "premature_close_mid_length_body",
            first: b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
            rest: b"",
            close: true,
            expect: RespExpect::CutAfter(44, ErrorKind::UpstreamReset),
            why: "§8: an incomplete message; the client must see the close, not a complete-looking answer",
        },
    ]
}

async fn run_response_case(case: RespCase) -> Result<(), String> {
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let go = Arc::new(Mutex::new(Some(go_rx)));
    let (first, rest, close) = (case.first, case.rest, case.close);
    let (up, _) = upstream(move |mut c| {
        let go = go.clone();
        async move {
            c.read_head().await;
            c.write(first).await;
            let go = go.lock().unwrap().take();
            if let Some(go) = go {
                if !rest.is_empty() {
                    let _ = go.await;
                    let _ = c.stream.write_all(rest).await;
                }
            }
            if !close {
                c.read_at_least(usize::MAX).await;
            }
        }
    })
    .await;
    let p = fake::proxy(up).await;
    let mut s = TcpStream::connect(p.addr)
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let expect_kind = match case.expect {
        RespExpect::BadGateway => {
            let resp = read_until_close(&mut s).await;
            if status_of(&resp) != Some(502) {
                return Err(format!("expected 502, got {:?}", show(&resp)));
            }
            Some(ErrorKind::BadResponse)
        }
        RespExpect::Forward => {
            let resp = read_n(&mut s, first.len()).await;
            if resp != first {
                return Err(format!("forwarded {:?}", show(&resp)));
            }
            None
        }
        RespExpect::CutAfter(n, kind) => {
            let mut got = read_n(&mut s, n).await;
            let _ = go_tx.send(());
            got.extend(read_until_close(&mut s).await);
            if got != first[..n] {
                return Err(format!(
                    "expected exactly the first {n} bytes then the close, got {:?}",
                    show(&got)
                ));
            }
            Some(kind)
        }
    };
    if let Some(kind) = expect_kind {
        let errors = eventually(|| {
            let e = p.capture.errors();
            (!e.is_empty()).then_some(e)
        })
        .await;
        if errors != Some(vec![kind]) {
            return Err(format!("expected the error {kind:?}, got {errors:?}"));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_corpus() {
    run_all(
        response_cases()
            .into_iter()
            .map(|c| {
                (c.name.to_owned(), c.why.to_owned(), move || {
                    run_response_case(c)
                })
            })
            .collect(),
    )
    .await;
}

// --- 0.CL with early-response gadgets ----------------------------------------------------
//
// An upstream that answers before reading the body (a redirect, a static file, a 417)
// and then reads the rest of the connection as requests: a body that hides a request
// becomes one, and its answer the answer to the client's next request (a 0.CL desync
// built from an early-response gadget). Whatever the body hides and whenever it
// arrives, the client must never receive the hidden request's answer, and its next
// request is either answered by a clean upstream connection or its connection closes.

const EARLY: &[u8] = b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n";
const SMUGGLED: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled";
const HIDDEN: &str = "GET /admin HTTP/1.1\r\nHost: a\r\n\r\n";

struct Gadget {
    name: &'static str,
    head: String,
    body: Vec<u8>,
    /// The early answer the upstream gives.
    answer: &'static [u8],
}

fn gadget_cases() -> Vec<Gadget> {
    let cl = |method: &str, extra: &str| Gadget {
        name: "",
        head: format!(
            "{method} /static HTTP/1.1\r\nHost: a\r\n{extra}Content-Length: {}\r\n\r\n",
            HIDDEN.len()
        ),
        body: HIDDEN.as_bytes().to_vec(),
        answer: EARLY,
    };
    let chunk = format!("{:x}\r\n{HIDDEN}\r\n0\r\n\r\n", HIDDEN.len());
    vec![
        Gadget {
            name: "get_with_cl_hiding_a_request",
            ..cl("GET", "")
        },
        Gadget {
            name: "post_with_cl_hiding_a_request",
            ..cl("POST", "")
        },
        Gadget {
            name: "options_with_cl_hiding_a_request",
            ..cl("OPTIONS", "")
        },
        Gadget {
            name: "expect_417_with_cl_hiding_a_request",
            answer: b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n",
            ..cl("PUT", "Expect: 100-continue\r\n")
        },
        Gadget {
            name: "chunked_hiding_a_request",
            head: "POST /static HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".into(),
            body: chunk.into_bytes(),
            answer: EARLY,
        },
    ]
}

async fn run_gadget(g: Gadget, body_with_head: bool) -> Result<(), String> {
    let answer = g.answer;
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (up, received) = upstream(move |mut c| {
        let first = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            c.read_head().await;
            if !first {
                c.write(OK).await;
                c.read_at_least(usize::MAX).await;
                return;
            }
            c.write(answer).await;
            // Everything after is read as requests: every head end in what arrives gets
            // an answer, the hidden request's first.
            let mut answered = 1;
            loop {
                while fake::occurrences(&c.buf, b"\r\n\r\n") > answered {
                    c.write(SMUGGLED).await;
                    answered += 1;
                }
                let have = c.buf.len();
                if c.read_at_least(have + 1).await == have {
                    return;
                }
            }
        }
    })
    .await;
    let p = fake::proxy(up).await;
    let mut s = TcpStream::connect(p.addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut got = if body_with_head {
        // The whole request reached the upstream before its answer: nothing tells that
        // answer from an honest one. The hidden request's answer comes while no request
        // is in flight, and must be dropped. (Had the client pipelined its next request
        // right behind, that answer could not be told from the next one's: see
        // docs/security.md, "the limit of the guarantee".)
        let _ = s.write_all(&[g.head.as_bytes(), &g.body].concat()).await;
        let got = read_n(&mut s, answer.len()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = s.write_all(PROBE).await;
        got
    } else {
        // The body, and the next request right behind it, only once the answer is in.
        let _ = s.write_all(g.head.as_bytes()).await;
        let got = read_n(&mut s, answer.len()).await;
        let _ = s.write_all(&[&g.body, PROBE].concat()).await;
        got
    };
    got.extend(read_until_close_or_idle(&mut s).await);
    let ok = got == answer || got == [answer, OK].concat();
    if !ok {
        return Err(format!(
            "the client got {} (expected the early answer, then OK or the close)",
            show(&got)
        ));
    }
    let all = received.all();
    if all.len() > 1 && all[1] != PROBE {
        return Err(format!(
            "a second upstream connection carried {}",
            show(&all[1])
        ));
    }
    Ok(())
}

/// Reads until the peer closes or is quiet for half a second.
async fn read_until_close_or_idle(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_millis(500), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_response_gadgets_corpus() {
    let mut cases = Vec::new();
    for body_with_head in [true, false] {
        for g in gadget_cases() {
            let name = format!(
                "{}_{}",
                g.name,
                if body_with_head {
                    "one_write"
                } else {
                    "body_after_answer"
                }
            );
            cases.push((
                name,
                "the early answer must not make a hidden request the next one's answer".into(),
                move || run_gadget(g, body_with_head),
            ));
        }
    }
    run_all(cases).await;
}

// --- docs/security.md holds these tables -------------------------------------------------

/// The rows `| `name` | outcome | why |` of the section `## {title}` of docs/security.md.
fn doc_rows(title: &str) -> Vec<(String, String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md");
    let doc = std::fs::read_to_string(path).expect("docs/security.md");
    let heading = format!("## {title}\n");
    let start = doc
        .find(&heading)
        .unwrap_or_else(|| panic!("no {heading:?}"))
        + heading.len();
    let section = &doc[start..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.strip_prefix("| `")?.splitn(3, " | ").collect();
            let [name, outcome, why] = cells[..] else {
                return None;
            };
            let name = name.strip_suffix('`')?;
            Some((
                name.to_owned(),
                outcome.to_owned(),
                why.strip_suffix(" |")?.to_owned(),
            ))
        })
        .collect()
}

/// Every row the cases give that the doc lacks, and every row the doc has that no case
/// gives, as a readable list.
fn table_differences(
    cases: Vec<(String, String, String)>,
    doc: Vec<(String, String, String)>,
) -> Vec<String> {
    let row = |(name, outcome, why): &(String, String, String)| {
        format!("| `{name}` | {outcome} | {why} |")
    };
    let missing = cases
        .iter()
        .filter(|c| !doc.contains(c))
        .map(|c| format!("+ {}", row(c)));
    let extra = doc
        .iter()
        .filter(|d| !cases.contains(d))
        .map(|d| format!("- {}", row(d)));
    missing.chain(extra).collect()
}

#[test]
fn the_request_table_in_docs_security_is_the_request_corpus() {
    let cases = request_cases()
        .into_iter()
        .map(|c| {
            let outcome = match c.expect {
                Expect::Forward => "forwarded".to_owned(),
                Expect::Reject(status) => status.to_string(),
                Expect::RejectStreamed(status) => {
                    format!("{status}, after the body began to stream")
                }
            };
            (c.name.to_owned(), outcome, c.why.to_owned())
        })
        .collect();
    let differences = table_differences(cases, doc_rows("Request cases"));
    assert!(
        differences.is_empty(),
        "docs/security.md \"Request cases\" differs from request_cases() (+ in the test only, - in the doc only):\n{}",
        differences.join("\n")
    );
}

#[test]
fn the_response_table_in_docs_security_is_the_response_corpus() {
    let cases = response_cases()
        .into_iter()
        .map(|c| {
            let outcome = match c.expect {
                RespExpect::BadGateway => "502".to_owned(),
                RespExpect::Forward => "forwarded".to_owned(),
                RespExpect::CutAfter(_, kind) => {
                    format!("first part forwarded, then closed (`{}`)", kind.name())
                }
            };
            (c.name.to_owned(), outcome, c.why.to_owned())
        })
        .collect();
    let differences = table_differences(cases, doc_rows("Response cases"));
    assert!(
        differences.is_empty(),
        "docs/security.md \"Response cases\" differs from response_cases() (+ in the test only, - in the doc only):\n{}",
        differences.join("\n")
    );
}
