//! A write body as the API server decodes it: JSON or YAML (nesting, node and alias budgets
//! included), then the NRT decoder, the unknown-field check and the metadata validation. Must
//! never panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaresources_apiserver::body::DEFAULT_MAX_NESTING_DEPTH;
use numaresources_apiserver::validate::{decode, parse_body, unknown_fields, validate_create};

fuzz_target!(|data: &[u8]| {
    let body = bytes::Bytes::copy_from_slice(data);
    for content_type in ["application/json", "application/yaml"] {
        if let Ok(parsed) = parse_body(&body, Some(content_type), DEFAULT_MAX_NESTING_DEPTH) {
            let _ = unknown_fields(&parsed.value);
            if let Ok(object) = decode(parsed.value, Some("node")) {
                let _ = validate_create(&object);
            }
        }
    }
});
