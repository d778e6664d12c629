//! The HTTP server cannot be starved (issue 12, item 1): idle connections, clients that send
//! their request head or body a byte at a time, and more of them than the process has files
//! for, must neither keep `/healthz` from answering nor keep SIGTERM from ending the process.

use std::time::Duration;

use base64::Engine as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::helpers::Receiver;
use crate::process::Deployment;
use crate::shutdown::{EXIT, SHORT_DEADLINE};

/// More idle connections than the cap, and than the open-files limit leaves room for.
const IDLE_CLIENTS: usize = 80;
const SLOW_CLIENTS: usize = 5;
/// How often a slow client sends its next byte: fast enough to defeat a per-read timeout.
const TRICKLE: Duration = Duration::from_millis(300);
/// A generous bound for `/healthz` once the timeouts have freed places (2 s each, cap 20).
const HEALTHZ_WITHIN: Duration = Duration::from_secs(40);

/// A client that sends `head` and then one byte of `trickle` every [`TRICKLE`], for ever.
fn trickling_client(address: String, head: String, trickle: u8) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Ok(mut stream) = TcpStream::connect(&address).await else {
            return;
        };
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        while stream.write_all(&[trickle]).await.is_ok() {
            tokio::time::sleep(TRICKLE).await;
        }
    })
}

#[tokio::test]
async fn idle_and_slow_clients_cannot_starve_the_server() {
    let receiver = Receiver::start().await;
    let mut deployment = Deployment::new().await;
    deployment.limit_open_files(64);
    for (key, value) in [
        ("BOSON_HTTP__MAX_CONNECTIONS", "20"),
        ("BOSON_HTTP__HEADER_READ_TIMEOUT_SECS", "2"),
        ("BOSON_HTTP__BODY_READ_TIMEOUT_SECS", "2"),
        ("BOSON_HTTP__IDLE_TIMEOUT_SECS", "3"),
    ] {
        deployment.set_env(key, value);
    }
    let boson = deployment.start_with(SHORT_DEADLINE).await;
    let input = boson.pipeline(&receiver.url("/hook")).await;
    let address = boson.address().to_owned();

    let mut idle = Vec::new();
    for _ in 0..IDLE_CLIENTS {
        idle.push(TcpStream::connect(&address).await.expect("connect"));
    }
    let credentials = format!(
        "{}:{}",
        input["api_key"].as_str().expect("api_key"),
        input["api_secret"].as_str().expect("api_secret")
    );
    let basic = base64::engine::general_purpose::STANDARD.encode(credentials);
    let slow_body = format!(
        "POST /v2/events HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {basic}\r\n\
         Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"events\": ["
    );
    let mut slow = Vec::new();
    for _ in 0..SLOW_CLIENTS {
        let slow_head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ".to_owned();
        slow.push(trickling_client(address.clone(), slow_head, b'a'));
        slow.push(trickling_client(address.clone(), slow_body.clone(), b' '));
    }

    let fresh = reqwest::Client::builder()
        .timeout(HEALTHZ_WITHIN)
        .build()
        .expect("client");
    let health = fresh.get(format!("http://{address}/healthz")).send().await;
    assert!(
        health.as_ref().is_ok_and(|r| r.status() == 200),
        "/healthz behind {IDLE_CLIENTS} idle and {} slow clients: {health:?}",
        slow.len()
    );

    // The slow clients are still sending: shutdown must not wait for them.
    let status = boson.sigterm(EXIT).await;
    assert!(status.success(), "boson exited with {status} after SIGTERM");
    for client in slow {
        client.abort();
    }
    drop(idle);
}
