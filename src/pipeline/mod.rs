//! Applying a connection's settings to a stored batch: which events go out, what is stripped, and
//! how the result is cut into webhook requests. Pure functions only; the delivery workers call them
//! and the Live Stream's "why was this dropped" answer will come from the same code.

pub(crate) mod filter;
