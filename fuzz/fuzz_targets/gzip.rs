//! gzip request bodies as the SDK routes decode them.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boson::fuzzing::gzip(data));
