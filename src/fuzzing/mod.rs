//! Entry points into every parser a public key reaches, for the fuzz targets in `fuzz/` and for
//! their bounded property-test twins (`properties`). Built for tests and with the `fuzzing`
//! feature only; the server never contains it.
//!
//! Each entry point takes raw bytes, as a client sends them. Bad input must come back as a clean
//! error; a panic anywhere is a finding. Each entry point also checks the promises its parser
//! makes (an event count that matches, an error that names its field, a refused request that
//! stored nothing) and panics when one is broken, because a panic is how libFuzzer and proptest
//! are told.
//!
//! The pure parsers (`parsers`) are called directly. Parsers that live inside HTTP handlers (a
//! bulk request's split, IDSync's bodies, forwarding reports, signed mobile uploads) are reached
//! through the whole router in process ([`App`]), so the handlers are covered as they are.

mod app;
mod parsers;
#[cfg(test)]
mod properties;

pub use app::App;
pub use parsers::{batch, gzip, legacy_web, mobile};
