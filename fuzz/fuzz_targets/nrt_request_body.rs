//! A write body as the API server decodes it: JSON or YAML, then the NRT decoder and the
//! unknown-field check. Must never panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaresources_apiserver::validate::{decode, parse_body, unknown_fields};

fuzz_target!(|data: &[u8]| {
    let body = bytes::Bytes::copy_from_slice(data);
    for content_type in ["application/json", "application/yaml"] {
        if let Ok(value) = parse_body(&body, Some(content_type)) {
            let _ = unknown_fields(&value);
            let _ = decode(value, Some("node"));
        }
    }
});
