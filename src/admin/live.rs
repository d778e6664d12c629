//! `GET /api/v1/live-stream`: the Live Stream as server-sent events, filtered by input,
//! connection, direction, event type and MPID. Above a rate a browser can show, items are
//! sampled and the stream says how many it skipped. A stream starts with the node's recent
//! history (the items its filters admit, not sampled: it is bounded), then says `caught_up`.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::access::{Sessions, session_id};
use crate::live::{Direction, LiveItem};
use crate::model::ids::{ConnectionId, InputId, Mpid};
use crate::state::AppState;

/// Items sent per second per watcher; more are skipped and counted.
const MAX_PER_SECOND: u32 = 200;

/// The Live Stream's filters; all optional.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct LiveFilter {
    // Ids stay text: a malformed one matches nothing, as an unknown one does, rather than
    // refusing the stream.
    input_id: Option<String>,
    connection_id: Option<String>,
    /// `inbound`, `outbound` or `both` (the default).
    direction: Option<String>,
    event_type: Option<String>,
    mpid: Option<Mpid>,
}

impl LiveFilter {
    fn admits(&self, item: &LiveItem, connection_input: Option<&InputId>) -> bool {
        let direction = match self.direction.as_deref() {
            Some("inbound") => item.direction == Direction::Inbound,
            Some("outbound") => item.direction == Direction::Outbound,
            _ => true,
        };
        let connection = match (&self.connection_id, item.direction) {
            (None, _) => true,
            (Some(wanted), Direction::Outbound) => item
                .connection_id
                .as_ref()
                .is_some_and(|id| id.as_str() == wanted),
            // Inbound events of the connection's input are what the connection acts on.
            (Some(_), _) => connection_input == Some(&item.input_id),
        };
        direction
            && connection
            && self
                .input_id
                .as_ref()
                .is_none_or(|i| i == item.input_id.as_str())
            && self
                .event_type
                .as_ref()
                .is_none_or(|t| *t == item.event_type)
            && self.mpid.is_none_or(|m| Some(m) == item.mpid)
    }
}

/// The dashboard session a stream was opened with: the stream ends when the session does.
/// It is read again at most once per [`SESSION_RECHECK`] rather than for every item (items can
/// come thousands a second), so a sign-out on any node ends the stream within about that long.
struct WatchedSession {
    id: String,
    sessions: Sessions,
    checked: Instant,
}

impl Watch {
    /// The next history item the filters admit, then `caught_up` once, then `None`.
    fn next_of_history(&mut self) -> Option<Event> {
        let history = self.history.as_mut()?;
        let connection_input = self.connection_input.as_ref();
        if let Some(item) = history.find(|item| self.filter.admits(item, connection_input)) {
            return Some(item_event(&item));
        }
        self.history = None;
        Some(Event::default().event("caught_up").data("{}"))
    }
}

fn item_event(item: &LiveItem) -> Event {
    let data = serde_json::to_string(item).unwrap_or_default();
    Event::default().event("item").data(data)
}

/// How often a stream's dashboard session is read again.
const SESSION_RECHECK: Duration = Duration::from_secs(1);

impl WatchedSession {
    /// Whether the session is still signed in. A check the database cannot answer ends the
    /// stream as well: access is never granted on an unanswered check.
    async fn is_live(&mut self) -> bool {
        if self.checked.elapsed() < SESSION_RECHECK {
            return true;
        }
        self.checked = Instant::now();
        self.sessions.is_live(&self.id).await.unwrap_or(false)
    }
}

struct Watch {
    session: Option<WatchedSession>,
    /// The history not sent yet, oldest first; `None` once `caught_up` has been said.
    history: Option<std::vec::IntoIter<LiveItem>>,
    stopping: tokio_util::sync::CancellationToken,
    receiver: tokio::sync::broadcast::Receiver<LiveItem>,
    filter: LiveFilter,
    connection_input: Option<InputId>,
    window: Instant,
    sent: u32,
    skipped: u64,
}

pub(crate) async fn stream(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    Query(filter): Query<LiveFilter>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // A malformed connection id names no connection: it admits nothing, as an unknown one.
    let connection_input = filter
        .connection_id
        .as_deref()
        .and_then(|id| ConnectionId::parse(id).ok())
        .and_then(|id| state.catalog().connection(&id))
        .map(|(connection, _)| connection.input_id);
    let session = match session_id(&headers) {
        Some(id) if state.access.sessions.is_live(&id).await.unwrap_or(false) => {
            Some(WatchedSession {
                id,
                sessions: state.access.sessions.clone(),
                checked: Instant::now(),
            })
        }
        _ => None,
    };
    let (history, receiver) = state.live.subscribe();
    let watch = Watch {
        session,
        history: Some(history.into_iter()),
        stopping: state.stopping.clone(),
        receiver,
        filter,
        connection_input,
        window: Instant::now(),
        sent: 0,
        skipped: 0,
    };
    let events = futures_util::stream::unfold(watch, |mut watch| async move {
        if let Some(event) = watch.next_of_history() {
            return Some((Ok(event), watch));
        }
        loop {
            let received = tokio::select! {
                () = watch.stopping.cancelled() => return None,
                received = watch.receiver.recv() => received,
            };
            let item = match received {
                Ok(item) => item,
                Err(RecvError::Lagged(n)) => {
                    watch.skipped += n;
                    continue;
                }
                Err(RecvError::Closed) => return None,
            };
            if let Some(session) = watch.session.as_mut()
                && !session.is_live().await
            {
                return None;
            }
            if !watch.filter.admits(&item, watch.connection_input.as_ref()) {
                continue;
            }
            if watch.window.elapsed() >= Duration::from_secs(1) {
                let skipped = std::mem::take(&mut watch.skipped);
                watch.window = Instant::now();
                watch.sent = 0;
                if skipped > 0 {
                    let notice = Event::default()
                        .event("sampled")
                        .data(json!({"skipped": skipped}).to_string());
                    return Some((Ok(notice), watch));
                }
            }
            if watch.sent >= MAX_PER_SECOND {
                watch.skipped += 1;
                continue;
            }
            watch.sent += 1;
            return Some((Ok(item_event(&item)), watch));
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
