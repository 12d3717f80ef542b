//! YAML bodies through the bounded parser with every nesting bound an operator may set: never
//! a panic or a stack overflow, nothing deeper than the bound comes out, and a body that
//! parses keeps parsing with a larger bound (to the same value).
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaresources_apiserver::body::{DEFAULT_MAX_NESTING_DEPTH, Syntax, parse};
use serde_json::Value;

fn depth(value: &Value) -> usize {
    let mut stack = vec![(value, 0usize)];
    let mut deepest = 0;
    while let Some((value, level)) = stack.pop() {
        deepest = deepest.max(level);
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, level + 1))),
            Value::Object(fields) => stack.extend(fields.values().map(|v| (v, level + 1))),
            _ => {}
        }
    }
    deepest
}

fuzz_target!(|data: &[u8]| {
    let Some((&bound, body)) = data.split_first() else { return };
    let bound = usize::from(bound) % DEFAULT_MAX_NESTING_DEPTH + 1;
    for syntax in [Syntax::Yaml, Syntax::Json] {
        if let Ok(parsed) = parse(body, syntax, bound) {
            assert!(depth(&parsed.value) <= bound, "{syntax:?} deeper than {bound}");
            let again = parse(body, syntax, DEFAULT_MAX_NESTING_DEPTH).expect("a larger bound accepts it too");
            assert_eq!(again, parsed);
        }
    }
});
