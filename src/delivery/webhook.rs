//! The webhook client: one pooled `reqwest::Client`, no redirects, per-request timeouts, and a
//! resolver that refuses loopback, private and link-local destinations unless they are allowed.
//! The same address check guards URLs when an output is saved.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::retry::parse_retry_after;
use crate::model::settings::WebhookSettings;

/// A stable id per webhook request (job and position in the batch), so receivers can
/// de-duplicate a request that is delivered twice after a crash or a lost acknowledgement.
pub(crate) const DELIVERY_ID_HEADER: HeaderName = HeaderName::from_static("x-boson-delivery-id");
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");
const BOSON_USER_AGENT: HeaderValue =
    HeaderValue::from_static(concat!("Boson/", env!("CARGO_PKG_VERSION")));

/// How a webhook request ended when no HTTP answer came back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// The destination is not allowed or not a valid URL; retrying cannot help.
    #[error("{0}")]
    Refused(String),
    /// Connect, timeout or protocol failure; worth retrying.
    #[error("{0}")]
    Transport(String),
}

/// The part of a webhook answer delivery cares about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<Duration>,
}

/// The webhook client, cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub(crate) struct WebhookClient {
    client: reqwest::Client,
    allow_private: bool,
}

impl WebhookClient {
    pub(crate) fn new(allow_private: bool, timeout: Duration) -> anyhow::Result<Self> {
        // Process-wide and never changed afterwards; a second install (tests run several apps
        // in one process) is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .tcp_nodelay(true)
            .pool_max_idle_per_host(256)
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .build()?;
        Ok(Self {
            client,
            allow_private,
        })
    }

    /// POSTs one JSON body to the output's URL.
    pub(crate) async fn post(
        &self,
        output: &WebhookSettings,
        delivery_id: &str,
        body: Vec<u8>,
    ) -> Result<Answer, SendError> {
        let url =
            Url::parse(&output.url).map_err(|e| SendError::Refused(format!("invalid URL: {e}")))?;
        // IP literals bypass the resolver, so they are checked here.
        if let Some(ip) = literal_ip(&url)
            && !self.allow_private
            && is_private(ip)
        {
            return Err(SendError::Refused(format!(
                "destination {ip} is a private address"
            )));
        }
        let mut request = self
            .client
            .post(url)
            .header(CONTENT_TYPE, APPLICATION_JSON)
            .header(USER_AGENT, BOSON_USER_AGENT)
            .header(DELIVERY_ID_HEADER, delivery_id)
            .body(body);
        if let Some(auth) = output
            .authorization_header
            .as_deref()
            .filter(|a| !a.is_empty())
        {
            request = request.header(AUTHORIZATION, auth);
        }
        let mut response = request.send().await.map_err(|e| {
            if refused_by_resolver(&e) {
                SendError::Refused(error_chain(&e))
            } else {
                SendError::Transport(error_chain(&e))
            }
        })?;
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let status = response.status().as_u16();
        // Read (a bounded part of) the body so the connection can go back to the pool.
        let mut drained = 0;
        while drained < MAX_DRAINED_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => drained += chunk.len(),
                _ => break,
            }
        }
        Ok(Answer {
            status,
            retry_after,
        })
    }
}

/// Most of a webhook's answer body read before the connection is given up instead of reused.
const MAX_DRAINED_BYTES: usize = 64 * 1024;

/// Whether the request failed because the name resolves only to refused addresses.
fn refused_by_resolver(error: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.downcast_ref::<PrivateDestination>().is_some() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The resolver's refusal, typed so `post` can tell it from a network failure.
#[derive(Debug, thiserror::Error)]
#[error("{0} resolves only to loopback, private or link-local addresses")]
struct PrivateDestination(String);

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// Checks a webhook URL when an output is saved: http(s), a host, and (unless allowed) no
/// private destination. A name that does not resolve now is accepted; it is checked again on
/// every request.
pub(crate) async fn check_destination(url: &str, allow_private: bool) -> Result<(), String> {
    let parsed = Url::parse(url).map_err(|e| format!("`url` is not a valid URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("`url` must start with http:// or https://".into());
    }
    let host = parsed.host_str().ok_or("`url` must name a host")?;
    if allow_private {
        return Ok(());
    }
    let addresses: Vec<IpAddr> = match literal_ip(&parsed) {
        Some(ip) => vec![ip],
        None => tokio::net::lookup_host((host, 0))
            .await
            .map(|addrs| addrs.map(|a| a.ip()).collect())
            .unwrap_or_default(),
    };
    match addresses.into_iter().find(|ip| is_private(*ip)) {
        Some(ip) => Err(format!(
            "`url` resolves to {ip}, a loopback, private or link-local address; \
             set BOSON_ALLOW_PRIVATE_DESTINATIONS=true to allow it"
        )),
        None => Ok(()),
    }
}

fn literal_ip(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

/// Loopback, private, link-local, unspecified, broadcast and carrier-grade NAT addresses.
pub(crate) fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
        }
    }
}

/// Resolves with the system resolver and drops private addresses unless allowed.
#[derive(Debug)]
struct GuardedResolver {
    allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|a| allow_private || !is_private(a.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(
                    Box::new(PrivateDestination(host)) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            let addrs: Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_ranges_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(!is_private(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn saving_a_private_destination_is_refused_unless_allowed() {
        assert!(
            check_destination("http://127.0.0.1:9/x", false)
                .await
                .is_err()
        );
        assert!(
            check_destination("http://localhost:9/x", false)
                .await
                .is_err()
        );
        assert!(
            check_destination("http://127.0.0.1:9/x", true)
                .await
                .is_ok()
        );
        assert!(check_destination("ftp://example.com/", true).await.is_err());
        assert!(check_destination("not a url", true).await.is_err());
    }

    #[tokio::test]
    async fn sending_to_a_private_literal_is_refused() {
        let client = WebhookClient::new(false, Duration::from_secs(1)).unwrap();
        let output = WebhookSettings {
            url: "http://127.0.0.1:9/".into(),
            authorization_header: None,
            include_mp_deviceid: false,
        };
        let result = client.post(&output, "d1", b"{}".to_vec()).await;
        assert!(matches!(result, Err(SendError::Refused(_))), "{result:?}");
    }
}
