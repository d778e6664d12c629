//! Boson terminating HTTPS itself (`BOSON_TLS_CERT`, `BOSON_TLS_KEY`), as the mobile SDKs and
//! the Web SDK's config and alias calls require.

use serde_json::json;

use crate::helpers::{batch_of, http_client, spawn_app_with};

/// A self-signed certificate for `localhost`, written as PEM files into `dir`.
pub fn certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let issued =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, issued.cert.pem()).unwrap();
    std::fs::write(&key, issued.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

#[tokio::test]
async fn boson_serves_https_when_given_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path());
    let app = spawn_app_with(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
    })
    .await;
    assert!(app.base.starts_with("https://"));
    let health = app
        .client
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let input = app.create_input("web").await;
    assert_eq!(
        app.post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );
    let identify = app
        .client
        .post(format!("{}/v1/identify", app.base))
        .header("x-mp-key", input["api_key"].as_str().unwrap())
        .json(&json!({"known_identities": {"email": "tls@example.com"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(identify.status(), 200);

    // The port speaks TLS only.
    let plain = app.base.replace("https://", "http://");
    assert!(
        http_client()
            .get(format!("{plain}/healthz"))
            .send()
            .await
            .is_err()
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_session_cookie_is_secure_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path());
    let app = spawn_app_with(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
    })
    .await;
    let signed_in = app
        .client
        .post(format!("{}/dashboard/login", app.base))
        .json(&json!({"token": crate::helpers::ADMIN_TOKEN}))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 200);
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
    app.stop().await.unwrap();
}
