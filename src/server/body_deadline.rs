//! A deadline for reading a request's body. The body limits bound how much a client may send,
//! not how slowly: a client sending a byte every few seconds would hold a connection (and the
//! handler waiting for its body) for hours, and a per-read timeout cannot catch it. So the whole
//! body must have arrived within `body_read_timeout_secs` of the request's head; after that,
//! reading it fails, the handler answers as for any broken body, and the connection closes.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
use tokio::time::Sleep;

/// Middleware: gives the request's body (if it has one) `limit` to arrive.
pub(super) async fn limit_body_time(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let request = if request.body().is_end_stream() {
        request
    } else {
        request.map(|body| Body::new(DeadlineBody::new(body, limit)))
    };
    next.run(request).await
}

/// A body that fails once its deadline has passed while it still waits for data.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
}

impl DeadlineBody {
    fn new(inner: Body, limit: Duration) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => this.deadline.as_mut().poll(cx).map(|()| {
                Some(Err(axum::Error::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the request body did not arrive in time",
                ))))
            }),
            ready => ready,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt as _;
    use http_body_util::BodyExt as _;

    use super::*;

    /// A body that sends one chunk, then nothing more (a client that stalled).
    fn stalled_body() -> Body {
        let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from("{\"ev"))])
            .chain(futures_util::stream::pending());
        Body::from_stream(chunks)
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_at_the_deadline() {
        let body = DeadlineBody::new(stalled_body(), Duration::from_millis(100));
        let collected = tokio::time::timeout(Duration::from_secs(5), body.collect()).await;
        let error = collected
            .expect("the deadline ends the read")
            .expect_err("fails");
        assert!(error.to_string().contains("in time"), "{error}");
    }

    #[tokio::test]
    async fn a_body_that_arrives_in_time_is_read_whole() {
        let body = DeadlineBody::new(Body::from("{}"), Duration::from_secs(5));
        let bytes = body.collect().await.expect("read").to_bytes();
        assert_eq!(bytes, Bytes::from("{}"));
    }
}
