//! IDSync with only a public key: answers disclose no more than the caller sent, only a device
//! bound to a user may modify it, and the users such callers can create are capped.

use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, spawn_app_with};
use crate::identity::idsync;
use crate::mobile::{date_in, sign};

async fn email_of(app: &TestApp, mpid: &str) -> Value {
    let user: Value = app
        .admin(reqwest::Method::GET, &format!("/api/v1/users/{mpid}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    user["user_identities"]["email"].clone()
}

fn change_email(old: &str, new: &str, context: &Value) -> Value {
    json!({"context": context, "identity_changes":
        [{"identity_type": "email", "old_value": old, "new_value": new}]})
}

#[tokio::test]
async fn identify_answers_only_the_identities_the_caller_sent() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    let victim = json!({"known_identities": {"customerid": "cust-7", "email": "v@example.com",
        "mobile_number": "+15550100", "device_application_stamp": "victim-phone"}});
    let (status, _) = idsync(&app, key, "/v1/login", victim).await;
    assert_eq!(status, 200);

    let probe = json!({"known_identities": {"email": "v@example.com",
        "device_application_stamp": "attacker-laptop"}});
    let (status, answer) = idsync(&app, key, "/v1/identify", probe).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["matched_identities"],
        json!({"email": "v@example.com"}),
        "only what was sent"
    );
    let text = answer.to_string();
    assert!(
        !text.contains("cust-7") && !text.contains("+15550100"),
        "{text}"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn only_a_device_bound_to_a_user_may_modify_it() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    let login = json!({"known_identities": {"customerid": "cust-8", "email": "v@example.com",
        "device_application_stamp": "victim-phone"}});
    let (_, victim) = idsync(&app, key, "/v1/login", login).await;
    let mpid = victim["mpid"].as_str().unwrap().to_owned();
    assert!(victim["context"].is_string(), "a binding: {victim}");
    let modify = format!("/v1/{mpid}/modify");

    // Knowing the email finds the user, but binds nothing.
    let probe = json!({"known_identities": {"email": "v@example.com",
        "device_application_stamp": "attacker-laptop"}});
    let (_, found) = idsync(&app, key, "/v1/identify", probe).await;
    assert_eq!(found["mpid"], mpid);
    assert_eq!(found["context"], Value::Null, "{found}");
    // The attacker's own anonymous user does get a binding, of that user only.
    let own = json!({"known_identities": {"device_application_stamp": "attacker-phone"}});
    let (_, attacker) = idsync(&app, key, "/v1/identify", own).await;
    assert_ne!(attacker["mpid"], mpid);
    let forged = json!(format!("b1.{mpid}.1.AAAA"));
    for context in [
        Value::Null,
        found["context"].clone(),
        attacker["context"].clone(),
        forged,
    ] {
        let body = change_email("v@example.com", "attacker@example.com", &context);
        let (status, refused) = idsync(&app, key, &modify, body).await;
        assert_eq!(status, 403, "context {context}: {refused}");
        assert!(
            refused["Errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("may modify"),
            "{refused}"
        );
    }
    assert_eq!(email_of(&app, &mpid).await, "v@example.com");

    let body = change_email("v@example.com", "new@example.com", &victim["context"]);
    let (status, modified) = idsync(&app, key, &modify, body).await;
    assert_eq!(status, 200, "{modified}");
    assert_eq!(
        modified["change_results"],
        json!([{"identity_type": "email", "modified_mpid": mpid}]),
        "one result per requested change, nothing else of the user"
    );
    assert_eq!(email_of(&app, &mpid).await, "new@example.com");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_binding_from_another_input_is_refused() {
    let app = spawn_app().await;
    let shop = app.create_input("web").await;
    let blog = app.create_input("web").await;
    let (shop_key, blog_key) = (
        shop["api_key"].as_str().unwrap(),
        blog["api_key"].as_str().unwrap(),
    );
    let device = json!({"known_identities": {"email": "w@example.com",
        "device_application_stamp": "tablet"}});
    let (_, answer) = idsync(&app, blog_key, "/v1/identify", device).await;
    let mpid = answer["mpid"].as_str().unwrap();
    let body = change_email("w@example.com", "x@example.com", &answer["context"]);
    let modify = format!("/v1/{mpid}/modify");
    assert_eq!(idsync(&app, shop_key, &modify, body.clone()).await.0, 403);
    assert_eq!(idsync(&app, blog_key, &modify, body).await.0, 200);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn new_users_are_capped_per_client_address() {
    let app = spawn_app_with(|config| config.identity.max_new_users_per_client = 3).await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    let identify = |device: String| {
        idsync(
            &app,
            key,
            "/v1/identify",
            json!({"known_identities": {"device_application_stamp": device}}),
        )
    };
    for i in 0..3 {
        assert_eq!(identify(format!("made-up-{i}")).await.0, 200);
    }
    let response = app
        .client
        .post(format!("{}/v1/identify", app.base))
        .header("x-mp-key", key)
        .json(&json!({"known_identities": {"device_application_stamp": "made-up-3"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let body: Value = response.json().await.unwrap();
    assert!(
        body["Errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("new users"),
        "{body}"
    );
    // A known device is still answered: only creation is capped.
    assert_eq!(identify("made-up-0".into()).await.0, 200);
    assert_eq!(app.count("users").await, 3);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn web_batches_without_an_mpid_create_no_users() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    for i in 0..3 {
        let batch = json!({"mp_deviceid": format!("made-up-{i}"), "events": []});
        let response = app
            .client
            .post(format!("{}/v3/JS/{key}/events", app.base))
            .header("content-type", "text/plain;charset=UTF-8")
            .body(batch.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
    }
    assert_eq!(app.count("batches").await, 3, "the batches are kept");
    assert_eq!(
        app.count("users").await,
        0,
        "but made-up devices make no users"
    );
    app.stop().await.unwrap();
}

/// A modify as the iOS SDK sends it: plain JSON, no `context`, signed over the default path.
async fn ios_modify(app: &TestApp, input: &Value, mpid: &str, secret: &str) -> u16 {
    let body = change_email("i@example.com", "j@example.com", &Value::Null).to_string();
    let date = date_in(0);
    let path = format!("/v1/{mpid}/modify");
    let response = app
        .client
        .post(format!("{}/identity{path}", app.base))
        .header("x-mp-key", input["api_key"].as_str().unwrap())
        .header("content-type", "application/json")
        .header("date", &date)
        .header(
            "x-mp-signature",
            sign(secret, &date, &path, body.as_bytes()),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

#[tokio::test]
async fn an_ios_modify_is_allowed_by_the_apps_signature_instead_of_a_binding() {
    let app = spawn_app().await;
    for platform in ["ios", "android"] {
        let input = app.create_input(platform).await;
        let key = input["api_key"].as_str().unwrap();
        let secret = input["api_secret"].as_str().unwrap();
        let device = json!({"known_identities": {"email": "i@example.com",
            "device_application_stamp": format!("{platform}-device")}});
        let (_, answer) = idsync(&app, key, "/v1/identify", device).await;
        let mpid = answer["mpid"].as_str().unwrap();
        assert_eq!(ios_modify(&app, &input, mpid, "not-the-secret").await, 403);
        let signed = ios_modify(&app, &input, mpid, secret).await;
        if platform == "ios" {
            assert_eq!(signed, 200, "the iOS SDK signs and cannot send a binding");
            assert_eq!(email_of(&app, mpid).await, "j@example.com");
        } else {
            assert_eq!(
                signed, 403,
                "Android sends its binding back: a signature is not enough"
            );
        }
    }
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_plain_identity_body_over_the_limit_is_413() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let padding = "x".repeat(300 * 1024);
    let body = json!({"known_identities": {"email": "big@example.com"}, "padding": padding});
    let (status, answer) = idsync(
        &app,
        input["api_key"].as_str().unwrap(),
        "/v1/identify",
        body,
    )
    .await;
    assert_eq!(status, 413, "{answer}");
    assert!(
        answer["Errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("too large"),
        "{answer}"
    );
    app.stop().await.unwrap();
}
