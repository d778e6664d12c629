//! Stopping the real `boson serve` binary: SIGTERM stops it cleanly, and within its shutdown
//! deadline whatever clients and webhook receivers do.

use std::collections::HashSet;
use std::time::Duration;

use crate::helpers::Receiver;
use crate::process::{
    DELIVERY, Deployment, assert_none_missing, collect, post_batch, tagged_batch,
};

#[tokio::test]
async fn sigterm_shuts_down_gracefully() {
    let mut receiver = Receiver::start().await;
    let mut deployment = Deployment::new().await;
    let boson = deployment.start().await;
    let input = boson.pipeline(&receiver.url("/hook")).await;
    let mut expected = HashSet::new();
    for n in 0..3 {
        let (batch, ids) = tagged_batch(n);
        assert_eq!(boson.post_batch(&input, &batch).await.expect("post"), 202);
        expected.extend(ids);
    }
    assert_none_missing(
        &collect(&mut receiver, &expected, Duration::from_secs(10)).await,
        &expected,
    );

    let base = boson.base.clone();
    let status = boson.sigterm(Duration::from_secs(15)).await;
    assert!(status.success(), "boson exited with {status} after SIGTERM");
    // Every SQLite connection was closed before the exit: the last one copied the WAL back
    // and deleted it (and its shared-memory file).
    if let Some(file) = deployment.database_url.strip_prefix("sqlite://") {
        for left in [format!("{file}-wal"), format!("{file}-shm")] {
            assert!(
                !std::path::Path::new(&left).exists(),
                "{left} is left after a graceful stop"
            );
        }
    }
    // A new client: a pooled keep-alive connection would fail differently (closed mid-request).
    let fresh = crate::helpers::http_client();
    let after = post_batch(&fresh, &base, &input, &tagged_batch(99).0).await;
    assert!(
        after.as_ref().is_err_and(reqwest::Error::is_connect),
        "a request after shutdown got {after:?}"
    );

    // A graceful stop records every delivery as done: a restart must not send anything again.
    let _restarted = deployment.start().await;
    if let Some(again) = receiver.next_within(Duration::from_secs(1)).await {
        panic!("delivered again after a graceful restart: {}", again.body);
    }
}

/// Shutdown settings for the deadline tests: a 2 s deadline, and webhook requests allowed to
/// take far longer than that (the lease must be at least twice the request timeout), so only
/// the deadline can end them in time.
pub const SHORT_DEADLINE: &[(&str, &str)] = &[
    ("BOSON_SHUTDOWN_DEADLINE_SECS", "2"),
    ("BOSON_DELIVERY__REQUEST_TIMEOUT_SECS", "60"),
    ("BOSON_DELIVERY__LEASE_SECS", "120"),
];
/// A generous bound on "exits at all" after SIGTERM with the 2 s deadline.
pub const EXIT: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_half_sent_request_does_not_hold_up_shutdown() {
    use base64::Engine as _;
    use tokio::io::AsyncWriteExt as _;

    let receiver = Receiver::start().await;
    let mut deployment = Deployment::new().await;
    let boson = deployment.start_with(SHORT_DEADLINE).await;
    let input = boson.pipeline(&receiver.url("/hook")).await;
    // An authenticated Events API request whose body stops after a few bytes of the promised
    // 100,000: the handler waits for the rest, which never comes.
    let credentials = format!(
        "{}:{}",
        input["api_key"].as_str().expect("api_key"),
        input["api_secret"].as_str().expect("api_secret")
    );
    let basic = base64::engine::general_purpose::STANDARD.encode(credentials);
    let address = boson.base.trim_start_matches("http://").to_owned();
    let mut slow_client = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    let head = format!(
        "POST /v2/events HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {basic}\r\n\
         Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"events\": ["
    );
    slow_client
        .write_all(head.as_bytes())
        .await
        .expect("send half a request");
    // Not a wait for a condition: gives the server time to read the head and start the handler.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let status = boson.sigterm(EXIT).await;
    assert!(status.success(), "boson exited with {status} after SIGTERM");
    drop(slow_client);
}

/// A webhook endpoint that takes requests and never answers; tells when one has arrived.
struct HangingEndpoint {
    port: u16,
    arrived: tokio::sync::mpsc::UnboundedReceiver<()>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<tokio::net::TcpListener>,
}

impl HangingEndpoint {
    async fn start() -> Self {
        use tokio::io::AsyncReadExt as _;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the hanging endpoint");
        let port = listener.local_addr().expect("address").port();
        let (sent, arrived) = tokio::sync::mpsc::unbounded_channel();
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let accepted = tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut socket, _)) = accepted else { break };
                let mut buffer = [0u8; 1024];
                let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buffer));
                if matches!(read.await, Ok(Ok(n)) if n > 0) {
                    let _ = sent.send(());
                }
                held.push(socket);
            }
            listener
        });
        Self {
            port,
            arrived,
            stop,
            task,
        }
    }

    /// Stops hanging: the held requests' connections are closed, and the listener is handed
    /// back still bound. Closed and bound again, its port could be taken in between as the
    /// local port of some other test's outgoing connection.
    async fn stop(self) -> tokio::net::TcpListener {
        let _ = self.stop.send(());
        self.task.await.expect("the hanging endpoint's task")
    }
}

#[tokio::test]
async fn a_hanging_webhook_does_not_hold_up_shutdown_and_its_event_is_delivered_after_restart() {
    let mut endpoint = HangingEndpoint::start().await;
    let mut deployment = Deployment::new().await;
    let boson = deployment.start_with(SHORT_DEADLINE).await;
    let input = boson
        .pipeline(&format!("http://127.0.0.1:{}/hook", endpoint.port))
        .await;
    let (batch, ids) = tagged_batch(1);
    assert_eq!(boson.post_batch(&input, &batch).await.expect("post"), 202);
    let arrived = tokio::time::timeout(Duration::from_secs(10), endpoint.arrived.recv()).await;
    assert!(
        matches!(arrived, Ok(Some(()))),
        "the delivery never reached the webhook"
    );

    let status = boson.sigterm(EXIT).await;
    assert!(status.success(), "boson exited with {status} after SIGTERM");

    // The endpoint recovers on the same port; the restarted process delivers the event.
    let mut receiver = Receiver::on(endpoint.stop().await);
    let _restarted = deployment.start_with(SHORT_DEADLINE).await;
    let expected: HashSet<String> = ids.into_iter().collect();
    assert_none_missing(
        &collect(&mut receiver, &expected, DELIVERY).await,
        &expected,
    );
}
