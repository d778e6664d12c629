//! Identities as IDSync sees them: the user identity types, the SDKs' identity names and the
//! resolution rules, pure.
//! The store runs a resolution in one transaction, calling [`resolve::decide`] between its
//! reads and writes; IDSync and the pipeline (for batches without an MPID) both ask it to.

pub(crate) mod names;
pub(crate) mod resolve;
pub(crate) mod types;
