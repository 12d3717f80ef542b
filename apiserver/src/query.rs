//! Query parameters of list, watch and write requests, parsed once with errors a person can act
//! on (`400 BadRequest` naming the parameter).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use numaresources_api::field::{FieldError, FieldErrors, FieldPath};
use numaresources_api::selector;
use serde::Deserialize;

use crate::status::ApiError;

/// The longest watch `timeoutSeconds` may ask for: far beyond any real client's (client-go's
/// reflectors ask for 5 to 10 minutes), and small enough that the deadline it sets can always be
/// computed (the largest int64 made the watch's `Instant` arithmetic overflow and panic).
pub(crate) const MAX_WATCH_TIMEOUT_SECONDS: u64 = 7 * 24 * 60 * 60;

/// The raw query string, as axum decodes it. Unknown parameters are ignored, as kube-apiserver
/// does (e.g. `shardSelector` from newer clients). A parameter given twice is not an error:
/// apimachinery's query decoding (and Go's `url.Values.Get`) takes the first value of each
/// single-valued option, and keeps every value of the one list-valued option we read, `dryRun`
/// (each must then be `All`).
#[derive(Debug, Default)]
pub struct RawQuery {
    label_selector: Option<String>,
    field_selector: Option<String>,
    resource_version: Option<String>,
    resource_version_match: Option<String>,
    watch: Option<String>,
    allow_watch_bookmarks: Option<String>,
    timeout_seconds: Option<String>,
    send_initial_events: Option<String>,
    dry_run: Vec<String>,
    include_object: Option<String>,
    field_validation: Option<String>,
    continue_: Option<String>,
    limit: Option<String>,
    propagation_policy: Option<String>,
    orphan_dependents: Option<String>,
    grace_period_seconds: Option<String>,
}

impl RawQuery {
    /// Takes one `key=value` pair of the query string, in order.
    fn take(&mut self, key: &str, value: String) {
        let slot = match key {
            "labelSelector" => &mut self.label_selector,
            "fieldSelector" => &mut self.field_selector,
            "resourceVersion" => &mut self.resource_version,
            "resourceVersionMatch" => &mut self.resource_version_match,
            "watch" => &mut self.watch,
            "allowWatchBookmarks" => &mut self.allow_watch_bookmarks,
            "timeoutSeconds" => &mut self.timeout_seconds,
            "sendInitialEvents" => &mut self.send_initial_events,
            "includeObject" => &mut self.include_object,
            "fieldValidation" => &mut self.field_validation,
            "continue" => &mut self.continue_,
            "limit" => &mut self.limit,
            "propagationPolicy" => &mut self.propagation_policy,
            "orphanDependents" => &mut self.orphan_dependents,
            "gracePeriodSeconds" => &mut self.grace_period_seconds,
            "dryRun" => {
                self.dry_run.push(value);
                return;
            }
            _ => return,
        };
        slot.get_or_insert(value);
    }
}

impl<'de> Deserialize<'de> for RawQuery {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(FirstValueWins)
    }
}

/// Reads the query's pairs in order into a [`RawQuery`] (see there for duplicates).
struct FirstValueWins;

impl<'de> serde::de::Visitor<'de> for FirstValueWins {
    type Value = RawQuery;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("query parameters")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut pairs: A) -> Result<RawQuery, A::Error> {
        let mut raw = RawQuery::default();
        while let Some((key, value)) = pairs.next_entry::<String, String>()? {
            raw.take(&key, value);
        }
        Ok(raw)
    }
}

impl RawQuery {
    /// Makes this a watch (the legacy `/watch/` path prefix).
    pub(crate) fn force_watch(&mut self) {
        self.watch = Some("true".into());
    }
}

/// Parsed options.
#[derive(Debug, Default)]
pub struct Options {
    /// Objects must match this (an empty selector matches everything).
    pub labels: LabelSelector,
    /// Field selector terms on `metadata.name`.
    pub fields: Vec<FieldTerm>,
    /// A field selector no object here can satisfy (e.g. a non-empty namespace).
    pub selects_nothing: bool,
    /// The `resourceVersion` parameter, parsed (`None`: unset or empty).
    pub resource_version: Option<ResourceVersion>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<VersionMatch>,
    /// `watch=true`.
    pub watch: bool,
    /// `allowWatchBookmarks=true`.
    pub allow_bookmarks: bool,
    /// `timeoutSeconds`, at most [`MAX_WATCH_TIMEOUT_SECONDS`]; `None` when absent or 0, which
    /// kube-apiserver reads as "no timeout given" (the server's default applies).
    pub timeout_seconds: Option<u64>,
    /// `sendInitialEvents=true`.
    pub send_initial_events: bool,
    /// Whether `sendInitialEvents` was given at all (`false` too): a list refuses either.
    send_initial_events_given: bool,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `includeObject` for Tables.
    pub include_object: IncludeObject,
    /// The `continue` token of a paged list, still encoded.
    pub continue_token: Option<String>,
    /// `limit`: the page size (`None`: no paging).
    pub limit: Option<usize>,
    /// What to do about fields the schema does not know.
    pub field_validation: FieldValidation,
    /// DeleteOptions given as parameters (kube-apiserver reads them when a DELETE has no body).
    pub delete: DeleteParameters,
}

/// The DeleteOptions fields a DELETE may give as query parameters.
#[derive(Debug, Default, Clone)]
pub struct DeleteParameters {
    /// `propagationPolicy`, unchecked (the DELETE handler validates it with the body's).
    pub propagation_policy: Option<String>,
    /// `orphanDependents` (deprecated).
    pub orphan_dependents: Option<bool>,
}

/// `fieldValidation`: what happens to unknown fields in a written object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and say so in `Warning` headers (the server default).
    #[default]
    Warn,
    /// Refuse the request.
    Strict,
}

/// A resourceVersion as clients send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceVersion {
    /// `"0"`: any state will do.
    Any,
    /// A specific revision.
    At(u64),
}

/// `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionMatch {
    /// At least as new as the given revision.
    NotOlderThan,
    /// Exactly the given revision.
    Exact,
}

/// What a Table row carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

/// One `metadata.name` field-selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTerm {
    /// The value compared with.
    pub value: String,
    /// True for `!=`.
    pub negated: bool,
}

impl Options {
    /// Whether an object with this name and these labels passes the selectors.
    pub fn selects(&self, name: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        !self.selects_nothing
            && self.fields.iter().all(|term| (term.value == name) != term.negated)
            && selector::matches(&self.labels, labels.unwrap_or(&EMPTY))
    }

    /// The checks kube-apiserver's `ValidateListOptions` makes of a list (not a watch: the watch
    /// checks its own), every problem at once as a 422 `ListOptions` Status.
    pub(crate) fn check_list(&self) -> Result<(), ApiError> {
        let mut errors = FieldErrors::default();
        let version_match = || FieldPath::new("resourceVersionMatch");
        if let Some(wanted) = self.resource_version_match {
            if self.resource_version.is_none() {
                errors.push(FieldError::forbidden(
                    version_match(),
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if self.continue_token.is_some() {
                errors.push(FieldError::forbidden(
                    version_match(),
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if wanted == VersionMatch::Exact && self.resource_version == Some(ResourceVersion::Any) {
                errors.push(FieldError::forbidden(
                    version_match(),
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events_given {
            errors.push(FieldError::forbidden(
                FieldPath::new("sendInitialEvents"),
                "sendInitialEvents is forbidden for list",
            ));
        }
        errors.into_result().map_err(|errors| ApiError::invalid_options_of("ListOptions", &errors))
    }

    /// True when no selector narrows the result.
    pub(crate) fn selects_everything(&self) -> bool {
        self.fields.is_empty()
            && !self.selects_nothing
            && self.labels.match_expressions.as_ref().is_none_or(Vec::is_empty)
            && self.labels.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
    }
}

impl TryFrom<RawQuery> for Options {
    type Error = ApiError;

    fn try_from(raw: RawQuery) -> Result<Self, ApiError> {
        let mut options = Options {
            watch: flag(raw.watch.as_deref(), "watch")?,
            allow_bookmarks: flag(raw.allow_watch_bookmarks.as_deref(), "allowWatchBookmarks")?,
            send_initial_events: flag(raw.send_initial_events.as_deref(), "sendInitialEvents")?,
            send_initial_events_given: raw.send_initial_events.as_deref().is_some_and(|v| !v.is_empty()),
            continue_token: raw.continue_.filter(|c| !c.is_empty()),
            limit: crate::paging::parse_limit(raw.limit.as_deref())?,
            ..Options::default()
        };
        if let Some(text) = raw.label_selector.as_deref().filter(|s| !s.trim().is_empty()) {
            options.labels = parse_label_selector(text)?;
        }
        if let Some(text) = raw.field_selector.as_deref().filter(|s| !s.trim().is_empty()) {
            (options.fields, options.selects_nothing) = parse_field_selector(text)?;
        }
        options.resource_version = match raw.resource_version.as_deref() {
            None | Some("") => None,
            Some("0") => Some(ResourceVersion::Any),
            Some(text) => Some(ResourceVersion::At(text.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid resourceVersion {text:?}: must be a resourceVersion returned by this server"
                ))
            })?)),
        };
        options.resource_version_match = match raw.resource_version_match.as_deref() {
            None | Some("") => None,
            Some("NotOlderThan") => Some(VersionMatch::NotOlderThan),
            Some("Exact") => Some(VersionMatch::Exact),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
                )));
            }
        };
        options.timeout_seconds = match raw.timeout_seconds.as_deref() {
            None | Some("") => None,
            Some(text) => {
                let seconds: u64 = text.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid timeoutSeconds {text:?}: must be a non-negative integer"))
                })?;
                (seconds > 0).then_some(seconds.min(MAX_WATCH_TIMEOUT_SECONDS))
            }
        };
        options.dry_run = dry_run(&raw.dry_run)?;
        options.field_validation = match raw.field_validation.as_deref() {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Ignore") => FieldValidation::Ignore,
            Some("Strict") => FieldValidation::Strict,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Warn\", \"Strict\""
                )));
            }
        };
        options.delete = DeleteParameters {
            propagation_policy: raw.propagation_policy.filter(|p| !p.is_empty()),
            orphan_dependents: match raw.orphan_dependents.as_deref() {
                None | Some("") => None,
                Some(text) => Some(flag(Some(text), "orphanDependents")?),
            },
        };
        // `gracePeriodSeconds` is checked, and without effect, as for every custom resource.
        if let Some(text) = raw.grace_period_seconds.as_deref().filter(|text| !text.is_empty()) {
            let invalid = |_| ApiError::bad_request(format!("invalid gracePeriodSeconds {text:?}: must be an integer"));
            text.parse::<i64>().map_err(invalid)?;
        }
        options.include_object = match raw.include_object.as_deref() {
            None | Some("") | Some("Metadata") => IncludeObject::Metadata,
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "includeObject: Unsupported value: {other:?}: supported values: \"None\", \"Metadata\", \"Object\""
                )));
            }
        };
        Ok(options)
    }
}

/// `dryRun`, every value of it: all must be `All` (an empty one is read as absent).
fn dry_run(values: &[String]) -> Result<bool, ApiError> {
    let mut dry_run = false;
    for value in values.iter().filter(|v| !v.is_empty()) {
        if value != "All" {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {value:?}: supported values: \"All\""
            )));
        }
        dry_run = true;
    }
    Ok(dry_run)
}

fn flag(value: Option<&str>, name: &str) -> Result<bool, ApiError> {
    match value {
        None | Some("") | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!("invalid {name} {other:?}: must be true or false"))),
    }
}

/// Parses the label-selector syntax of `labels.Parse`: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
/// `a notin (x,y)`, `a`, `!a`, joined by commas.
pub fn parse_label_selector(text: &str) -> Result<LabelSelector, ApiError> {
    let bad =
        |why: String| ApiError::bad_request(format!("unable to parse requirement: {why} (in labelSelector {text:?})"));
    let mut requirements = Vec::new();
    for term in split_terms(text) {
        let term = term.trim();
        if term.is_empty() {
            return Err(bad("empty requirement".into()));
        }
        let requirement = if let Some(key) = term.strip_prefix('!') {
            requirement(key.trim(), "DoesNotExist", Vec::new())
        } else if let Some((key, value)) = term.split_once("!=") {
            requirement(key.trim(), "NotIn", vec![value.trim().to_owned()])
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            requirement(key.trim(), "In", vec![value.trim().to_owned()])
        } else if let Some((key, rest)) = split_set_operator(term) {
            let (operator, values) = rest;
            requirement(key, operator, values)
        } else if term.contains(['<', '>']) {
            return Err(bad(format!("{term:?}: the operators > and < are not supported for this resource")));
        } else {
            requirement(term, "Exists", Vec::new())
        };
        if let Err(why) = selector::check_qualified_name(&requirement.key) {
            return Err(bad(format!("invalid label key {:?}: {why}", requirement.key)));
        }
        for value in requirement.values.iter().flatten() {
            if let Err(why) = selector::check_label_value(value) {
                return Err(bad(format!("invalid label value {value:?}: {why}")));
            }
        }
        requirements.push(requirement);
    }
    Ok(LabelSelector { match_expressions: Some(requirements), match_labels: None })
}

fn requirement(key: &str, operator: &str, values: Vec<String>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: (!values.is_empty()).then_some(values),
    }
}

/// `key in (a,b)` / `key notin (a,b)` → (key, (operator, values)).
fn split_set_operator(term: &str) -> Option<(&str, (&'static str, Vec<String>))> {
    let open = term.find('(')?;
    let close = term.rfind(')')?;
    if close != term.len() - 1 || close < open {
        return None;
    }
    let head = term[..open].trim();
    let (key, operator) = if let Some(key) = head.strip_suffix("notin") {
        (key, "NotIn")
    } else if let Some(key) = head.strip_suffix("in") {
        (key, "In")
    } else {
        return None;
    };
    if !key.ends_with(char::is_whitespace) {
        return None;
    }
    let values = term[open + 1..close].split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect();
    Some((key.trim(), (operator, values)))
}

/// Splits on commas outside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

/// Parses `metadata.name=x`, `metadata.name!=x`, `metadata.namespace=` (cluster-scoped objects
/// have an empty namespace) joined by commas; any other field is a 400, as kube-apiserver has it.
/// Returns the name terms and whether a namespace term rules out every object.
pub fn parse_field_selector(text: &str) -> Result<(Vec<FieldTerm>, bool), ApiError> {
    let (mut terms, mut nothing) = (Vec::new(), false);
    for term in text.split(',').map(str::trim) {
        let (field, value, negated) = if let Some((f, v)) = term.split_once("!=") {
            (f, v, true)
        } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            (f, v, false)
        } else {
            return Err(ApiError::bad_request(format!("invalid selector: {term:?}; can't understand {term:?}")));
        };
        match field.trim() {
            "metadata.name" => terms.push(FieldTerm { value: value.trim().to_owned(), negated }),
            "metadata.namespace" => {
                // Every object here has the empty namespace.
                nothing |= value.trim().is_empty() == negated;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "\"{other}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                )));
            }
        }
    }
    Ok((terms, nothing))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn options(label_selector: &str, field_selector: &str) -> Options {
        Options::try_from(RawQuery {
            label_selector: Some(label_selector.into()),
            field_selector: Some(field_selector.into()),
            ..RawQuery::default()
        })
        .unwrap()
    }

    #[test]
    fn every_label_operator_filters() {
        let set = labels(&[("zone", "a"), ("tier", "cnf")]);
        let rows = [
            ("zone=a", true),
            ("zone==a", true),
            ("zone!=a", false),
            ("zone!=b", true),
            ("missing!=b", true),
            ("zone in (a, b)", true),
            ("zone notin (a,b)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("zone=a,tier in (cnf),!gpu", true),
            ("zone=a,tier=other", false),
        ];
        for (selector, want) in rows {
            assert_eq!(options(selector, "").selects("n", Some(&set)), want, "{selector}");
        }
    }

    #[test]
    fn bad_label_selectors_are_400() {
        for selector in ["zone=a,,tier", "bad key=x", "a=b c", "cpu>4", "zone in (a", "!"] {
            let raw = RawQuery { label_selector: Some(selector.into()), ..RawQuery::default() };
            let error = Options::try_from(raw).unwrap_err();
            assert_eq!(error.code(), http::StatusCode::BAD_REQUEST, "{selector}");
        }
    }

    #[test]
    fn field_selectors_know_name_and_namespace_only() {
        assert!(options("", "metadata.name=worker-0").selects("worker-0", None));
        assert!(!options("", "metadata.name=worker-0").selects("worker-1", None));
        assert!(options("", "metadata.name!=worker-0").selects("worker-1", None));
        assert!(options("", "metadata.namespace=").selects("x", None));
        assert!(!options("", "metadata.namespace=default").selects("x", None));
        let raw = RawQuery { field_selector: Some("spec.nodeName=x".into()), ..RawQuery::default() };
        let error = Options::try_from(raw).unwrap_err();
        assert_eq!(error.code(), http::StatusCode::BAD_REQUEST);
        assert!(error.to_status()["message"].as_str().unwrap().contains("spec.nodeName"));
    }

    #[test]
    fn versions_and_flags() {
        let raw = RawQuery {
            resource_version: Some("0".into()),
            watch: Some("1".into()),
            dry_run: vec!["All".into()],
            timeout_seconds: Some("290".into()),
            ..RawQuery::default()
        };
        let options = Options::try_from(raw).unwrap();
        assert_eq!(options.resource_version, Some(ResourceVersion::Any));
        assert!(options.watch && options.dry_run);
        assert_eq!(options.timeout_seconds, Some(290));
        let raw = RawQuery { resource_version_match: Some("Exact".into()), ..RawQuery::default() };
        assert!(Options::try_from(raw).unwrap().check_list().is_err(), "a list's match needs a resourceVersion");
        let raw = RawQuery { dry_run: vec!["Maybe".into()], ..RawQuery::default() };
        assert!(Options::try_from(raw).is_err());
        let raw = RawQuery { resource_version: Some("abc".into()), ..RawQuery::default() };
        assert!(Options::try_from(raw).is_err());
    }

    #[test]
    fn timeout_seconds_zero_is_no_timeout_and_huge_ones_are_clamped() {
        let timeout = |text: &str| {
            Options::try_from(RawQuery { timeout_seconds: Some(text.into()), ..RawQuery::default() })
                .map(|o| o.timeout_seconds)
        };
        assert_eq!(timeout("0").unwrap(), None);
        assert_eq!(timeout("290").unwrap(), Some(290));
        assert_eq!(timeout("9223372036854775807").unwrap(), Some(MAX_WATCH_TIMEOUT_SECONDS));
        assert_eq!(timeout("18446744073709551615").unwrap(), Some(MAX_WATCH_TIMEOUT_SECONDS));
        for bad in ["-1", "18446744073709551616", "1e3"] {
            assert_eq!(timeout(bad).unwrap_err().code(), http::StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn lists_refuse_what_kube_apiserver_refuses_with_422() {
        let check = |raw: RawQuery| Options::try_from(raw).unwrap().check_list();
        let status = |raw: RawQuery| {
            let error = check(raw).unwrap_err();
            assert_eq!(error.code(), http::StatusCode::UNPROCESSABLE_ENTITY);
            error.to_status()
        };
        for value in ["true", "false"] {
            let refused = status(RawQuery { send_initial_events: Some(value.into()), ..RawQuery::default() });
            assert_eq!(refused["reason"], "Invalid");
            assert_eq!(
                refused["message"],
                "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"
            );
            assert_eq!(refused["details"]["kind"], "ListOptions");
            assert_eq!(refused["details"]["group"], "meta.k8s.io");
            assert_eq!(refused["details"]["causes"][0]["field"], "sendInitialEvents");
            assert_eq!(refused["details"]["causes"][0]["type"], "FieldValueForbidden");
        }
        let exact_zero = status(RawQuery {
            resource_version: Some("0".into()),
            resource_version_match: Some("Exact".into()),
            ..RawQuery::default()
        });
        assert_eq!(
            exact_zero["message"],
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
        );
        let both = status(RawQuery {
            resource_version_match: Some("NotOlderThan".into()),
            continue_: Some("token".into()),
            ..RawQuery::default()
        });
        assert_eq!(both["details"]["causes"].as_array().unwrap().len(), 2, "every problem at once: {both}");
        // What lists may do.
        for (rv, version_match) in [("0", "NotOlderThan"), ("12", "Exact"), ("12", "NotOlderThan")] {
            let raw = RawQuery {
                resource_version: Some(rv.into()),
                resource_version_match: Some(version_match.into()),
                ..RawQuery::default()
            };
            assert!(check(raw).is_ok(), "{rv} {version_match}");
        }
        assert!(check(RawQuery { send_initial_events: Some(String::new()), ..RawQuery::default() }).is_ok());
    }
}
