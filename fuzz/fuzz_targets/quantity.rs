//! Quantities: parse, print, and parse the printed form again (the canonical form must parse
//! back to the same value, and print as the same text: printing is a fixed point).
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaresources_api::quantity::Quantity;

fuzz_target!(|text: &str| {
    if let Ok(quantity) = Quantity::parse(text) {
        let printed = quantity.to_string();
        let again = Quantity::parse(&printed).expect("the canonical form parses");
        assert_eq!(again, quantity, "{text} printed as {printed}");
        assert_eq!(again.to_string(), printed, "{text}: the canonical form {printed} is not a fixed point");
    }
});
