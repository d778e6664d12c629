//! Identities as IDSync sees them: the user identity types, the SDKs' identity names and the
//! resolution rules, pure.
//! The store runs a resolution in one transaction, calling [`resolve::decide`] between its
//! reads and writes; IDSync and the pipeline (for batches without an MPID) both ask it to.

pub(crate) mod names;
pub(crate) mod resolve;
pub(crate) mod types;

/// Whether an identity or device id can be stored: identities are stored as text, and
/// PostgreSQL's text cannot hold U+0000. One with a NUL would fail to store (a 503, which clients
/// retry forever) instead of being refused as the bad request it is.
pub(crate) fn is_storable(value: &str) -> bool {
    !value.contains('\0')
}

/// What a refusal by [`is_storable`] says.
pub(crate) const NOT_STORABLE: &str = "must be a string without NUL characters";
