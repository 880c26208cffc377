//! A client that starts a message and stops sending (half a header, or a length prefix promising
//! more than ever arrives) holds a connection and its read buffer forever; [`StallGuard`] ends it.
//!
//! It wraps the connection's read half and follows MongoDB's framing itself (each message starts
//! with its little-endian int32 length): between messages a connection may idle for hours, as
//! drivers' pools do, but once a message has begun, the rest must keep arriving: a read that waits
//! longer than the limit mid-message fails with `TimedOut`, which closes the connection.
//!
//! Must not: time out an idle connection, or look at anything but the length prefixes (the codec
//! validates messages).

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Sleep;

/// Where the reader is in the byte stream of messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Between messages.
    Idle,
    /// `n` bytes of the 4-byte length read (`len` so far, little-endian).
    Header { n: usize, len: u32 },
    /// Inside a message, this many bytes still to come.
    Body { remaining: usize },
}

impl Position {
    /// The position after `bytes` more of the stream.
    fn advance(mut self, mut bytes: &[u8]) -> Position {
        while !bytes.is_empty() {
            self = match self {
                Position::Idle => Position::Header { n: 0, len: 0 },
                Position::Header { n, len } => {
                    let len = len | u32::from(bytes[0]) << (8 * n);
                    bytes = &bytes[1..];
                    if n + 1 < 4 {
                        Position::Header { n: n + 1, len }
                    } else {
                        // A length below the header's own 4 bytes is the codec's error to report;
                        // here it just ends the message.
                        let remaining = (len as usize).saturating_sub(4);
                        if remaining == 0 { Position::Idle } else { Position::Body { remaining } }
                    }
                }
                Position::Body { remaining } => {
                    let take = remaining.min(bytes.len());
                    bytes = &bytes[take..];
                    if remaining == take { Position::Idle } else { Position::Body { remaining: remaining - take } }
                }
            };
        }
        self
    }
}

pub struct StallGuard<R> {
    inner: R,
    position: Position,
    limit: Duration,
    /// Armed while a read waits mid-message.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<R> StallGuard<R> {
    pub fn new(inner: R, limit: Duration) -> Self {
        Self { inner, position: Position::Idle, limit, timer: None }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for StallGuard<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let position = self.position.advance(&buf.filled()[before..]);
                self.position = position;
                self.timer = None;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if self.position == Position::Idle => Poll::Pending,
            Poll::Pending => {
                let limit = self.limit;
                let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client stopped sending in the middle of a message for {} s", limit.as_secs()),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn positions_follow_length_prefixes_across_chunks() {
        let mut message = 10u32.to_le_bytes().to_vec();
        message.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        assert_eq!(Position::Idle.advance(&message), Position::Idle);
        assert_eq!(Position::Idle.advance(&message[..2]), Position::Header { n: 2, len: 10 });
        let mid = Position::Idle.advance(&message[..5]);
        assert_eq!(mid, Position::Body { remaining: 5 });
        assert_eq!(mid.advance(&message[5..]), Position::Idle);
        let two: Vec<u8> = message.iter().chain(&message[..3]).copied().collect();
        assert_eq!(Position::Idle.advance(&two), Position::Header { n: 3, len: 10 });
    }

    #[tokio::test(start_paused = true)]
    async fn idle_is_fine_but_half_a_message_times_out() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut guard = StallGuard::new(server, Duration::from_secs(30));
        let mut buf = [0u8; 16];
        // Idle for longer than the limit: still waiting, no error.
        let idle = tokio::time::timeout(Duration::from_secs(120), guard.read(&mut buf)).await;
        assert!(idle.is_err(), "an idle connection is never timed out");
        client.write_all(&100u32.to_le_bytes()).await.unwrap();
        client.write_all(&[0; 10]).await.unwrap();
        let n = guard.read(&mut buf).await.unwrap();
        assert_eq!(n, 14);
        let stalled = guard.read(&mut buf).await;
        assert_eq!(stalled.unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}
