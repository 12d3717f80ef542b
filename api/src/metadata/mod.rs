//! `ObjectMeta` validation as apimachinery does it for a custom resource
//! (`ValidateObjectMetaAccessor` with `NameIsDNSSubdomain`, and
//! `ValidateObjectMetaAccessorUpdate`), worded as kube-apiserver words it, so that every
//! component that writes or admits objects refuses the same ones.
//!
//! Pure functions: the caller decides what "create" and "update" mean (the API server runs them
//! on every write path, patches included, after setting what it owns: a generated name, the
//! old uid and timestamps).

mod names;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

pub use names::{
    DNS1123_SUBDOMAIN_MAX_LENGTH, LABEL_VALUE_MAX_LENGTH, QUALIFIED_NAME_MAX_LENGTH, dns1123_subdomain, label_value,
    name_is_dns_subdomain, qualified_name,
};

use crate::{FieldError, FieldPath};

/// All annotations of one object together, keys and values, may not exceed this many bytes
/// (apimachinery's `TotalAnnotationSizeLimitB`).
pub const TOTAL_ANNOTATION_SIZE_LIMIT_BYTES: usize = 256 * 1024;

/// The standard finalizers that may not both be set (`metav1.FinalizerOrphanDependents`,
/// `metav1.FinalizerDeleteDependents`).
pub const FINALIZER_ORPHAN_DEPENDENTS: &str = "orphan";
/// See [`FINALIZER_ORPHAN_DEPENDENTS`].
pub const FINALIZER_DELETE_DEPENDENTS: &str = "foregroundDeletion";

/// apimachinery's message for a changed immutable field.
pub const FIELD_IMMUTABLE: &str = "field is immutable";

/// The metadata of an object being created. `name` must already be generated from
/// `generateName` when one was given (as kube-apiserver does before validating), so that both
/// are checked.
pub fn validate_create(meta: &ObjectMeta, namespaced: bool) -> Vec<FieldError> {
    let path = FieldPath::new("metadata");
    let mut errors = Vec::new();
    if let Some(prefix) = meta.generate_name.as_deref().filter(|p| !p.is_empty()) {
        errors.extend(
            name_is_dns_subdomain(prefix, true)
                .into_iter()
                .map(|why| FieldError::invalid(path.child("generateName"), prefix, why)),
        );
    }
    match meta.name.as_deref().filter(|n| !n.is_empty()) {
        None => errors.push(FieldError::required(path.child("name"), "name or generateName is required")),
        Some(name) => errors.extend(
            name_is_dns_subdomain(name, false)
                .into_iter()
                .map(|why| FieldError::invalid(path.child("name"), name, why)),
        ),
    }
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    if namespaced && namespace.is_empty() {
        errors.push(FieldError::required(path.child("namespace"), ""));
    } else if !namespaced && !namespace.is_empty() {
        errors.push(FieldError::forbidden(path.child("namespace"), "not allowed on this type"));
    }
    if let Some(generation) = meta.generation.filter(|g| *g < 0) {
        errors.push(FieldError::invalid(path.child("generation"), generation, "must be greater than or equal to 0"));
    }
    errors.extend(validate_common(meta, &path));
    errors
}

/// The metadata of an object replacing `old`: what is immutable stayed, no finalizer was
/// added once deletion began, and the new labels, annotations, owners and finalizers are valid.
pub fn validate_update(new: &ObjectMeta, old: &ObjectMeta) -> Vec<FieldError> {
    let path = FieldPath::new("metadata");
    let mut errors = Vec::new();
    if old.deletion_timestamp.is_some() {
        errors.extend(no_new_finalizers(new, old, &path.child("finalizers")));
    }
    if new.generation.unwrap_or_default() < old.generation.unwrap_or_default() {
        errors.push(FieldError::invalid(
            path.child("generation"),
            new.generation.unwrap_or_default(),
            "must not be decremented",
        ));
    }
    // Compared as they are; put in words only when one differs (every update passes here).
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    let changed: [(&str, bool, &dyn Fn() -> String); 6] = [
        ("name", new.name.as_deref().unwrap_or_default() != old.name.as_deref().unwrap_or_default(), &|| {
            text(&new.name)
        }),
        (
            "namespace",
            new.namespace.as_deref().unwrap_or_default() != old.namespace.as_deref().unwrap_or_default(),
            &|| text(&new.namespace),
        ),
        ("uid", new.uid.as_deref().unwrap_or_default() != old.uid.as_deref().unwrap_or_default(), &|| text(&new.uid)),
        ("creationTimestamp", new.creation_timestamp != old.creation_timestamp, &|| time(&new.creation_timestamp)),
        ("deletionTimestamp", new.deletion_timestamp != old.deletion_timestamp, &|| time(&new.deletion_timestamp)),
        ("deletionGracePeriodSeconds", new.deletion_grace_period_seconds != old.deletion_grace_period_seconds, &|| {
            new.deletion_grace_period_seconds.map(|s| s.to_string()).unwrap_or_default()
        }),
    ];
    for (field, differs, shown) in changed {
        if differs {
            errors.push(FieldError::invalid(path.child(field), shown(), FIELD_IMMUTABLE));
        }
    }
    errors.extend(validate_common(new, &path));
    errors
}

fn time(value: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    value.as_ref().map(|t| t.0.to_string()).unwrap_or_default()
}

/// Labels, annotations, owner references and finalizers: checked on create and update alike.
fn validate_common(meta: &ObjectMeta, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    errors.extend(validate_labels(meta, &path.child("labels")));
    errors.extend(validate_annotations(meta, &path.child("annotations")));
    errors.extend(validate_owner_references(
        meta.owner_references.as_deref().unwrap_or_default(),
        &path.child("ownerReferences"),
    ));
    errors.extend(validate_finalizers(meta.finalizers.as_deref().unwrap_or_default(), &path.child("finalizers")));
    errors
}

/// `ValidateLabels`: keys are qualified names, values label values.
pub fn validate_labels(meta: &ObjectMeta, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (key, value) in meta.labels.iter().flatten() {
        errors.extend(qualified_name(key).into_iter().map(|why| FieldError::invalid(path.clone(), key, why)));
        errors.extend(label_value(value).into_iter().map(|why| FieldError::invalid(path.clone(), value, why)));
    }
    errors
}

/// `ValidateAnnotations`: keys are qualified names (in any case), and all of them together
/// at most [`TOTAL_ANNOTATION_SIZE_LIMIT_BYTES`].
pub fn validate_annotations(meta: &ObjectMeta, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut total = 0usize;
    for (key, value) in meta.annotations.iter().flatten() {
        // Lowered only when there is something to lower (every object carries an annotation).
        let lowered = if key.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
            std::borrow::Cow::Owned(key.to_lowercase())
        } else {
            std::borrow::Cow::Borrowed(key.as_str())
        };
        errors.extend(qualified_name(&lowered).into_iter().map(|why| FieldError::invalid(path.clone(), key, why)));
        total = total.saturating_add(key.len()).saturating_add(value.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_BYTES {
        errors.push(FieldError::too_long(path.clone(), TOTAL_ANNOTATION_SIZE_LIMIT_BYTES));
    }
    errors
}

/// `ValidateFinalizers`: qualified names, and not both of the standard dependents policies.
pub fn validate_finalizers(finalizers: &[String], path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for finalizer in finalizers {
        errors
            .extend(qualified_name(finalizer).into_iter().map(|why| FieldError::invalid(path.clone(), finalizer, why)));
    }
    let has = |name: &str| finalizers.iter().any(|f| f == name);
    if has(FINALIZER_ORPHAN_DEPENDENTS) && has(FINALIZER_DELETE_DEPENDENTS) {
        errors.push(FieldError::invalid(
            path.clone(),
            go_string_list(finalizers),
            format!("finalizer {FINALIZER_ORPHAN_DEPENDENTS} and {FINALIZER_DELETE_DEPENDENTS} cannot be both set"),
        ));
    }
    errors
}

/// `ValidateOwnerReferences`: each names a version, kind, name and uid; one controller at most.
pub fn validate_owner_references(references: &[OwnerReference], path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut controller: Option<String> = None;
    for reference in references {
        let version = match reference.api_version.split('/').collect::<Vec<_>>().as_slice() {
            [version] | [_, version] => *version,
            _ => "",
        };
        if version.is_empty() {
            errors.push(FieldError::invalid(
                path.child("apiVersion"),
                &reference.api_version,
                "version must not be empty",
            ));
        }
        for (field, value) in [("kind", &reference.kind), ("name", &reference.name), ("uid", &reference.uid)] {
            if value.is_empty() {
                errors.push(FieldError::invalid(path.child(field), value, "must not be empty"));
            }
        }
        if reference.controller == Some(true) {
            let this = format!("{}/{}", reference.kind, reference.name);
            match &controller {
                Some(first) => errors.push(FieldError::invalid(
                    path.clone(),
                    "[...]",
                    format!("Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"),
                )),
                None => controller = Some(this),
            }
        }
    }
    errors
}

/// `ValidateNoNewFinalizers`, for an object whose deletion has begun.
fn no_new_finalizers(new: &ObjectMeta, old: &ObjectMeta, path: &FieldPath) -> Option<FieldError> {
    let old_finalizers = old.finalizers.as_deref().unwrap_or_default();
    let mut added: Vec<String> =
        new.finalizers.iter().flatten().filter(|f| !old_finalizers.contains(f)).cloned().collect();
    added.sort();
    added.dedup();
    (!added.is_empty()).then(|| {
        FieldError::forbidden(
            path.clone(),
            format!(
                "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                go_string_list(&added)
            ),
        )
    })
}

/// A list of strings as Go's `%#v` prints it: `[]string{"a", "b"}`.
fn go_string_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("{item:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

#[cfg(test)]
mod tests;
