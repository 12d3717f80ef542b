//! `metav1.LabelSelector`: validation (as apimachinery's `ValidateLabelSelector`), a canonical
//! text form for comparing selectors, and matching against a label set.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::field::{FieldError, FieldPath};
use crate::metadata;

/// The operators a `matchExpressions` entry may use.
pub const OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist"];

/// Every problem with a selector, with field paths below `path`.
pub fn validate(selector: &LabelSelector, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        let labels = path.child("matchLabels");
        if let Err(reason) = check_qualified_name(key) {
            errors.push(FieldError::invalid(labels.clone(), key, reason));
        }
        if let Err(reason) = check_label_value(value) {
            errors.push(FieldError::invalid(labels.key(key), value, reason));
        }
    }
    for (i, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        errors.extend(validate_requirement(requirement, &path.child("matchExpressions").index(i)));
    }
    errors
}

fn validate_requirement(requirement: &LabelSelectorRequirement, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let values = requirement.values.as_deref().unwrap_or_default();
    match requirement.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => errors
            .push(FieldError::required(path.child("values"), "must be specified when `operator` is 'In' or 'NotIn'")),
        "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(FieldError::forbidden(
            path.child("values"),
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )),
        "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
        other => errors.push(FieldError::not_supported(path.child("operator"), other, OPERATORS)),
    }
    if let Err(reason) = check_qualified_name(&requirement.key) {
        errors.push(FieldError::invalid(path.child("key"), &requirement.key, reason));
    }
    for (i, value) in values.iter().enumerate() {
        if let Err(reason) = check_label_value(value) {
            errors.push(FieldError::invalid(path.child("values").index(i), value, reason));
        }
    }
    errors
}

/// The selector as one canonical string: requirements sorted by key and operator, values sorted,
/// `matchLabels` entries written as the single-value `in` they mean. Two selectors that select
/// the same objects by construction have the same key (`{a: b}` and `a in (b)` included).
pub fn canonical(selector: &LabelSelector) -> String {
    let mut requirements: Vec<(String, &str, Vec<&str>)> = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        requirements.push((key.clone(), "in", vec![value.as_str()]));
    }
    for requirement in selector.match_expressions.iter().flatten() {
        let mut values: Vec<&str> = requirement.values.iter().flatten().map(String::as_str).collect();
        values.sort_unstable();
        values.dedup();
        let operator = match requirement.operator.as_str() {
            "In" => "in",
            "NotIn" => "notin",
            "Exists" => "exists",
            "DoesNotExist" => "!",
            other => other,
        };
        requirements.push((requirement.key.clone(), operator, values));
    }
    requirements.sort();
    requirements.dedup();
    let parts: Vec<String> = requirements
        .into_iter()
        .map(|(key, operator, values)| match operator {
            "exists" => key,
            "!" => format!("!{key}"),
            _ => format!("{key} {operator} ({})", values.join(",")),
        })
        .collect();
    parts.join(",")
}

/// Whether a label set satisfies the selector. An empty selector matches everything.
/// A requirement with an unknown operator matches nothing (validation reports it).
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_match = selector.match_labels.iter().flatten().all(|(key, value)| labels.get(key) == Some(value));
    labels_match
        && selector.match_expressions.iter().flatten().all(|requirement| {
            let values = requirement.values.as_deref().unwrap_or_default();
            let actual = labels.get(&requirement.key);
            match requirement.operator.as_str() {
                "In" => actual.is_some_and(|v| values.contains(v)),
                "NotIn" => actual.is_none_or(|v| !values.contains(v)),
                "Exists" => actual.is_some(),
                "DoesNotExist" => actual.is_none(),
                _ => false,
            }
        })
}

/// A label key: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric. The first of
/// [`metadata::qualified_name`]'s problems.
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    first_problem(metadata::qualified_name(key))
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` or `.`, starting and ending
/// alphanumeric. The first of [`metadata::label_value`]'s problems.
pub fn check_label_value(value: &str) -> Result<(), String> {
    first_problem(metadata::label_value(value))
}

/// A DNS-1123 subdomain: at most 253 lowercase alphanumerics, `-` or `.`, starting and ending
/// alphanumeric (object names of most kinds). The first of [`metadata::dns1123_subdomain`]'s
/// problems.
pub fn check_dns1123_subdomain(value: &str) -> Result<(), String> {
    first_problem(metadata::dns1123_subdomain(value))
}

fn first_problem(problems: Vec<String>) -> Result<(), String> {
    problems.into_iter().next().map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(json: serde_json::Value) -> LabelSelector {
        serde_json::from_value(json).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn valid_selectors_have_no_errors() {
        let s = selector(serde_json::json!({
            "matchLabels": {"node-role.kubernetes.io/worker": "", "tier": "cnf"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "example.com/gpu", "operator": "Exists"}
            ]
        }));
        assert!(validate(&s, &FieldPath::new("s")).is_empty());
    }

    #[test]
    fn each_selector_rule_is_reported_with_its_path() {
        let table = [
            (serde_json::json!({"matchLabels": {"bad key!": "x"}}), "s.matchLabels: Invalid value: \"bad key!\""),
            (serde_json::json!({"matchLabels": {"k": "-x"}}), "s.matchLabels[k]: Invalid value: \"-x\""),
            (
                serde_json::json!({"matchExpressions": [{"key": "k", "operator": "In"}]}),
                "s.matchExpressions[0].values: Required value",
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["a"]}]}),
                "s.matchExpressions[0].values: Forbidden",
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "k", "operator": "Near", "values": ["a"]}]}),
                "s.matchExpressions[0].operator: Unsupported value: \"Near\"",
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "Bad.Prefix/k", "operator": "Exists"}]}),
                "s.matchExpressions[0].key: Invalid value",
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "k", "operator": "In", "values": ["ok", "no way"]}]}),
                "s.matchExpressions[0].values[1]: Invalid value",
            ),
        ];
        for (json, want) in table {
            let errors = validate(&selector(json.clone()), &FieldPath::new("s"));
            assert_eq!(errors.len(), 1, "{json}: {errors:?}");
            assert!(errors[0].to_string().starts_with(want), "{json}: {}", errors[0]);
        }
    }

    #[test]
    fn canonical_form_ignores_spelling() {
        let a = selector(serde_json::json!({"matchLabels": {"b": "2", "a": "1"}}));
        let b = selector(serde_json::json!({"matchExpressions": [
            {"key": "a", "operator": "In", "values": ["1"]},
            {"key": "b", "operator": "In", "values": ["2", "2"]}
        ]}));
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(canonical(&a), "a in (1),b in (2)");
        let c = selector(serde_json::json!({"matchExpressions": [
            {"key": "x", "operator": "DoesNotExist"}, {"key": "w", "operator": "Exists"}
        ]}));
        assert_eq!(canonical(&c), "w,!x");
        assert_ne!(canonical(&a), canonical(&LabelSelector::default()));
    }

    #[test]
    fn matching_follows_each_operator() {
        let s = selector(serde_json::json!({
            "matchLabels": {"role": "worker"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "tier", "operator": "NotIn", "values": ["infra"]},
                {"key": "numa", "operator": "Exists"},
                {"key": "cordoned", "operator": "DoesNotExist"}
            ]
        }));
        assert!(matches(&s, &labels(&[("role", "worker"), ("zone", "a"), ("numa", "")])));
        assert!(!matches(&s, &labels(&[("role", "worker"), ("zone", "c"), ("numa", "")])));
        assert!(!matches(&s, &labels(&[("role", "worker"), ("zone", "a"), ("numa", ""), ("tier", "infra")])));
        assert!(!matches(&s, &labels(&[("role", "worker"), ("zone", "a")])));
        assert!(!matches(&s, &labels(&[("role", "worker"), ("zone", "a"), ("numa", ""), ("cordoned", "y")])));
        assert!(!matches(&s, &labels(&[("zone", "a"), ("numa", "")])));
        assert!(matches(&LabelSelector::default(), &labels(&[])));
    }

    #[test]
    fn names_and_subdomains() {
        assert!(check_qualified_name("kubernetes.io/hostname").is_ok());
        assert!(check_qualified_name("a").is_ok());
        assert!(check_qualified_name("/a").is_err());
        assert!(check_qualified_name("a/").is_err());
        assert!(check_qualified_name(&"a".repeat(64)).is_err());
        assert!(check_dns1123_subdomain("numaresources.example.com").is_ok());
        assert!(check_dns1123_subdomain("a..b").is_err());
        assert!(check_dns1123_subdomain("Upper").is_err());
        assert!(check_label_value("").is_ok());
    }
}
