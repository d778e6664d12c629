//! SDK uploads through the whole router: the Web SDK's v3 and legacy uploads, and signed mobile
//! uploads (Android or iOS, plain or gzip). The first byte picks which.
#![no_main]

use std::sync::LazyLock;

use boson::fuzzing::App;

static APP: LazyLock<App> = LazyLock::new(|| App::start().expect("an in-process Boson"));

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((selector, body)) = data.split_first() {
        let _status = match selector % 4 {
            0 => APP.web_upload(false, body),
            1 => APP.web_upload(true, body),
            _ => APP.mobile_upload(selector >> 2, body),
        };
    }
});
