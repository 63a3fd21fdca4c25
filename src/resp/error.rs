//! What can be wrong with a RESP byte stream.
//!
//! The error is `Copy` so that a scanner can keep the first error it met and return it
//! again on every later call: once framing is lost on a connection it cannot be regained,
//! and the tap must see the same reason each time it asks.

use thiserror::Error;

/// Why a byte stream is not valid RESP (or, on the request side, not a command Redis
/// would accept). Each message is one sentence a log line can carry as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RespError {
    #[error("byte 0x{byte:02x} does not start any RESP type")]
    BadType { byte: u8 },
    #[error("a command argument must be a bulk string ('$'), got byte 0x{byte:02x}")]
    ExpectedBulk { byte: u8 },
    #[error("a streamed string chunk must start with ';', got byte 0x{byte:02x}")]
    ExpectedChunk { byte: u8 },
    #[error("a line does not end with CRLF")]
    BadLineEnd,
    #[error("a length or integer line is not a plain decimal number")]
    BadNumber,
    #[error("a length is negative and is not the RESP2 null length -1")]
    NegativeLength,
    #[error("a '?' (streamed) length appears where the type cannot be streamed")]
    StreamedNotAllowed,
    #[error("an integer does not fit in 64 bits")]
    IntegerOverflow,
    #[error("a string length exceeds the limit of {limit} bytes")]
    BulkTooLong { limit: u64 },
    #[error("an aggregate count exceeds the limit of {limit} elements")]
    AggregateTooLong { limit: u64 },
    #[error("aggregates nest deeper than the limit of {limit} levels")]
    TooDeep { limit: usize },
    #[error("a line is longer than the limit of {limit} bytes")]
    LineTooLong { limit: u64 },
    #[error("an inline command is longer than the limit of {limit} bytes")]
    InlineTooLong { limit: u64 },
    #[error("a string payload is not followed by CRLF")]
    BadPayloadEnd,
    #[error("a null ('_') or end-of-stream ('.') line is not empty")]
    NotEmpty,
    #[error("a boolean is neither #t nor #f")]
    BadBoolean,
    #[error("a double holds a character that no number has")]
    BadDouble,
    #[error("a verbatim string is shorter than its 4-byte format prefix")]
    BadVerbatim,
    #[error("an end-of-stream marker ('.') appears outside a streamed aggregate")]
    UnexpectedEnd,
    #[error("a streamed map ends after a key that has no value")]
    OddMapEnd,
    #[error("an attribute is not followed by the value it describes")]
    DanglingAttribute,
    #[error("the buffer is shorter than the bytes already scanned from it")]
    BufferShrank,
    #[error("the message is incomplete")]
    Incomplete,
    #[error("bytes follow the end of the command")]
    TrailingBytes,
    #[error("an inline command has unbalanced quotes")]
    UnbalancedQuotes,
}
