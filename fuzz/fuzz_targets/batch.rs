//! The Events API batch (`/v2/events`) and the Web SDK's v3 upload: one body, normalised.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boson::fuzzing::batch(data));
