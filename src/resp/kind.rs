//! The type of a whole RESP message.

/// The type of a message's value, as its type byte says. For a message that starts with
/// attributes (`|`) it is the type of the value the attributes describe, since that is
/// what the tap acts on: a push is still a push when it carries attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `+`
    SimpleString,
    /// `-`
    SimpleError,
    /// `:`
    Integer,
    /// `$`, including the RESP2 null bulk string `$-1` and streamed strings `$?`.
    BulkString,
    /// `*`, including the RESP2 null array `*-1` and streamed arrays `*?`. Also every
    /// multibulk command on the request side.
    Array,
    /// `_`
    Null,
    /// `,`
    Double,
    /// `#`
    Boolean,
    /// `(`
    BigNumber,
    /// `!`
    BulkError,
    /// `=`
    VerbatimString,
    /// `%`
    Map,
    /// `~`
    Set,
    /// `>`: out-of-band data that answers no command.
    Push,
    /// A request written as a plain line (`PING\r\n`), as Redis accepts from clients.
    Inline,
}

impl Kind {
    /// An error reply (`-` or `!`): the command failed.
    pub const fn is_error(self) -> bool {
        matches!(self, Kind::SimpleError | Kind::BulkError)
    }

    /// A RESP3 push: not the reply of any command, so it must not be paired with one.
    pub const fn is_push(self) -> bool {
        matches!(self, Kind::Push)
    }
}
