//! Connections that can be cut at the shutdown deadline. axum's `serve` runs every connection
//! in a task of its own and, on graceful shutdown, waits for all of them without a limit, so one
//! client that sent half a request (and then nothing) would hold the process for ever. Every
//! stream this listener accepts fails its reads and writes (`ConnectionAborted`) once the token
//! is cancelled: the connection's task ends, its request is dropped, and `serve` can return.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::access::Peer;

/// A TCP listener whose connections all end when `cut` is cancelled.
#[derive(Debug)]
pub(super) struct CutoffListener {
    inner: TcpListener,
    cut: CancellationToken,
}

impl CutoffListener {
    pub(super) fn new(inner: TcpListener, cut: CancellationToken) -> Self {
        Self { inner, cut }
    }
}

impl axum::serve::Listener for CutoffListener {
    type Io = CutoffStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (CutoffStream, SocketAddr) {
        // axum's own accept loop for TCP (it logs and retries accept errors).
        let (inner, address) = axum::serve::Listener::accept(&mut self.inner).await;
        // A child token per connection: each checks its own lock, not one shared by all.
        let cut = Box::pin(self.cut.child_token().cancelled_owned());
        (CutoffStream { inner, cut }, address)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, CutoffListener>>
    for Peer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, CutoffListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

/// A TCP stream that fails once its listener's token is cancelled.
///
/// The token is looked at only when the stream itself has nothing to do (`Pending`): that
/// registers the task to be woken by the cut, and costs a ready read or write nothing. A
/// connection that keeps moving data is not waiting on anyone and finishes on its own.
#[derive(Debug)]
pub(super) struct CutoffStream {
    inner: TcpStream,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl CutoffStream {
    /// For an operation that is pending: the error to end it with if the cut has come.
    fn poll_cut<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        self.cut.as_mut().poll(cx).map(|()| {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the shutdown deadline has passed",
            ))
        })
    }

    /// `poll` on the inner stream, or the cut's error if it is pending and the cut has come.
    fn pending_or_cut<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll(Pin::new(&mut self.inner), cx) {
            Poll::Pending => self.poll_cut(cx),
            ready => ready,
        }
    }
}

impl AsyncRead for CutoffStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.pending_or_cut(cx, |inner, cx| inner.poll_read(cx, buf))
    }
}

impl AsyncWrite for CutoffStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.pending_or_cut(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.pending_or_cut(cx, |inner, cx| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.pending_or_cut(cx, AsyncWrite::poll_flush)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.pending_or_cut(cx, AsyncWrite::poll_shutdown)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// A connected pair: the client's stream and the server's cut-off stream.
    async fn pair(cut: &CancellationToken) -> (TcpStream, CutoffStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let mut listener = CutoffListener::new(listener, cut.clone());
        let client = TcpStream::connect(address).await.expect("connect");
        let (server, _) = axum::serve::Listener::accept(&mut listener).await;
        (client, server)
    }

    #[tokio::test]
    async fn streams_work_until_the_cut() {
        let cut = CancellationToken::new();
        let (mut client, mut server) = pair(&cut).await;
        client.write_all(b"ping").await.expect("write");
        let mut buffer = [0u8; 4];
        server.read_exact(&mut buffer).await.expect("read");
        assert_eq!(&buffer, b"ping");
        server.write_all(b"pong").await.expect("write");
        client.read_exact(&mut buffer).await.expect("read");
        assert_eq!(&buffer, b"pong");
    }

    #[tokio::test]
    async fn the_cut_wakes_a_read_that_waits_for_a_silent_client() {
        let cut = CancellationToken::new();
        let (_client, mut server) = pair(&cut).await;
        let reading = tokio::spawn(async move {
            let mut buffer = [0u8; 16];
            server.read(&mut buffer).await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !reading.is_finished(),
            "nothing was sent, so the read waits"
        );
        cut.cancel();
        let read = tokio::time::timeout(Duration::from_secs(5), reading)
            .await
            .expect("the cut ends the read")
            .expect("read task");
        let error = read.expect_err("a cut read fails");
        assert_eq!(error.kind(), io::ErrorKind::ConnectionAborted);
    }
}
