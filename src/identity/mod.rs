//! IDSync: `/v1/identify`, `/v1/login`, `/v1/logout` and `/v1/{mpid}/modify` (also under the
//! `/identity` CNAME prefix), authenticated by the `x-mp-key` header. Answers carry what the
//! SDKs require (`mpid` as a decimal string, `context`, `is_ephemeral`, `is_logged_in`,
//! `matched_identities`). Login, logout and modify also put a `profile` event into the input's
//! stream, so connections with Send Profile Change Events see them.
//!
//! The key is public, so an answer discloses no more than the caller sent: `matched_identities`
//! holds only the request's own identities, never the rest of the profile. Modify needs the
//! device's binding to the user ([`binding`]), and new users are capped per input and per client
//! address ([`NewUserLimits`](crate::access::NewUserLimits)).

mod binding;

use axum::Extension;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::access::{CapReached, Client, Peer};
use crate::ingest::body::decode_body;
use crate::ingest::check_signed;
use crate::ingest::cors::{self, X_MP_KEY};
use crate::model::batch::Channel;
use crate::model::identity::names::{Kind, classify, device_rank};
use crate::model::identity::resolve::Call;
use crate::model::identity::types::IdentityType;
use crate::model::identity::{NOT_STORABLE, is_storable};
use crate::model::ids::Mpid;
use crate::model::{Platform, now_ms};
use crate::pipeline::catalog::InputEntry;
use crate::pipeline::{Document, identity};
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::identity_sql::{IdentityChange, Resolution};

/// The IDSync routes, with the same body limit as ingest (compressed or not).
pub(crate) fn router(max_body_bytes: usize) -> Router<AppState> {
    let mut router = Router::new();
    for prefix in ["", "/identity"] {
        router = router
            .route(&format!("{prefix}/v1/identify"), post(identify))
            .route(&format!("{prefix}/v1/login"), post(login))
            .route(&format!("{prefix}/v1/logout"), post(logout))
            .route(&format!("{prefix}/v1/{{mpid}}/modify"), post(modify));
    }
    router
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(cors::layer())
}

#[derive(Debug, Default, Deserialize)]
struct IdentityRequest {
    #[serde(default)]
    known_identities: Option<Map<String, Value>>,
    #[serde(default)]
    previous_mpid: Option<Value>,
    #[serde(default)]
    environment: Option<String>,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    identity_changes: Option<Vec<ChangeIn>>,
    /// What the SDK was last answered as `context`: Boson's binding of the device to its user.
    #[serde(default)]
    context: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ChangeIn {
    identity_type: String,
    old_value: Option<String>,
    new_value: Option<String>,
}

/// An IDSync failure, in the shape the SDKs log.
#[derive(Debug)]
struct IdentityError {
    status: StatusCode,
    message: String,
    /// Seconds to announce in `Retry-After`.
    retry_after: Option<u64>,
}

impl IdentityError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "Missing or unknown x-mp-key header.",
        )
    }

    fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Identity store unavailable; retry.",
        )
    }

    /// A modify without the device's binding to the user.
    fn not_bound(mpid: Mpid, refusal: binding::Refusal) -> Self {
        let why = match refusal {
            binding::Refusal::Missing => "carries no binding to it",
            binding::Refusal::OtherUser => "is bound to another user",
            binding::Refusal::Expired => "has an expired binding to it",
        };
        Self::new(
            StatusCode::FORBIDDEN,
            format!(
                "Only a device that identified or logged in as {mpid} may modify it; this request {why}."
            ),
        )
    }

    fn too_many_new_users(cap: CapReached) -> Self {
        let (whose, retry_after) = match cap {
            CapReached::Input { retry_after } => ("this input", retry_after),
            CapReached::Client { retry_after } => ("this client address", retry_after),
        };
        let seconds = retry_after.as_secs().max(1);
        Self {
            retry_after: Some(seconds),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("Too many new users for {whose}; retry in {seconds} s."),
            )
        }
    }
}

impl IntoResponse for IdentityError {
    fn into_response(self) -> Response {
        let code = if self.status == StatusCode::BAD_REQUEST {
            "BAD_REQUEST"
        } else {
            "ERROR"
        };
        let body = json!({
            "Errors": [{"code": code, "message": self.message}],
            "ErrorCode": code,
            "StatusCode": self.status.as_u16(),
        });
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

async fn identify(
    state: State<AppState>,
    peer: Option<Extension<ConnectInfo<Peer>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, client_of(peer), headers, body, Call::Identify).await
}

async fn login(
    state: State<AppState>,
    peer: Option<Extension<ConnectInfo<Peer>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, client_of(peer), headers, body, Call::Login).await
}

async fn logout(
    state: State<AppState>,
    peer: Option<Extension<ConnectInfo<Peer>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, client_of(peer), headers, body, Call::Logout).await
}

fn client_of(peer: Option<Extension<ConnectInfo<Peer>>>) -> Client {
    Client::of(peer.map(|Extension(ConnectInfo(Peer(address)))| address.ip()))
}

async fn handle(
    State(state): State<AppState>,
    client: Client,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    call: Call,
) -> Response {
    let result = match body_of(&state, body) {
        Ok(body) => resolve_call(&state, client, &headers, &body, call).await,
        Err(error) => Err(error),
    };
    match result {
        Ok(answered) => answer(&answered).into_response(),
        Err(error) => error.into_response(),
    }
}

/// A resolution with what the answer may show of it.
struct Answered {
    resolution: Resolution,
    /// The request's own user identities: the only ones the answer shows.
    asked: Vec<(String, String)>,
    /// The device's binding to the user, when it is entitled to one.
    binding: Option<String>,
}

async fn resolve_call(
    state: &AppState,
    client: Client,
    headers: &HeaderMap,
    body: &[u8],
    call: Call,
) -> Result<Answered, IdentityError> {
    let input = input_of(state, headers)?;
    let request = parse(&gunzip(state, headers, body)?)?;
    let (identities, device) = split_identities(request.known_identities.as_ref())?;
    let previous = request.previous_mpid.as_ref().and_then(Mpid::from_json);
    let cap_reached = std::sync::OnceLock::new();
    let may_create = || match state.new_users.take(input.id.as_str(), client) {
        Ok(()) => true,
        Err(cap) => {
            let _ = cap_reached.set(cap);
            false
        }
    };
    let now = now_ms();
    let resolution = identity::resolve(
        &state.store,
        call,
        &identities,
        device.as_deref(),
        previous,
        now,
        may_create,
    )
    .await
    .map_err(|error| match (error, cap_reached.get()) {
        (StoreError::Refused, Some(cap)) => IdentityError::too_many_new_users(*cap),
        (error, _) => {
            tracing::error!(%error, "Identity resolution failed.");
            IdentityError::unavailable()
        }
    })?;
    let profile_event = match call {
        Call::Identify => None,
        Call::Login => Some("login"),
        Call::Logout => Some("logout"),
    };
    if let Some(kind) = profile_event {
        let previous = previous.unwrap_or(Mpid::new(0));
        record_profile_event(
            state,
            &input,
            &request,
            &resolution,
            device.as_deref(),
            kind,
            previous,
        )
        .await;
    }
    let binding = entitled_to_binding(&resolution, &identities)
        .then(|| binding::issue(&input.secret, input.id.as_str(), resolution.mpid, now));
    Ok(Answered {
        resolution,
        asked: identities,
        binding,
    })
}

/// Whether the caller may be given the user's binding: any caller for a user who has not
/// logged in (the device's own anonymous user, or one known by weaker identities only), but for
/// a logged-in user only a caller that gave the user's customer id. Knowing someone's email
/// finds their MPID (that is what identify is for); it does not let one modify them.
fn entitled_to_binding(resolution: &Resolution, asked: &[(String, String)]) -> bool {
    let login = IdentityType::CustomerId.as_str();
    !resolution.logged_in
        || asked.iter().any(|(kind, value)| {
            kind == login
                && resolution
                    .identities
                    .contains(&(kind.clone(), value.clone()))
        })
}

/// Whether this request may modify `mpid`: it carries the device's binding to that user, or,
/// from the iOS SDK (which never sends the binding back), it is signed with the input's secret
/// as the mobile SDKs sign every call (`signed`: the headers, the default path and the
/// uncompressed body).
fn may_modify(
    state: &AppState,
    input: &InputEntry,
    mpid: Mpid,
    request: &IdentityRequest,
    signed: (&HeaderMap, &str, &[u8]),
) -> Result<(), IdentityError> {
    let context = request.context.as_ref().and_then(Value::as_str);
    let max_age_ms = i64::try_from(state.config.identity.binding_max_age_secs)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    let (id, secret) = (input.id.as_str(), &input.secret);
    let refusal = match binding::check(context, secret, id, mpid, now_ms(), max_age_ms) {
        Ok(()) => return Ok(()),
        Err(refusal) => refusal,
    };
    let (headers, path, body) = signed;
    let skew = state.config.ingest.mobile_max_clock_skew_secs;
    if input.platform == Platform::Ios && check_signed(headers, secret, path, body, skew).is_ok() {
        return Ok(());
    }
    Err(IdentityError::not_bound(mpid, refusal))
}

async fn modify(
    State(state): State<AppState>,
    Path(raw_mpid): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let input = input_of(&state, &headers)?;
        let body = body_of(&state, body)?;
        let mpid: Mpid = raw_mpid.parse().map_err(|_| {
            IdentityError::bad_request("The MPID in the path is not a 64-bit integer.")
        })?;
        let plain = gunzip(&state, &headers, &body)?;
        let request = parse(&plain)?;
        let changes = changes_of(request.identity_changes.as_deref().unwrap_or_default())?;
        let signed_path = format!("/v1/{raw_mpid}/modify");
        may_modify(
            &state,
            &input,
            mpid,
            &request,
            (&headers, &signed_path, &plain),
        )?;
        let resolution = state
            .store
            .modify_identities(mpid, &changes, now_ms())
            .await
            .map_err(|error| match error {
                StoreError::NotFound => IdentityError::bad_request(format!("Unknown MPID {mpid}.")),
                StoreError::Conflict(_) => {
                    IdentityError::bad_request("A new identity already belongs to another user.")
                }
                other => {
                    tracing::error!(error = %other, "Identity modify failed.");
                    IdentityError::unavailable()
                }
            })?;
        record_profile_event(&state, &input, &request, &resolution, None, "update", mpid).await;
        Ok::<_, IdentityError>((resolution.mpid, changes))
    }
    .await;
    match result {
        // One result per requested change: what else the user has stays undisclosed.
        Ok((mpid, changes)) => {
            let results: Vec<Value> = changes
                .iter()
                .map(|c| json!({"identity_type": c.identity_type.as_str(), "modified_mpid": mpid.to_string()}))
                .collect();
            Json(json!({"change_results": results, "mpid": mpid.to_string()})).into_response()
        }
        Err(error) => error.into_response(),
    }
}

fn input_of(state: &AppState, headers: &HeaderMap) -> Result<InputEntry, IdentityError> {
    let key = headers
        .get(X_MP_KEY)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(IdentityError::unauthorized)?;
    let input = state
        .catalog()
        .input_by_key(key)
        .ok_or_else(IdentityError::unauthorized)?;
    cors::origin_allowed(&input, headers).map_err(|origin| {
        IdentityError::new(
            StatusCode::FORBIDDEN,
            format!("Origin {origin} is not allowed for this input."),
        )
    })?;
    Ok(input)
}

/// The body as sent, or 413 in IDSync's error shape when it is over the body limit.
fn body_of(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Bytes, IdentityError> {
    body.map_err(|rejection| {
        let limit = state.config.ingest.max_body_bytes;
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            IdentityError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("Identity request body is too large: over {limit} bytes."),
            )
        } else {
            IdentityError::bad_request(format!("Identity request body unreadable: {rejection}."))
        }
    })
}

/// Android gzips identity bodies; the others send them plain. A body too large once inflated
/// is 413 and says so; anything else that cannot be inflated is not gzip.
fn gunzip(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<Vec<u8>, IdentityError> {
    let limit = state.config.ingest.max_body_bytes;
    decode_body(headers, body, limit).map_err(|error| {
        if error.status == StatusCode::PAYLOAD_TOO_LARGE {
            IdentityError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "Identity request body is too large: over {limit} bytes once decompressed."
                ),
            )
        } else {
            IdentityError::bad_request("Identity request body is not valid gzip.")
        }
    })
}

fn parse(body: &[u8]) -> Result<IdentityRequest, IdentityError> {
    if body.is_empty() {
        return Ok(IdentityRequest::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| IdentityError::bad_request(format!("Malformed identity request: {e}.")))
}

/// A device's key in the identity store: `{identity name}:{value}`.
type DeviceKey = Option<String>;

/// Splits `known_identities` into user identities (server type names) and the device key
/// (`{name}:{value}` of its most specific device identity).
fn split_identities(
    known: Option<&Map<String, Value>>,
) -> Result<(Vec<(String, String)>, DeviceKey), IdentityError> {
    let mut identities = Vec::new();
    let mut device: Option<(usize, String)> = None;
    for (name, value) in known.into_iter().flatten() {
        let value = match value {
            Value::Null => continue,
            Value::String(s) if s.is_empty() => continue,
            Value::String(s) if !is_storable(s) => {
                return Err(IdentityError::bad_request(format!(
                    "Identity \"{name}\" {NOT_STORABLE}."
                )));
            }
            Value::String(s) => s.clone(),
            _ => {
                return Err(IdentityError::bad_request(format!(
                    "Identity \"{name}\" must be a string."
                )));
            }
        };
        match classify(name) {
            Some(Kind::User(kind)) => identities.push((kind.as_str().to_owned(), value)),
            Some(Kind::Device(kind)) => {
                let rank = device_rank(kind);
                if device.as_ref().is_none_or(|(best, _)| rank < *best) {
                    device = Some((rank, format!("{kind}:{value}")));
                }
            }
            None => {
                return Err(IdentityError::bad_request(format!(
                    "Unknown identity type \"{name}\"."
                )));
            }
        }
    }
    Ok((identities, device.map(|(_, key)| key)))
}

fn changes_of(changes: &[ChangeIn]) -> Result<Vec<IdentityChange>, IdentityError> {
    changes
        .iter()
        .map(|c| match classify(&c.identity_type) {
            _ if [&c.old_value, &c.new_value]
                .into_iter()
                .flatten()
                .any(|v| !is_storable(v)) =>
            {
                Err(IdentityError::bad_request(format!(
                    "Identity \"{}\" {NOT_STORABLE}.",
                    c.identity_type
                )))
            }
            Some(Kind::User(kind)) => Ok(IdentityChange {
                identity_type: kind,
                old_value: c.old_value.clone().filter(|v| !v.is_empty()),
                new_value: c.new_value.clone().filter(|v| !v.is_empty()),
            }),
            _ => Err(IdentityError::bad_request(format!(
                "Cannot modify identity type \"{}\".",
                c.identity_type
            ))),
        })
        .collect()
}

/// The answer: the MPID, the device's binding as `context`, and of the user's identities only
/// those the request gave.
fn answer(answered: &Answered) -> Json<Value> {
    let resolution = &answered.resolution;
    let matched: Map<String, Value> = resolution
        .identities
        .iter()
        .filter(|identity| answered.asked.contains(identity))
        .map(|(kind, value)| (kind.clone(), Value::from(value.as_str())))
        .collect();
    Json(json!({
        // The Web SDK keeps MPIDs as strings; a JSON number would lose precision in JavaScript.
        "mpid": resolution.mpid.to_string(),
        "context": answered.binding,
        "is_ephemeral": false,
        "is_logged_in": resolution.logged_in,
        "matched_identities": matched,
    }))
}

fn channel_of(platform: Platform) -> Channel {
    match platform {
        Platform::Web => Channel::Javascript,
        Platform::Ios | Platform::Android => Channel::Native,
        Platform::CustomFeed => Channel::ServerToServer,
    }
}

/// Puts a `profile` event (login, logout, update) into the input's stream. A failure is logged:
/// the identity call itself succeeded and the SDK must get its answer.
async fn record_profile_event(
    state: &AppState,
    input: &InputEntry,
    request: &IdentityRequest,
    resolution: &Resolution,
    device: Option<&str>,
    kind: &str,
    previous_mpid: Mpid,
) {
    let now = now_ms();
    let identities: Map<String, Value> = resolution
        .identities
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    let mut batch = json!({
        "mpid": resolution.mpid,
        "environment": request.environment.as_deref().filter(|e| *e == "development").unwrap_or("production"),
        "user_identities": identities,
        "events": [{
            "event_type": "profile",
            "data": {
                "profile_event_type": kind,
                "previous_mpid": previous_mpid,
                "current_mpid": resolution.mpid,
                "timestamp_unixtime_ms": now,
            }
        }],
    });
    if let Some(stamp) = device.and_then(|d| d.strip_prefix("device_application_stamp:")) {
        batch["mp_deviceid"] = Value::from(stamp);
    }
    if let Some(request_id) = &request.request_id {
        batch["source_request_id"] = Value::from(format!("idsync-{kind}-{request_id}"));
    }
    let documents = vec![Document::single(batch)];
    let channel = channel_of(input.platform);
    if let Err(error) = state.pipeline.accept(input, documents, channel).await {
        // An invalid event comes from what the client sent (its identities, its request id):
        // not an operator's problem, and its message is the client's text, so only the reason.
        let (reason, input) = (error.reason(), &input.id);
        if error.is_server_fault() {
            tracing::error!(reason, %input, kind, "Storing a profile event failed.");
        } else {
            tracing::warn!(reason, %input, kind, "Dropped a profile event the request made invalid.");
        }
    }
}
