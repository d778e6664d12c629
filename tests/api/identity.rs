//! IDSync and the identity store over HTTP, the Web SDK endpoints' answers and CORS, and MPID
//! resolution for Events API batches that arrive without one.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Receiver, TestApp, batch_of, spawn_app};

/// An IDSync call with the input's key, answered as (status, JSON body).
pub async fn idsync(app: &TestApp, key: &str, path: &str, body: Value) -> (u16, Value) {
    let response = app
        .client
        .post(format!("{}{path}", app.base))
        .header("x-mp-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn mpid(answer: &Value) -> String {
    answer["mpid"]
        .as_str()
        .expect("mpid as a string")
        .to_owned()
}

async fn user_by(app: &TestApp, kind: &str, value: &str) -> (u16, Value) {
    let response = app
        .admin(
            Method::GET,
            &format!("/api/v1/users?identity_type={kind}&value={value}"),
        )
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn identify_login_logout_and_modify_follow_the_identity_store() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    let device = json!({"email": "a@example.com", "device_application_stamp": "dev-1"});

    let (status, first) = idsync(
        &app,
        key,
        "/v1/identify",
        json!({"known_identities": device}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["is_logged_in"], false);
    assert_eq!(first["is_ephemeral"], false);
    assert!(first.get("context").is_some() && first["matched_identities"].is_object());
    let anonymous = mpid(&first);
    let (_, again) = idsync(
        &app,
        key,
        "/v1/identify",
        json!({"known_identities": device}),
    )
    .await;
    assert_eq!(
        mpid(&again),
        anonymous,
        "the same identities resolve to the same MPID"
    );

    let login = json!({"previous_mpid": anonymous, "known_identities":
        {"customerid": "c-1", "email": "a@example.com", "device_application_stamp": "dev-1"}});
    let (status, logged_in) = idsync(&app, key, "/v1/login", login).await;
    assert_eq!(status, 200);
    assert_eq!(logged_in["is_logged_in"], true);
    assert_eq!(
        mpid(&logged_in),
        anonymous,
        "logging in converts the anonymous user"
    );

    let (_, logged_out) = idsync(
        &app,
        key,
        "/v1/logout",
        json!({"known_identities": {"device_application_stamp": "dev-1"}}),
    )
    .await;
    assert_ne!(mpid(&logged_out), anonymous);
    assert_eq!(logged_out["is_logged_in"], false);

    // The customer id finds the same user from another device, under the CNAME prefix too.
    let other_device =
        json!({"known_identities": {"customerid": "c-1", "device_application_stamp": "dev-2"}});
    let (_, elsewhere) = idsync(&app, key, "/identity/v1/login", other_device).await;
    assert_eq!(mpid(&elsewhere), anonymous);

    // The device that logged in with the customer id holds the binding that modify needs.
    let change = json!({"context": elsewhere["context"], "identity_changes":
        [{"identity_type": "email", "old_value": "a@example.com", "new_value": "b@example.com"}]});
    let (status, modified) = idsync(&app, key, &format!("/v1/{anonymous}/modify"), change).await;
    assert_eq!(status, 200, "{modified}");
    let (status, user) = user_by(&app, "email", "b@example.com").await;
    assert_eq!(status, 200);
    assert_eq!(user["mpid"], anonymous);
    assert_eq!(user["user_identities"]["customer_id"], "c-1");
    let history = user["identity_history"].as_array().unwrap();
    assert!(
        history
            .iter()
            .any(|h| h["old_value"] == "a@example.com" && h["new_value"] == "b@example.com")
    );
    assert_eq!(
        user_by(&app, "email", "a@example.com").await.0,
        404,
        "the old email no longer resolves"
    );
    let by_mpid = app
        .admin(Method::GET, &format!("/api/v1/users/{anonymous}"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_mpid.status(), 200);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn malformed_identity_requests_are_refused_and_store_nothing() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();

    let no_key = app
        .client
        .post(format!("{}/v1/identify", app.base))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_key.status(), 401);
    assert_eq!(
        idsync(&app, "nobody", "/v1/identify", json!({})).await.0,
        401
    );

    let malformed = app
        .client
        .post(format!("{}/v1/identify", app.base))
        .header("x-mp-key", key)
        .body("{\"known_identities\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    let body: Value = malformed.json().await.unwrap();
    assert_eq!(body["Errors"][0]["code"], "BAD_REQUEST");

    let (status, body) = idsync(
        &app,
        key,
        "/v1/identify",
        json!({"known_identities": {"shoe_size": "44"}}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["Errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("shoe_size")
    );
    let (status, _) = idsync(
        &app,
        key,
        "/v1/identify",
        json!({"known_identities": {"email": 7}}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = idsync(&app, key, "/v1/123/modify", json!({"identity_changes": []})).await;
    assert_eq!(status, 403, "modify of an MPID this device is not bound to");
    assert_eq!(app.count("users").await, 0);
    assert_eq!(app.count("user_identities").await, 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn browser_routes_answer_cors_preflights() {
    let app = spawn_app().await;
    let preflight = app
        .client
        .request(Method::OPTIONS, format!("{}/v1/identify", app.base))
        .header("origin", "http://shop.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type,x-mp-key")
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success());
    let headers = preflight.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://shop.example"
    );
    let allowed = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        allowed.contains("x-mp-key") && allowed.contains("content-type"),
        "{allowed}"
    );

    let input = app.create_input("web").await;
    let upload = app
        .client
        .post(format!(
            "{}/v3/JS/{}/events",
            app.base,
            input["api_key"].as_str().unwrap()
        ))
        .header("origin", "http://shop.example")
        .header("content-type", "text/plain;charset=UTF-8")
        .body(json!({"mpid": "42", "events": []}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 202);
    assert_eq!(
        upload.headers()["access-control-allow-origin"],
        "http://shop.example"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn web_uploads_and_config_refuse_other_platforms_and_unknown_keys() {
    let app = spawn_app().await;
    let ios = app.create_input("ios").await;
    let web = app.create_input("web").await;
    let upload = |key: &str| {
        app.client
            .post(format!("{}/v3/JS/{key}/events", app.base))
            .header("content-type", "text/plain;charset=UTF-8")
            .body(batch_of(&["custom_event"]).to_string())
            .send()
    };
    let refused = upload(ios["api_key"].as_str().unwrap()).await.unwrap();
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("ios input"),
        "{body}"
    );
    assert_eq!(upload("no-such-key").await.unwrap().status(), 403);
    let malformed = app
        .client
        .post(format!(
            "{}/v3/JS/{}/events",
            app.base,
            web["api_key"].as_str().unwrap()
        ))
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    assert_eq!(app.count("batches").await, 0);

    let config: Value = app
        .client
        .get(format!(
            "{}/JS/v2/{}/config?env=1",
            app.base,
            web["api_key"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["kitConfigs"], json!([]));
    assert!(config["workspaceToken"].is_string());
    let status = app
        .client
        .get(format!("{}/JS/v2/nobody/config", app.base))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 403);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn events_api_batches_without_an_mpid_are_resolved_from_their_identities() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let mut batch = batch_of(&["custom_event"]);
    batch.as_object_mut().unwrap().remove("mpid");
    batch["user_identities"] = json!({"customer_id": "c-9"});
    app.post_events(&input, batch.clone()).await;
    app.post_events(&input, batch).await;
    let got = receiver.take(2).await;
    let (_, user) = user_by(&app, "customer_id", "c-9").await;
    let expected: i64 = user["mpid"].as_str().unwrap().parse().unwrap();
    assert_eq!(got[0].body["mpid"], expected);
    assert_eq!(got[1].body["mpid"], expected);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn alias_requests_are_accepted_and_validated() {
    let app = spawn_app().await;
    let web = app.create_input("web").await;
    let key = web["api_key"].as_str().unwrap();
    let alias = json!({"request_type": "alias", "data": {"source_mpid": "1", "destination_mpid": "2",
                       "start_unixtime_ms": 1, "end_unixtime_ms": 2}});
    for path in [
        format!("/v1/identity/{key}/Alias"),
        format!("/webevents/v1/identity/{key}/Alias"),
    ] {
        let response = app
            .client
            .post(format!("{}{path}", app.base))
            .json(&alias)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{path}");
    }
    let bad = app
        .client
        .post(format!("{}/v1/identity/{key}/Alias", app.base))
        .json(&json!({"data": {"source_mpid": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(app.count("aliases").await, 2);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn batches_keep_their_users_attributes_and_last_seen() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    let mut first = batch_of(&["custom_event"]);
    first["mpid"] = json!(777);
    first["user_attributes"] = json!({"tier": "gold", "plan": "trial", "tags": ["a", "b"]});
    app.post_events(&input, first).await;
    let mut second = batch_of(&[]);
    second["mpid"] = json!(777);
    second["user_attributes"] = json!({"tier": "platinum"});
    second["deleted_user_attributes"] = json!(["plan"]);
    app.post_events(&input, second).await;
    receiver.take(2).await;

    let user: Value = app
        .admin(Method::GET, "/api/v1/users/777")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        user["user_attributes"],
        json!({"tier": "platinum", "tags": ["a", "b"]}),
        "{user}"
    );
    assert!(user["last_seen_at"].as_i64().unwrap() > 0);
    assert!(user["first_seen_at"].as_i64().unwrap() <= user["last_seen_at"].as_i64().unwrap());
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_inputs_allowed_origins_limit_browser_requests() {
    let app = spawn_app().await;
    let input = app
        .create(
            "/api/v1/inputs",
            json!({"name": "shop", "platform": "web",
                                         "settings": {"allowed_origins": ["http://shop.example"]}}),
        )
        .await;
    assert_eq!(
        input["settings"]["allowed_origins"],
        json!(["http://shop.example"])
    );
    let key = input["api_key"].as_str().unwrap();
    let upload = |origin: Option<&'static str>| {
        let mut request = app
            .client
            .post(format!("{}/v3/JS/{key}/events", app.base))
            .header("content-type", "text/plain;charset=UTF-8")
            .body(json!({"mpid": "5", "events": []}).to_string());
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    assert_eq!(
        upload(Some("http://evil.example")).await.unwrap().status(),
        403
    );
    assert_eq!(
        upload(Some("http://shop.example")).await.unwrap().status(),
        202
    );
    assert_eq!(
        upload(None).await.unwrap().status(),
        202,
        "servers send no Origin"
    );
    let identify = app
        .client
        .post(format!("{}/v1/identify", app.base))
        .header("x-mp-key", key)
        .header("origin", "http://evil.example")
        .json(&json!({"known_identities": {"email": "x@example.com"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(identify.status(), 403);

    let path = format!("/api/v1/inputs/{}", input["id"].as_str().unwrap());
    let bad = app
        .admin(Method::PATCH, &path)
        .json(&json!({"settings": {"allowed_origins": ["shop.example"]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let opened = app
        .admin(Method::PATCH, &path)
        .json(&json!({"settings": {"allowed_origins": []}}))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    assert_eq!(
        upload(Some("http://evil.example")).await.unwrap().status(),
        202,
        "an empty list allows any origin"
    );
    app.stop().await.unwrap();
}
