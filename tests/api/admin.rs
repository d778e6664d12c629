//! The admin API: shapes, validation and error bodies.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Receiver, batch_of, spawn_app};

async fn call(
    app: &crate::helpers::TestApp,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = app.admin(method, path);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn assert_error(status: u16, body: &Value, expected_status: u16, code: &str) {
    assert_eq!(status, expected_status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn the_admin_api_wants_the_token() {
    let app = spawn_app().await;
    let no_token = app
        .client
        .get(format!("{}/api/v1/inputs", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 401);
    let body: Value = no_token.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let wrong = app
        .client
        .get(format!("{}/api/v1/inputs", app.base))
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn inputs_are_created_listed_rotated_and_deleted() {
    let app = spawn_app().await;
    let input = app.create_input("ios").await;
    for key in [
        "id",
        "name",
        "platform",
        "api_key",
        "api_secret",
        "created_at",
    ] {
        assert!(!input[key].is_null(), "missing {key}: {input}");
    }
    assert_eq!(input["platform"], "ios");
    let id = input["id"].as_str().unwrap();

    let (status, list) = call(&app, Method::GET, "/api/v1/inputs", None).await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (status, got) = call(&app, Method::GET, &format!("/api/v1/inputs/{id}"), None).await;
    assert_eq!((status, &got["api_key"]), (200, &input["api_key"]));

    // After rotation the old secret is refused and the new one accepted.
    let (status, rotated) = call(
        &app,
        Method::POST,
        &format!("/api/v1/inputs/{id}/rotate-secret"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_ne!(rotated["api_secret"], input["api_secret"]);
    assert_eq!(rotated["api_key"], input["api_key"]);
    assert_eq!(app.post_events(&input, batch_of(&[])).await.status(), 403);
    assert_eq!(app.post_events(&rotated, batch_of(&[])).await.status(), 202);

    let deleted = app
        .admin(Method::DELETE, &format!("/api/v1/inputs/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let (status, body) = call(&app, Method::GET, &format!("/api/v1/inputs/{id}"), None).await;
    assert_error(status, &body, 404, "input_not_found");
    assert_eq!(
        app.post_events(&rotated, batch_of(&[])).await.status(),
        403,
        "a deleted input's key stops working"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn bad_admin_requests_get_clear_errors_and_store_nothing() {
    let app = spawn_app().await;
    let cases = [
        (
            "/api/v1/inputs",
            json!({"name": "x", "platform": "windows"}),
            "invalid_platform",
        ),
        (
            "/api/v1/inputs",
            json!({"name": "", "platform": "web"}),
            "invalid_name",
        ),
        (
            "/api/v1/inputs",
            json!({"name": "x", "platform": "web", "colour": "red"}),
            "invalid_body",
        ),
        ("/api/v1/inputs", json!({"platform": "web"}), "invalid_body"),
        (
            "/api/v1/outputs",
            json!({"name": "x", "kind": "kafka", "settings": {"url": "http://example.com"}}),
            "invalid_kind",
        ),
        (
            "/api/v1/outputs",
            json!({"name": "x", "kind": "webhook", "settings": {"url": "ftp://example.com"}}),
            "invalid_url",
        ),
        (
            "/api/v1/outputs",
            json!({"name": "x", "kind": "webhook", "settings": {"url": "http://e.com", "headers": {}}}),
            "invalid_settings",
        ),
    ];
    for (path, body, code) in cases {
        let (status, answer) = call(&app, Method::POST, path, Some(body.clone())).await;
        assert_error(status, &answer, 400, code);
    }
    let malformed = app
        .admin(Method::POST, "/api/v1/inputs")
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    let status = malformed.status().as_u16();
    assert_error(
        status,
        &malformed.json().await.unwrap(),
        400,
        "malformed_json",
    );
    assert_eq!(app.count("inputs").await, 0);
    assert_eq!(app.count("outputs").await, 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn output_settings_are_validated_on_create_and_update() {
    let app = spawn_app().await;
    let webhook = |settings: Value| json!({"name": "x", "kind": "webhook", "settings": settings});
    let header =
        |value: &str| json!({"url": "http://example.com/hook", "authorization_header": value});
    // Each refused value with the code and the field its message must name.
    let cases = [
        (
            header("Bearer a\r\nX-Injected: 1"),
            "invalid_settings",
            "authorization_header",
        ),
        (
            header("Bearer a\nb"),
            "invalid_settings",
            "authorization_header",
        ),
        (
            header("Bearer \u{0}"),
            "invalid_settings",
            "authorization_header",
        ),
        (
            header("Bearer \u{7f}"),
            "invalid_settings",
            "authorization_header",
        ),
        (
            header("Bearer caf\u{e9}"),
            "invalid_settings",
            "authorization_header",
        ),
        (json!({"url": "http://"}), "invalid_url", "url"),
        (json!({"url": "mailto:a@example.com"}), "invalid_url", "url"),
        (json!({"url": "data:text/plain,x"}), "invalid_url", "url"),
    ];
    for (settings, code, field) in &cases {
        let (status, body) = call(
            &app,
            Method::POST,
            "/api/v1/outputs",
            Some(webhook(settings.clone())),
        )
        .await;
        assert_error(status, &body, 400, code);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{field}`")),
            "{settings}: {message}"
        );
    }
    assert_eq!(app.count("outputs").await, 0);

    let output = app.create_webhook("http://example.com/hook").await;
    let path = format!("/api/v1/outputs/{}", output["id"].as_str().unwrap());
    for (settings, code, _) in cases {
        let (status, body) = call(
            &app,
            Method::PATCH,
            &path,
            Some(json!({"settings": settings})),
        )
        .await;
        assert_error(status, &body, 400, code);
    }
    let (status, stored) = call(&app, Method::GET, &path, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        stored["settings"], output["settings"],
        "a refused update changes nothing"
    );
    app.stop().await.unwrap();
}

/// An id that names nothing gets the same answer whether it is well formed or not: ids are
/// parsed at the edge, and a malformed one is answered as an unknown one.
#[tokio::test]
async fn ids_that_name_nothing_are_answered_as_unknown_ones() {
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    let input = app.create_input("web").await;
    let output = app.create_webhook(&receiver.url("/hook")).await;
    let unknown = "0192d3b4c5e67f8091a2b3c4d5e6f708";
    let ids = |prefix: &str| {
        [
            format!("{prefix}_{unknown}"),
            format!("{prefix}_x"),
            "nope".to_owned(),
            format!("{}_{unknown}", if prefix == "inp" { "out" } else { "inp" }),
        ]
    };
    for id in ids("inp") {
        for (method, path) in [
            (Method::GET, format!("/api/v1/inputs/{id}")),
            (Method::DELETE, format!("/api/v1/inputs/{id}")),
            (Method::POST, format!("/api/v1/inputs/{id}/rotate-secret")),
            (Method::GET, format!("/api/v1/inputs/{id}/forwarding-stats")),
        ] {
            let (status, body) = call(&app, method, &path, None).await;
            assert_error(status, &body, 404, "input_not_found");
        }
        let path = format!("/api/v1/inputs/{id}");
        let (status, body) = call(&app, Method::PATCH, &path, Some(json!({"name": "y"}))).await;
        assert_error(status, &body, 404, "input_not_found");
        // The body is read before the id: a bad body is reported first, as before.
        let (status, body) = call(&app, Method::PATCH, &path, Some(json!({"colour": 1}))).await;
        assert_error(status, &body, 400, "invalid_body");
    }
    for id in ids("out") {
        let path = format!("/api/v1/outputs/{id}");
        for method in [Method::GET, Method::DELETE] {
            let (status, body) = call(&app, method, &path, None).await;
            assert_error(status, &body, 404, "output_not_found");
        }
        let (status, body) = call(&app, Method::PATCH, &path, Some(json!({"name": "y"}))).await;
        assert_error(status, &body, 404, "output_not_found");
        let connect = json!({"input_id": input["id"], "output_id": id});
        let (status, body) = call(&app, Method::POST, "/api/v1/connections", Some(connect)).await;
        assert_error(status, &body, 400, "unknown_output");
        assert_eq!(
            body["error"]["message"],
            format!("no output with id {id:?}"),
            "{body}"
        );
    }
    for id in ids("inp") {
        let connect = json!({"input_id": id, "output_id": output["id"]});
        let (status, body) = call(&app, Method::POST, "/api/v1/connections", Some(connect)).await;
        assert_error(status, &body, 400, "unknown_input");
        assert_eq!(body["error"]["message"], format!("no input with id {id:?}"));
    }
    for id in ids("conn") {
        for (method, path) in [
            (Method::GET, format!("/api/v1/connections/{id}")),
            (Method::DELETE, format!("/api/v1/connections/{id}")),
            (Method::GET, format!("/api/v1/connections/{id}/attempts")),
            (
                Method::GET,
                format!("/api/v1/connections/{id}/dead-letters"),
            ),
            (
                Method::POST,
                format!("/api/v1/connections/{id}/dead-letters/1/replay"),
            ),
        ] {
            let (status, body) = call(&app, method, &path, None).await;
            assert_error(status, &body, 404, "connection_not_found");
        }
        let path = format!("/api/v1/connections/{id}");
        let (status, body) = call(&app, Method::PATCH, &path, Some(json!({}))).await;
        assert_error(status, &body, 404, "connection_not_found");
    }

    // A known connection given a malformed output is told the output is unknown.
    let connection = app.connect(&input, &output, json!({})).await;
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    let patch = json!({"output_id": "out_x"});
    let (status, body) = call(&app, Method::PATCH, &path, Some(patch)).await;
    assert_error(status, &body, 400, "unknown_output");
    let (status, body) = call(&app, Method::GET, "/api/v1/users/abc", None).await;
    assert_error(status, &body, 400, "invalid_mpid");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn connection_settings_are_validated() {
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    let input = app.create_input("web").await;
    let output = app.create_webhook(&receiver.url("/hook")).await;
    let connect = |settings: Value| json!({"input_id": input["id"], "output_id": output["id"], "settings": settings});

    let (status, body) = call(
        &app,
        Method::POST,
        "/api/v1/connections",
        Some(connect(json!({"send_everything": true}))),
    )
    .await;
    assert_error(status, &body, 400, "invalid_settings");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send_everything")
    );

    let exclusions = json!({"metadata_field_exclusions": ["device_info.shoe_size"]});
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/v1/connections",
        Some(connect(exclusions)),
    )
    .await;
    assert_error(status, &body, 400, "invalid_metadata_field");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("device_info.shoe_size")
            && message.contains("device_info.device")
            && message.contains("ip"),
        "{message}"
    );

    let (status, body) = call(
        &app,
        Method::POST,
        "/api/v1/connections",
        Some(json!({"input_id": "inp_x", "output_id": output["id"]})),
    )
    .await;
    assert_error(status, &body, 400, "unknown_input");
    assert_eq!(app.count("connections").await, 0);

    // Omitted keys take mParticle's defaults.
    let connection = app
        .connect(&input, &output, json!({"send_as_batch": true}))
        .await;
    let settings = &connection["settings"];
    assert_eq!(settings["status"], "active");
    assert_eq!(settings["send_as_batch"], true);
    assert_eq!(settings["send_custom_events"], true);
    assert_eq!(settings["include_user_attribute_change_events"], false);
    assert_eq!(settings["metadata_field_exclusions"], json!([]));

    let (status, body) = call(
        &app,
        Method::POST,
        "/api/v1/connections",
        Some(connect(json!({}))),
    )
    .await;
    assert_error(status, &body, 409, "connection_exists");
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    let (status, body) = call(
        &app,
        Method::PATCH,
        &path,
        Some(json!({"settings": {"status": "paused"}})),
    )
    .await;
    assert_error(status, &body, 400, "invalid_settings");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_output_in_use_cannot_be_deleted() {
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    let input = app.create_input("android").await;
    let output = app.create_webhook(&receiver.url("/hook")).await;
    let connection = app.connect(&input, &output, json!({})).await;
    let output_path = format!("/api/v1/outputs/{}", output["id"].as_str().unwrap());

    let (status, body) = call(&app, Method::DELETE, &output_path, None).await;
    assert_error(status, &body, 409, "output_in_use");
    let input_path = format!("/api/v1/inputs/{}", input["id"].as_str().unwrap());
    let (status, body) = call(&app, Method::DELETE, &input_path, None).await;
    assert_error(status, &body, 409, "input_in_use");

    let (status, patched) = call(
        &app,
        Method::PATCH,
        &output_path,
        Some(json!({"name": "renamed", "settings": {"authorization_header": "Basic abc"}})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(patched["name"], "renamed");
    assert_eq!(
        patched["settings"]["url"],
        receiver.url("/hook"),
        "a patch keeps the other settings"
    );
    assert_eq!(patched["settings"]["authorization_header"], "Basic abc");

    let conn_path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    assert_eq!(
        app.admin(Method::DELETE, &conn_path)
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        app.admin(Method::DELETE, &output_path)
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    let (status, body) = call(&app, Method::GET, &output_path, None).await;
    assert_error(status, &body, 404, "output_not_found");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn metadata_fields_are_listed_with_labels() {
    let app = spawn_app().await;
    let (status, body) = call(&app, Method::GET, "/api/v1/metadata-fields", None).await;
    assert_eq!(status, 200);
    let items = body["items"].as_array().unwrap();
    assert!(
        items
            .iter()
            .any(|f| f["path"] == "ip" && f["label"] == "IP Address")
    );
    assert!(
        items
            .iter()
            .any(|f| f["path"] == "device_info.device" && f["label"] == "Device Name")
    );
    app.stop().await.unwrap();
}

/// mParticle's Webhook defaults (name, kind, default), and Boson's own, stated here independently of the server's
/// settings model so a changed default there shows up as a failure here.
fn mparticle_defaults() -> Vec<(&'static str, &'static str, Value)> {
    let (on, off) = (json!(true), json!(false));
    vec![
        ("status", "status", json!("active")),
        ("send_as_batch", "boolean", off.clone()),
        (
            "metadata_field_exclusions",
            "metadata_exclusions",
            json!([]),
        ),
        ("send_custom_events", "boolean", on.clone()),
        ("send_lifecycle_events", "boolean", on.clone()),
        ("send_profile_change_events", "boolean", on.clone()),
        ("send_screen_views", "boolean", on.clone()),
        ("send_commerce_events", "boolean", on.clone()),
        ("include_metadata", "boolean", on.clone()),
        (
            "include_user_identity_change_events",
            "boolean",
            off.clone(),
        ),
        (
            "include_user_attribute_change_events",
            "boolean",
            off.clone(),
        ),
        ("send_crash_events", "boolean", on.clone()),
        ("send_network_performance_events", "boolean", on.clone()),
        (
            "send_push_registrations_and_receipts",
            "boolean",
            on.clone(),
        ),
        ("include_location_information", "boolean", on.clone()),
        ("include_event_batch_location", "boolean", off.clone()),
        ("send_batches_without_events", "boolean", on),
        ("send_alias_requests", "boolean", off),
        ("unique_id", "optional_text", Value::Null),
        // Boson's own delivery controls follow mParticle's settings; null keeps today's behaviour.
        ("rate_limit_per_second", "optional_count", Value::Null),
        ("auto_pause_after_hours", "optional_hours", Value::Null),
        ("ordering", "ordering", json!("none")),
        ("batch_window_secs", "count", json!(0)),
        ("max_batch_bytes", "count", json!(262_144)),
        (
            "data_filter",
            "data_filter",
            json!({"send_new_data_points": true, "rules": []}),
        ),
        (
            "forwarding_rules",
            "forwarding_rules",
            json!({"attribute": null, "require_login_identity": false, "gdpr_purposes": [],
                   "ccpa_respect_data_sale_opt_out": false, "user_sample_percent": 100}),
        ),
    ]
}

#[tokio::test]
async fn connection_settings_are_described_with_mparticle_defaults() {
    let app = spawn_app().await;
    let (status, body) = call(&app, Method::GET, "/api/v1/connection-settings", None).await;
    assert_eq!(status, 200, "{body}");
    let settings = body["settings"].as_array().expect("a settings array");
    let expected = mparticle_defaults();
    let names: Vec<&str> = settings.iter().filter_map(|s| s["name"].as_str()).collect();
    let expected_names: Vec<&str> = expected.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(
        names, expected_names,
        "every setting, once, in a stable order"
    );
    for ((name, kind, default), setting) in expected.iter().zip(settings) {
        assert_eq!(setting["kind"], *kind, "{name}: {setting}");
        assert_eq!(setting["default"], *default, "{name}: {setting}");
        for text in ["label", "help"] {
            assert!(
                setting[text].as_str().is_some_and(|t| !t.trim().is_empty()),
                "{name} has no {text}: {setting}"
            );
        }
    }
    let label_of = |name: &str| {
        settings
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["label"].clone())
    };
    assert_eq!(label_of("send_as_batch"), Some(json!("Send as Batch")));
    assert_eq!(label_of("status"), Some(json!("Connection Status")));

    // The described defaults are what a connection created without settings gets.
    let input = app.create_input("custom_feed").await;
    let receiver = Receiver::start().await;
    let output = app.create_webhook(&receiver.url("/hook")).await;
    let connection = app.connect(&input, &output, json!({})).await;
    for setting in settings {
        let name = setting["name"].as_str().unwrap();
        assert_eq!(
            connection["settings"][name], setting["default"],
            "{name}: {connection}"
        );
    }

    let no_token = app
        .client
        .get(format!("{}/api/v1/connection-settings", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 401);
    app.stop().await.unwrap();
}
