//! Request bodies (JSON, or YAML as kubectl and curl users send it) parsed into JSON values,
//! with a bound on everything a hostile body could make cost more than linear time or memory.
//!
//! * Nesting is bounded ([`DEFAULT_MAX_NESTING_DEPTH`], `--max-nesting-depth`). serde_json
//!   refuses more than 128 levels itself and parses linearly; YAML parsers are another story:
//!   a libyaml-style scanner rescans every open flow level for each token, so `a: [[[[…` cost
//!   quadratic time (100,000 brackets: 13 s). The YAML parser here is told the bound, stops at
//!   the first level too deep, and its node, event, alias and scalar budgets are sized from the
//!   body, so what it builds is linear in what was sent.
//! * Repeated keys are kept as kube-apiserver keeps them (the last one wins) and reported, so
//!   that `fieldValidation=Strict` can refuse them and `Warn` can say so.
//! * A large body is parsed on the blocking pool, a few at a time
//!   ([`parse_off_the_runtime`]), so that no async worker (and no `/healthz`) waits behind it.

use std::fmt;
use std::sync::OnceLock;

use bytes::Bytes;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use tokio::sync::Semaphore;

use crate::status::ApiError;

/// The deepest a body may nest (objects and arrays), by default. It is also the most an
/// operator may set: serde_json refuses deeper JSON whatever we say.
pub const DEFAULT_MAX_NESTING_DEPTH: usize = 128;

/// The YAML parser recurses once per level, with large frames: 128 levels take up to 512 KiB
/// of stack in a release build and up to 4 MiB in a debug one, more than an async worker
/// (or a test thread) has. It runs on a thread of its own with this much (reserved, and only
/// touched as deep as the body goes).
const YAML_PARSE_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Bodies up to this size are parsed in place: parsing them costs well under a millisecond.
pub(crate) const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// At most this many repeated keys are reported for one body (the rest are still resolved the
/// same way, last wins): they become `Warning` headers.
const MAX_REPORTED_DUPLICATES: usize = 64;

/// The two syntaxes a body may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// `application/json` (and the JSON patch types).
    Json,
    /// `application/yaml`.
    Yaml,
}

/// A parsed body: the value, and the paths of keys it repeats (`metadata.name`,
/// `zones[0].type`), as kube-apiserver's strict decoding names them.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The body as a JSON value (for a repeated key, its last value).
    pub value: Value,
    /// Keys given more than once, in the order they were met.
    pub duplicates: Vec<String>,
}

/// Parses `body`, refusing more than `max_depth` levels of nesting. Linear in the body's size.
pub fn parse(body: &[u8], syntax: Syntax, max_depth: usize) -> Result<Parsed, ApiError> {
    let mut builder = Builder { path: String::new(), duplicates: Vec::new(), depth: 0, max_depth };
    let value = match syntax {
        Syntax::Json => {
            let mut deserializer = serde_json::Deserializer::from_slice(body);
            Node(&mut builder)
                .deserialize(&mut deserializer)
                .and_then(|value| deserializer.end().map(|()| value))
                .map_err(|e| ApiError::bad_request(format!("the body of the request is not valid JSON: {e}")))?
        }
        Syntax::Yaml => on_a_large_stack(|| {
            serde_saphyr::with_deserializer_from_slice_with_options(
                body,
                yaml_options(body.len(), max_depth),
                |deserializer| Node(&mut builder).deserialize(deserializer),
            )
        })?
        .map_err(|e| ApiError::bad_request(format!("the body of the request is not valid YAML: {e}")))?,
    };
    Ok(Parsed { value, duplicates: builder.duplicates })
}

/// Runs `work` on a thread of its own with a [`YAML_PARSE_STACK_BYTES`] stack, and waits.
fn on_a_large_stack<T: Send>(work: impl FnOnce() -> T + Send) -> Result<T, ApiError> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("yaml-parse".into())
            .stack_size(YAML_PARSE_STACK_BYTES)
            .spawn_scoped(scope, work)
            .map_err(|e| ApiError::internal("starting the YAML parser", &e))?;
        thread.join().map_err(|_| ApiError::internal("parsing YAML", &"the parser panicked"))
    })
}

/// [`parse`], on the blocking pool when the body is large enough to take more than a
/// millisecond or so, with at most one such parse per runtime worker at a time (the others
/// wait here, asynchronously).
pub async fn parse_off_the_runtime(body: Bytes, syntax: Syntax, max_depth: usize) -> Result<Parsed, ApiError> {
    if body.len() <= INLINE_PARSE_BYTES {
        return parse(&body, syntax, max_depth);
    }
    let _permit = parse_permits().acquire().await.map_err(|e| ApiError::internal("waiting to parse the body", &e))?;
    tokio::task::spawn_blocking(move || parse(&body, syntax, max_depth))
        .await
        .map_err(|e| ApiError::internal("parsing the body", &e))?
}

/// As many parses at once as the runtime has workers (`--worker-threads`), not as the node has
/// CPUs: each holds a parsed body, up to ≈10 times the body's size.
fn parse_permits() -> &'static Semaphore {
    static PERMITS: OnceLock<Semaphore> = OnceLock::new();
    PERMITS.get_or_init(|| Semaphore::new(tokio::runtime::Handle::current().metrics().num_workers()))
}

/// The YAML parser's budget for a body of `len` bytes: nesting as for JSON, and no more nodes,
/// events or scalar bytes than such a body can honestly hold (aliases may repeat what was
/// written, but not without limit).
fn yaml_options(len: usize, max_depth: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = max_depth;
    budget.flow_nesting_limit = max_depth;
    budget.max_reader_input_bytes = Some(len);
    budget.max_nodes = len.saturating_add(1024);
    budget.max_events = len.saturating_mul(2).saturating_add(1024);
    budget.max_total_scalar_bytes = len.saturating_add(1024);
    budget.max_documents = 1;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // Repeated keys reach our visitor, which keeps the last and reports them.
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    options.with_snippet = false;
    options
}

/// What the visitor keeps while it walks the body.
struct Builder {
    /// Where it is, as strict decoding errors name fields (`zones[0].resources`).
    path: String,
    duplicates: Vec<String>,
    depth: usize,
    max_depth: usize,
}

impl Builder {
    fn enter<E: serde::de::Error>(&mut self) -> Result<(), E> {
        if self.depth >= self.max_depth {
            return Err(E::custom(format!("nesting exceeds the limit of {} levels", self.max_depth)));
        }
        self.depth += 1;
        Ok(())
    }
}

/// One value of the body, built into a [`Value`] as serde_json's own visitor would.
struct Node<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let builder = self.0;
        builder.enter()?;
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        let at = builder.path.len();
        loop {
            builder.path.push_str(&format!("[{}]", items.len()));
            let item = seq.next_element_seed(Node(builder));
            builder.path.truncate(at);
            match item? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        builder.depth -= 1;
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let builder = self.0;
        builder.enter()?;
        let mut object = Map::new();
        let at = builder.path.len();
        while let Some(key) = map.next_key::<String>()? {
            if at > 0 {
                builder.path.push('.');
            }
            builder.path.push_str(&key);
            let value = map.next_value_seed(Node(builder));
            let value = match value {
                Ok(value) => value,
                Err(error) => {
                    builder.path.truncate(at);
                    return Err(error);
                }
            };
            if object.insert(key, value).is_some() && builder.duplicates.len() < MAX_REPORTED_DUPLICATES {
                builder.duplicates.push(builder.path.clone());
            }
            builder.path.truncate(at);
        }
        builder.depth -= 1;
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Result<Parsed, ApiError> {
        parse(text.as_bytes(), Syntax::Yaml, DEFAULT_MAX_NESTING_DEPTH)
    }

    #[test]
    fn yaml_and_json_give_the_same_values() {
        let json = br#"{"a": [1, -2, 1.5, "x", true, null], "b": {"c": "d"}}"#;
        let from_json = parse(json, Syntax::Json, 8).unwrap();
        let from_yaml = yaml("a: [1, -2, 1.5, x, true, ~]\nb:\n  c: d\n").unwrap();
        assert_eq!(from_json, from_yaml);
        assert!(from_json.duplicates.is_empty());
    }

    #[test]
    fn nesting_deeper_than_the_bound_is_refused_in_either_syntax() {
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        for syntax in [Syntax::Json, Syntax::Yaml] {
            assert!(parse(deep(10).as_bytes(), syntax, 10).is_ok(), "{syntax:?}");
            let refused = parse(deep(11).as_bytes(), syntax, 10).unwrap_err();
            assert_eq!(refused.code().as_u16(), 400, "{syntax:?}");
        }
        // Unclosed brackets, the quadratic case for libyaml-style parsers: refused at once.
        let attack = format!("a: {}", "[".repeat(1_000_000));
        assert_eq!(yaml(&attack).unwrap_err().code().as_u16(), 400);
        let attack = format!("a: {}", "{a: ".repeat(500_000));
        assert_eq!(yaml(&attack).unwrap_err().code().as_u16(), 400);
    }

    #[test]
    fn repeated_keys_keep_the_last_value_and_are_named_by_path() {
        let json = br#"{"metadata": {"name": "a", "name": "b"}, "zones": [{"type": "x", "type": "Node"}]}"#;
        let parsed = parse(json, Syntax::Json, 8).unwrap();
        assert_eq!(parsed.value["metadata"]["name"], "b");
        assert_eq!(parsed.duplicates, ["metadata.name", "zones[0].type"]);
        let parsed = yaml("kind: a\nkind: b\n").unwrap();
        assert_eq!(parsed.value["kind"], "b");
        assert_eq!(parsed.duplicates, ["kind"]);
    }

    #[test]
    fn alias_bombs_stay_within_the_budget() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (name, previous) in
            ["b", "c", "d", "e", "f", "g", "h", "i"].iter().zip(["a", "b", "c", "d", "e", "f", "g", "h"])
        {
            bomb.push_str(&format!("{name}: &{name} [{}]\n", vec![format!("*{previous}"); 10].join(", ")));
        }
        assert_eq!(yaml(&bomb).unwrap_err().code().as_u16(), 400);
    }
}
