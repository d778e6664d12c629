//! Configuring Boson through its admin API: one input, one webhook output
//! pointing at our receiver, and an active connection between them.

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

/// Creates the input → webhook output → connection pipeline and returns the
/// input's credentials.
pub(crate) async fn setup_pipeline(
    http: &reqwest::Client,
    base_url: &str,
    admin_token: &str,
    webhook_url: &str,
    send_as_batch: bool,
) -> Result<InputCredentials> {
    let admin = Admin {
        http,
        base_url,
        admin_token,
    };

    let input: CreatedInput = admin
        .create(
            "inputs",
            &json!({ "name": "load", "platform": "custom_feed" }),
        )
        .await?;
    let output: Created = admin
        .create(
            "outputs",
            &json!({ "name": "receiver", "kind": "webhook", "settings": { "url": webhook_url } }),
        )
        .await?;
    // The ids are passed back verbatim, whatever JSON type Boson uses for them.
    let _: Created = admin
        .create(
            "connections",
            &json!({
                "input_id": input.id,
                "output_id": output.id,
                "settings": { "status": "active", "send_as_batch": send_as_batch },
            }),
        )
        .await?;

    Ok(InputCredentials {
        api_key: input.api_key,
        api_secret: input.api_secret,
    })
}

struct Admin<'a> {
    http: &'a reqwest::Client,
    base_url: &'a str,
    admin_token: &'a str,
}

impl Admin<'_> {
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
