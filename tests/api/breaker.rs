//! A connection's circuit breaker: a failing endpoint gets only probe requests, and when one
//! succeeds the deliveries waiting out their backoff are sent at once (also after a hang).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{HANG, Receiver, TestApp, batch_of, spawn_app_with};

fn with_breaker(config: &mut boson::Config) {
    config.delivery.circuit_breaker_failures = 3;
    config.delivery.circuit_breaker_max_open_secs = 1;
}

/// Posts `n` batches, each one event tagged with its number.
async fn post_tagged(app: &TestApp, input: &Value, n: usize) {
    for i in 0..n {
        let mut batch = batch_of(&["custom_event"]);
        batch["events"][0]["data"]["custom_attributes"] = json!({ "n": i });
        assert_eq!(app.post_events(input, batch).await.status(), 202);
    }
}

/// Collects requests until every one of `n` tagged events was answered 200, or `within`.
async fn delivered(receiver: &mut Receiver, n: usize, within: Duration) -> HashMap<i64, usize> {
    let deadline = Instant::now() + within;
    let mut copies = HashMap::new();
    while copies.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(request) = receiver.next_within(left).await else {
            break;
        };
        if request.answered != 200 {
            continue;
        }
        for event in request.events() {
            let tag = event["data"]["custom_attributes"]["n"].as_i64().unwrap();
            *copies.entry(tag).or_default() += 1;
        }
    }
    copies
}

#[tokio::test]
async fn while_an_endpoint_is_down_only_probes_reach_it() {
    let app = spawn_app_with(with_breaker).await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(500, None); 1000]);
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    post_tagged(&app, &input, 10).await;

    // Without a breaker each of the 10 jobs is retried every 50 ms to 1 s: some 50 requests in
    // two seconds. With it: at most the first 10 (3 once it has opened), then one probe at a
    // time.
    let mut requests = 0;
    let window = Instant::now() + Duration::from_secs(2);
    while let Some(_request) = receiver
        .next_within(window.saturating_duration_since(Instant::now()))
        .await
    {
        requests += 1;
    }
    assert!(
        (3..=18).contains(&requests),
        "{requests} requests reached a failing endpoint in 2 s"
    );
    assert_eq!(app.count("jobs").await, 10, "every delivery still waits");

    receiver.clear_script();
    let copies = delivered(&mut receiver, 10, Duration::from_secs(10)).await;
    assert_eq!(
        copies.len(),
        10,
        "every event arrives once the endpoint is back"
    );
    assert!(copies.values().all(|&n| n == 1), "{copies:?}");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn when_a_probe_succeeds_deliveries_waiting_out_their_backoff_go_at_once() {
    let app = spawn_app_with(|config| {
        with_breaker(config);
        config.delivery.max_backoff_secs = 3600;
    })
    .await;
    let mut receiver = Receiver::start().await;
    // Each failure asks for an hour's pause; only a probe can find out sooner that it is back.
    receiver.script(&[(503, Some("3600")); 6]);
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    post_tagged(&app, &input, 6).await;

    let copies = delivered(&mut receiver, 6, Duration::from_secs(15)).await;
    assert_eq!(
        copies.len(),
        6,
        "deliveries still wait out a one-hour backoff: {copies:?}"
    );
    assert!(copies.values().all(|&n| n == 1), "{copies:?}");
    app.stop().await.unwrap();
}

/// The order in which tagged events first arrived with a 200, until `n` distinct ones did.
async fn arrival_order(receiver: &mut Receiver, n: usize, within: Duration) -> Vec<i64> {
    let deadline = Instant::now() + within;
    let mut order: Vec<i64> = Vec::new();
    while order.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(request) = receiver.next_within(left).await else {
            break;
        };
        if request.answered != 200 {
            continue;
        }
        for event in request.events() {
            let tag = event["data"]["custom_attributes"]["n"].as_i64().unwrap();
            if !order.contains(&tag) {
                order.push(tag);
            }
        }
    }
    order
}

/// Posts batches tagged `from..to` (one user, as every `batch_of`).
async fn post_tagged_range(app: &TestApp, input: &Value, tags: std::ops::Range<i64>) {
    for i in tags {
        let mut batch = batch_of(&["custom_event"]);
        batch["events"][0]["data"]["custom_attributes"] = json!({ "n": i });
        assert_eq!(app.post_events(input, batch).await.status(), 202);
    }
}

#[tokio::test]
async fn after_a_recovery_new_events_go_behind_the_backlog() {
    let app = spawn_app_with(|config| {
        with_breaker(config);
        // One request at a time, so arrival order is the order of sending; the default poll
        // interval, so a backlog waiting for the poller is visible.
        config.delivery.max_in_flight_per_connection = 1;
        config.delivery.poll_interval_ms = 500;
    })
    .await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(500, None); 1000]);
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    post_tagged_range(&app, &input, 0..10).await;
    // The breaker opens after 3 failures; then only probes go out.
    for _ in 0..3 {
        receiver.next().await;
    }

    // The endpoint comes back: the next probe succeeds, and the user's events accepted right
    // after it must arrive after the ten waiting ones, which keep their order.
    receiver.clear_script();
    let probe = loop {
        let request = receiver.next().await;
        if request.answered == 200 {
            break request;
        }
    };
    post_tagged_range(&app, &input, 10..20).await;
    let mut order: Vec<i64> = probe
        .events()
        .iter()
        .map(|event| event["data"]["custom_attributes"]["n"].as_i64().unwrap())
        .collect();
    for tag in arrival_order(&mut receiver, 20 - order.len(), Duration::from_secs(15)).await {
        if !order.contains(&tag) {
            order.push(tag);
        }
    }
    assert_eq!(order.len(), 20, "every event arrives: {order:?}");
    // The backlog first, in order; the events accepted during the drain behind it (among
    // themselves, one accepted as the drain ends can wait for the poller: see `recovery`).
    assert_eq!(
        order[..10],
        (0..10).collect::<Vec<i64>>(),
        "the backlog did not arrive first and in order: {order:?}"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn after_a_hang_the_endpoint_is_found_back_without_waiting_out_the_hung_requests() {
    let app = spawn_app_with(|config| {
        with_breaker(config);
        config.delivery.request_timeout_secs = 4;
    })
    .await;
    let mut receiver = Receiver::start().await;
    // The endpoint accepts connections but answers nothing.
    receiver.script(&[(HANG, None); 1000]);
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    post_tagged(&app, &input, 3).await;
    // Three requests hang until they time out and open the breaker; then a probe goes out,
    // and it hangs too.
    for _ in 0..4 {
        let request = receiver
            .next_within(Duration::from_secs(15))
            .await
            .expect("the hanging endpoint's requests, then a probe");
        assert_eq!(request.answered, HANG);
    }

    // Back just after the probe went out. Waiting for that probe to time out (4 s), then for
    // the breaker's next probe, took over 4 s; the next probe goes after the open interval
    // (here a fraction of a second) even while the hung one is out, and its success has the
    // hung request sent again at once.
    receiver.clear_script();
    let copies = delivered(&mut receiver, 3, Duration::from_millis(2_500)).await;
    assert_eq!(
        copies.len(),
        3,
        "not every event arrived within 2.5 s of the endpoint's return: {copies:?}"
    );
    assert!(copies.values().all(|&n| n == 1), "{copies:?}");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn requests_sent_again_after_a_hang_keep_the_rate_limit() {
    let app = spawn_app_with(|config| {
        with_breaker(config);
        config.delivery.request_timeout_secs = 30;
    })
    .await;
    let mut receiver = Receiver::start().await;
    // The first four requests hang (they stay unanswered for the whole test), the ones after
    // them fail and open the breaker.
    let mut script = vec![(HANG, None); 4];
    script.extend([(500, None); 1000]);
    receiver.script(&script);
    let limit = 4;
    let (input, _) = app
        .pipeline(
            &receiver.url("/hook"),
            json!({ "rate_limit_per_second": limit }),
        )
        .await;
    post_tagged(&app, &input, 8).await;
    // Four hang, three fail and open the breaker, then a probe fails.
    for _ in 0..8 {
        receiver
            .next_within(Duration::from_secs(15))
            .await
            .expect("the hanging requests, the failing ones, then a probe");
    }

    // Back: the next probe succeeds, and the four hung requests go again. Sent at once, they
    // arrived together with the probe and the first of the drain.
    receiver.clear_script();
    let mut arrivals = Vec::new();
    while let Some(request) = receiver.next_within(Duration::from_secs(4)).await {
        arrivals.push(request.at);
    }
    assert!(arrivals.len() >= 8, "only {} requests", arrivals.len());
    let busiest = crate::rate_limit::busiest_second(&arrivals);
    // One late arrival allowed: the pace is kept as requests leave, not as they arrive.
    assert!(
        busiest <= limit + 1,
        "{busiest} requests within one second against a limit of {limit}"
    );
    app.stop().await.unwrap();
}
