//! Batches that arrive with identities and no MPID (the usual server-side feed): each gets the
//! MPID its identities resolve to, one user per identity however many requests (or nodes) see
//! it first at once, and the batch's jobs, profile and consent carry that MPID (issue 16,
//! item 4).

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::helpers::{
    Receiver, TestApp, batch_of, multi_node_postgres, spawn_app, spawn_app_on_postgres,
};
use crate::identity::idsync;

/// A batch of `customer_id` (and an email derived from it) without an MPID.
fn unnamed(customer_id: &str) -> Value {
    let mut batch = batch_of(&["custom_event"]);
    batch.as_object_mut().unwrap().remove("mpid");
    batch["user_identities"] =
        json!({"customer_id": customer_id, "email": format!("{customer_id}@example.com")});
    batch
}

/// The MPID that owns `customer_id`, as the admin API answers it.
async fn owner_of(app: &TestApp, customer_id: &str) -> i64 {
    let path = format!("/api/v1/users?identity_type=customer_id&value={customer_id}");
    let user: Value = app.read(&path).await;
    user["mpid"].as_str().expect("a user").parse().unwrap()
}

/// Posts `n` copies of `batch` to `app` at once; asserts every one is accepted.
async fn post_at_once(app: &TestApp, input: &Value, batch: &Value, n: usize) {
    let posts = (0..n).map(|_| app.post_events(input, batch.clone()));
    for response in join_all(posts).await {
        assert_eq!(response.status(), 202);
    }
}

#[tokio::test]
async fn sixty_four_requests_of_one_new_identity_at_once_make_one_user() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    post_at_once(&app, &input, &unnamed("new-64"), 64).await;
    let got = receiver.take(64).await;
    let mpid = owner_of(&app, "new-64").await;
    assert!(
        got.iter().all(|r| r.body["mpid"] == mpid),
        "one MPID for all"
    );
    assert_eq!(app.count("users").await, 1);
    assert_eq!(app.count("user_identities").await, 2);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn two_nodes_resolve_one_new_identity_to_one_user() {
    let Some(server) = multi_node_postgres("nompid_two_nodes").await else {
        return;
    };
    let first = spawn_app_on_postgres(&server).await;
    let mut receiver = Receiver::start().await;
    let (input, _) = first.pipeline(&receiver.url("/hook"), json!({})).await;
    let second = first.second_node(|_| {}).await;
    let batch = unnamed("two-nodes");
    tokio::join!(
        post_at_once(&first, &input, &batch, 32),
        post_at_once(&second, &input, &batch, 32)
    );
    let mpid = owner_of(&first, "two-nodes").await;
    let got = receiver.take(64).await;
    let resolved = got.iter().filter(|r| r.body["mpid"] == mpid).count();
    assert_eq!(resolved, 64, "every batch of the identity got its one MPID");
    let users = "SELECT COUNT(DISTINCT mpid) FROM user_identities WHERE identity LIKE 'two-nodes%'";
    assert_eq!(first.query_i64(users).await, 1);
    second.stop().await.unwrap();
    first.stop().await.unwrap();
}

#[tokio::test]
async fn a_returning_identity_resolves_to_the_user_idsync_made() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let web = app.create_input("web").await;
    let key = web["api_key"].as_str().unwrap();
    let known = json!({"known_identities": {"customerid": "back-1"}});
    let (status, answer) = idsync(&app, key, "/v1/identify", known).await;
    assert_eq!(status, 200, "{answer}");
    let mpid: i64 = answer["mpid"].as_str().unwrap().parse().unwrap();
    app.post_events(&input, unnamed("back-1")).await;
    app.post_events(&input, unnamed("back-1")).await;
    let got = receiver.take(2).await;
    assert!(
        got.iter().all(|r| r.body["mpid"] == mpid),
        "{}",
        got[0].body
    );
    assert_eq!(app.count("users").await, 1);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_resolved_batch_gives_its_mpid_to_its_jobs_profile_and_consent() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"ordering": "per_user", "send_as_batch": true});
    let (input, _) = app.pipeline(&receiver.url("/hook"), settings).await;
    app.post_events(&input, unnamed("prof-1")).await;
    receiver.take(1).await;
    let mpid = owner_of(&app, "prof-1").await;
    // The user's requests now fail, so their jobs stay in the table to be looked at.
    receiver.fail_user(mpid, true);
    let mut batch = unnamed("prof-1");
    batch["user_attributes"] = json!({"tier": "silver"});
    batch["consent_state"] =
        json!({"ccpa": {"data_sale_opt_out": {"consented": true, "timestamp_unixtime_ms": 1}}});
    assert_eq!(app.post_events(&input, batch.clone()).await.status(), 202);
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    let jobs = format!("SELECT COUNT(*) FROM jobs WHERE mpid = {mpid}");
    assert_eq!(app.query_i64(&jobs).await, 2, "both jobs are the user's");
    let user: Value = app.read(&format!("/api/v1/users/{mpid}")).await;
    assert_eq!(user["user_attributes"]["tier"], "silver", "{user}");
    assert_eq!(
        user["consent_state"]["ccpa"]["data_sale_opt_out"]["consented"], true,
        "{user}"
    );
    // Ordered per user: the second batch waits behind the first, which keeps failing.
    let got = receiver.next().await;
    assert_eq!(got.body["mpid"], mpid);
    receiver.fail_user(mpid, false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.count("jobs").await > 0 {
        assert!(Instant::now() < deadline, "the user's jobs never finished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.stop().await.unwrap();
}

/// The text of every stored batch's body that mentions `needle`, counted in the database.
async fn stored_bodies_with(app: &TestApp, needle: &str) -> i64 {
    let body = if app.database_url.starts_with("sqlite") {
        "CAST(body AS TEXT)"
    } else {
        "convert_from(body, 'UTF8')"
    };
    app.query_i64(&format!(
        "SELECT COUNT(*) FROM batches WHERE {body} LIKE '%{needle}%'"
    ))
    .await
}

#[tokio::test]
async fn a_resent_batch_without_an_mpid_changes_no_identity() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let mut first = unnamed("dup-1");
    first["source_request_id"] = json!("req-dup");
    assert_eq!(app.post_events(&input, first).await.status(), 202);
    receiver.take(1).await;
    // The same request id again, as a client's retry, whatever it says now: it is a duplicate,
    // so it is not stored, and who it names must not become a user either.
    let mut again = unnamed("dup-2");
    again["source_request_id"] = json!("req-dup");
    assert_eq!(app.post_events(&input, again).await.status(), 202);
    assert_eq!(app.count("batches").await, 1);
    assert_eq!(app.count("users").await, 1, "the duplicate made a user");
    assert_eq!(app.count("user_identities").await, 2);
    assert_eq!(app.count("identity_changes").await, 2);
    assert!(
        receiver
            .next_within(Duration::from_millis(300))
            .await
            .is_none()
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_batch_with_mpid_zero_is_stored_and_sent_with_its_resolved_mpid() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    // 0 is what SDKs send before they know the user: "not known", as if the key were missing.
    let mut batch = unnamed("zero-1");
    batch["mpid"] = json!(0);
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    let got = receiver.next().await;
    let mpid = owner_of(&app, "zero-1").await;
    assert_eq!(got.body["mpid"], mpid, "{}", got.body);
    let stored = stored_bodies_with(&app, &format!("\"mpid\":{mpid}")).await;
    assert_eq!(stored, 1, "the stored body names the resolved MPID");
    assert_eq!(stored_bodies_with(&app, "\"mpid\":0").await, 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_batch_with_mpid_zero_that_gets_no_user_keeps_its_mpid_zero() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline_for("web", &receiver.url("/hook"), json!({}))
        .await;
    let key = input["api_key"].as_str().unwrap();
    // A Web SDK upload may not make a user (IDSync does), so an unknown identity resolves to
    // none: the batch is stored and sent as it came, "mpid": 0 (not known) included.
    let mut batch = unnamed("zero-web");
    batch["mpid"] = json!(0);
    let response = app
        .client
        .post(format!("{}/v3/JS/{key}/events", app.base))
        .header("content-type", "text/plain;charset=UTF-8")
        .body(batch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let got = receiver.next().await;
    assert_eq!(got.body["mpid"], 0, "{}", got.body);
    assert_eq!(stored_bodies_with(&app, "\"mpid\":0").await, 1);
    assert_eq!(app.count("users").await, 0);
    app.stop().await.unwrap();
}
