//! The HTTP server's connections, guarded so that no client can starve the server or hold up
//! shutdown. Both listeners (HTTP and HTTPS, served by axum_server) accept through
//! [`GuardedListener`]:
//!
//! - **A cap on open connections.** A place (a semaphore permit) is taken *before* `accept`, so
//!   beyond the cap new connections wait in the kernel's backlog, using no file of ours, until
//!   one closes. Reaching the cap is logged once per burst, not once per connection.
//! - **Accept errors without a hot loop.** `EMFILE` and the like are logged once per burst and
//!   retried after a pause that doubles up to a second (axum_server would retry every 50 ms,
//!   silently; axum's own loop logs every second for ever).
//! - **An idle timeout.** A connection that moves no byte either way for `idle` fails its
//!   pending read or write (`TimedOut`): a client that stops reading its answer, or goes silent
//!   mid-request, gives its place back. (Request heads and bodies have tighter deadlines of
//!   their own: hyper's header-read timeout and `body_deadline`.)
//! - **The cut at the shutdown deadline.** Servers wait for their connections on graceful
//!   shutdown, so one client that sent half a request (and then nothing) would hold the process
//!   for ever. Every stream fails its reads and writes (`ConnectionAborted`) once the token is
//!   cancelled: the connection's task ends, its request is dropped, and the server can return.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::access::Peer;

/// The first pause after a failed `accept`; each further failure in a row doubles it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between two failed `accept`s.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What every accepted connection is held to.
#[derive(Debug, Clone)]
pub(super) struct Guards {
    /// Most connections open at once.
    pub(super) max_connections: usize,
    /// A connection moving no byte for this long is closed.
    pub(super) idle: Duration,
    /// Cancelled at the shutdown deadline: every connection is cut.
    pub(super) cut: CancellationToken,
}

/// A TCP listener that admits at most `max_connections` at once, handles accept errors with a
/// backoff, and hands out [`GuardedStream`]s.
#[derive(Debug)]
pub(super) struct GuardedListener {
    inner: TcpListener,
    places: Arc<Semaphore>,
    guards: Guards,
    /// Whether the cap was reached and not yet logged as cleared (one log line per burst).
    full: AtomicBool,
    /// Failed `accept`s in a row.
    failures: AtomicU32,
}

/// The peer address of a guarded connection: axum_server's address type for
/// [`GuardedListener`].
#[derive(Debug, Clone, Copy)]
pub(super) struct GuardedAddr(pub(super) SocketAddr);

impl axum_server::Address for GuardedAddr {
    type Stream = GuardedStream;
    type Listener = GuardedListener;
}

impl axum::extract::connect_info::Connected<GuardedAddr> for Peer {
    fn connect_info(address: GuardedAddr) -> Self {
        Peer(address.0)
    }
}

impl GuardedListener {
    pub(super) fn new(inner: TcpListener, guards: Guards) -> Self {
        Self {
            inner,
            places: Arc::new(Semaphore::new(guards.max_connections)),
            guards,
            full: AtomicBool::new(false),
            failures: AtomicU32::new(0),
        }
    }

    /// Waits for a free place. Logs when the cap is reached, and when a place was free again
    /// at once after that, so a sustained flood writes two lines, not one per connection.
    async fn admit(&self) -> io::Result<OwnedSemaphorePermit> {
        if let Ok(place) = Arc::clone(&self.places).try_acquire_owned() {
            if self.full.swap(false, Ordering::Relaxed) {
                tracing::info!("Below the HTTP connection limit again.");
            }
            return Ok(place);
        }
        if !self.full.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                max_connections = self.guards.max_connections,
                "HTTP connection limit reached: new connections wait in the backlog until one closes."
            );
        }
        Arc::clone(&self.places)
            .acquire_owned()
            .await
            .map_err(io::Error::other)
    }

    /// Accepts the next connection, retrying errors: a connection that failed before we took
    /// it is skipped; anything else (no files left, no memory) is logged once per burst and
    /// retried after a growing pause, so it neither spins nor floods the log.
    async fn accept_tcp(&self) -> (TcpStream, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok(accepted) => {
                    self.failures.store(0, Ordering::Relaxed);
                    return accepted;
                }
                Err(error) if is_connection_error(&error) => {}
                Err(error) => {
                    let failures = self.failures.fetch_add(1, Ordering::Relaxed);
                    if failures == 0 {
                        tracing::error!(%error, "Accepting HTTP connections fails; retrying with a backoff.");
                    }
                    tokio::time::sleep(accept_backoff(failures)).await;
                }
            }
        }
    }
}

/// The pause after the `failures + 1`th failed `accept` in a row.
fn accept_backoff(failures: u32) -> Duration {
    ACCEPT_BACKOFF
        .saturating_mul(1 << failures.min(16))
        .min(ACCEPT_BACKOFF_MAX)
}

/// Errors of one connection (it was reset before we took it), not of the listener.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

impl axum_server::AddrListener<GuardedStream, GuardedAddr> for GuardedListener {
    async fn bind_to(_address: GuardedAddr) -> io::Result<Self> {
        // Boson always binds the listener itself (tests bind port 0 first).
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a guarded listener is built from a bound TcpListener",
        ))
    }

    async fn accept_stream(&self) -> io::Result<(GuardedStream, GuardedAddr)> {
        let place = self.admit().await?;
        let (inner, address) = self.accept_tcp().await;
        let stream = GuardedStream::new(inner, &self.guards, place);
        Ok((stream, GuardedAddr(address)))
    }

    fn get_local_addr(&self) -> io::Result<GuardedAddr> {
        self.inner.local_addr().map(GuardedAddr)
    }
}

/// A TCP stream that holds one of its listener's places until dropped, fails after `idle`
/// without traffic, and fails once its listener's token is cancelled.
///
/// The timers are looked at only when the stream itself has nothing to do (`Pending`): that
/// registers the task to be woken by them, and costs a ready read or write only a clock read.
#[derive(Debug)]
pub(super) struct GuardedStream {
    inner: TcpStream,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    idle_for: Duration,
    /// When a read or write last moved bytes (or the connection was accepted).
    last_active: Instant,
    /// Fires at or before `last_active + idle_for`; re-armed lazily when it fires early.
    idle: Pin<Box<Sleep>>,
    _place: OwnedSemaphorePermit,
}

impl GuardedStream {
    fn new(inner: TcpStream, guards: &Guards, place: OwnedSemaphorePermit) -> Self {
        // A child token per connection: each checks its own lock, not one shared by all.
        let cut = Box::pin(guards.cut.child_token().cancelled_owned());
        let now = Instant::now();
        Self {
            inner,
            cut,
            idle_for: guards.idle,
            last_active: now,
            idle: Box::pin(tokio::time::sleep_until(now + guards.idle)),
            _place: place,
        }
    }

    /// For an operation that is pending: the error to end it with if the cut has come or the
    /// connection has been idle too long.
    fn poll_guards<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if self.cut.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the shutdown deadline has passed",
            )));
        }
        loop {
            if self.idle.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let due = self.last_active + self.idle_for;
            if due <= Instant::now() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the connection was idle too long",
                )));
            }
            self.idle.as_mut().reset(due);
        }
    }

    /// `poll` on the inner stream; if it is pending, the guards' error once one is due.
    fn pending_or_guarded<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll(Pin::new(&mut self.inner), cx) {
            Poll::Pending => self.poll_guards(cx),
            ready => {
                self.last_active = Instant::now();
                ready
            }
        }
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.pending_or_guarded(cx, |inner, cx| inner.poll_read(cx, buf))
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.pending_or_guarded(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.pending_or_guarded(cx, |inner, cx| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.pending_or_guarded(cx, AsyncWrite::poll_flush)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.pending_or_guarded(cx, AsyncWrite::poll_shutdown)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    use axum_server::AddrListener as _;

    /// A guarded listener on a free port, and its address.
    async fn listener(cut: &CancellationToken, max: usize, idle: Duration) -> GuardedListener {
        let inner = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let guards = Guards {
            max_connections: max,
            idle,
            cut: cut.clone(),
        };
        GuardedListener::new(inner, guards)
    }

    /// A connected pair: the client's stream and the server's guarded stream.
    async fn pair(cut: &CancellationToken) -> (TcpStream, GuardedStream) {
        let listener = listener(cut, 10, Duration::from_secs(60)).await;
        let address = listener.get_local_addr().expect("address").0;
        let client = TcpStream::connect(address).await.expect("connect");
        let (server, _) = listener.accept_stream().await.expect("accept");
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

    #[tokio::test]
    async fn beyond_the_cap_a_connection_waits_until_a_place_is_free() {
        let listener = listener(&CancellationToken::new(), 2, Duration::from_secs(60)).await;
        let address = listener.get_local_addr().expect("address").0;
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(address).await.expect("connect"));
        }
        let first = listener.accept_stream().await.expect("accept");
        let _second = listener.accept_stream().await.expect("accept");
        let third = tokio::time::timeout(Duration::from_millis(200), listener.accept_stream());
        assert!(third.await.is_err(), "the third waits while two are open");
        drop(first);
        let third = tokio::time::timeout(Duration::from_secs(5), listener.accept_stream());
        assert!(third.await.is_ok(), "a closed connection frees its place");
    }

    #[tokio::test]
    async fn a_connection_idle_too_long_fails_its_read() {
        let listener = listener(&CancellationToken::new(), 2, Duration::from_millis(300)).await;
        let address = listener.get_local_addr().expect("address").0;
        let mut client = TcpStream::connect(address).await.expect("connect");
        let (mut server, _) = listener.accept_stream().await.expect("accept");
        let mut buffer = [0u8; 4];
        // Traffic keeps it open past the idle time; silence then ends it.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            client.write_all(b"x").await.expect("write");
            server.read_exact(&mut buffer[..1]).await.expect("read");
        }
        let read = tokio::time::timeout(Duration::from_secs(5), server.read(&mut buffer)).await;
        let error = read
            .expect("the idle timeout ends the read")
            .expect_err("fails");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn the_accept_backoff_doubles_up_to_a_second() {
        assert_eq!(accept_backoff(0), ACCEPT_BACKOFF);
        assert_eq!(accept_backoff(1), ACCEPT_BACKOFF * 2);
        assert_eq!(accept_backoff(40), ACCEPT_BACKOFF_MAX);
    }
}
