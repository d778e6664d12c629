//! IDSync bodies through the whole router: identify, login, logout, modify and alias, plain or
//! gzip. The first byte picks which.
#![no_main]

use std::sync::LazyLock;

use boson::fuzzing::App;

static APP: LazyLock<App> = LazyLock::new(|| App::start().expect("an in-process Boson"));

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((selector, body)) = data.split_first() {
        APP.idsync(*selector, body);
    }
});
