//! An output's `custom_headers`: header names and values sent with every request, checked when
//! saved so that what is stored can always be sent, and cannot override what Boson sends itself.

use std::collections::BTreeMap;

/// Most custom headers per output.
pub(crate) const MAX_CUSTOM_HEADERS: usize = 32;
/// Longest custom header value; common servers refuse header fields past 8 KiB.
pub(crate) const MAX_CUSTOM_HEADER_VALUE_BYTES: usize = 4096;
/// Most bytes of names and values together: servers commonly refuse request heads past 8 to
/// 16 KiB, and Boson's own headers need room too.
pub(crate) const MAX_CUSTOM_HEADERS_BYTES: usize = 8192;

/// Headers a custom header must not set, with why: Boson sets them itself, or they frame the
/// request (a wrong length or encoding would corrupt it, or smuggle a second request).
const RESERVED: &[(&str, &str)] = &[
    ("accept", "Boson sets it"),
    (
        "authorization",
        "use the output's `authorization_header` setting",
    ),
    ("connection", "it controls the connection"),
    ("content-encoding", "Boson sends the body unencoded"),
    ("content-length", "it frames the body"),
    ("content-type", "Boson sends application/json"),
    ("expect", "it controls the connection"),
    ("host", "it is the URL's host"),
    ("keep-alive", "it controls the connection"),
    ("proxy-connection", "it controls the connection"),
    ("te", "it controls the connection"),
    ("trailer", "it frames the body"),
    ("transfer-encoding", "it frames the body"),
    ("upgrade", "it controls the connection"),
    ("user-agent", "Boson sets it"),
];
/// Name prefixes a custom header must not use: the Standard Webhooks headers Boson signs with,
/// and Boson's own (`x-boson-delivery-id`, and any it adds later).
const RESERVED_PREFIXES: &[(&str, &str)] = &[
    (
        "webhook-",
        "Boson sets the Standard Webhooks headers when the output signs",
    ),
    ("x-boson-", "Boson sets its own headers"),
];

/// Checks that `custom_headers`, as sent, is an object of strings, naming what is not: a
/// failed deserialisation would not say which header was at fault.
pub(crate) fn check_custom_headers_shape(value: &serde_json::Value) -> Result<(), String> {
    let Some(headers) = value.as_object() else {
        return Err("`custom_headers` must be an object of header names to values".into());
    };
    match headers.iter().find(|(_, value)| !value.is_string()) {
        Some((name, _)) => Err(format!("`custom_headers.{name}` must be a string")),
        None => Ok(()),
    }
}

/// Checks every custom header, naming the first at fault as `custom_headers.<name>`.
pub(crate) fn check_custom_headers(headers: &BTreeMap<String, String>) -> Result<(), String> {
    if headers.len() > MAX_CUSTOM_HEADERS {
        return Err(format!(
            "`custom_headers` has {} headers; at most {MAX_CUSTOM_HEADERS} are allowed",
            headers.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0;
    for (name, value) in headers {
        check_one(name, value).map_err(|problem| format!("`custom_headers.{name}` {problem}"))?;
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(format!(
                "`custom_headers.{name}` names a header twice (header names are case-insensitive)"
            ));
        }
        bytes += name.len() + value.len();
    }
    if bytes > MAX_CUSTOM_HEADERS_BYTES {
        return Err(format!(
            "`custom_headers` take {bytes} bytes (names and values); at most {MAX_CUSTOM_HEADERS_BYTES} are allowed"
        ));
    }
    Ok(())
}

/// Why one header cannot be sent, if it cannot.
fn check_one(name: &str, value: &str) -> Result<(), String> {
    if name.is_empty() || !name.bytes().all(is_token_byte) {
        return Err(
            "is not a valid header name: use letters, digits and !#$%&'*+-.^_`|~ only".into(),
        );
    }
    let lower = name.to_ascii_lowercase();
    let reserved = RESERVED
        .iter()
        .find(|(reserved, _)| *reserved == lower)
        .or_else(|| {
            RESERVED_PREFIXES
                .iter()
                .find(|(prefix, _)| lower.starts_with(prefix))
        });
    if let Some((_, why)) = reserved {
        return Err(format!("is reserved: {why}"));
    }
    if value.len() > MAX_CUSTOM_HEADER_VALUE_BYTES {
        return Err(format!(
            "is longer than {MAX_CUSTOM_HEADER_VALUE_BYTES} bytes"
        ));
    }
    header_value_problem(value).map_or(Ok(()), |problem| Err(problem.into()))
}

/// A byte of an HTTP token (RFC 9110 §5.6.2), what a header name is made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Why a header value cannot be sent as configured, if it cannot: printable ASCII only. CR and
/// LF would end the header (header injection, or a request the client refuses to build), other
/// control characters are refused by HTTP libraries and servers, and non-ASCII bytes are read
/// differently by each.
pub(crate) fn header_value_problem(value: &str) -> Option<&'static str> {
    if value.contains(['\r', '\n']) {
        return Some("must not contain a line break (CR or LF)");
    }
    if !value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Some("must be printable ASCII: no control or non-ASCII characters");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn ordinary_headers_pass() {
        let ok = headers(&[
            ("X-Api-Key", "abc123"),
            ("x-tenant", "shop 1"),
            ("Cookie", "a=b; c=d"),
            ("X-Empty", ""),
            ("!#$%&'*+-.^_`|~09", "v"),
        ]);
        assert_eq!(check_custom_headers(&ok), Ok(()));
    }

    #[test]
    fn each_refusal_names_the_header_at_fault() {
        let refused = [
            ("bad name", "v", "`custom_headers.bad name`"),
            ("", "v", "`custom_headers.`"),
            ("X-Ü", "v", "`custom_headers.X-Ü`"),
            ("X-A", "a\r\nInjected: 1", "`custom_headers.X-A`"),
            ("X-A", "tab\there", "`custom_headers.X-A`"),
            ("X-A", "café", "`custom_headers.X-A`"),
            ("X-A", &"v".repeat(4097), "`custom_headers.X-A`"),
        ];
        for (name, value, field) in refused {
            let error = check_custom_headers(&headers(&[(name, value)])).expect_err(name);
            assert!(error.contains(field), "{name:?}: {error}");
        }
    }

    #[test]
    fn headers_boson_sets_itself_are_reserved() {
        for name in [
            "Content-Type",
            "content-length",
            "Host",
            "Transfer-Encoding",
            "Connection",
            "Authorization",
            "User-Agent",
            "Accept",
            "webhook-id",
            "Webhook-Signature",
            "webhook-anything",
            "X-Boson-Delivery-Id",
            "x-boson-future",
        ] {
            let error = check_custom_headers(&headers(&[(name, "v")])).expect_err(name);
            assert!(
                error.contains(&format!("`custom_headers.{name}`")) && error.contains("reserved"),
                "{name}: {error}"
            );
        }
    }

    #[test]
    fn webhook_settings_name_the_new_field_they_refuse() {
        use crate::model::settings::WebhookSettings;
        use serde_json::json;
        let refused = [
            (
                json!({"custom_headers": {"Host": "x"}}),
                "`custom_headers.Host`",
            ),
            (
                json!({"custom_headers": {"X-A": 1}}),
                "`custom_headers.X-A`",
            ),
            (json!({"custom_headers": ["X-A"]}), "`custom_headers`"),
            (
                json!({"signing_rotation_overlap_secs": -1}),
                "`signing_rotation_overlap_secs`",
            ),
            (
                json!({"signing_rotation_overlap_secs": 2_592_001}),
                "`signing_rotation_overlap_secs`",
            ),
            (
                json!({"signing_rotation_overlap_secs": "1d"}),
                "`signing_rotation_overlap_secs`",
            ),
        ];
        for (mut settings, field) in refused {
            settings["url"] = json!("http://e.com");
            let error = WebhookSettings::parse(settings.clone()).expect_err("refused");
            assert!(error.to_string().contains(field), "{settings}: {error}");
        }
        let ok = json!({"url": "http://e.com", "custom_headers": {"X-A": "1"},
                        "signing_rotation_overlap_secs": 0});
        assert!(WebhookSettings::parse(ok).is_ok());
    }

    #[test]
    fn count_size_and_case_duplicates_are_capped() {
        let many: BTreeMap<String, String> = (0..=MAX_CUSTOM_HEADERS)
            .map(|i| (format!("X-H{i}"), "v".to_owned()))
            .collect();
        let error = check_custom_headers(&many).expect_err("too many");
        assert!(
            error.contains("`custom_headers`") && error.contains("32"),
            "{error}"
        );

        let big: BTreeMap<String, String> = (0..3)
            .map(|i| (format!("X-H{i}"), "v".repeat(3000)))
            .collect();
        let error = check_custom_headers(&big).expect_err("too big");
        assert!(
            error.contains("`custom_headers`") && error.contains("8192"),
            "{error}"
        );

        let twice = headers(&[("X-A", "1"), ("x-a", "2")]);
        let error = check_custom_headers(&twice).expect_err("twice");
        assert!(error.contains("x-a") && error.contains("twice"), "{error}");
    }
}
