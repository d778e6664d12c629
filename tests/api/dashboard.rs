//! The dashboard: sign-in sessions and CSRF over HTTP, and the quickstart walked in headless
//! Chromium (sign in, create an input and a webhook output, Connect, Add Connection, see events
//! at a real receiver, switch the connection to inactive and see the next event filtered).
//! Screenshots of each page go to `target/screenshots/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, Receiver, TestApp, batch_of, http_client, spawn_app};

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

pub async fn walk(phase: &str, base: &str, target: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/dashboard.mjs");
    let args = [
        phase.to_owned(),
        base.to_owned(),
        ADMIN_TOKEN.to_owned(),
        target.to_owned(),
        screenshots().display().to_string(),
    ];
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg(script)
            .args(args)
            .output()
    })
    .await
    .unwrap()
    .expect("run node");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "dashboard {phase} failed (see target/screenshots/zz-failure.png): {stderr}"
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("dashboard output: {e}\n{stderr}"))
}

#[tokio::test]
async fn the_quickstart_works_in_the_dashboard() {
    if !crate::web_sdk::browser_suite_runs("dashboard") {
        return;
    }
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let created = walk("setup", &app.base, &receiver.url("/hook")).await;
    let input = json!({"api_key": created["api_key"], "api_secret": created["api_secret"]});
    let credentials = format!(
        "{}:{}",
        input["api_key"].as_str().unwrap(),
        input["api_secret"].as_str().unwrap()
    );

    // The page sends an event while watching the Live Stream, which shows it forwarded.
    let live = walk("live", &app.base, &format!("{credentials}:forwarded")).await;
    assert!(
        live["detail"].as_str().unwrap().contains("Live Test"),
        "{live}"
    );
    let got = receiver.next().await;
    assert_eq!(got.headers["authorization"], "Bearer dashboard-test");
    assert_eq!(got.events()[0]["data"]["event_name"], "Live Test");

    assert_eq!(
        app.post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );
    let got = receiver.next().await;
    assert!(
        got.body.get("ip").is_none(),
        "the IP Address exclusion chosen in the form applies"
    );

    walk(
        "deactivate",
        &app.base,
        created["connection_id"].as_str().unwrap(),
    )
    .await;
    let live = walk("live", &app.base, &format!("{credentials}:filtered")).await;
    assert!(
        live["detail"].as_str().unwrap().contains("status"),
        "filtered by the status setting: {live}"
    );
    assert!(
        receiver
            .next_within(Duration::from_millis(800))
            .await
            .is_none(),
        "an inactive connection forwards nothing"
    );
    app.stop().await.unwrap();
}

async fn login(app: &TestApp, client: &reqwest::Client, token: &str) -> reqwest::Response {
    client
        .post(format!("{}/dashboard/login", app.base))
        .json(&json!({"token": token}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn sessions_need_the_token_and_their_csrf_header() {
    let app = spawn_app().await;
    let _ = http_client();
    let browser = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    assert_eq!(login(&app, &browser, "wrong").await.status(), 401);
    let signed_in = login(&app, &browser, ADMIN_TOKEN).await;
    assert_eq!(signed_in.status(), 200);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let csrf = signed_in.json::<Value>().await.unwrap()["csrf"]
        .as_str()
        .unwrap()
        .to_owned();

    let list = browser
        .get(format!("{}/api/v1/inputs", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200, "reads need only the session");
    let body = json!({"name": "x", "platform": "web"});
    let forged = browser
        .post(format!("{}/api/v1/inputs", app.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        forged.status(),
        401,
        "a write without the CSRF header is refused"
    );
    let wrong = browser
        .post(format!("{}/api/v1/inputs", app.base))
        .header("x-boson-csrf", "guess")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let real = browser
        .post(format!("{}/api/v1/inputs", app.base))
        .header("x-boson-csrf", &csrf)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(real.status(), 201);

    let out = browser
        .post(format!("{}/dashboard/logout", app.base))
        .header("x-boson-csrf", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    assert_eq!(
        browser
            .get(format!("{}/api/v1/inputs", app.base))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    let page = app
        .client
        .get(format!("{}/", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    app.stop().await.unwrap();
}

#[tokio::test]
async fn sign_in_takes_the_token_exactly_as_configured() {
    let app = spawn_app().await;
    // Blank and padded values once signed in because the input was trimmed; a secret is
    // compared as given.
    for token in [
        "",
        "   ",
        &format!(" {ADMIN_TOKEN}"),
        &format!("{ADMIN_TOKEN}\n"),
    ] {
        let refused = login(&app, &app.client, token).await;
        assert_eq!(refused.status(), 401, "{token:?}");
        assert!(
            refused.headers().get("set-cookie").is_none(),
            "{token:?} got a session"
        );
    }
    assert_eq!(login(&app, &app.client, ADMIN_TOKEN).await.status(), 200);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn dashboard_and_admin_answers_carry_the_security_headers() {
    let app = spawn_app().await;
    let (cookie, _) = sign_in(&app).await;
    let answers = [
        app.client
            .get(format!("{}/", app.base))
            .send()
            .await
            .unwrap(),
        app.client
            .get(format!("{}/assets/app.js", app.base))
            .send()
            .await
            .unwrap(),
        with_session(&app, reqwest::Method::GET, "/api/v1/inputs", &cookie, None)
            .send()
            .await
            .unwrap(),
        // Refusals too: a page that fails must not be framable either.
        app.client
            .get(format!("{}/api/v1/inputs", app.base))
            .send()
            .await
            .unwrap(),
        login(&app, &app.client, "wrong-token-wrong").await,
    ];
    for answer in answers {
        let url = answer.url().path().to_owned();
        let headers = answer.headers();
        let csp = headers["content-security-policy"].to_str().unwrap();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{url}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{url}: {csp}");
        assert_eq!(headers["x-frame-options"], "DENY", "{url}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{url}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{url}");
    }
    app.stop().await.unwrap();
}

/// A client whose requests come from `ip` (any address of 127.0.0.0/8 reaches the server).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

#[tokio::test]
async fn wrong_sign_ins_are_slowed_down_per_client() {
    let app = spawn_app().await;
    let guesser = client_from("127.0.0.2");
    // A few typos cost nothing.
    for _ in 0..5 {
        assert_eq!(
            login(&app, &guesser, "wrong-token-wrong").await.status(),
            401
        );
    }
    // Then each further failure makes the client wait, twice as long each time.
    let mut waits = Vec::new();
    for _ in 0..2 {
        let wrong = login(&app, &guesser, "wrong-token-wrong").await;
        assert_eq!(wrong.status(), 401);
        let throttled = login(&app, &guesser, ADMIN_TOKEN).await;
        assert_eq!(throttled.status(), 429, "even the right token waits");
        let wait: u64 = throttled.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let body: Value = throttled.json::<Value>().await.unwrap();
        assert_eq!(body["error"]["code"], "too_many_attempts", "{body}");
        waits.push(wait);
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
    assert!(waits[0] >= 1 && waits[1] > waits[0], "{waits:?}");

    // Another client is not slowed by this one's guesses.
    assert_eq!(
        login(&app, &client_from("127.0.0.3"), ADMIN_TOKEN)
            .await
            .status(),
        200
    );
    // After the wait, the right token signs in, and the slate is clean.
    assert_eq!(login(&app, &guesser, ADMIN_TOKEN).await.status(), 200);
    assert_eq!(
        login(&app, &guesser, "wrong-token-wrong").await.status(),
        401
    );
    assert_eq!(login(&app, &guesser, ADMIN_TOKEN).await.status(), 200);
    app.stop().await.unwrap();
}

/// Signs in on `app` and returns the session's `Cookie` header value and its CSRF token.
async fn sign_in(app: &TestApp) -> (String, String) {
    let signed_in = login(app, &app.client, ADMIN_TOKEN).await;
    assert_eq!(signed_in.status(), 200);
    let set_cookie = signed_in.headers()["set-cookie"].to_str().unwrap();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let csrf = signed_in.json::<Value>().await.unwrap()["csrf"]
        .as_str()
        .unwrap()
        .to_owned();
    (cookie, csrf)
}

/// A request to `app` carrying the session cookie (and the CSRF header, when given).
fn with_session(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    cookie: &str,
    csrf: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = app
        .client
        .request(method, format!("{}{path}", app.base))
        .header("cookie", cookie);
    match csrf {
        Some(csrf) => request.header("x-boson-csrf", csrf),
        None => request,
    }
}

#[tokio::test]
async fn a_session_is_valid_on_every_node_and_ends_on_every_node() {
    // Two nodes on one database, as behind a load balancer: on SQLite both open the same file.
    let node_1 = spawn_app().await;
    let node_2 = node_1.second_node(|_| {}).await;
    let (cookie, csrf) = sign_in(&node_1).await;

    let read = with_session(
        &node_2,
        reqwest::Method::GET,
        "/api/v1/inputs",
        &cookie,
        None,
    );
    assert_eq!(
        read.send().await.unwrap().status(),
        200,
        "node 2 knows the session"
    );
    let session = with_session(
        &node_2,
        reqwest::Method::GET,
        "/dashboard/session",
        &cookie,
        None,
    )
    .send()
    .await
    .unwrap()
    .json::<Value>()
    .await
    .unwrap();
    assert_eq!(session, json!({"signed_in": true, "csrf": csrf}));
    let create = with_session(
        &node_2,
        reqwest::Method::POST,
        "/api/v1/inputs",
        &cookie,
        Some(&csrf),
    )
    .json(&json!({"name": "from node 2", "platform": "web"}));
    assert_eq!(create.send().await.unwrap().status(), 201);

    let out = with_session(
        &node_2,
        reqwest::Method::POST,
        "/dashboard/logout",
        &cookie,
        Some(&csrf),
    );
    assert_eq!(out.send().await.unwrap().status(), 204);
    for node in [&node_1, &node_2] {
        let after = with_session(node, reqwest::Method::GET, "/api/v1/inputs", &cookie, None);
        assert_eq!(
            after.send().await.unwrap().status(),
            401,
            "signed out everywhere"
        );
    }
    node_2.stop().await.unwrap();
    node_1.stop().await.unwrap();
}

#[tokio::test]
async fn a_live_stream_ends_when_its_session_is_signed_out_on_another_node() {
    let node_1 = spawn_app().await;
    let node_2 = node_1.second_node(|_| {}).await;
    let input = node_1.create_input("custom_feed").await;
    let (cookie, csrf) = sign_in(&node_1).await;
    let mut stream = with_session(
        &node_1,
        reqwest::Method::GET,
        "/api/v1/live-stream",
        &cookie,
        None,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(stream.status(), 200);
    let out = with_session(
        &node_2,
        reqwest::Method::POST,
        "/dashboard/logout",
        &cookie,
        Some(&csrf),
    );
    assert_eq!(out.send().await.unwrap().status(), 204);

    // The stream reads its session again as items come (at most once a second): keep events
    // coming until it ends.
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let posted = node_1
                .post_events(&input, batch_of(&["custom_event"]))
                .await;
            assert_eq!(posted.status(), 202);
            let next = tokio::time::timeout(Duration::from_millis(200), stream.chunk()).await;
            if let Ok(chunk) = next
                && chunk.map_or(true, |c| c.is_none())
            {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the live stream outlived its session");
    node_2.stop().await.unwrap();
    node_1.stop().await.unwrap();
}

#[tokio::test]
async fn sessions_are_stored_hashed_and_refused_once_expired() {
    let app = spawn_app().await;
    let (cookie, _) = sign_in(&app).await;
    let id = cookie.trim_start_matches("boson_session=");
    assert_eq!(app.count("sessions").await, 1);
    let raw = app
        .query_i64(&format!(
            "SELECT COUNT(*) FROM sessions WHERE id_hash LIKE '%{id}%' OR csrf LIKE '%{id}%'"
        ))
        .await;
    assert_eq!(raw, 0, "the session id itself is never stored");

    app.execute("UPDATE sessions SET expires_at = 1").await;
    let read = with_session(&app, reqwest::Method::GET, "/api/v1/inputs", &cookie, None);
    assert_eq!(
        read.send().await.unwrap().status(),
        401,
        "an expired session is refused"
    );
    // The next sign-in prunes the expired one.
    sign_in(&app).await;
    assert_eq!(app.count("sessions").await, 1);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_session_check_the_database_cannot_answer_grants_nothing() {
    let app = spawn_app().await;
    let (cookie, csrf) = sign_in(&app).await;
    // The sessions table gone stands for a database that cannot answer the check.
    app.execute("DROP TABLE sessions").await;
    let read = with_session(&app, reqwest::Method::GET, "/api/v1/inputs", &cookie, None);
    assert_eq!(read.send().await.unwrap().status(), 503);
    let write = with_session(
        &app,
        reqwest::Method::POST,
        "/api/v1/inputs",
        &cookie,
        Some(&csrf),
    )
    .json(&json!({"name": "x", "platform": "web"}));
    assert_eq!(write.send().await.unwrap().status(), 503);
    let session = with_session(
        &app,
        reqwest::Method::GET,
        "/dashboard/session",
        &cookie,
        None,
    );
    assert_eq!(session.send().await.unwrap().status(), 503);
    // The admin token needs no database to be checked.
    let by_token = app
        .admin(reqwest::Method::GET, "/api/v1/inputs")
        .send()
        .await
        .unwrap();
    assert_eq!(by_token.status(), 200);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn dashboard_modules_are_served_from_folders_as_javascript() {
    let app = spawn_app().await;
    let get = |path: &str| app.client.get(format!("{}/assets/{path}", app.base)).send();
    let index = app
        .client
        .get(format!("{}/", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        index.contains(r#"<script type="module" src="/assets/app.js">"#),
        "{index}"
    );
    for path in ["app.js", "lib/api.js", "pages/connect.js"] {
        let response = get(path).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "text/javascript",
            "{path}: browsers run modules only with a JavaScript type"
        );
    }
    // Encoded slashes reach the handler as `../`, which could step out of the folder on disk.
    for path in ["..%2FCargo.toml", "lib%2F..%2F..%2FCargo.toml", "nope.js"] {
        assert_eq!(get(path).await.unwrap().status(), 404, "{path}");
    }
    app.stop().await.unwrap();
}

/// After traffic, the Overview and the connection's page draw charts whose points add up to the
/// events received and forwarded (at 1440 and 420 px; screenshots 20–23).
#[tokio::test]
async fn charts_are_drawn_with_real_points_after_traffic() {
    if !crate::web_sdk::browser_suite_runs("dashboard_charts") {
        return;
    }
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    for types in [
        &["custom_event", "screen_view", "custom_event"][..],
        &["custom_event"],
    ] {
        assert_eq!(app.post_events(&input, batch_of(types)).await.status(), 202);
        receiver.next().await;
    }
    // The figures are flushed every few seconds: wait until both counts are stored.
    crate::helpers::wait_for(|| async {
        let m = app.read("/api/v1/metrics").await;
        let total = |series: &str| -> i64 {
            m["totals"][series]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .sum()
        };
        total("received") == 4 && total("forwarded") == 4
    })
    .await;
    let id = connection["id"].as_str().unwrap();
    let drawn = walk("charts", &app.base, &format!("{id}:4:4")).await;
    assert!(drawn["points"].as_i64().unwrap() > 0, "{drawn}");
    app.stop().await.unwrap();
}
