//! `GET /api/v1/metrics?range=hour|day[&input_id=…|&connection_id=…]`: the per-minute figures
//! as series for the dashboard's charts. `hour` is the last 60 minutes, a point per minute;
//! `day` the last 24 hours, a point per 5 minutes (minutes of a step merge: counts add, the
//! backlog keeps the greatest, latency histograms add before p50/p99 are read).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::model::ids::{ConnectionId, InputId};
use crate::model::metrics::{Axis, Figures, MINUTE_MS};
use crate::model::now_ms;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub(crate) struct MetricsQuery {
    range: Option<String>,
    input_id: Option<String>,
    connection_id: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct MetricsOut {
    range: &'static str,
    step_secs: i64,
    /// The start of each point's step (Unix ms); every series has one value per time.
    times: Vec<i64>,
    inputs: Vec<InputSeries>,
    connections: Vec<ConnectionSeries>,
    /// Every listed input and connection together.
    totals: ConnectionSeries,
}

#[derive(Debug, Serialize)]
struct InputSeries {
    id: InputId,
    name: String,
    received: Vec<i64>,
}

#[derive(Debug, Default, Serialize)]
struct ConnectionSeries {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<ConnectionId>,
    /// `input → output`.
    name: String,
    received: Vec<i64>,
    forwarded: Vec<i64>,
    requests: Vec<i64>,
    failures: Vec<i64>,
    dead_letters: Vec<i64>,
    backlog: Vec<i64>,
    /// Null where nothing was delivered in the step.
    latency_p50_ms: Vec<Option<f64>>,
    latency_p99_ms: Vec<Option<f64>>,
}

impl ConnectionSeries {
    fn of(id: Option<ConnectionId>, name: String, series: &[Figures]) -> Self {
        let pick = |f: fn(&Figures) -> i64| series.iter().map(f).collect();
        let percentile = |q: f64| {
            series
                .iter()
                .map(|f| f.latency.percentile(q).map(|ms| (ms * 10.0).round() / 10.0))
                .collect()
        };
        Self {
            id,
            name,
            received: pick(|f| f.received),
            forwarded: pick(|f| f.forwarded),
            requests: pick(|f| f.requests),
            failures: pick(|f| f.failures),
            dead_letters: pick(|f| f.dead_letters),
            backlog: pick(|f| f.backlog),
            latency_p50_ms: percentile(0.5),
            latency_p99_ms: percentile(0.99),
        }
    }
}

/// The axis a `range` asks for.
fn axis_of(range: Option<&str>, now: i64) -> Result<(&'static str, Axis), ApiError> {
    match range.unwrap_or("hour") {
        "hour" => Ok(("hour", Axis::ending_at(now, MINUTE_MS, 60))),
        "day" => Ok(("day", Axis::ending_at(now, 5 * MINUTE_MS, 288))),
        _ => Err(ApiError::bad_request(
            "invalid_query",
            "`range` must be `hour` or `day`",
        )),
    }
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Query(query): Query<MetricsQuery>,
) -> Result<Json<MetricsOut>, ApiError> {
    let (range, axis) = axis_of(query.range.as_deref(), now_ms())?;
    if query.input_id.is_some() && query.connection_id.is_some() {
        return Err(ApiError::bad_request(
            "invalid_query",
            "give `input_id` or `connection_id`, not both",
        ));
    }
    let store_error = |e| ApiError::from_store(e, "metrics_unavailable", "metrics");
    let all_inputs = state.store.list_inputs().await.map_err(store_error)?;
    let mut inputs = all_inputs.clone();
    let outputs = state.store.list_outputs().await.map_err(store_error)?;
    let mut connections = state.store.list_connections().await.map_err(store_error)?;
    let subject = match (&query.input_id, &query.connection_id) {
        (Some(raw), _) => {
            let id: InputId = super::path_id(raw, "input_not_found", "input")?;
            inputs.retain(|i| i.id == id);
            connections.clear();
            if inputs.is_empty() {
                return Err(ApiError::not_found("input_not_found", "input"));
            }
            Some(id.as_str().to_owned())
        }
        (None, Some(raw)) => {
            let id: ConnectionId = super::path_id(raw, "connection_not_found", "connection")?;
            connections.retain(|c| c.id == id);
            inputs.clear();
            if connections.is_empty() {
                return Err(ApiError::not_found("connection_not_found", "connection"));
            }
            Some(id.as_str().to_owned())
        }
        (None, None) => None,
    };
    let minutes = state
        .store
        .minutes_between(axis.start_ms, axis.end_ms(), subject.as_deref())
        .await
        .map_err(store_error)?;
    let mut by_subject: HashMap<&str, Vec<(i64, &Figures)>> = HashMap::new();
    for (subject, minute, figures) in &minutes {
        by_subject
            .entry(subject.as_str())
            .or_default()
            .push((*minute, figures));
    }
    let series_of = |id: &str| axis.series(by_subject.get(id).into_iter().flatten().copied());
    let mut total = vec![Figures::default(); axis.points];
    let mut add_to_total = |series: &[Figures]| {
        for (t, f) in total.iter_mut().zip(series) {
            let backlog = t.backlog + f.backlog;
            t.merge(f);
            // Each connection's backlog is its own queue: the total is their sum.
            t.backlog = backlog;
        }
    };
    let input_names: HashMap<&InputId, &str> = all_inputs
        .iter()
        .map(|i| (&i.id, i.name.as_str()))
        .collect();
    let output_names: HashMap<_, &str> = outputs.iter().map(|o| (&o.id, o.name.as_str())).collect();
    let mut connection_series = Vec::new();
    for c in &connections {
        let series = series_of(c.id.as_str());
        add_to_total(&series);
        let name = format!(
            "{} → {}",
            input_names.get(&c.input_id).copied().unwrap_or("?"),
            output_names.get(&c.output_id).copied().unwrap_or("?")
        );
        connection_series.push(ConnectionSeries::of(Some(c.id.clone()), name, &series));
    }
    let mut input_series = Vec::new();
    for i in &inputs {
        let series = series_of(i.id.as_str());
        add_to_total(&series);
        input_series.push(InputSeries {
            id: i.id.clone(),
            name: i.name.clone(),
            received: series.iter().map(|f| f.received).collect(),
        });
    }
    Ok(Json(MetricsOut {
        range,
        step_secs: axis.step_ms / 1000,
        times: axis.times(),
        inputs: input_series,
        connections: connection_series,
        totals: ConnectionSeries::of(None, "all".to_owned(), &total),
    }))
}
