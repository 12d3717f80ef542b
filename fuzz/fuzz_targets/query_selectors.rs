//! Label and field selectors from query strings.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaresources_apiserver::query::{parse_field_selector, parse_label_selector};

fuzz_target!(|text: &str| {
    let _ = parse_label_selector(text);
    let _ = parse_field_selector(text);
});
