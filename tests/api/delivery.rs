//! Delivery behaviour: immediate activation, retries with backoff and `Retry-After`, dead
//! letters, and a receiver that is down and comes back.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Receiver, TestApp, batch_of, spawn_app, spawn_app_with, wait_for};

#[tokio::test]
async fn a_saved_setting_applies_to_the_next_event() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    let patch = |settings: Value| {
        app.admin(Method::PATCH, &path)
            .json(&json!({ "settings": settings }))
            .send()
    };

    app.post_events(&input, batch_of(&["screen_view"])).await;
    receiver.take(1).await;

    assert_eq!(
        patch(json!({"status": "inactive"})).await.unwrap().status(),
        200
    );
    app.post_events(&input, batch_of(&["screen_view"])).await;
    receiver.expect_silence().await;

    let reactivated: Value = patch(json!({"status": "active", "send_screen_views": false}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reactivated["settings"]["status"], "active");
    assert_eq!(reactivated["settings"]["send_screen_views"], false);
    assert_eq!(
        reactivated["settings"]["send_custom_events"], true,
        "a patch keeps the other keys"
    );
    app.post_events(&input, batch_of(&["screen_view", "custom_event"]))
        .await;
    let got = receiver.take(1).await;
    assert_eq!(got[0].event_types(), vec!["custom_event"]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn server_errors_are_retried_until_delivered() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, None), (500, None), (408, None)]);
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    app.post_events(&input, batch_of(&["custom_event"])).await;

    let attempts = receiver.take(4).await;
    let ids: Vec<_> = attempts
        .iter()
        .map(|r| r.headers["x-boson-delivery-id"].clone())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] == w[1]),
        "a retried request keeps its delivery id"
    );
    assert!(
        attempts.iter().all(|r| r.body == attempts[0].body),
        "a retried request keeps its body"
    );

    wait_for(|| async { app.count("jobs").await == 0 }).await;
    let log = attempts_log(&app, &connection).await;
    let outcomes: Vec<&str> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    // Newest first: the delivery, after three retries.
    assert_eq!(
        outcomes,
        vec!["delivered", "retry", "retry", "retry"],
        "{log}"
    );
    let statuses: Vec<i64> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].as_i64().unwrap())
        .collect();
    assert_eq!(statuses, vec![200, 408, 500, 503]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(429, Some("2"))]);
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    let first = receiver.next().await;
    let second = receiver.next().await;
    let waited = second.at - first.at;
    assert!(
        waited >= Duration::from_millis(1900),
        "retried after {waited:?}, before Retry-After: 2"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn client_errors_go_to_dead_letters_at_once() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(400, None)]);
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    app.post_events(&input, batch_of(&["custom_event", "screen_view"]))
        .await;

    // The refused event is not retried; the next event of the batch still goes out.
    let got = receiver.take(2).await;
    assert_eq!(got[0].event_types(), vec!["custom_event"]);
    assert_eq!(got[1].event_types(), vec!["screen_view"]);
    wait_for(|| async { app.count("jobs").await == 0 }).await;
    let letters: Value = app
        .admin(
            Method::GET,
            &format!(
                "/api/v1/connections/{}/dead-letters",
                connection["id"].as_str().unwrap()
            ),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = letters["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{letters}");
    assert_eq!(items[0]["status"], 400);
    assert_eq!(items[0]["body"]["events"][0]["event_type"], "custom_event");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_receiver_that_was_down_gets_everything_when_it_is_back() {
    let app = spawn_app().await;
    // Reserve a port, and leave nothing listening on it for now.
    let reserved = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = reserved.local_addr().unwrap();
    drop(reserved);
    let (input, _) = app
        .pipeline(&format!("http://{address}/hook"), json!({}))
        .await;
    for _ in 0..5 {
        assert_eq!(
            app.post_events(&input, batch_of(&["custom_event", "screen_view"]))
                .await
                .status(),
            202
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.count("jobs").await, 5, "undeliverable jobs stay queued");

    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    let mut receiver = Receiver::on(listener);
    let got = receiver.take(10).await;
    assert_eq!(got.len(), 10);
    wait_for(|| async { app.count("jobs").await == 0 }).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn requests_still_failing_after_the_retry_window_become_dead_letters() {
    let app = spawn_app_with(|c| c.delivery.retry_window_secs = 1).await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, None); 100]);
    let (input, connection) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    receiver.next().await;
    wait_for(|| async { app.count("dead_letters").await == 1 }).await;
    assert_eq!(app.count("jobs").await, 0);
    let letters: Value = app
        .admin(
            Method::GET,
            &format!(
                "/api/v1/connections/{}/dead-letters",
                connection["id"].as_str().unwrap()
            ),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        letters["items"][0]["error"]
            .as_str()
            .unwrap()
            .contains("retry window"),
        "{letters}"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn private_destinations_are_refused_when_saved_and_when_sent() {
    let app = spawn_app_with(|c| c.allow_private_destinations = false).await;
    let response = app
        .admin(Method::POST, "/api/v1/outputs")
        .json(&json!({"name": "h", "kind": "webhook", "settings": {"url": "http://127.0.0.1:9/hook"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_url");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("BOSON_ALLOW_PRIVATE_DESTINATIONS")
    );
    // IPv6 forms that lead to loopback or the metadata service, and non-unicast IPv4.
    for url in [
        "http://[::127.0.0.1]:9/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:7f00:1::]:9/",
        "http://224.0.0.1:9/",
    ] {
        let response = app
            .admin(Method::POST, "/api/v1/outputs")
            .json(&json!({"name": "h", "kind": "webhook", "settings": {"url": url}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{url}");
    }
    assert_eq!(app.count("outputs").await, 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_https_webhook_must_present_a_trusted_certificate() {
    // A receiver with a self-signed certificate: the TLS handshake fails, nothing is delivered,
    // and the attempt log says why (a transport error, so the job is retried, not dropped).
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = crate::tls::certificate(dir.path());
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
        .await
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&reached);
    let receiver = axum::Router::new().fallback(move || async move {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        "ok"
    });
    let server = axum_server::from_tcp_rustls(listener, tls)
        .unwrap()
        .serve(receiver.into_make_service());
    let _server = tokio::spawn(server);

    let app = spawn_app().await;
    let (input, connection) = app
        .pipeline(&format!("https://localhost:{port}/hook"), json!({}))
        .await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    let mut log = Value::Null;
    for _ in 0..200 {
        log = attempts_log(&app, &connection).await;
        if !log["items"].as_array().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attempt = &log["items"][0];
    assert_eq!(attempt["outcome"], "retry", "{log}");
    assert!(
        attempt["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("certificate"),
        "{log}"
    );
    assert!(!reached.load(std::sync::atomic::Ordering::SeqCst));
    app.stop().await.unwrap();
}

#[tokio::test]
async fn credentials_in_the_webhook_url_are_sent_as_basic_authorization() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let url = format!("http://hook-user:p%40ss@{}/hook?x=1", receiver.address);
    let (input, _) = app.pipeline(&url, json!({})).await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    let got = receiver.next().await;
    // base64("hook-user:p@ss")
    assert_eq!(got.headers["authorization"], "Basic aG9vay11c2VyOnBAc3M=");
    assert_eq!(got.path, "/hook");
    assert_eq!(got.headers["host"], receiver.address.to_string());
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_job_waiting_longer_than_its_lease_is_not_taken_by_another_node() {
    // Node A holds a queue of jobs for a receiver that takes 400 ms per request, one at a time:
    // the last of 16 waits ~6 s, past the 4 s lease. Node B, on the same database, claims every
    // job whose lease ran out. A must keep renewing the leases of what it holds, or B delivers
    // those jobs too. (A polls rarely, so its own claims cannot renew them by accident; the
    // request timeout leaves the slow receiver a wide margin, so no retry muddles the count.)
    let tuned = |c: &mut boson::Config| {
        c.delivery.lease_secs = 4;
        c.delivery.request_timeout_secs = 2;
        c.delivery.max_in_flight_per_connection = 1;
    };
    let node_a = spawn_app_with(|c| {
        tuned(c);
        c.delivery.poll_interval_ms = 60_000;
    })
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel::<String>();
    let receiver = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let sent = sent.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let id = headers["x-boson-delivery-id"].to_str().unwrap().to_owned();
            let _ = sent.send(id);
            "ok"
        }
    });
    let _receiver = tokio::spawn(async move { axum::serve(listener, receiver).await });
    let (input, _) = node_a
        .pipeline(&format!("http://{address}/hook"), json!({}))
        .await;
    // Started before anything is sent: on SQLite a starting node releases every lease (it takes
    // itself for the only node), which would hand B the jobs A holds.
    let node_b = node_a.second_node(tuned).await;

    let bulk: Vec<Value> = (0..16).map(|_| batch_of(&["custom_event"])).collect();
    let response = node_a
        .post_raw(&input, "/v2/bulkevents", Value::Array(bulk).to_string())
        .await;
    assert_eq!(response.status(), 202);

    let mut ids = std::collections::HashSet::new();
    for _ in 0..16 {
        let id = tokio::time::timeout(Duration::from_secs(15), received.recv())
            .await
            .expect("16 deliveries within 15 s")
            .unwrap();
        assert!(ids.insert(id.clone()), "job {id} was delivered twice");
    }
    // Nothing more arrives: no job was taken by both nodes.
    if let Ok(Some(extra)) = tokio::time::timeout(Duration::from_secs(1), received.recv()).await {
        panic!("delivery {extra} arrived a second time");
    }
    node_b.stop().await.unwrap();
    node_a.stop().await.unwrap();
}

#[tokio::test]
async fn a_node_never_renews_a_lease_another_node_has_taken() {
    // A node that stalled past a lease may find that another node claimed one of its jobs; its
    // next renewal must leave that lease alone. Staged here by handing a queued job's lease to
    // "another node" in the table while this node still holds the job.
    let app = spawn_app_with(|c| {
        c.delivery.lease_secs = 3;
        c.delivery.request_timeout_secs = 1;
        c.delivery.max_in_flight_per_connection = 1;
    })
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let slow = axum::Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        "ok"
    });
    let _receiver = tokio::spawn(async move { axum::serve(listener, slow).await });
    let (input, _) = app
        .pipeline(&format!("http://{address}/hook"), json!({}))
        .await;
    let bulk: Vec<Value> = (0..12).map(|_| batch_of(&["custom_event"])).collect();
    let response = app
        .post_raw(&input, "/v2/bulkevents", Value::Array(bulk).to_string())
        .await;
    assert_eq!(response.status(), 202);

    // The last job waits ~6 s in this node's queue; renewals come every second.
    let last = app.query_i64("SELECT MAX(id) FROM jobs").await;
    let theirs: i64 = 4_000_000_000_000;
    app.execute(&format!(
        "UPDATE jobs SET leased_by = 'another-node', lease_until = {theirs} WHERE id = {last}"
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let lease = app
        .query_i64(&format!("SELECT lease_until FROM jobs WHERE id = {last}"))
        .await;
    assert_eq!(lease, theirs, "the other node's lease was overwritten");
    // Every other job this node holds carries its own name (one read, so no job can finish
    // between two counts).
    assert_eq!(
        app.count(&format!(
            "jobs WHERE id <> {last} AND lease_until > 0 \
             AND (leased_by IS NULL OR leased_by = 'another-node')"
        ))
        .await,
        0
    );
    app.stop().await.unwrap();
}

/// A connection's attempt log, newest first.
async fn attempts_log(app: &TestApp, connection: &Value) -> Value {
    let path = format!(
        "/api/v1/connections/{}/attempts",
        connection["id"].as_str().unwrap()
    );
    app.admin(Method::GET, &path)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn jobs_beyond_a_full_queue_wait_in_the_database_and_are_all_delivered_once() {
    // A queue of 8 jobs and one request at a time: most jobs of these 150 batches wait in the
    // table (left unleased by the writer, or released), and the poller feeds them in later.
    let app = spawn_app_with(|config| {
        config.delivery.lane_capacity = 8;
        config.delivery.max_in_flight_per_connection = 1;
    })
    .await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    for request in 0..3 {
        let bulk: Vec<Value> = (0..50)
            .map(|n| {
                let mut batch = batch_of(&["custom_event"]);
                batch["events"][0]["data"]["custom_attributes"]["n"] = json!(request * 50 + n);
                batch
            })
            .collect();
        let response = app
            .post_raw(&input, "/v2/bulkevents", Value::Array(bulk).to_string())
            .await;
        assert_eq!(response.status(), 202);
    }
    assert!(
        app.count("jobs WHERE lease_until = 0").await > 0,
        "some jobs wait unleased in the table"
    );

    let mut seen = std::collections::HashSet::new();
    let mut delivery_ids = std::collections::HashSet::new();
    for received in receiver.take(150).await {
        let n = received.events()[0]["data"]["custom_attributes"]["n"]
            .as_u64()
            .unwrap();
        assert!(seen.insert(n), "event {n} was delivered twice");
        let id = received.headers["x-boson-delivery-id"].to_str().unwrap();
        assert!(
            delivery_ids.insert(id.to_owned()),
            "delivery id {id} reused"
        );
    }
    assert_eq!(seen, (0..150).collect());
    wait_for(|| async { app.count("jobs").await == 0 }).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn delivery_ids_are_never_reused() {
    // Ids come from the job table, which empties whenever delivery catches up; a reused id would
    // make receivers that de-duplicate drop new events.
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let mut ids = std::collections::HashSet::new();
    for _ in 0..3 {
        app.post_events(&input, batch_of(&["custom_event"])).await;
        let got = receiver.next().await;
        wait_for(|| async { app.count("jobs").await == 0 }).await;
        let id = got.headers["x-boson-delivery-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(ids.insert(id.clone()), "delivery id {id} was used twice");
    }
    app.stop().await.unwrap();
}

#[tokio::test]
async fn old_rows_are_pruned_but_never_a_batch_still_owed() {
    let app = spawn_app_with(|c| {
        c.retention.hours = 0;
        c.retention.interval_secs = 1;
    })
    .await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/ok"), json!({})).await;
    // A second connection to a port nothing listens on keeps the batch owed.
    let reserved = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}/down", reserved.local_addr().unwrap());
    drop(reserved);
    let output = app.create_webhook(&down).await;
    let owed = app.connect(&input, &output, json!({})).await;

    app.post_events(&input, batch_of(&["custom_event"])).await;
    receiver.next().await;
    wait_for(|| async { app.count("attempts").await > 0 }).await;
    // Two pruning passes go by while the second connection still owes the batch.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        app.count("batches").await,
        1,
        "a batch a connection still needs was pruned"
    );

    let path = format!("/api/v1/connections/{}", owed["id"].as_str().unwrap());
    app.admin(Method::DELETE, &path).send().await.unwrap();
    wait_for(|| async { app.count("batches").await == 0 && app.count("attempts").await == 0 })
        .await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_inactive_connection_pauses_its_queued_deliveries_until_reactivated() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    // Fails every request until the connection is paused.
    receiver.script(&[(500, None); 200]);
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    let set_status = |status: &'static str| {
        app.admin(Method::PATCH, &path)
            .json(&json!({ "settings": { "status": status } }))
            .send()
    };
    app.post_events(&input, batch_of(&["custom_event"])).await;
    receiver.next().await;
    receiver.next().await;

    assert_eq!(set_status("inactive").await.unwrap().status(), 200);
    // A request already on the wire may still end; after that, nothing is sent or retried.
    let _in_flight = receiver.next_within(Duration::from_millis(200)).await;
    assert!(
        receiver
            .next_within(Duration::from_millis(1500))
            .await
            .is_none(),
        "an inactive connection's queued job is retried"
    );
    assert_eq!(app.count("jobs").await, 1, "the paused job waits, not lost");
    receiver.clear_script();
    app.post_events(&input, batch_of(&["screen_view"])).await;

    assert_eq!(set_status("active").await.unwrap().status(), 200);
    let resumed = receiver.next().await;
    assert_eq!(
        resumed.event_types(),
        ["custom_event"],
        "the queued job resumes; the event accepted while inactive is not forwarded"
    );
    receiver.expect_silence().await;
    wait_for(|| async { app.count("jobs").await == 0 }).await;
    app.stop().await.unwrap();
}
