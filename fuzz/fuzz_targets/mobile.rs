//! The mobile SDKs' upload envelope, translated for either OS and normalised.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boson::fuzzing::mobile(data));
