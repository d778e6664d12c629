//! Configuring Boson through its admin API: one input, one webhook output
//! pointing at our receiver, and an active connection between them; for the
//! propagation scenario, a second connection whose status the run toggles; for the
//! isolation and recovery scenarios, one input with a connection to each of several receivers.

use anyhow::{Context as _, Result, ensure};
use serde::Deserialize;
use serde_json::{Value, json};

/// Credentials the sender uses for HTTP Basic auth on `/v2/events`.
#[derive(Debug, Clone)]
pub(crate) struct InputCredentials {
    pub(crate) api_key: String,
    pub(crate) api_secret: String,
}

#[derive(Debug, Deserialize)]
struct CreatedInput {
    id: Value,
    api_key: String,
    api_secret: String,
}

#[derive(Debug, Deserialize)]
struct Created {
    id: Value,
}

/// How the throughput run's connection and output are set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    pub(crate) send_as_batch: bool,
    /// The output signs its requests.
    pub(crate) sign: bool,
    /// The connection has the Data Filter and forwarding rules of [`rules_settings`].
    pub(crate) rules: bool,
    /// The connection keeps each user's batches in order.
    pub(crate) per_user: bool,
    /// The connection's `batch_window_secs` (0: none).
    pub(crate) batch_window_secs: u32,
}

/// Creates the input → webhook output → connection pipeline as `options` say and returns the
/// input's credentials; without a `webhook_url` (`--ingest-only`), the input alone.
pub(crate) async fn setup_pipeline(
    http: &reqwest::Client,
    base_url: &str,
    admin_token: &str,
    webhook_url: Option<&str>,
    options: Options,
) -> Result<InputCredentials> {
    let admin = Admin {
        http,
        base_url,
        admin_token,
    };
    let (credentials, input_id) = admin.input().await?;
    let Some(webhook_url) = webhook_url else {
        return Ok(credentials);
    };
    let mut settings = json!({ "status": "active", "send_as_batch": options.send_as_batch });
    if options.rules {
        settings = rules_settings(settings);
    }
    if options.per_user {
        settings["ordering"] = json!("per_user");
    }
    if options.batch_window_secs > 0 {
        settings["batch_window_secs"] = json!(options.batch_window_secs);
    }
    admin
        .connect_with(&input_id, webhook_url, settings, "receiver")
        .await?;
    if options.sign {
        admin.sign_every_output().await?;
    }
    Ok(credentials)
}

/// `settings` plus a Data Filter of 50 rules and every forwarding rule, none of which drops
/// what the load sends (custom events named `load_test` with `page` attributes, a
/// `customer_id`, and, with `--rules`, consent to `marketing` and no CCPA opt-out), so the run
/// delivers everything and measures the rules' cost alone.
fn rules_settings(mut settings: Value) -> Value {
    let mut rules: Vec<Value> = (0..40)
        .map(|i| json!({"event_type": "custom_event", "event_name": format!("unused_{i}"), "send": false}))
        .collect();
    rules.extend((0..8).map(|i| {
        json!({"event_type": "custom_event", "event_name": "load_test",
               "attribute": format!("unused_{i}"), "send": false})
    }));
    rules.push(json!({"user_attribute": "$Age", "send": false}));
    rules.push(json!({"identity_type": "email", "send": false}));
    settings["data_filter"] = json!({"send_new_data_points": true, "rules": rules});
    settings["forwarding_rules"] = json!({
        "attribute": {"scope": "event", "name": "page", "value": "/nowhere", "mode": "dont_forward"},
        "require_login_identity": true,
        "gdpr_purposes": ["marketing"],
        "ccpa_respect_data_sale_opt_out": true,
        // Below 100 some users' events would never arrive and the run could not drain.
        "user_sample_percent": 100,
    });
    settings
}

/// The propagation scenario's setup: one input connected to two receivers, `steady` (always
/// active) and `toggled`. Returns the input's credentials and the toggled connection's id.
pub(crate) async fn setup_toggled_pipeline(
    admin: &Admin<'_>,
    steady_url: &str,
    toggled_url: &str,
) -> Result<(InputCredentials, Value)> {
    let (credentials, input_id) = admin.connected_input(steady_url, true, "steady").await?;
    let toggled = admin
        .connect(&input_id, toggled_url, true, "toggled")
        .await?;
    Ok((credentials, toggled))
}

/// The isolation and recovery scenarios' setup: one input with an active connection to each of
/// `webhook_urls`, ordered per user if `per_user`. Returns the input's credentials and the
/// connections' ids, in order.
pub(crate) async fn setup_fan_out(
    admin: &Admin<'_>,
    webhook_urls: &[String],
    send_as_batch: bool,
    per_user: bool,
) -> Result<(InputCredentials, Vec<String>)> {
    let (credentials, input_id) = admin.input().await?;
    let mut settings = json!({ "status": "active", "send_as_batch": send_as_batch });
    if per_user {
        settings["ordering"] = json!("per_user");
    }
    let mut ids = Vec::with_capacity(webhook_urls.len());
    for (i, url) in webhook_urls.iter().enumerate() {
        let id = admin
            .connect_with(&input_id, url, settings.clone(), &format!("endpoint-{i}"))
            .await?;
        ids.push(id_text(&id)?);
    }
    Ok((credentials, ids))
}

fn id_text(id: &Value) -> Result<String> {
    Ok(id.as_str().context("an id is not a string")?.to_owned())
}

/// The admin API of one node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admin<'a> {
    pub(crate) http: &'a reqwest::Client,
    pub(crate) base_url: &'a str,
    pub(crate) admin_token: &'a str,
}

impl Admin<'_> {
    /// A new input with an active connection to a webhook at `webhook_url`: its credentials
    /// and its id.
    async fn connected_input(
        &self,
        webhook_url: &str,
        send_as_batch: bool,
        name: &str,
    ) -> Result<(InputCredentials, Value)> {
        let (credentials, input_id) = self.input().await?;
        self.connect(&input_id, webhook_url, send_as_batch, name)
            .await?;
        Ok((credentials, input_id))
    }

    /// A new input: its credentials and its id.
    async fn input(&self) -> Result<(InputCredentials, Value)> {
        let input: CreatedInput = self
            .create(
                "inputs",
                &json!({ "name": "load", "platform": "custom_feed" }),
            )
            .await?;
        let credentials = InputCredentials {
            api_key: input.api_key,
            api_secret: input.api_secret,
        };
        Ok((credentials, input.id))
    }

    /// A webhook output at `webhook_url` and an active connection from `input_id` to it;
    /// answers the connection's id.
    async fn connect(
        &self,
        input_id: &Value,
        webhook_url: &str,
        send_as_batch: bool,
        name: &str,
    ) -> Result<Value> {
        let settings = json!({ "status": "active", "send_as_batch": send_as_batch });
        self.connect_with(input_id, webhook_url, settings, name)
            .await
    }

    /// A webhook output at `webhook_url` and a connection from `input_id` to it with
    /// `settings`; answers the connection's id.
    async fn connect_with(
        &self,
        input_id: &Value,
        webhook_url: &str,
        settings: Value,
        name: &str,
    ) -> Result<Value> {
        let output: Created = self
            .create(
                "outputs",
                &json!({ "name": name, "kind": "webhook", "settings": { "url": webhook_url } }),
            )
            .await?;
        // The ids are passed back verbatim, whatever JSON type Boson uses for them.
        let connection: Created = self
            .create(
                "connections",
                &json!({
                    "input_id": input_id,
                    "output_id": output.id,
                    "settings": settings,
                }),
            )
            .await?;
        Ok(connection.id)
    }

    /// Saves a connection's status; answers once the node has saved it.
    pub(crate) async fn set_status(&self, connection_id: &Value, active: bool) -> Result<()> {
        let id = connection_id
            .as_str()
            .context("connection id is not a string")?;
        let url = format!("{}/api/v1/connections/{id}", self.base_url);
        let status = if active { "active" } else { "inactive" };
        let resp = self
            .http
            .patch(&url)
            .bearer_auth(self.admin_token)
            .json(&json!({ "settings": { "status": status } }))
            .send()
            .await
            .with_context(|| format!("PATCH {url}"))?;
        ensure!(
            resp.status() == reqwest::StatusCode::OK,
            "PATCH {url} answered {}",
            resp.status()
        );
        Ok(())
    }
}

impl Admin<'_> {
    /// Issues every output a signing secret (the receiver does not verify: this measures the
    /// sender's cost).
    async fn sign_every_output(&self) -> Result<()> {
        let url = format!("{}/api/v1/outputs", self.base_url);
        let outputs: Vec<Created> = self
            .http
            .get(&url)
            .bearer_auth(self.admin_token)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?
            .json()
            .await
            .with_context(|| format!("reading GET {url}"))?;
        for output in outputs {
            let id = id_text(&output.id)?;
            let _: Value = self
                .create(&format!("outputs/{id}/signing-secret"), &json!({}))
                .await?;
        }
        Ok(())
    }

    /// `POST /api/v1/<collection>` expecting 201 and a JSON body.
    async fn create<T: serde::de::DeserializeOwned>(
        &self,
        collection: &str,
        body: &Value,
    ) -> Result<T> {
        let url = format!("{}/api/v1/{collection}", self.base_url);
        let resp = self
            .http
            .post(&url)
            .bearer_auth(self.admin_token)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {url}"))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .with_context(|| format!("reading response of POST {url}"))?;
        ensure!(
            status == reqwest::StatusCode::CREATED,
            "POST {url} answered {status}, expected 201: {text}"
        );
        serde_json::from_str(&text)
            .with_context(|| format!("parsing response of POST {url}: {text}"))
    }
}
