//! Denials worded the way kube-apiserver words its own: `422 Invalid`, one message with every
//! problem and its field path, and the same problems as `details.causes`.

use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails};
use numaresources_api::field::ErrorKind;
use numaresources_api::operator::GROUP;
use numaresources_api::{FieldError, FieldErrors, FieldPath};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// `Kind.group "name" is invalid: <problems>` with code 422 and reason `Invalid`.
pub(super) fn invalid(kind: &str, name: &str, errors: &FieldErrors) -> Status {
    let message = format!("{kind}.{GROUP} {name:?} is invalid: {errors}");
    let causes = errors
        .iter()
        .map(|error| {
            let full = error.to_string();
            let prefix = format!("{}: ", error.path);
            StatusCause {
                reason: error.kind.cause_type().to_owned(),
                message: full.strip_prefix(&prefix).unwrap_or(&full).to_owned(),
                field: error.path.to_string(),
            }
        })
        .collect();
    let details = StatusDetails {
        name: name.to_owned(),
        group: GROUP.to_owned(),
        kind: kind.to_owned(),
        uid: String::new(),
        causes,
        retry_after_seconds: 0,
    };
    Status::failure(&message, "Invalid").with_code(422).with_details(details)
}

/// The object as its Rust type, or the field that does not fit it (a value the CRD schema lets
/// through but the type cannot hold, such as a malformed duration).
pub(super) fn decode<T: DeserializeOwned>(raw: &Value) -> Result<T, FieldErrors> {
    serde_path_to_error::deserialize(raw).map_err(|error| {
        let path = error.path().to_string();
        let path = if path == "." { FieldPath::default() } else { FieldPath::new(&path) };
        let detail = error.into_inner().to_string();
        FieldErrors(vec![FieldError { path, kind: ErrorKind::Invalid, value: None, detail }])
    })
}

#[cfg(test)]
mod tests {
    use numaresources_api::operator::NUMAResourcesOperator;
    use serde_json::json;

    use super::*;

    #[test]
    fn one_message_with_every_problem_like_kube_apiserver() {
        let spec = FieldPath::new("spec");
        let errors = FieldErrors(vec![
            FieldError::not_supported(spec.child("logLevel"), "Loud", &["Normal", "Debug"]),
            FieldError::required(spec.child("nodeGroups").index(0), "set one"),
        ]);
        let status = invalid("NUMAResourcesOperator", "numaresourcesoperator", &errors);
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            status.message,
            "NUMAResourcesOperator.nodetopology.openshift.io \"numaresourcesoperator\" is invalid: \
             [spec.logLevel: Unsupported value: \"Loud\": supported values: \"Normal\", \"Debug\", \
             spec.nodeGroups[0]: Required value: set one]"
        );
        let causes = &status.details.as_ref().unwrap().causes;
        assert_eq!(causes[0].field, "spec.logLevel");
        assert_eq!(causes[0].reason, "FieldValueNotSupported");
        assert_eq!(causes[0].message, "Unsupported value: \"Loud\": supported values: \"Normal\", \"Debug\"");
        assert_eq!(causes[1].reason, "FieldValueRequired");
    }

    #[test]
    fn a_value_the_type_cannot_hold_is_reported_at_its_path() {
        let raw = json!({"apiVersion": "nodetopology.openshift.io/v1", "kind": "NUMAResourcesOperator",
            "metadata": {"name": "numaresourcesoperator"},
            "spec": {"nodeGroups": [{"poolName": "w", "config": {"infoRefreshPeriod": "soon"}}]}});
        let errors = decode::<NUMAResourcesOperator>(&raw).unwrap_err();
        let message = errors.to_string();
        assert!(message.starts_with("spec.nodeGroups[0].config.infoRefreshPeriod: Invalid value: "), "{message}");
    }
}
