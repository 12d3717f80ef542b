//! apimachinery's name checks (`k8s.io/apimachinery/pkg/util/validation`), with its exact
//! messages: each returns every problem found, empty when the value is valid.

/// The longest DNS-1123 subdomain (object names of most kinds, label and annotation prefixes).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// The longest name part of a qualified name (label keys, annotation keys, finalizers).
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// The longest label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_ERROR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
     characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERROR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and \
     end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERROR: &str = "a valid label must be an empty string or consist of alphanumeric characters, \
     '-', '_' or '.', and must start and end with an alphanumeric character";

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errors.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let labels_ok = value.split('.').all(|label| {
        let bytes = label.as_bytes();
        bytes.first().is_some_and(is_lower_alnum)
            && bytes.last().is_some_and(is_lower_alnum)
            && bytes.iter().all(|b| is_lower_alnum(b) || *b == b'-')
    });
    if !labels_ok {
        let format = format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*");
        errors.push(regex_error(DNS1123_SUBDOMAIN_ERROR, &format, &["example.com"]));
    }
    errors
}

/// `IsQualifiedName`: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                errors.extend(dns1123_subdomain(prefix).into_iter().map(|e| format!("prefix part {e}")));
            }
            *name
        }
        _ => {
            let shape = regex_error(QUALIFIED_NAME_ERROR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"]);
            errors.push(format!(
                "a qualified name {shape} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
            return errors;
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errors.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX_LENGTH)));
    }
    if !is_qualified_shape(name) {
        let shape = regex_error(QUALIFIED_NAME_ERROR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"]);
        errors.push(format!("name part {shape}"));
    }
    errors
}

/// `IsValidLabelValue`: empty, or at most 63 alphanumerics, `-`, `_` or `.`, starting and
/// ending alphanumeric.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errors.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !is_qualified_shape(value) {
        errors.push(regex_error(LABEL_VALUE_ERROR, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errors
}

/// `NameIsDNSSubdomain`, the object-name rule custom resources follow. A `generateName`
/// (`prefix`) may end in `-`: a suffix follows it.
pub fn name_is_dns_subdomain(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        return dns1123_subdomain(&mask_trailing_dash(name));
    }
    dns1123_subdomain(name)
}

/// apimachinery's `maskTrailingDash`, faithfully (it drops the last two characters for one
/// `a`, which only matters for the length check).
fn mask_trailing_dash(name: &str) -> String {
    match name.strip_suffix('-') {
        // Not at a character boundary: the name is not ASCII, which the check refuses anyway.
        Some(_) if name.len() > 1 => {
            name.get(..name.len() - 2).map_or_else(|| name.to_owned(), |head| format!("{head}a"))
        }
        _ => name.to_owned(),
    }
}

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `RegexError`, with its spacing (`'MyName',  or 'my.name'`).
fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let mut text = format!("{message} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            text.push_str(" or ");
        }
        text.push_str(&format!("'{example}', "));
    }
    text.push_str(&format!("regex used for validation is '{format}')"));
    text
}

fn is_qualified_shape(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_lower_alnum(b: &u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_apimachinerys() {
        assert_eq!(
            dns1123_subdomain("BAD_"),
            ["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and \
              must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is \
              '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
        );
        assert_eq!(
            qualified_name("bad key!"),
            ["name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
              alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
              '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]
        );
        assert_eq!(label_value(&"a".repeat(64)), ["must be no more than 63 characters"]);
        assert_eq!(qualified_name("/a"), ["prefix part must be non-empty"]);
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert_eq!(qualified_name("").len(), 2, "empty, and not of the shape");
    }

    #[test]
    fn valid_values_pass() {
        for name in ["a", "worker-0", "a.b.c", "0"] {
            assert!(dns1123_subdomain(name).is_empty(), "{name}");
        }
        for key in ["a", "A_b.c-D", "example.com/x", "kubernetes.io/hostname"] {
            assert!(qualified_name(key).is_empty(), "{key}");
        }
        for value in ["", "a", "A_b.c-D"] {
            assert!(label_value(value).is_empty(), "{value}");
        }
        for refused in ["a.", ".a", "a..b", "-a", "A", "a_b"] {
            assert!(!dns1123_subdomain(refused).is_empty(), "{refused}");
        }
    }

    #[test]
    fn a_generate_name_may_end_in_a_dash() {
        assert!(name_is_dns_subdomain("worker-", true).is_empty());
        assert!(!name_is_dns_subdomain("worker-", false).is_empty());
        assert!(!name_is_dns_subdomain("BAD_", true).is_empty());
        assert!(!name_is_dns_subdomain("é-", true).is_empty(), "bytes, not characters, and no panic");
    }
}
