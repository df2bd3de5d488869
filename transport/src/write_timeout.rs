//! A connection whose peer stops reading: every accepted socket is wrapped
//! so that a write (or flush) that makes no progress for [`WRITE_STALL`]
//! fails with `TimedOut`. hyper has no write timeout of its own, so without
//! this a client that keeps its connection open but never reads would hold
//! its response — and the synthesis feeding it — forever. With it, the
//! connection errors, hyper drops the response body, and the request's
//! producer sees its receiver gone and cancels the engine request (an
//! upgraded WebSocket inherits the same bound, which matches its own
//! per-send timeout).
//!
//! Only a *pending* write is timed: an idle connection (nothing to send)
//! never times out here; idle limits are the header and idle timeouts'.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a write may wait for the peer to take bytes: the realtime
/// socket's per-send bound ([`crate::realtime::SEND_TIMEOUT`]).
pub const WRITE_STALL: Duration = crate::realtime::SEND_TIMEOUT;

/// `S` with stalled writes turned into errors after `stall`.
pub struct WriteTimeout<S> {
    inner: S,
    stall: Duration,
    /// Armed while a write is pending; cleared by any progress.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteTimeout<S> {
    pub fn new(inner: S, stall: Duration) -> Self {
        WriteTimeout {
            inner,
            stall,
            timer: None,
        }
    }

    /// The wrapped stream (to peek at it, or ask its peer's address).
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// `Pending` from the inner write: arms the timer (once) and fails if
    /// it has run out.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let stall = self.stall;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.timer = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the peer took no bytes for {:.0} s (it stopped reading)",
                        stall.as_secs_f64()
                    ),
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        r: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.pending(cx),
            ready => {
                self.timer = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progressed(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progressed(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.progressed(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progressed(r, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_write_the_peer_never_takes_fails_and_a_slow_reader_does_not() {
        // A pipe with a 64-byte buffer: writes stall once it is full.
        let (a, _peer) = tokio::io::duplex(64);
        let mut w = WriteTimeout::new(a, Duration::from_millis(200));
        let t0 = std::time::Instant::now();
        let e = w.write_all(&[0u8; 4096]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(200));
        // A reader that takes a little every 50 ms keeps the writer going.
        let (a, mut b2) = tokio::io::duplex(64);
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 32];
            while got < 4096 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                got += b2.read(&mut buf).await.unwrap();
            }
        });
        let mut w = WriteTimeout::new(a, Duration::from_millis(200));
        w.write_all(&[0u8; 4096]).await.unwrap();
        reader.await.unwrap();
    }
}
