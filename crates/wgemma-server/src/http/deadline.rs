//! The write deadline of a connection: a response write that makes no progress for
//! [`WRITE_STALL`] fails, and hyper closes the connection. A client that sends requests and
//! never reads their answers (its socket buffer full) would otherwise hold its connection,
//! and with `--max-connections` of them every other client would be locked out; its
//! sequence is cancelled with the connection, as a disconnect's is.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long a response write may wait for the client to read before the connection is
/// closed. Reading a token stream at any pace resets it; only a reader that stops does not.
pub const WRITE_STALL: Duration = Duration::from_secs(30);

/// `io` with a deadline on every write that cannot progress.
pub struct WriteDeadline<T> {
    io: T,
    stall: Duration,
    /// Armed while a write waits; disarmed by any progress.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub fn new(io: T, stall: Duration) -> WriteDeadline<T> {
        WriteDeadline {
            io,
            stall,
            timer: None,
        }
    }

    /// A write that is not ready: pending until the deadline, then an error.
    fn stalled<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let stall = self.stall;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing of the response for {} s",
                    stall.as_secs_f64()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The result of a write step: progress disarms the deadline.
    fn progress<R>(
        &mut self,
        cx: &mut Context<'_>,
        step: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match step {
            Poll::Ready(r) => {
                self.timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let step = Pin::new(&mut this.io).poll_write(cx, buf);
        this.progress(cx, step)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let step = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.progress(cx, step)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let step = Pin::new(&mut this.io).poll_flush(cx);
        this.progress(cx, step)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let step = Pin::new(&mut this.io).poll_shutdown(cx);
        this.progress(cx, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn a_reader_that_stops_fails_the_write_and_one_that_reads_does_not() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            // A 64-byte pipe whose far end never reads: the second write cannot progress.
            let (near, _far) = tokio::io::duplex(64);
            let mut io = WriteDeadline::new(near, Duration::from_millis(20));
            let err = io.write_all(&[7u8; 1024]).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
            // One that reads everything lets a write of any size through.
            let (near, mut far) = tokio::io::duplex(64);
            let reader = tokio::spawn(async move {
                let mut all = Vec::new();
                far.read_to_end(&mut all).await.map(|_| all.len())
            });
            let mut io = WriteDeadline::new(near, Duration::from_secs(3600));
            io.write_all(&[7u8; 4096]).await.unwrap();
            io.shutdown().await.unwrap();
            drop(io);
            assert_eq!(reader.await.unwrap().unwrap(), 4096);
        });
    }
}
