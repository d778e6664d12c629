//! The Web SDK's legacy per-event upload, translated and normalised.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boson::fuzzing::legacy_web(data));
