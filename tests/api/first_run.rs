//! What a person sees on a first run: the real `boson serve` says where it listens, where the
//! dashboard is and where the admin token came from; the real `boson receive` prints each
//! webhook request it gets.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::{ADMIN_TOKEN, fresh_database_url};
use crate::process::{POLL, free_port};

const WAIT: Duration = Duration::from_secs(30);

/// A child process killed when dropped, with its stdout and stderr in one file.
struct Running {
    child: Child,
    output: std::path::PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn start(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let output = dir.join(format!("{name}.out"));
        let file = std::fs::File::create(&output).expect("output file");
        let child = Command::new(env!("CARGO_BIN_EXE_boson"))
            .args(args)
            .current_dir(dir)
            .env_remove("BOSON_CONFIG")
            .env_remove("BOSON_ADMIN_TOKEN")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("output file"))
            .stderr(file)
            .spawn()
            .expect("start the boson binary");
        Self { child, output }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Waits until the output holds `needle`, then returns all of it.
    async fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            let text = self.text();
            if text.contains(needle) {
                return text;
            }
            if let Some(status) = self.child.try_wait().expect("child status") {
                panic!("exited with {status} before printing {needle:?}:\n{text}");
            }
            tokio::time::sleep(POLL).await;
        }
        panic!("{needle:?} not printed within {WAIT:?}:\n{}", self.text());
    }
}

/// Starts `boson serve` on `database_url`, waits for its start-up lines, stops it.
async fn start_up_output(dir: &Path, database_url: &str, token: Option<&str>) -> String {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut env = vec![
        ("BOSON_LISTEN", listen.as_str()),
        ("BOSON_DATABASE_URL", database_url),
    ];
    if let Some(token) = token {
        env.push(("BOSON_ADMIN_TOKEN", token));
    }
    let mut boson = Running::start(dir, "serve", &["serve"], &env);
    boson.wait_for(&format!("http://{listen}/ (sign in")).await;
    boson.text().replace(&listen, "ADDR")
}

#[tokio::test]
async fn start_up_says_where_to_go_and_where_the_admin_token_came_from() {
    let dir = tempfile::tempdir().expect("temp dir");
    let database_url = fresh_database_url(dir.path()).await;

    let first = start_up_output(dir.path(), &database_url, None).await;
    assert!(
        first.contains("Boson is listening on http://ADDR"),
        "{first}"
    );
    assert!(
        first.contains("Dashboard: http://ADDR/ (sign in with the admin token)"),
        "{first}"
    );
    assert!(first.contains("Generated admin token"), "{first}");
    assert!(first.contains("Admin token: generated now"), "{first}");
    assert!(!first.contains("address=Some"), "{first}");

    let second = start_up_output(dir.path(), &database_url, None).await;
    assert!(
        second.contains("Admin token: kept from an earlier start"),
        "{second}"
    );
    assert!(!second.contains("Generated admin token"), "{second}");

    let third = start_up_output(dir.path(), &database_url, Some(ADMIN_TOKEN)).await;
    assert!(
        third.contains("Admin token: from BOSON_ADMIN_TOKEN"),
        "{third}"
    );
    assert!(third.contains("WARN"), "{third}");
    assert!(
        third.contains("BOSON_ADMIN_TOKEN replaces the admin token generated"),
        "{third}"
    );
    crate::helpers::drop_database(&database_url).await;
}

#[tokio::test]
async fn receive_prints_each_request_and_answers_200() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port().to_string();
    let mut receiver = Running::start(dir.path(), "receive", &["receive", "--port", &port], &[]);
    let base = format!("http://127.0.0.1:{port}");
    receiver.wait_for(&base).await;
    let response = crate::helpers::http_client()
        .post(format!("{base}/hook"))
        .header("content-type", "application/json")
        .body(r#"{"events": [{"data": {"event_name": "Signed Up"}}]}"#)
        .send()
        .await
        .expect("POST to the receiver");
    assert_eq!(response.status(), 200);
    let text = receiver.wait_for("Signed Up").await;
    let line = text
        .lines()
        .find(|l| l.contains("Signed Up"))
        .expect("the printed line");
    assert_eq!(
        line,
        r#"POST /hook {"events":[{"data":{"event_name":"Signed Up"}}]}"#
    );
}
