//! Field paths and field errors, shaped like apimachinery's `field.Error` so that messages read
//! the way kubectl users know them: `spec.nodeGroups[1].poolName: Required value: …`.

use std::fmt;

/// A path to a field: `spec.nodeGroups[0].config.infoRefreshPeriod`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FieldPath(String);

impl FieldPath {
    /// A path that starts at a top-level field (`spec`, `metadata`).
    pub fn new(root: &str) -> Self {
        Self(root.to_owned())
    }

    /// The path to a child field.
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            return Self::new(name);
        }
        Self(format!("{}.{name}", self.0))
    }

    /// The path to a list element.
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// The path to a map entry.
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What is wrong with a field; the names and wording are apimachinery's `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A required field is missing or empty.
    Required,
    /// The value is malformed or out of range.
    Invalid,
    /// The value repeats one that must be unique.
    Duplicate,
    /// The value is not one of an enumerated set.
    NotSupported,
    /// The field may not be set (in this combination).
    Forbidden,
    /// A list or map has too many entries.
    TooMany,
    /// A value (or all of a map's entries together) is longer than allowed.
    TooLong,
}

impl ErrorKind {
    /// The phrase kubectl users see after the field path.
    pub fn phrase(&self) -> &'static str {
        match self {
            Self::Required => "Required value",
            Self::Invalid => "Invalid value",
            Self::Duplicate => "Duplicate value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::TooMany => "Too many",
            Self::TooLong => "Too long",
        }
    }

    /// The `metav1.StatusCause.type` for this kind (`FieldValueRequired`, …).
    pub fn cause_type(&self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::Duplicate => "FieldValueDuplicate",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooMany => "FieldValueTooMany",
            Self::TooLong => "FieldValueTooLong",
        }
    }
}

/// One problem with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Where the problem is.
    pub path: FieldPath,
    /// What kind of problem it is.
    pub kind: ErrorKind,
    /// The offending value, when showing it helps.
    pub value: Option<String>,
    /// What a person should know to fix it.
    pub detail: String,
}

impl FieldError {
    /// A required field is missing.
    pub fn required(path: FieldPath, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Required, None, detail)
    }

    /// A value is malformed or out of range.
    pub fn invalid(path: FieldPath, value: impl fmt::Display, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Invalid, Some(value.to_string()), detail)
    }

    /// A value repeats one that must be unique.
    pub fn duplicate(path: FieldPath, value: impl fmt::Display) -> Self {
        Self::new(path, ErrorKind::Duplicate, Some(value.to_string()), "")
    }

    /// A value outside an enumerated set.
    pub fn not_supported(path: FieldPath, value: impl fmt::Display, supported: &[&str]) -> Self {
        let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        let detail = format!("supported values: {}", quoted.join(", "));
        Self::new(path, ErrorKind::NotSupported, Some(value.to_string()), detail)
    }

    /// A field that may not be set.
    pub fn forbidden(path: FieldPath, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Forbidden, None, detail)
    }

    /// A list or map with more than `limit` entries.
    pub fn too_many(path: FieldPath, actual: usize, limit: usize) -> Self {
        let detail = format!("must have at most {limit} items");
        Self::new(path, ErrorKind::TooMany, Some(actual.to_string()), detail)
    }

    /// A value longer than `limit` bytes (apimachinery omits the value).
    pub fn too_long(path: FieldPath, limit: usize) -> Self {
        let unit = if limit == 1 { "byte" } else { "bytes" };
        Self::new(path, ErrorKind::TooLong, None, format!("may not be more than {limit} {unit}"))
    }

    fn new(path: FieldPath, kind: ErrorKind, value: Option<String>, detail: impl Into<String>) -> Self {
        Self { path, kind, value, detail: detail.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.kind.phrase())?;
        match (&self.value, self.kind) {
            (Some(value), ErrorKind::TooMany) => write!(f, ": {value}")?,
            (Some(value), _) => write!(f, ": {value:?}")?,
            (None, _) => {}
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Every problem found in one object, in the order the fields appear.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    /// True when nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Records one problem.
    pub fn push(&mut self, error: FieldError) {
        self.0.push(error);
    }

    /// Records several problems.
    pub fn extend(&mut self, errors: impl IntoIterator<Item = FieldError>) {
        self.0.extend(errors);
    }

    /// The problems, in order.
    pub fn iter(&self) -> impl Iterator<Item = &FieldError> {
        self.0.iter()
    }

    /// `Ok(())` when nothing is wrong, else every problem.
    pub fn into_result(self) -> Result<(), Self> {
        if self.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl fmt::Display for FieldErrors {
    /// All problems in one line, as kube-apiserver aggregates them: `[a, b]` for several.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [] => Ok(()),
            [one] => write!(f, "{one}"),
            many => {
                f.write_str("[")?;
                for (i, error) in many.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{error}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl std::error::Error for FieldErrors {}

impl IntoIterator for FieldErrors {
    type Item = FieldError;
    type IntoIter = std::vec::IntoIter<FieldError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_like_apimachinery() {
        let groups = FieldPath::new("spec").child("nodeGroups");
        let cases = [
            (
                FieldError::required(groups.index(1).child("poolName"), "must not be empty"),
                "spec.nodeGroups[1].poolName: Required value: must not be empty",
            ),
            (
                FieldError::not_supported(FieldPath::new("spec").child("logLevel"), "Loud", &["Normal", "Debug"]),
                "spec.logLevel: Unsupported value: \"Loud\": supported values: \"Normal\", \"Debug\"",
            ),
            (
                FieldError::too_many(groups.index(0).child("annotations"), 9, 8),
                "spec.nodeGroups[0].annotations: Too many: 9: must have at most 8 items",
            ),
            (
                FieldError::duplicate(groups.index(2).child("poolName"), "worker"),
                "spec.nodeGroups[2].poolName: Duplicate value: \"worker\"",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.to_string(), want);
        }
    }

    #[test]
    fn several_errors_are_bracketed() {
        let mut errors = FieldErrors::default();
        errors.push(FieldError::forbidden(FieldPath::new("a"), "x"));
        errors.push(FieldError::forbidden(FieldPath::new("b"), "y"));
        assert_eq!(errors.to_string(), "[a: Forbidden: x, b: Forbidden: y]");
    }
}
