//! The request decoders never panic, whatever arrives (the fuzz targets in fuzz/ explore the
//! same code for longer, under libFuzzer).

use numaresources_apiserver::body::DEFAULT_MAX_NESTING_DEPTH;
use numaresources_apiserver::query::{parse_field_selector, parse_label_selector};
use numaresources_apiserver::validate::{decode, parse_body, unknown_fields, validate_create};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn bodies_never_panic_the_decoder(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let body = bytes::Bytes::from(data);
        for content_type in ["application/json", "application/yaml"] {
            if let Ok(parsed) = parse_body(&body, Some(content_type), DEFAULT_MAX_NESTING_DEPTH) {
                let _ = unknown_fields(&parsed.value);
                if let Ok(object) = decode(parsed.value, Some("node")) {
                    let _ = validate_create(&object);
                }
            }
        }
    }

    #[test]
    fn json_shaped_bodies_never_panic_the_decoder(text in r#"\{("(apiVersion|kind|metadata|zones|name|type|resources|capacity|costs|value)":(\[|\{|"[a-z0-9.-]{0,8}"|-?[0-9]{1,20}|null|true)[,}\]]{0,3}){0,12}"#) {
        if let Ok(parsed) = parse_body(&bytes::Bytes::from(text), Some("application/json"), DEFAULT_MAX_NESTING_DEPTH) {
            let _ = decode(parsed.value, None);
        }
    }

    #[test]
    fn selectors_never_panic(text in ".{0,64}") {
        let _ = parse_label_selector(&text);
        let _ = parse_field_selector(&text);
    }
}
