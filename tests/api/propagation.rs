//! Settings saved on one node reach the other nodes on the same PostgreSQL: a connection set
//! inactive, a new input, a rotated secret, a changed output and an output's new signing secret,
//! each observed through what the second node does (its answers, its Live Stream, its
//! deliveries), which it decides from its in-memory catalog and not from the database.
//!
//! They need PostgreSQL (on SQLite a node owns its database file, so there is no second node to
//! tell): `TEST_DATABASE_URL`'s server, or in the SQLite pass the local one (see
//! `helpers::multi_node_postgres`); without one they are skipped loudly.
//!
//! The bound is generous (1 s) so a busy test machine does not make them flaky; the 100 ms
//! target is measured by `boson-load --scenario propagation`.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Receiver, TestApp, batch_of, multi_node_postgres, spawn_app_on_postgres};
use crate::live::LiveStream;
use crate::signing::{issue_secret, verify_all};

/// How soon another node must apply a change saved on the first.
const BOUND: Duration = Duration::from_secs(1);
/// How often the second node is asked whether it applied the change yet.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// A first node on a fresh PostgreSQL database, or `None` if there is no server (said loudly).
async fn first_node() -> Option<TestApp> {
    let server = multi_node_postgres("propagation").await?;
    Some(spawn_app_on_postgres(&server).await)
}

/// Runs `probe` every `PROBE_EVERY` until it answers true, and returns how long after `since`
/// that answer came; fails the test if it came later than `BOUND`.
async fn applied_within(
    what: &str,
    since: Instant,
    mut probe: impl AsyncFnMut() -> bool,
) -> Duration {
    loop {
        let applied = probe().await;
        let waited = since.elapsed();
        assert!(
            waited <= BOUND,
            "{what}: the second node had not applied the change after {waited:?} (bound {BOUND:?})"
        );
        if applied {
            return waited;
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// Lets whatever the receiver is still getting arrive, then forgets it.
async fn drain(receiver: &mut Receiver) {
    while receiver
        .next_within(Duration::from_millis(300))
        .await
        .is_some()
    {}
}

#[tokio::test]
async fn a_connection_set_inactive_on_one_node_stops_deliveries_through_another_within_a_second() {
    let Some(node_1) = first_node().await else {
        return;
    };
    let mut receiver = Receiver::start().await;
    let (input, connection) = node_1.pipeline(&receiver.url("/hook"), json!({})).await;
    let node_2 = node_1.second_node(|_| {}).await;
    let id = connection["id"].as_str().unwrap();
    assert_eq!(
        node_2
            .post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );
    receiver.take(1).await;
    // Node 2 reports "filtered: status" for an event it accepts while its catalog holds the
    // connection inactive, and creates no delivery job for it.
    let mut live =
        LiveStream::open(&node_2, &format!("connection_id={id}&direction=outbound")).await;

    let saved = node_1
        .admin(Method::PATCH, &format!("/api/v1/connections/{id}"))
        .json(&json!({"settings": {"status": "inactive"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(saved.status(), 200);
    let since = Instant::now();
    let took = applied_within("connection status", since, async || {
        let answer = node_2
            .post_events(&input, batch_of(&["custom_event"]))
            .await;
        assert_eq!(answer.status(), 202);
        live.shows_filtered_by_status(PROBE_EVERY).await
    })
    .await;
    eprintln!("connection status applied on node 2 after {took:?}");

    // What node 2 accepts now reaches nobody.
    drain(&mut receiver).await;
    node_2
        .post_events(&input, batch_of(&["custom_event"]))
        .await;
    receiver.expect_silence().await;
    node_2.stop().await.unwrap();
    node_1.stop().await.unwrap();
}

#[tokio::test]
async fn an_input_created_on_one_node_is_accepted_by_another_within_a_second() {
    let Some(node_1) = first_node().await else {
        return;
    };
    let node_2 = node_1.second_node(|_| {}).await;

    let input = node_1.create_input("custom_feed").await;
    let since = Instant::now();
    let took = applied_within("new input", since, async || {
        let status = node_2
            .post_events(&input, batch_of(&["custom_event"]))
            .await
            .status();
        assert!(
            status == 202 || status == 403,
            "node 2 answered {status} for a new input"
        );
        status == 202
    })
    .await;
    eprintln!("new input accepted by node 2 after {took:?}");
    node_2.stop().await.unwrap();
    node_1.stop().await.unwrap();
}

#[tokio::test]
async fn a_secret_rotated_on_one_node_is_honoured_by_another_within_a_second() {
    let Some(node_1) = first_node().await else {
        return;
    };
    let input = node_1.create_input("custom_feed").await;
    let node_2 = node_1.second_node(|_| {}).await;
    assert_eq!(
        node_2
            .post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );

    let path = format!(
        "/api/v1/inputs/{}/rotate-secret",
        input["id"].as_str().unwrap()
    );
    let rotated: Value = node_1
        .admin(Method::POST, &path)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(rotated["api_secret"], input["api_secret"]);
    let since = Instant::now();
    let took = applied_within("rotated secret", since, async || {
        node_2
            .post_events(&rotated, batch_of(&["custom_event"]))
            .await
            .status()
            == 202
    })
    .await;
    eprintln!("rotated secret honoured by node 2 after {took:?}");
    assert_eq!(
        node_2
            .post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        403,
        "the old secret still works on node 2"
    );
    node_2.stop().await.unwrap();
    node_1.stop().await.unwrap();
}

#[tokio::test]
async fn an_output_changed_on_one_node_is_delivered_to_by_another_within_a_second() {
    let Some(node_1) = first_node().await else {
        return;
    };
    let mut before = Receiver::start().await;
    let mut after = Receiver::start().await;
    let (input, connection) = node_1.pipeline(&before.url("/hook"), json!({})).await;
    let node_2 = node_1.second_node(|_| {}).await;
    node_2
        .post_events(&input, batch_of(&["custom_event"]))
        .await;
    before.take(1).await;

    let connection: Value = node_1
        .admin(
            Method::GET,
            &format!("/api/v1/connections/{}", connection["id"].as_str().unwrap()),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let output = connection["output_id"].as_str().unwrap();
    let saved = node_1
        .admin(Method::PATCH, &format!("/api/v1/outputs/{output}"))
        .json(&json!({"settings": {"url": after.url("/hook")}}))
        .send()
        .await
        .unwrap();
    assert_eq!(saved.status(), 200);
    // Node 2 leases the jobs it accepts and delivers them itself, with the output settings of
    // its catalog.
    let since = Instant::now();
    let took = applied_within("changed output", since, async || {
        node_2
            .post_events(&input, batch_of(&["custom_event"]))
            .await;
        after.next_within(PROBE_EVERY).await.is_some()
    })
    .await;
    eprintln!("changed output used by node 2 after {took:?}");
    node_2.stop().await.unwrap();
    node_1.stop().await.unwrap();
}

#[tokio::test]
async fn a_signing_secret_issued_on_one_node_signs_the_requests_of_another_within_a_second() {
    let Some(node_1) = first_node().await else {
        return;
    };
    let mut receiver = Receiver::start().await;
    let input = node_1.create_input("custom_feed").await;
    let output = node_1.create_webhook(&receiver.url("/hook")).await;
    node_1.connect(&input, &output, json!({})).await;
    let node_2 = node_1.second_node(|_| {}).await;
    node_2
        .post_events(&input, batch_of(&["custom_event"]))
        .await;
    let unsigned = receiver.take(1).await;
    assert!(unsigned[0].headers.get("webhook-signature").is_none());

    let secret = issue_secret(&node_1, output["id"].as_str().unwrap()).await;
    // Node 2 leases the jobs it accepts and signs them with the keys of its catalog.
    let since = Instant::now();
    let mut signed = None;
    let took = applied_within("signing secret", since, async || {
        node_2
            .post_events(&input, batch_of(&["custom_event"]))
            .await;
        match receiver.next_within(PROBE_EVERY).await {
            Some(request) if request.headers.contains_key("webhook-signature") => {
                signed = Some(request);
                true
            }
            _ => false,
        }
    })
    .await;
    eprintln!("signing secret used by node 2 after {took:?}");
    let signed = signed.expect("a signed request");
    if let Some(results) = verify_all(&[(&signed, secret.as_str())]).await {
        assert_eq!(results, [Ok(())], "node 2 signs with the new secret");
    }
    node_2.stop().await.unwrap();
    node_1.stop().await.unwrap();
}
