//! RESP framing against a reference decoder, under every way a stream can be cut.
//!
//! Values are generated, encoded by a small encoder here, concatenated, and the stream
//! is delivered to the scanner in pieces: cut at every single position, at random
//! positions, and one byte at a time. The boundaries the scanner finds must be those of
//! the encoder and those the `redis-protocol` crate's decoder finds.

use phasescope::recorder::Direction;
use phasescope::resp::{command, Kind, Limits, RespError, Scanner};
use proptest::prelude::*;
use redis_protocol::resp3::types::{DecodedRangeFrame, RangeFrame};

// ---------------------------------------------------------------------------------------
// A value model and its encoder.

#[derive(Debug, Clone)]
enum V {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Vec<u8>),
    /// RESP2 `$-1`.
    NullBulk,
    /// RESP2 `*-1`.
    NullArray,
    Null,
    Double(String),
    Bool(bool),
    Big(String),
    BulkError(Vec<u8>),
    Verbatim(Vec<u8>),
    Array(Vec<V>),
    Map(Vec<(V, V)>),
    Set(Vec<V>),
    Push(Vec<V>),
    Attr(Vec<(V, V)>, Box<V>),
    StreamedString(Vec<Vec<u8>>),
    StreamedArray(Vec<V>),
    StreamedMap(Vec<(V, V)>),
    StreamedSet(Vec<V>),
}

impl V {
    fn kind(&self) -> Kind {
        match self {
            V::Simple(_) => Kind::SimpleString,
            V::Error(_) => Kind::SimpleError,
            V::Int(_) => Kind::Integer,
            V::Bulk(_) | V::NullBulk | V::StreamedString(_) => Kind::BulkString,
            V::NullArray | V::Array(_) | V::StreamedArray(_) => Kind::Array,
            V::Null => Kind::Null,
            V::Double(_) => Kind::Double,
            V::Bool(_) => Kind::Boolean,
            V::Big(_) => Kind::BigNumber,
            V::BulkError(_) => Kind::BulkError,
            V::Verbatim(_) => Kind::VerbatimString,
            V::Map(_) | V::StreamedMap(_) => Kind::Map,
            V::Set(_) | V::StreamedSet(_) => Kind::Set,
            V::Push(_) => Kind::Push,
            V::Attr(_, v) => v.kind(),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        fn line(out: &mut Vec<u8>, t: u8, body: &[u8]) {
            out.push(t);
            out.extend_from_slice(body);
            out.extend_from_slice(b"\r\n");
        }
        fn blob(out: &mut Vec<u8>, t: u8, data: &[u8]) {
            line(out, t, data.len().to_string().as_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        fn all(out: &mut Vec<u8>, t: u8, items: &[V]) {
            line(out, t, items.len().to_string().as_bytes());
            items.iter().for_each(|v| v.encode(out));
        }
        fn pairs(out: &mut Vec<u8>, t: u8, items: &[(V, V)]) {
            line(out, t, items.len().to_string().as_bytes());
            for (k, v) in items {
                k.encode(out);
                v.encode(out);
            }
        }
        match self {
            V::Simple(s) => line(out, b'+', s),
            V::Error(s) => line(out, b'-', s),
            V::Int(i) => line(out, b':', i.to_string().as_bytes()),
            V::Bulk(b) => blob(out, b'$', b),
            V::NullBulk => line(out, b'$', b"-1"),
            V::NullArray => line(out, b'*', b"-1"),
            V::Null => line(out, b'_', b""),
            V::Double(d) => line(out, b',', d.as_bytes()),
            V::Bool(b) => line(out, b'#', if *b { b"t" } else { b"f" }),
            V::Big(n) => line(out, b'(', n.as_bytes()),
            V::BulkError(b) => blob(out, b'!', b),
            V::Verbatim(b) => {
                let mut data = b"txt:".to_vec();
                data.extend_from_slice(b);
                blob(out, b'=', &data)
            }
            V::Array(items) => all(out, b'*', items),
            V::Set(items) => all(out, b'~', items),
            V::Push(items) => all(out, b'>', items),
            V::Map(items) => pairs(out, b'%', items),
            V::Attr(attrs, v) => {
                pairs(out, b'|', attrs);
                v.encode(out);
            }
            V::StreamedString(chunks) => {
                line(out, b'$', b"?");
                for c in chunks {
                    blob(out, b';', c);
                }
                line(out, b';', b"0");
            }
            V::StreamedArray(items) | V::StreamedSet(items) => {
                let t = if matches!(self, V::StreamedArray(_)) {
                    b'*'
                } else {
                    b'~'
                };
                line(out, t, b"?");
                items.iter().for_each(|v| v.encode(out));
                line(out, b'.', b"");
            }
            V::StreamedMap(items) => {
                line(out, b'%', b"?");
                for (k, v) in items {
                    k.encode(out);
                    v.encode(out);
                }
                line(out, b'.', b"");
            }
        }
    }
}

/// Encodes `values` back to back; returns the stream and the end offset of each value.
fn encode_all(values: &[V]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut ends = Vec::new();
    for v in values {
        v.encode(&mut out);
        ends.push(out.len());
    }
    (out, ends)
}

// ---------------------------------------------------------------------------------------
// Strategies.

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

/// Simple-string content: anything but LF (a CR inside is legal and must not end it).
fn text() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>().prop_filter("no LF", |b| *b != b'\n'), 0..12)
        .prop_filter("no CR at the end", |s| s.last() != Some(&b'\r'))
}

fn double() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>()
            .prop_filter("finite", |d| d.is_finite())
            .prop_map(|d| format!("{d:e}")),
        (-1000i32..1000).prop_map(|i| format!("{}", f64::from(i) / 8.0)),
        Just("inf".to_owned()),
        Just("-inf".to_owned()),
        Just("nan".to_owned()),
    ]
}

fn big_number() -> impl Strategy<Value = String> {
    "-?[1-9][0-9]{0,40}|0"
}

/// RESP2 values: what Redis sends before HELLO 3.
fn resp2_value() -> impl Strategy<Value = V> {
    let leaf = prop_oneof![
        text().prop_map(V::Simple),
        text().prop_map(V::Error),
        any::<i64>().prop_map(V::Int),
        bytes(24).prop_map(V::Bulk),
        Just(V::NullBulk),
        Just(V::NullArray),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop::collection::vec(inner, 0..5).prop_map(V::Array)
    })
}

/// RESP3 values that can be map keys and set members in the reference decoder.
fn resp3_scalar() -> BoxedStrategy<V> {
    prop_oneof![
        text().prop_map(V::Simple),
        text().prop_map(V::Error),
        any::<i64>().prop_map(V::Int),
        bytes(24).prop_map(V::Bulk),
        Just(V::Null),
        double().prop_map(V::Double),
        any::<bool>().prop_map(V::Bool),
        big_number().prop_map(V::Big),
        bytes(16).prop_map(V::BulkError),
        bytes(16).prop_map(V::Verbatim),
    ]
    .boxed()
}

/// RESP3 values the reference decoder accepts inside other values.
fn resp3_nested() -> impl Strategy<Value = V> {
    resp3_scalar().prop_recursive(4, 32, 4, |inner| {
        let pairs = prop::collection::vec((resp3_scalar(), inner.clone()), 0..3);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(V::Array),
            pairs.clone().prop_map(V::Map),
            prop::collection::vec(resp3_scalar(), 0..4).prop_map(V::Set),
            prop::collection::vec(inner.clone(), 0..4).prop_map(V::Push),
            (
                prop::collection::vec((resp3_scalar(), inner.clone()), 0..3),
                inner
            )
                .prop_filter(
                    "the reference attaches attributes to non-null values only",
                    |(_, v)| { !matches!(v, V::Null | V::Attr(..)) }
                )
                .prop_map(|(a, v)| V::Attr(a, Box::new(v))),
        ]
    })
}

/// RESP3 messages the reference decoder accepts: streamed types at the top only.
fn resp3_message() -> impl Strategy<Value = V> {
    prop_oneof![
        6 => resp3_nested(),
        1 => prop::collection::vec(bytes(12).prop_filter("chunks are not empty", |c| !c.is_empty()), 0..4)
            .prop_map(V::StreamedString),
        1 => prop::collection::vec(resp3_nested(), 0..4).prop_map(V::StreamedArray),
        1 => prop::collection::vec((resp3_scalar(), resp3_nested()), 0..3).prop_map(V::StreamedMap),
        1 => prop::collection::vec(resp3_scalar(), 0..4).prop_map(V::StreamedSet),
    ]
}

/// Any RESP3 value the protocol allows, including streamed values nested in aggregates,
/// aggregates as map keys and attributes on nulls, which the reference decoder refuses.
fn resp3_any() -> impl Strategy<Value = V> {
    resp3_scalar().prop_recursive(5, 48, 4, |inner| {
        let pairs = prop::collection::vec((inner.clone(), inner.clone()), 0..3);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(V::Array),
            pairs.clone().prop_map(V::Map),
            prop::collection::vec(inner.clone(), 0..4).prop_map(V::Set),
            prop::collection::vec(inner.clone(), 0..4).prop_map(V::Push),
            (pairs.clone(), inner.clone()).prop_map(|(a, v)| V::Attr(a, Box::new(v))),
            prop::collection::vec(bytes(8).prop_filter("not empty", |c| !c.is_empty()), 0..3)
                .prop_map(V::StreamedString),
            prop::collection::vec(inner.clone(), 0..4).prop_map(V::StreamedArray),
            pairs.prop_map(V::StreamedMap),
            prop::collection::vec(inner, 0..4).prop_map(V::StreamedSet),
        ]
    })
}

/// A client command as sent on the wire.
#[derive(Debug, Clone)]
enum Cmd {
    Multibulk(Vec<Vec<u8>>),
    /// Words and whether the line ends with CRLF (else a bare LF).
    Inline(Vec<String>, bool),
    /// `*0` or `*-1`.
    Empty(i8),
}

impl Cmd {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Cmd::Multibulk(args) => {
                out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
                for a in args {
                    out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                    out.extend_from_slice(a);
                    out.extend_from_slice(b"\r\n");
                }
            }
            Cmd::Inline(words, crlf) => {
                out.extend_from_slice(words.join(" ").as_bytes());
                out.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
            }
            Cmd::Empty(n) => out.extend_from_slice(format!("*{n}\r\n").as_bytes()),
        }
    }

    fn words(&self) -> Vec<Vec<u8>> {
        match self {
            Cmd::Multibulk(args) => args.clone(),
            Cmd::Inline(words, _) => words.iter().map(|w| w.clone().into_bytes()).collect(),
            Cmd::Empty(_) => Vec::new(),
        }
    }

    fn kind(&self) -> Kind {
        match self {
            Cmd::Multibulk(_) | Cmd::Empty(_) => Kind::Array,
            Cmd::Inline(..) => Kind::Inline,
        }
    }
}

fn command_strategy() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        5 => prop::collection::vec(bytes(20), 1..5).prop_map(Cmd::Multibulk),
        2 => (prop::collection::vec("[A-Za-z0-9_:.-]{1,8}", 0..4), any::<bool>())
            .prop_map(|(w, crlf)| Cmd::Inline(w, crlf)),
        1 => prop_oneof![Just(0i8), Just(-1i8)].prop_map(Cmd::Empty),
    ]
}

// ---------------------------------------------------------------------------------------
// Delivery harnesses.

/// Delivers `stream` as a relay's read buffer would fill: the bytes up to each cut become
/// available in turn, and the scanner is asked with the buffer from the current message's
/// start. Returns each message's end offset and kind.
fn scan_pieces(
    dir: Direction,
    stream: &[u8],
    cuts: &[usize],
) -> (Vec<(usize, Option<Kind>)>, Option<RespError>) {
    let mut sc = Scanner::new(dir);
    let mut found = Vec::new();
    let mut start = 0;
    for &avail in cuts.iter().chain(std::iter::once(&stream.len())) {
        loop {
            match sc.scan(&stream[start..avail]) {
                Ok(Some(n)) => {
                    assert!(n > 0 && start + n <= avail);
                    start += n;
                    found.push((start, sc.kind()));
                }
                Ok(None) => {
                    assert_eq!(sc.consumed(), (avail - start) as u64);
                    break;
                }
                Err(e) => return (found, Some(e)),
            }
        }
    }
    (found, None)
}

/// Delivers `stream` in pieces through `feed`, each byte exactly once.
fn feed_pieces(
    dir: Direction,
    stream: &[u8],
    cuts: &[usize],
) -> (Vec<(usize, Option<Kind>)>, Option<RespError>) {
    let mut sc = Scanner::new(dir);
    let mut found = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain(std::iter::once(&stream.len())) {
        let mut off = from;
        while off < to {
            match sc.feed(&stream[off..to]) {
                Ok(Some(n)) => {
                    off += n;
                    found.push((off, sc.kind()));
                }
                Ok(None) => off = to,
                Err(e) => return (found, Some(e)),
            }
        }
        from = to;
    }
    (found, None)
}

/// Checks that every delivery finds `expected`, with no error and nothing left over.
fn assert_framing(
    dir: Direction,
    stream: &[u8],
    expected: &[(usize, Option<Kind>)],
    random_cuts: &[usize],
) {
    let check = |what: &str, cuts: &[usize]| {
        for (name, run) in [
            ("scan", scan_pieces as fn(_, _, _) -> _),
            ("feed", feed_pieces),
        ] {
            let (found, err) = run(dir, stream, cuts);
            assert_eq!(
                err,
                None,
                "{name}, {what} {cuts:?}: error on {:?}",
                String::from_utf8_lossy(stream)
            );
            assert_eq!(
                found,
                expected,
                "{name}, {what} {cuts:?} on {:?}",
                String::from_utf8_lossy(stream)
            );
        }
    };
    check("whole", &[]);
    for k in 1..stream.len() {
        check("cut at", &[k]);
    }
    let mut cuts: Vec<usize> = random_cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    cuts.sort_unstable();
    check("cuts", &cuts);
    let every: Vec<usize> = (1..stream.len()).collect();
    check("byte by byte", &every);
}

/// Message ends as the reference RESP3 decoder finds them; a streamed message runs to the
/// end-of-stream frame the decoder reports separately.
fn reference_resp3(stream: &[u8]) -> Vec<usize> {
    use redis_protocol::resp3::decode::streaming::decode_range;
    let next = |pos: usize| match decode_range(&stream[pos..]) {
        Ok(Some((frame, n))) => (frame, pos + n),
        other => panic!(
            "reference decoder at {pos}: {other:?} on {:?}",
            String::from_utf8_lossy(stream)
        ),
    };
    let mut ends = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let (frame, after) = next(pos);
        pos = after;
        if let DecodedRangeFrame::Streaming(_) = frame {
            loop {
                let (part, after) = next(pos);
                pos = after;
                if matches!(
                    part,
                    DecodedRangeFrame::Complete(RangeFrame::ChunkedString((0, 0)))
                ) {
                    break;
                }
            }
        }
        ends.push(pos);
    }
    ends
}

fn reference_resp2(stream: &[u8]) -> Vec<usize> {
    use redis_protocol::resp2::decode::decode_range;
    let mut ends = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        match decode_range(&stream[pos..]) {
            Ok(Some((_, n))) => pos += n,
            other => panic!("reference decoder at {pos}: {other:?}"),
        }
        ends.push(pos);
    }
    ends
}

fn expected(ends: &[usize], kinds: impl IntoIterator<Item = Kind>) -> Vec<(usize, Option<Kind>)> {
    ends.iter()
        .copied()
        .zip(kinds.into_iter().map(Some))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn resp3_boundaries_match_the_reference(
        values in prop::collection::vec(resp3_message(), 1..5),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let (stream, ends) = encode_all(&values);
        prop_assert_eq!(&reference_resp3(&stream), &ends);
        let want = expected(&ends, values.iter().map(V::kind));
        assert_framing(Direction::Response, &stream, &want, &cuts);
    }

    #[test]
    fn resp2_boundaries_match_the_reference(
        values in prop::collection::vec(resp2_value(), 1..5),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let (stream, ends) = encode_all(&values);
        prop_assert_eq!(&reference_resp2(&stream), &ends);
        let want = expected(&ends, values.iter().map(V::kind));
        assert_framing(Direction::Response, &stream, &want, &cuts);
    }

    #[test]
    fn any_resp3_value_is_framed_as_encoded(
        values in prop::collection::vec(resp3_any(), 1..4),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let (stream, ends) = encode_all(&values);
        let want = expected(&ends, values.iter().map(V::kind));
        assert_framing(Direction::Response, &stream, &want, &cuts);
    }

    #[test]
    fn commands_are_framed_and_read_back(
        cmds in prop::collection::vec(command_strategy(), 1..6),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for c in &cmds {
            c.encode(&mut stream);
            ends.push(stream.len());
        }
        if cmds.iter().all(|c| matches!(c, Cmd::Multibulk(_))) {
            prop_assert_eq!(&reference_resp2(&stream), &ends);
        }
        let want = expected(&ends, cmds.iter().map(Cmd::kind));
        assert_framing(Direction::Request, &stream, &want, &cuts);

        let mut start = 0;
        for (c, end) in cmds.iter().zip(&ends) {
            let view = command(&stream[start..*end]).unwrap();
            let words = c.words();
            prop_assert_eq!(view.argc(), words.len());
            prop_assert_eq!(view.is_empty(), words.is_empty());
            prop_assert_eq!(view.name(), words.first().map_or(&b""[..], |w| &w[..]));
            let args: Vec<&[u8]> = view.args().collect();
            let want: Vec<&[u8]> = words.iter().skip(1).map(|w| &w[..]).collect();
            prop_assert_eq!(args, want);
            start = *end;
        }
    }
}

/// Bytes that make up RESP, so that random input reaches deep into the grammar.
fn protocol_soup() -> impl Strategy<Value = Vec<u8>> {
    let alphabet: Vec<u8> = b"+-:$*_,#(!=%~>|.;?\r\n0123456789tfinaxTXT \"'".to_vec();
    prop::collection::vec(prop::sample::select(alphabet), 0..120)
}

/// Corrupts a valid stream in a few places.
fn mutated_stream() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(resp3_any(), 1..3),
        prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..4),
    )
        .prop_map(|(values, edits)| {
            let (mut stream, _) = encode_all(&values);
            for (at, byte, op) in edits {
                let at = at % (stream.len() + 1);
                match op {
                    0 if at < stream.len() => stream[at] = byte,
                    1 => stream.insert(at, byte),
                    _ if at < stream.len() => {
                        stream.remove(at);
                    }
                    _ => {}
                }
            }
            stream
        })
}

/// Random input never panics, and how it is cut never changes what the scanner decides:
/// the same boundaries, then the same error or the same need for more bytes.
fn assert_cut_invariant(dir: Direction, input: &[u8], cuts: &[usize]) {
    let whole = scan_pieces(dir, input, &[]);
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    let every: Vec<usize> = (1..input.len()).collect();
    for pieces in [&cuts[..], &every[..]] {
        assert_eq!(scan_pieces(dir, input, pieces), whole, "scan {pieces:?}");
        assert_eq!(feed_pieces(dir, input, pieces), whole, "feed {pieces:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn garbage_never_panics_and_cuts_do_not_matter(
        input in prop_oneof![bytes(200), protocol_soup(), mutated_stream()],
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        assert_cut_invariant(Direction::Response, &input, &cuts);
        assert_cut_invariant(Direction::Request, &input, &cuts);
        // The command view never panics on whatever the request scanner frames.
        let (found, _) = scan_pieces(Direction::Request, &input, &[]);
        let mut start = 0;
        for (end, _) in found {
            let _ = command(&input[start..end]).map(|c| (c.mode_switch(), c.args().count()));
            start = end;
        }
    }

    #[test]
    fn an_accepted_first_message_is_one_the_reference_accepts_too(input in mutated_stream()) {
        // Where both decoders accept the start of a corrupted stream, they agree on its length.
        let mut sc = Scanner::new(Direction::Response);
        if let Ok(Some(n)) = sc.scan(&input) {
            if let Ok(Some((DecodedRangeFrame::Complete(_), m))) =
                redis_protocol::resp3::decode::streaming::decode_range(&input)
            {
                prop_assert_eq!(n, m);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Fixed cases.

fn reply(msg: &[u8]) -> Result<Option<(usize, Option<Kind>)>, RespError> {
    let mut sc = Scanner::new(Direction::Response);
    Ok(sc.scan(msg)?.map(|n| (n, sc.kind())))
}

fn request(msg: &[u8]) -> Result<Option<usize>, RespError> {
    Scanner::new(Direction::Request).scan(msg)
}

#[test]
fn every_resp3_type_alone() {
    let cases: &[(&[u8], Kind)] = &[
        (b"+OK\r\n", Kind::SimpleString),
        (b"+\r\n", Kind::SimpleString),
        (b"-ERR unknown command 'x'\r\n", Kind::SimpleError),
        (b":0\r\n", Kind::Integer),
        (b":-9223372036854775808\r\n", Kind::Integer),
        (b":9223372036854775807\r\n", Kind::Integer),
        (b"$5\r\nhello\r\n", Kind::BulkString),
        (b"$0\r\n\r\n", Kind::BulkString),
        (b"$4\r\n\r\n\r\n\r\n", Kind::BulkString),
        (b"$-1\r\n", Kind::BulkString),
        (b"*-1\r\n", Kind::Array),
        (b"*0\r\n", Kind::Array),
        (b"*2\r\n:1\r\n$1\r\nx\r\n", Kind::Array),
        (b"_\r\n", Kind::Null),
        (b",3.14\r\n", Kind::Double),
        (b",-1.5e-10\r\n", Kind::Double),
        (b",inf\r\n", Kind::Double),
        (b",-inf\r\n", Kind::Double),
        (b",nan\r\n", Kind::Double),
        (b"#t\r\n", Kind::Boolean),
        (b"#f\r\n", Kind::Boolean),
        (
            b"(3492890328409238509324850943850943825024385\r\n",
            Kind::BigNumber,
        ),
        (b"(-1\r\n", Kind::BigNumber),
        (b"!21\r\nSYNTAX invalid syntax\r\n", Kind::BulkError),
        (b"=15\r\ntxt:Some string\r\n", Kind::VerbatimString),
        (b"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", Kind::Map),
        (b"%0\r\n", Kind::Map),
        (b"~3\r\n+a\r\n+b\r\n+c\r\n", Kind::Set),
        (b">3\r\n+message\r\n+chan\r\n$2\r\nhi\r\n", Kind::Push),
    ];
    for (msg, kind) in cases {
        assert_eq!(
            reply(msg),
            Ok(Some((msg.len(), Some(*kind)))),
            "{:?}",
            String::from_utf8_lossy(msg)
        );
        // One byte short is incomplete, never an error or a shorter message.
        assert_eq!(
            reply(&msg[..msg.len() - 1]),
            Ok(None),
            "{:?}",
            String::from_utf8_lossy(msg)
        );
    }
}

#[test]
fn attributes_belong_to_the_value_they_describe() {
    // The spec's example: an attribute map, then the real reply; one message.
    let msg = b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n";
    assert_eq!(reply(msg), Ok(Some((msg.len(), Some(Kind::Array)))));
    // Attributes before a push: the message is a push.
    let push = b"|1\r\n+a\r\n+b\r\n>2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n";
    assert_eq!(reply(push), Ok(Some((push.len(), Some(Kind::Push)))));
    // Inside an aggregate, attribute plus value count as one element.
    let inner = b"*2\r\n|1\r\n+ttl\r\n:3600\r\n:1\r\n:2\r\n";
    assert_eq!(reply(inner), Ok(Some((inner.len(), Some(Kind::Array)))));
    // An empty attribute still needs its value.
    assert_eq!(reply(b"|0\r\n"), Ok(None));
    assert_eq!(reply(b"|0\r\n:1\r\n"), Ok(Some((8, Some(Kind::Integer)))));
    // Two attribute maps in a row still describe the one value after them.
    let twice = b"|1\r\n+a\r\n+b\r\n|0\r\n:1\r\n";
    assert_eq!(reply(twice), Ok(Some((twice.len(), Some(Kind::Integer)))));
    // Until the value's type byte arrives the kind is unknown.
    let mut sc = Scanner::new(Direction::Response);
    assert_eq!(sc.scan(b"|1\r\n+a\r\n+b\r\n"), Ok(None));
    assert_eq!(sc.kind(), None);
}

#[test]
fn streamed_strings_and_aggregates() {
    let cases: &[(&[u8], Kind)] = &[
        (
            b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n",
            Kind::BulkString,
        ),
        (b"$?\r\n;0\r\n", Kind::BulkString),
        (b"*?\r\n:1\r\n:2\r\n:3\r\n.\r\n", Kind::Array),
        (b"*?\r\n.\r\n", Kind::Array),
        (b"~?\r\n+a\r\n+b\r\n.\r\n", Kind::Set),
        (b"%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n", Kind::Map),
        // Streamed values nest in each other and in counted aggregates.
        (
            b"*2\r\n$?\r\n;1\r\na\r\n;0\r\n*?\r\n*?\r\n.\r\n.\r\n",
            Kind::Array,
        ),
    ];
    for (msg, kind) in cases {
        assert_eq!(
            reply(msg),
            Ok(Some((msg.len(), Some(*kind)))),
            "{:?}",
            String::from_utf8_lossy(msg)
        );
        assert_eq!(reply(&msg[..msg.len() - 1]), Ok(None));
    }
}

#[test]
fn inline_commands_end_at_the_line_feed() {
    for msg in [
        &b"PING\r\n"[..],
        b"SET a b\r\n",
        b"PING\n",
        b"\r\n",
        b"\n",
        b"GET \"a b\"\r\n",
    ] {
        assert_eq!(
            request(msg),
            Ok(Some(msg.len())),
            "{:?}",
            String::from_utf8_lossy(msg)
        );
        assert_eq!(request(&msg[..msg.len() - 1]), Ok(None));
    }
    // A pipeline of inline and multibulk commands.
    let stream = b"PING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\nSET a b\n*0\r\n";
    let (found, err) = scan_pieces(Direction::Request, stream, &[]);
    assert_eq!(err, None);
    let ends: Vec<usize> = found.iter().map(|(e, _)| *e).collect();
    assert_eq!(ends, vec![6, 26, 34, 38]);
    let kinds: Vec<Option<Kind>> = found.iter().map(|(_, k)| *k).collect();
    assert_eq!(
        kinds,
        vec![
            Some(Kind::Inline),
            Some(Kind::Array),
            Some(Kind::Inline),
            Some(Kind::Array)
        ]
    );
}

#[test]
fn request_side_follows_redis_rules() {
    // Redis reads `*0` and `*-N` from a client as nothing at all.
    assert_eq!(request(b"*0\r\n"), Ok(Some(4)));
    assert_eq!(request(b"*-5\r\n"), Ok(Some(5)));
    assert_eq!(
        request(b"*1\r\n:1\r\n"),
        Err(RespError::ExpectedBulk { byte: b':' })
    );
    assert_eq!(request(b"*1\r\n$-1\r\n"), Err(RespError::NegativeLength));
    assert_eq!(request(b"*?\r\n"), Err(RespError::StreamedNotAllowed));
    assert_eq!(request(b"*1\r\n$?\r\n"), Err(RespError::StreamedNotAllowed));
    // A `+` line from a client is an inline command, as Redis reads it.
    assert_eq!(request(b"+OK\r\n"), Ok(Some(5)));
}

#[test]
fn errors_say_what_is_wrong() {
    let over = |n: u64| format!("${n}\r\n").into_bytes();
    let too_deep = b"*1\r\n".repeat(phasescope::resp::MAX_DEPTH + 1);
    let cases: Vec<(Vec<u8>, RespError)> = vec![
        (b"@1\r\n".to_vec(), RespError::BadType { byte: b'@' }),
        (b"*1\r\n\x00".to_vec(), RespError::BadType { byte: 0 }),
        (b"$x\r\n".to_vec(), RespError::BadNumber),
        (b"$\r\n".to_vec(), RespError::BadNumber),
        (b"$01\r\n".to_vec(), RespError::BadNumber),
        (b"$+1\r\n".to_vec(), RespError::BadNumber),
        (b"$1 \r\n".to_vec(), RespError::BadNumber),
        (b":-0\r\n".to_vec(), RespError::BadNumber),
        (b"$-2\r\n".to_vec(), RespError::NegativeLength),
        (b"*-2\r\n".to_vec(), RespError::NegativeLength),
        (b"%-1\r\n".to_vec(), RespError::NegativeLength),
        (b"!-1\r\n".to_vec(), RespError::NegativeLength),
        (b">?\r\n".to_vec(), RespError::StreamedNotAllowed),
        (b"!?\r\n".to_vec(), RespError::StreamedNotAllowed),
        (
            b":9223372036854775808\r\n".to_vec(),
            RespError::IntegerOverflow,
        ),
        (
            b":-9223372036854775809\r\n".to_vec(),
            RespError::IntegerOverflow,
        ),
        (
            b":99999999999999999999999999\r\n".to_vec(),
            RespError::IntegerOverflow,
        ),
        (
            over(512 * 1024 * 1024 + 1),
            RespError::BulkTooLong {
                limit: 512 * 1024 * 1024,
            },
        ),
        (
            b"$99999999999999999999999999\r\n".to_vec(),
            RespError::BulkTooLong {
                limit: 512 * 1024 * 1024,
            },
        ),
        (
            b"*2147483648\r\n".to_vec(),
            RespError::AggregateTooLong {
                limit: i32::MAX as u64,
            },
        ),
        (
            too_deep,
            RespError::TooDeep {
                limit: phasescope::resp::MAX_DEPTH,
            },
        ),
        (b"+OK\n".to_vec(), RespError::BadLineEnd),
        (b":1\rx".to_vec(), RespError::BadLineEnd),
        (b"$1\r\nab\r\n".to_vec(), RespError::BadPayloadEnd),
        (b"$1\r\na\n".to_vec(), RespError::BadPayloadEnd),
        (b"_x\r\n".to_vec(), RespError::NotEmpty),
        (b"#x\r\n".to_vec(), RespError::BadBoolean),
        (b"#tt\r\n".to_vec(), RespError::BadBoolean),
        (b"#\r\n".to_vec(), RespError::BadBoolean),
        (b",1.0x\r\n".to_vec(), RespError::BadDouble),
        (b",\r\n".to_vec(), RespError::BadDouble),
        (b"=3\r\ntxt\r\n".to_vec(), RespError::BadVerbatim),
        (b".\r\n".to_vec(), RespError::UnexpectedEnd),
        (b"*1\r\n.\r\n".to_vec(), RespError::UnexpectedEnd),
        (b"%?\r\n+k\r\n.\r\n".to_vec(), RespError::OddMapEnd),
        (
            b"*?\r\n|1\r\n+a\r\n+b\r\n.\r\n".to_vec(),
            RespError::DanglingAttribute,
        ),
        (
            b"$?\r\n:1\r\n".to_vec(),
            RespError::ExpectedChunk { byte: b':' },
        ),
        (b"$?\r\n;-1\r\n".to_vec(), RespError::NegativeLength),
        (b";1\r\n".to_vec(), RespError::BadType { byte: b';' }),
    ];
    for (msg, want) in cases {
        let got = reply(&msg);
        assert_eq!(got, Err(want), "{:?}", String::from_utf8_lossy(&msg));
        assert!(!want.to_string().is_empty());
    }
}

#[test]
fn limits_are_configurable() {
    let limits = Limits {
        max_depth: 2,
        max_bulk: 10,
        max_aggregate: 3,
        max_line: 5,
        max_inline: 8,
    };
    let reply = |msg: &[u8]| Scanner::with_limits(Direction::Response, limits).scan(msg);
    assert_eq!(reply(b"*1\r\n*1\r\n:1\r\n"), Ok(Some(12)));
    assert_eq!(
        reply(b"*1\r\n*1\r\n*1\r\n"),
        Err(RespError::TooDeep { limit: 2 })
    );
    assert_eq!(reply(b"$10\r\n0123456789\r\n"), Ok(Some(17)));
    assert_eq!(reply(b"$11\r\n"), Err(RespError::BulkTooLong { limit: 10 }));
    assert_eq!(
        reply(b"$?\r\n;11\r\n"),
        Err(RespError::BulkTooLong { limit: 10 })
    );
    assert_eq!(
        reply(b"%4\r\n"),
        Err(RespError::AggregateTooLong { limit: 3 })
    );
    assert_eq!(reply(b"+12345\r\n"), Ok(Some(8)));
    assert_eq!(
        reply(b"+123456\r\n"),
        Err(RespError::LineTooLong { limit: 5 })
    );
    // The limit holds for a line that has not ended yet.
    assert_eq!(reply(b"-1234567"), Err(RespError::LineTooLong { limit: 5 }));
    let request = |msg: &[u8]| Scanner::with_limits(Direction::Request, limits).scan(msg);
    assert_eq!(request(b"GET abcd\r\n"), Ok(Some(10)));
    assert_eq!(
        request(b"GET abcde\r\n"),
        Err(RespError::InlineTooLong { limit: 8 })
    );
    assert_eq!(
        request(b"GET abcdefgh"),
        Err(RespError::InlineTooLong { limit: 8 })
    );
    // Past the scanner's own array of levels (a Lua script's nested tables, 41 and 101
    // levels deep in the hostile round) the levels go on in a vector: the reply is framed
    // whole, and the scanner frames the next message as usual.
    for levels in [41, 101, 1000] {
        let mut nested = b"*2\r\n".repeat(levels);
        for _ in 0..=levels {
            nested.extend_from_slice(b":1\r\n");
        }
        let mut sc = Scanner::new(Direction::Response);
        assert_eq!(sc.scan(&nested), Ok(Some(nested.len())), "{levels} levels");
        assert_eq!(sc.scan(b"+OK\r\n"), Ok(Some(5)));
        assert_eq!(sc.feed(&nested), Ok(Some(nested.len())), "fed, {levels}");
    }
}

#[test]
fn an_error_sticks_until_reset() {
    let mut sc = Scanner::new(Direction::Response);
    assert_eq!(sc.scan(b"@"), Err(RespError::BadType { byte: b'@' }));
    assert_eq!(sc.scan(b"+OK\r\n"), Err(RespError::BadType { byte: b'@' }));
    assert_eq!(sc.feed(b"+OK\r\n"), Err(RespError::BadType { byte: b'@' }));
    assert_eq!(sc.error(), Some(RespError::BadType { byte: b'@' }));
    sc.reset();
    assert_eq!(sc.error(), None);
    assert_eq!(sc.scan(b"+OK\r\n"), Ok(Some(5)));
}

#[test]
fn a_shrunk_buffer_is_refused() {
    let mut sc = Scanner::new(Direction::Response);
    assert_eq!(sc.scan(b"$5\r\nab"), Ok(None));
    assert!(sc.in_message());
    assert_eq!(sc.scan(b"$5"), Err(RespError::BufferShrank));
}

#[test]
fn a_large_bulk_string_is_skipped_not_scanned() {
    const SIZE: usize = 1 << 20;
    const PIECE: usize = 1024;
    let header = format!("${SIZE}\r\n");
    let mut msg = header.clone().into_bytes();
    msg.extend(std::iter::repeat_n(b'\n', SIZE));
    msg.extend_from_slice(b"\r\n");

    // A growing buffer, as a relay that keeps the message until it is complete.
    let mut sc = Scanner::new(Direction::Response);
    let mut calls = 0;
    let mut end = None;
    for avail in (PIECE..msg.len())
        .step_by(PIECE)
        .chain(std::iter::once(msg.len()))
    {
        calls += 1;
        match sc.scan(&msg[..avail]).unwrap() {
            None => assert_eq!(
                sc.consumed(),
                avail as u64,
                "progress is kept between calls"
            ),
            Some(n) => end = Some(n),
        }
    }
    assert_eq!(end, Some(msg.len()));
    assert_eq!(calls, msg.len().div_ceil(PIECE));
    // Only the header and the final CRLF were looked at, not one payload byte.
    assert_eq!(sc.bytes_inspected(), header.len() as u64 + 2);

    // Pieces passed once each, as a relay that forwards and drops them.
    let mut sc = Scanner::new(Direction::Response);
    let mut end = None;
    for (i, piece) in msg.chunks(PIECE).enumerate() {
        if let Some(n) = sc.feed(piece).unwrap() {
            end = Some(i * PIECE + n);
        }
    }
    assert_eq!(end, Some(msg.len()));
    assert_eq!(sc.bytes_inspected(), header.len() as u64 + 2);
}

#[test]
fn work_grows_with_the_protocol_not_the_data() {
    // Examined bytes for an array of bulk strings is its headers and CRLFs, whatever the
    // payload sizes, even when delivered one byte at a time.
    let overhead = |size: usize| {
        let mut msg = b"*4\r\n".to_vec();
        for _ in 0..4 {
            msg.extend_from_slice(format!("${size}\r\n").as_bytes());
            msg.extend(std::iter::repeat_n(b'x', size));
            msg.extend_from_slice(b"\r\n");
        }
        let mut sc = Scanner::new(Direction::Response);
        let mut done = false;
        for b in msg.chunks(1) {
            done |= sc.feed(b).unwrap().is_some();
        }
        assert!(done);
        let headers = msg.len() - 4 * size;
        (sc.bytes_inspected(), headers as u64)
    };
    for size in [10, 1000, 100_000] {
        let (inspected, headers) = overhead(size);
        assert_eq!(inspected, headers, "payload of {size} bytes");
    }
}

// ---------------------------------------------------------------------------------------
// Against a real Redis, when one is installed.

mod real_redis {
    use super::*;
    use std::io::{ErrorKind, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::process::{Child, Command as Process, Stdio};
    use std::time::{Duration, Instant};

    struct Redis {
        child: Child,
        port: u16,
        version: String,
    }

    impl Drop for Redis {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Starts `redis-server` on a free loopback port.
    fn start() -> Redis {
        let version = match Process::new("redis-server").arg("--version").output() {
            Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
            // A missing server is a failure, not a skip: the test command installs it.
            Err(_) => panic!("redis-server is missing: run scripts/test, which installs it"),
        };
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Process::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args([
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let redis = Redis {
            child,
            port,
            version,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", redis.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    fn multibulk(words: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
            out.extend_from_slice(w);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// Reads replies until `want` non-push replies and `pushes` pushes were framed.
    fn read_replies(conn: &mut TcpStream, want: usize, pushes: usize) -> Vec<Kind> {
        conn.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut sc = Scanner::new(Direction::Response);
        let mut kinds = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        let replies = |k: &[Kind]| k.iter().filter(|k| !k.is_push()).count();
        let pushed = |k: &[Kind]| k.iter().filter(|k| k.is_push()).count();
        while replies(&kinds) < want || pushed(&kinds) < pushes {
            assert!(Instant::now() < deadline, "got only {kinds:?}");
            let n = match conn.read(&mut buf) {
                Ok(0) => panic!("redis closed the connection after {kinds:?}"),
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(e) => panic!("{e}"),
            };
            let mut off = 0;
            while off < n {
                match sc.feed(&buf[off..n]).unwrap() {
                    Some(used) => {
                        off += used;
                        kinds.push(sc.kind().unwrap());
                    }
                    None => off = n,
                }
            }
        }
        assert!(!sc.in_message(), "a reply is left half-read");
        kinds
    }

    #[test]
    fn redis_replies_are_framed_one_per_command() {
        let redis = start();
        let big = vec![b'\n'; 100_000];
        let script: Vec<(Vec<u8>, Option<Kind>)> = vec![
            (b"PING\r\n".to_vec(), Some(Kind::SimpleString)),
            (b"SET a b\r\n".to_vec(), Some(Kind::SimpleString)),
            (multibulk(&[b"SET", b"big", &big]), Some(Kind::SimpleString)),
            (multibulk(&[b"GET", b"big"]), Some(Kind::BulkString)),
            (multibulk(&[b"INCR", b"n"]), Some(Kind::Integer)),
            (
                multibulk(&[b"RPUSH", b"l", b"a", b"b", b"c"]),
                Some(Kind::Integer),
            ),
            (
                multibulk(&[b"LRANGE", b"l", b"0", b"-1"]),
                Some(Kind::Array),
            ),
            (
                multibulk(&[b"HSET", b"h", b"f1", b"v1", b"f2", b"v2"]),
                Some(Kind::Integer),
            ),
            (multibulk(&[b"HGETALL", b"h"]), Some(Kind::Array)),
            (
                multibulk(&[b"CONFIG", b"GET", b"maxmemory*"]),
                Some(Kind::Array),
            ),
            (multibulk(&[b"COMMAND", b"DOCS", b"SET"]), Some(Kind::Array)),
            (multibulk(&[b"INFO"]), Some(Kind::BulkString)),
            (multibulk(&[b"GET", b"missing"]), Some(Kind::BulkString)),
            (b"NOSUCHCMD x\r\n".to_vec(), Some(Kind::SimpleError)),
            (b"*0\r\n".to_vec(), None),
            (b"\r\n".to_vec(), None),
            (multibulk(&[b"EXEC"]), Some(Kind::SimpleError)),
            (
                multibulk(&[b"SADD", b"s", b"m1", b"m2"]),
                Some(Kind::Integer),
            ),
            (
                multibulk(&[b"ZADD", b"z", b"1.5", b"m"]),
                Some(Kind::Integer),
            ),
            (multibulk(&[b"HELLO", b"3"]), Some(Kind::Map)),
            (multibulk(&[b"HGETALL", b"h"]), Some(Kind::Map)),
            (multibulk(&[b"SMEMBERS", b"s"]), Some(Kind::Set)),
            (multibulk(&[b"ZSCORE", b"z", b"m"]), Some(Kind::Double)),
            (multibulk(&[b"GET", b"missing"]), Some(Kind::Null)),
            (multibulk(&[b"COMMAND", b"DOCS", b"SET"]), Some(Kind::Map)),
            (
                multibulk(&[b"CLIENT", b"TRACKING", b"ON"]),
                Some(Kind::SimpleString),
            ),
            (multibulk(&[b"GET", b"a"]), Some(Kind::BulkString)),
            // Changing a tracked key sends this connection an invalidation push.
            (multibulk(&[b"SET", b"a", b"c"]), Some(Kind::SimpleString)),
            (multibulk(&[b"PING"]), Some(Kind::SimpleString)),
        ];
        let requests: Vec<u8> = script.iter().flat_map(|(r, _)| r.clone()).collect();

        // The request scanner frames the pipeline as sent, and the empty commands are
        // the ones that get no reply.
        let (found, err) = scan_pieces(Direction::Request, &requests, &[]);
        assert_eq!(err, None);
        assert_eq!(found.len(), script.len());
        let mut start = 0;
        let mut hello = None;
        for ((end, _), (_, reply)) in found.iter().zip(&script) {
            let cmd = command(&requests[start..*end]).unwrap();
            assert_eq!(cmd.is_empty(), reply.is_none());
            if let Some(phasescope::resp::ModeSwitch::Hello { protover }) = cmd.mode_switch() {
                hello = protover;
            }
            start = *end;
        }
        assert_eq!(hello, Some(3));

        let mut conn = TcpStream::connect(("127.0.0.1", redis.port)).unwrap();
        let mut writer = conn.try_clone().unwrap();
        let sender = std::thread::spawn(move || writer.write_all(&requests));
        let want: Vec<Kind> = script.iter().filter_map(|(_, k)| *k).collect();
        let kinds = read_replies(&mut conn, want.len(), 1);
        sender.join().unwrap().unwrap();
        let replies: Vec<Kind> = kinds.iter().copied().filter(|k| !k.is_push()).collect();
        assert_eq!(replies, want);
        assert_eq!(kinds.iter().filter(|k| k.is_push()).count(), 1);
    }

    #[test]
    fn every_command_redis_lists_is_known() {
        let redis = start();
        if !redis.version.contains("v=7.") {
            eprintln!(
                "the table is for Redis 7; skipping for {}",
                redis.version.trim()
            );
            return;
        }
        let mut conn = TcpStream::connect(("127.0.0.1", redis.port)).unwrap();
        conn.write_all(&multibulk(&[b"COMMAND", b"LIST"])).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut sc = Scanner::new(Direction::Response);
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        let len = loop {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "redis closed the connection");
            reply.extend_from_slice(&buf[..n]);
            if let Some(len) = sc.scan(&reply).unwrap() {
                break len;
            }
        };
        assert_eq!(len, reply.len());
        let (frame, _) = redis_protocol::resp2::decode::decode(&reply)
            .unwrap()
            .unwrap();
        let redis_protocol::resp2::types::OwnedFrame::Array(names) = frame else {
            panic!("COMMAND LIST is not an array: {frame:?}")
        };
        assert!(names.len() >= 200, "{}", names.len());
        for name in names {
            let redis_protocol::resp2::types::OwnedFrame::BulkString(name) = name else {
                panic!("not a bulk string: {name:?}")
            };
            if name.contains(&b'|') {
                // A subcommand (`config|get`): it shares its container's route label.
                continue;
            }
            assert!(
                phasescope::resp::known_command(&name).is_some(),
                "{} is missing from the table",
                String::from_utf8_lossy(&name)
            );
        }
    }
}

/// What the headers of an incomplete message announce: a lower bound of its length.
#[test]
fn an_incomplete_message_announces_at_least_its_length() {
    let mut sc = Scanner::new(Direction::Request);
    assert_eq!(sc.scan(b"*2\r\n$3\r\nGET\r\n$400000000\r\n"), Ok(None));
    assert!(sc.announced() >= 400_000_000 + 2, "{}", sc.announced());
    let mut sc = Scanner::new(Direction::Request);
    assert_eq!(sc.scan(b"*2147483647\r\n"), Ok(None));
    assert!(sc.announced() >= 2_147_483_647 * 4);
    // A whole message is never below the bound taken at any of its bytes.
    let whole = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
    for cut in 1..whole.len() {
        let mut sc = Scanner::new(Direction::Request);
        assert_eq!(sc.scan(&whole[..cut]), Ok(None), "{cut}");
        assert!(
            sc.announced() <= whole.len() as u64,
            "cut at {cut}: {}",
            sc.announced()
        );
    }
}
