//! An output as delivery sends to it, prepared once per saved version of its row (when the
//! catalog loads it), so a request costs neither parsing nor key setup: the settings, the custom
//! headers as ready header names and values, and the signing keys.

use http::{HeaderName, HeaderValue};

use crate::model::settings::WebhookSettings;
use crate::model::signing::{Signer, SigningKey};
use crate::store::OutputRow;

/// One output, ready to send to.
#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) settings: WebhookSettings,
    /// `settings.custom_headers`, ready to add to a request.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// Present when the output signs its requests.
    pub(crate) signer: Option<Signer>,
}

impl Output {
    /// `settings` prepared for sending, signed by `signer` if given.
    pub(crate) fn new(settings: WebhookSettings, signer: Option<Signer>) -> Result<Self, String> {
        let headers = settings
            .custom_headers
            .iter()
            .map(|(name, value)| {
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| format!("custom header name {name:?}: {e}"))?;
                let value = HeaderValue::from_str(value)
                    .map_err(|e| format!("custom header {name}: {e}"))?;
                Ok((name, value))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            settings,
            headers,
            signer,
        })
    }

    /// A stored output: its settings and, if it has a signing secret, its keys. The previous
    /// secret signs until the rotation time plus the output's overlap.
    pub(crate) fn from_row(row: &OutputRow) -> Result<Self, String> {
        let settings: WebhookSettings =
            serde_json::from_str(&row.settings).map_err(|e| format!("settings: {e}"))?;
        let signer = match &row.signing_secret {
            None => None,
            Some(secret) => {
                let current = SigningKey::from_secret(secret).map_err(|e| e.to_string())?;
                let previous = match (&row.previous_signing_secret, row.signing_rotated_at) {
                    (Some(previous), Some(rotated_at)) => {
                        let key = SigningKey::from_secret(previous).map_err(|e| e.to_string())?;
                        let overlap_ms =
                            settings.signing_rotation_overlap_secs.saturating_mul(1000);
                        Some((key, rotated_at.saturating_add(overlap_ms)))
                    }
                    _ => None,
                };
                Some(Signer::new(current, previous))
            }
        };
        Self::new(settings, signer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::OutputId;

    const ONE: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const TWO: &str = "whsec_ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoM=";

    fn row(settings: &str) -> OutputRow {
        OutputRow {
            id: OutputId::new(),
            name: "out".to_owned(),
            kind: "webhook".to_owned(),
            settings: settings.to_owned(),
            created_at: 1,
            updated_at: 1,
            signing_secret: None,
            previous_signing_secret: None,
            signing_rotated_at: None,
        }
    }

    #[test]
    fn custom_headers_are_prepared_once() {
        let output = Output::from_row(&row(
            r#"{"url":"http://x/","custom_headers":{"X-Key":"k 1"}}"#,
        ))
        .unwrap();
        assert_eq!(output.headers.len(), 1);
        assert_eq!(output.headers[0].0, "x-key");
        assert_eq!(output.headers[0].1, "k 1");
        assert!(output.signer.is_none());
    }

    #[test]
    fn the_previous_secret_signs_until_the_overlap_after_the_rotation_ends() {
        let mut rotated = row(r#"{"url":"http://x/","signing_rotation_overlap_secs":10}"#);
        rotated.signing_secret = Some(TWO.to_owned());
        rotated.previous_signing_secret = Some(ONE.to_owned());
        rotated.signing_rotated_at = Some(1_000);
        let signer = Output::from_row(&rotated).unwrap().signer.unwrap();
        let count = |now| signer.signature("1-0", "1", b"{}", now).split(' ').count();
        assert_eq!(count(10_999), 2);
        assert_eq!(count(11_000), 1);

        rotated.previous_signing_secret = None;
        let signer = Output::from_row(&rotated).unwrap().signer.unwrap();
        assert_eq!(signer.signature("1-0", "1", b"{}", 0).split(' ').count(), 1);
    }

    #[test]
    fn an_unreadable_secret_or_header_leaves_the_output_unloaded() {
        let mut broken = row(r#"{"url":"http://x/"}"#);
        broken.signing_secret = Some("not-a-secret".to_owned());
        assert!(Output::from_row(&broken).is_err());
        let header = row(r#"{"url":"http://x/","custom_headers":{"X-A":"a\nb"}}"#);
        assert!(Output::from_row(&header).is_err());
    }
}
