//! A connection's `ordering`: with `per_user`, the batches of one MPID reach the receiver in the
//! order they were accepted, and while one user's requests fail, that user's later batches wait
//! (the other users' keep flowing) and go, in order, once the failure stops. `none` (the
//! default) sends without regard to order, as before. Each batch carries its place in its
//! user's sequence as the event attribute `seq`.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{
    Received, Receiver, TestApp, batch_of, multi_node_postgres, spawn_app, spawn_app_on_postgres,
};

/// The users of the order test, and how many batches each sends.
const USERS: [i64; 3] = [101, 202, 303];
const PER_USER: i64 = 15;
/// The user whose requests fail in the failure tests.
const FAILING: i64 = 666;

/// A batch of user `mpid`, number `seq` in that user's sequence (one event, sent as one request).
fn numbered(mpid: i64, seq: i64) -> Value {
    let mut batch = batch_of(&["custom_event"]);
    batch["mpid"] = json!(mpid);
    batch["events"][0]["data"]["custom_attributes"] = json!({"seq": seq.to_string()});
    batch
}

fn mpid_of(got: &Received) -> i64 {
    got.body["mpid"].as_i64().expect("mpid in the body")
}

fn seq_of(got: &Received) -> i64 {
    got.events()[0]["data"]["custom_attributes"]["seq"]
        .as_str()
        .expect("seq")
        .parse()
        .unwrap()
}

/// Posts `PER_USER` batches for each of `users`, interleaved, one after another (so each is
/// accepted after the previous one), alternating between `nodes`.
async fn post_interleaved(nodes: &[&TestApp], input: &Value, users: &[i64]) {
    let mut turn = 0;
    for seq in 0..PER_USER {
        for &mpid in users {
            let node = nodes[turn % nodes.len()];
            turn += 1;
            let status = node.post_events(input, numbered(mpid, seq)).await.status();
            assert_eq!(status, 202);
        }
    }
}

/// Each user's delivered sequence numbers, in arrival order (only requests answered 2xx).
fn delivered_by_user(got: &[Received]) -> HashMap<i64, Vec<i64>> {
    let mut by_user: HashMap<i64, Vec<i64>> = HashMap::new();
    for request in got.iter().filter(|r| r.answered < 300) {
        by_user
            .entry(mpid_of(request))
            .or_default()
            .push(seq_of(request));
    }
    by_user
}

async fn per_user_pipeline(app: &TestApp, receiver: &Receiver) -> Value {
    let (input, _) = app
        .pipeline(
            &receiver.url("/ordered"),
            json!({"ordering": "per_user", "send_as_batch": true}),
        )
        .await;
    input
}

#[tokio::test]
async fn each_users_batches_arrive_in_acceptance_order() {
    let app = spawn_app().await;
    // Answers take 1-30 ms, so requests sent side by side would overtake each other.
    let mut receiver = Receiver::with_latency(1..=30).await;
    let input = per_user_pipeline(&app, &receiver).await;
    post_interleaved(&[&app], &input, &USERS).await;
    let got = receiver.take(USERS.len() * PER_USER as usize).await;
    let by_user = delivered_by_user(&got);
    for mpid in USERS {
        assert_eq!(
            by_user[&mpid],
            (0..PER_USER).collect::<Vec<_>>(),
            "user {mpid}"
        );
    }
    app.stop().await.unwrap();
}

/// Requests a test reads at most while waiting for deliveries (retries of a failing user keep
/// coming, so silence alone would never end a wait that goes wrong).
const MOST_REQUESTS: usize = 2_000;

/// Receives until every user in `users` has had `PER_USER` batches delivered; returns every
/// request seen, failed ones included.
async fn until_delivered(receiver: &mut Receiver, users: &[i64]) -> Vec<Received> {
    let mut got = Vec::new();
    loop {
        assert!(
            got.len() < MOST_REQUESTS,
            "still not delivered: {:?}",
            delivered_by_user(&got)
        );
        let by_user = delivered_by_user(&got);
        let done = users
            .iter()
            .all(|mpid| by_user.get(mpid).map_or(0, Vec::len) >= PER_USER as usize);
        if done {
            return got;
        }
        got.push(receiver.next().await);
    }
}

#[tokio::test]
async fn a_failing_user_waits_while_the_others_flow_then_catches_up_in_order() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.fail_user(FAILING, true);
    let input = per_user_pipeline(&app, &receiver).await;
    post_interleaved(&[&app], &input, &[USERS[0], FAILING, USERS[1]]).await;

    // The others' batches all arrive, in order, while the failing user's first one fails.
    let during = until_delivered(&mut receiver, &USERS[..2]).await;
    let by_user = delivered_by_user(&during);
    for mpid in &USERS[..2] {
        assert_eq!(by_user[mpid], (0..PER_USER).collect::<Vec<_>>());
    }
    let tried: Vec<i64> = during
        .iter()
        .filter(|r| mpid_of(r) == FAILING)
        .map(seq_of)
        .collect();
    assert!(
        !tried.is_empty(),
        "the failing user's first batch was tried"
    );
    assert!(
        tried.iter().all(|seq| *seq == 0),
        "only the failing user's first batch may be tried while it fails: {tried:?}"
    );

    // Once the receiver takes them, the waiting batches follow, in order.
    receiver.fail_user(FAILING, false);
    let after = until_delivered(&mut receiver, &[FAILING]).await;
    assert_eq!(
        delivered_by_user(&after)[&FAILING],
        (0..PER_USER).collect::<Vec<_>>()
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn without_ordering_a_failing_users_later_batches_still_go_out() {
    // A breaker that stays closed: an open one would send only probes of the oldest batch.
    let app = crate::helpers::spawn_app_with(|config| {
        config.delivery.circuit_breaker_failures = 1000;
    })
    .await;
    let mut receiver = Receiver::start().await;
    receiver.fail_user(FAILING, true);
    let (input, _) = app
        .pipeline(&receiver.url("/unordered"), json!({"send_as_batch": true}))
        .await;
    post_interleaved(&[&app], &input, &[USERS[0], FAILING]).await;
    let during = until_delivered(&mut receiver, &USERS[..1]).await;
    let mut tried: Vec<i64> = during
        .iter()
        .filter(|r| mpid_of(r) == FAILING)
        .map(seq_of)
        .collect();
    // Everything is tried at once; keep receiving until every failing batch was tried.
    while tried.iter().copied().max() < Some(PER_USER - 1) {
        assert!(tried.len() < MOST_REQUESTS, "{tried:?}");
        let request = receiver.next().await;
        if mpid_of(&request) == FAILING {
            tried.push(seq_of(&request));
        }
    }
    assert!(tried.iter().any(|seq| *seq > 0), "{tried:?}");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_unknown_ordering_is_refused_naming_the_setting() {
    let app = spawn_app().await;
    let input = app.create_input("custom_feed").await;
    let output = app.create_webhook("https://example.com/hook").await;
    for bad in [json!("sometimes"), json!(1), json!(null)] {
        let response = app
            .admin(reqwest::Method::POST, "/api/v1/connections")
            .json(&json!({"input_id": input["id"], "output_id": output["id"],
                          "settings": {"ordering": bad}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{bad}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("ordering"), "{body}");
    }
    assert_eq!(app.count("connections").await, 0);
    let connection = app
        .connect(&input, &output, json!({"ordering": "per_user"}))
        .await;
    assert_eq!(connection["settings"]["ordering"], "per_user");
    let connection = app
        .connect(
            &input,
            &app.create_webhook("https://example.com/other").await,
            json!({}),
        )
        .await;
    assert_eq!(connection["settings"]["ordering"], "none");
    app.stop().await.unwrap();
}

/// Two nodes on one PostgreSQL database, the batches posted to each in turn: a node must not
/// send a user's batch while the other node still holds that user's earlier one.
#[tokio::test]
async fn two_nodes_keep_each_users_order() {
    let Some(server) = multi_node_postgres("ordering on two nodes").await else {
        return;
    };
    let node_1 = spawn_app_on_postgres(&server).await;
    let mut receiver = Receiver::with_latency(1..=30).await;
    let input = per_user_pipeline(&node_1, &receiver).await;
    let node_2 = node_1.second_node(|_| {}).await;
    post_interleaved(&[&node_1, &node_2], &input, &USERS).await;
    let got = receiver.take(USERS.len() * PER_USER as usize).await;
    let by_user = delivered_by_user(&got);
    for mpid in USERS {
        assert_eq!(
            by_user[&mpid],
            (0..PER_USER).collect::<Vec<_>>(),
            "user {mpid}"
        );
    }
    node_2.stop().await.unwrap();
    node_1.stop().await.unwrap();
}

#[tokio::test]
async fn a_user_whose_head_batch_is_dead_lettered_goes_on_with_the_next() {
    let app = spawn_app_with_short_window().await;
    let mut receiver = Receiver::start().await;
    receiver.fail_user(FAILING, true);
    let input = per_user_pipeline(&app, &receiver).await;
    for seq in 0..2 {
        let status = app
            .post_events(&input, numbered(FAILING, seq))
            .await
            .status();
        assert_eq!(status, 202);
    }
    // The first batch is given up on after the retry window; only then is the second tried.
    let mut seen = Vec::new();
    while !seen.contains(&1) {
        assert!(seen.len() < MOST_REQUESTS, "{seen:?}");
        let request = receiver.next().await;
        seen.push(seq_of(&request));
    }
    let first_of_second = seen.iter().position(|s| *s == 1).unwrap();
    assert!(seen[..first_of_second].iter().all(|s| *s == 0), "{seen:?}");
    wait_until_dead_lettered(&app, 1).await;
    app.stop().await.unwrap();
}

async fn spawn_app_with_short_window() -> TestApp {
    crate::helpers::spawn_app_with(|config| {
        config.delivery.retry_window_secs = 1;
        config.delivery.circuit_breaker_failures = 1000;
    })
    .await
}

async fn wait_until_dead_lettered(app: &TestApp, at_least: i64) {
    for _ in 0..100 {
        if app.count("dead_letters").await >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no dead letter");
}

/// Receives until `wanted` (user, seq) pairs were all answered 2xx; every request seen. Fails
/// after 15 s (failed probes keep coming, so a plain wait for silence would never end).
async fn until_answered(receiver: &mut Receiver, wanted: &[(i64, i64)]) -> Vec<Received> {
    let give_up = std::time::Instant::now() + Duration::from_secs(15);
    let mut got: Vec<Received> = Vec::new();
    loop {
        let done = wanted.iter().all(|pair| {
            got.iter()
                .any(|r| r.answered < 300 && (mpid_of(r), seq_of(r)) == *pair)
        });
        if done {
            return got;
        }
        let left = give_up.saturating_duration_since(std::time::Instant::now());
        let Some(request) = receiver.next_within(left).await else {
            panic!("not all answered: {:?}", delivered_by_user(&got));
        };
        got.push(request);
    }
}

#[tokio::test]
async fn a_user_refused_for_good_cannot_keep_the_breaker_open_for_the_others() {
    let app = crate::helpers::spawn_app_with(|config| {
        config.delivery.circuit_breaker_failures = 2;
        config.delivery.circuit_breaker_max_open_secs = 1;
    })
    .await;
    let mut receiver = Receiver::start().await;
    let (healthy, flaky) = (USERS[0], USERS[1]);
    receiver.fail_user(FAILING, true);
    receiver.fail_user(flaky, true);
    let input = per_user_pipeline(&app, &receiver).await;
    // Two users failing open the breaker; the first one's job is then the oldest there is.
    for mpid in [FAILING, flaky] {
        let status = app.post_events(&input, numbered(mpid, 0)).await.status();
        assert_eq!(status, 202);
    }
    until_failed(&mut receiver, &[FAILING, flaky]).await;
    receiver.fail_user(flaky, false);
    for (mpid, seq) in [(healthy, 0), (flaky, 1)] {
        let status = app.post_events(&input, numbered(mpid, seq)).await.status();
        assert_eq!(status, 202);
    }
    // The probes skip the user the receiver keeps refusing, so the others get through.
    let got = until_answered(&mut receiver, &[(healthy, 0), (flaky, 0), (flaky, 1)]).await;
    assert_eq!(delivered_by_user(&got)[&flaky], [0, 1]);
    assert!(!delivered_by_user(&got).contains_key(&FAILING));
    app.stop().await.unwrap();
}

/// Receives until each of `users` had a request refused.
async fn until_failed(receiver: &mut Receiver, users: &[i64]) {
    let mut failed = Vec::new();
    while !users.iter().all(|u| failed.contains(u)) {
        let request = receiver.next().await;
        if request.answered >= 300 {
            failed.push(mpid_of(&request));
        }
    }
}

#[tokio::test]
async fn a_users_next_batch_is_claimed_when_the_one_before_finishes() {
    // Polls an hour apart: only the finish of a user's batch can hand over the next one,
    // accepted while it was in flight (so left in the table, not leased, at insert).
    let app = crate::helpers::spawn_app_with(|config| {
        config.delivery.poll_interval_ms = 3_600_000;
    })
    .await;
    let mut receiver = Receiver::with_latency(300..=300).await;
    let input = per_user_pipeline(&app, &receiver).await;
    for seq in 0..3 {
        let status = app
            .post_events(&input, numbered(USERS[0], seq))
            .await
            .status();
        assert_eq!(status, 202);
    }
    let got = until_answered(&mut receiver, &[(USERS[0], 2)]).await;
    assert_eq!(delivered_by_user(&got)[&USERS[0]], [0, 1, 2]);
    app.stop().await.unwrap();
}

/// A per-user connection's endpoint fails until its breaker opens, then comes back: every
/// user's backlog arrives complete and in the order accepted. A claim takes only each user's
/// head, so with three users the recovery's drain gets far fewer jobs than it asks for; that
/// must not be taken for the end of the backlog. (Polls are two seconds apart, so the probe
/// goes out, but the backlog is not left to the poller.)
#[tokio::test]
async fn after_an_outage_every_users_backlog_is_drained_in_order() {
    let app = crate::helpers::spawn_app_with(|config| {
        config.delivery.circuit_breaker_failures = 3;
        config.delivery.circuit_breaker_max_open_secs = 1;
        config.delivery.poll_interval_ms = 2_000;
    })
    .await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(500, None); 1000]);
    let input = per_user_pipeline(&app, &receiver).await;
    post_interleaved(&[&app], &input, &USERS).await;
    // Each user's head fails; the breaker opens after three failures.
    until_failed(&mut receiver, &USERS).await;

    receiver.clear_script();
    let wanted: Vec<(i64, i64)> = USERS.iter().map(|&mpid| (mpid, PER_USER - 1)).collect();
    let got = until_answered(&mut receiver, &wanted).await;
    let by_user = delivered_by_user(&got);
    for mpid in USERS {
        assert_eq!(
            by_user.get(&mpid).cloned().unwrap_or_default(),
            (0..PER_USER).collect::<Vec<i64>>(),
            "user {mpid}'s batches after the recovery: {by_user:?}"
        );
    }
    app.stop().await.unwrap();
}
