//! The Web SDK's kit forwarding statistics (v1 and v2) through the whole router: the first byte
//! picks the version.
#![no_main]

use std::sync::LazyLock;

use boson::fuzzing::App;

static APP: LazyLock<App> = LazyLock::new(|| App::start().expect("an in-process Boson"));

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((selector, body)) = data.split_first() {
        APP.forwarding(selector & 1 == 1, body);
    }
});
