//! How a delivery attempt ended: the attempt log's `outcome` column and the label of the
//! `boson_deliveries_total` metric.

/// The end of one attempt at a job (or, in metrics, at one request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptOutcome {
    /// Every request was accepted by the receiver.
    Delivered,
    /// Something must be tried again later.
    Retry,
    /// A request was given up on and kept as a dead letter.
    DeadLetter,
    /// The job ended without a request (its connection or batch is gone).
    Dropped,
}

impl AttemptOutcome {
    /// The name stored in the attempt log and shown by the admin API.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Retry => "retry",
            Self::DeadLetter => "dead_letter",
            Self::Dropped => "dropped",
        }
    }
}
