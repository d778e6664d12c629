//! `/v2/bulkevents` and `/v2/events` through the whole router: the first byte picks the route.
#![no_main]

use std::sync::LazyLock;

use boson::fuzzing::App;

static APP: LazyLock<App> = LazyLock::new(|| App::start().expect("an in-process Boson"));

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((selector, body)) = data.split_first() {
        APP.events_api(selector & 1 == 1, body);
    }
});
