//! An AdmissionReview body as the webhook decodes it, for pods and for our custom resources:
//! any bytes give a request or a `Malformed` with a reason, never a panic; a decoded request
//! always has a uid.
#![no_main]

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use libfuzzer_sys::fuzz_target;
use numaresources_webhook::review::{Answer, decode};

fuzz_target!(|data: &[u8]| {
    match decode::<Pod>(data) {
        Ok(request) => assert!(!request.uid.is_empty()),
        Err(malformed) => {
            let _ = Answer::invalid(malformed.uid.as_deref(), &malformed.reason).to_json();
        }
    }
    if let Ok(request) = decode::<DynamicObject>(data) {
        assert!(!request.uid.is_empty());
    }
});
