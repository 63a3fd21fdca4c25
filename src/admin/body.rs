//! An admin answer's body, and what it holds until it is sent: the turn of the pool that
//! formatted it and the connection's busy mark.
//!
//! A `Full` body is handed to hyper whole and dropped at once, however slowly the client
//! reads it; the turn released then let the next scrape format another copy while the
//! first still sat in memory (64 `/api/snapshot` readers: 468 MB). This body gives hyper
//! a slice at a time, and hyper asks for the next only when its write buffer has room,
//! so the turn is released when all but the last slice have reached the socket: the
//! copies in memory are at most the pool's permits.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

use super::pool::Turn;
use super::slots::Busy;

/// What hyper is given at a time: a few of them fill its write buffer.
const SLICE: usize = 64 * 1024;

/// The body of every admin answer.
#[derive(Debug, Default)]
pub(crate) struct Body {
    rest: Bytes,
    /// Released when the last slice has been handed over, or the body dropped.
    turn: Option<Turn>,
    busy: Option<Busy>,
}

impl Body {
    pub(super) fn new(data: impl Into<Bytes>) -> Self {
        Self {
            rest: data.into(),
            turn: None,
            busy: None,
        }
    }

    /// Keeps the pool's turn until the body is sent.
    pub(super) fn hold_turn(&mut self, turn: Turn) {
        self.turn = Some(turn);
    }

    /// Keeps the connection marked busy until the body is sent.
    pub(super) fn hold_busy(&mut self, busy: Busy) {
        self.busy = Some(busy);
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.rest.is_empty() {
            self.turn = None;
            self.busy = None;
            return Poll::Ready(None);
        }
        let n = self.rest.len().min(SLICE);
        let slice = self.rest.split_to(n);
        Poll::Ready(Some(Ok(Frame::data(slice))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    /// Exact, so that hyper sends `Content-Length` rather than chunks.
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body_util::BodyExt;
    use tokio::sync::Semaphore;

    use super::*;

    #[tokio::test]
    async fn the_turn_is_held_until_the_last_slice_is_taken() {
        let permits = Arc::new(Semaphore::new(1));
        let mut body = Body::new(vec![7u8; 200 * 1024]);
        body.hold_turn(Arc::clone(&permits).try_acquire_owned().unwrap());
        assert_eq!(
            hyper::body::Body::size_hint(&body).exact(),
            Some(200 * 1024)
        );
        let mut slices = Vec::new();
        while let Some(frame) = body.frame().await {
            assert_eq!(permits.available_permits(), 0, "held while slices remain");
            slices.push(frame.unwrap().into_data().unwrap().len());
        }
        assert_eq!(slices, [SLICE, SLICE, SLICE, 8 * 1024]);
        assert_eq!(permits.available_permits(), 1, "released at the end");
    }
}
