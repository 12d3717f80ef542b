//! ObjectMeta validation (numaresources_api::metadata) on whatever metadata decodes: never a
//! panic, and what it accepts on create is what apimachinery's rules describe (a DNS-1123
//! name, label values of at most 63 characters, annotations within their total size).
#![no_main]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use libfuzzer_sys::fuzz_target;
use numaresources_api::metadata::{self, TOTAL_ANNOTATION_SIZE_LIMIT_BYTES};

fuzz_target!(|data: &[u8]| {
    let half = data.len() / 2;
    let (Ok(new), old) = (serde_json::from_slice::<ObjectMeta>(&data[..half]), serde_json::from_slice::<ObjectMeta>(&data[half..]))
    else {
        return;
    };
    if metadata::validate_create(&new, false).is_empty() {
        let name = new.name.as_deref().unwrap_or_default();
        assert!(!name.is_empty() && name.len() <= 253 && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'));
        assert!(new.labels.iter().flatten().all(|(_, v)| v.len() <= 63));
        let annotations: usize = new.annotations.iter().flatten().map(|(k, v)| k.len() + v.len()).sum();
        assert!(annotations <= TOTAL_ANNOTATION_SIZE_LIMIT_BYTES);
    }
    if let Ok(old) = old {
        let _ = metadata::validate_update(&new, &old);
        assert!(metadata::validate_update(&new, &new).iter().all(|e| !e.detail.contains("immutable")));
    }
});
