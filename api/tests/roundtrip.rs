//! Property tests: any valid NodeResourceTopology survives JSON and YAML round trips, and every
//! quantity's canonical text is a fixed point of parse-then-print.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use numaresources_api::nrt::{AttributeInfo, CostInfo, NodeResourceTopology, ResourceInfo, Zone};
use numaresources_api::quantity::Quantity;
use proptest::prelude::*;

fn quantity_text() -> impl Strategy<Value = String> {
    let number = prop_oneof!["[0-9]{1,12}", "[0-9]{1,6}\\.[0-9]{1,6}", "\\.[0-9]{1,6}",];
    let suffix = prop_oneof![
        Just(String::new()),
        prop::sample::select(vec!["Ki", "Mi", "Gi", "Ti", "n", "u", "m", "k", "M", "G", "T", "P"])
            .prop_map(String::from),
        (-12i32..12).prop_map(|e| format!("e{e}")),
    ];
    (prop::option::of(prop::sample::select(vec!["+", "-"])), number, suffix)
        .prop_map(|(sign, number, suffix)| format!("{}{number}{suffix}", sign.unwrap_or_default()))
}

/// Texts at the edges of what the parser takes: long digit runs (beyond the 38 digits the
/// mantissa holds), long fractions, every suffix, large exponents.
fn wide_quantity_text() -> impl Strategy<Value = String> {
    let number = prop_oneof!["[0-9]{1,42}", "[0-9]{0,20}\\.[0-9]{1,24}", "[1-9]0{0,60}"];
    let suffix = prop_oneof![
        Just(String::new()),
        prop::sample::select(vec!["Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"])
            .prop_map(String::from),
        (-60i32..60).prop_map(|e| format!("e{e}")),
        any::<i32>().prop_map(|e| format!("E{e}")),
    ];
    (prop::option::of(prop::sample::select(vec!["+", "-"])), number, suffix)
        .prop_map(|(sign, number, suffix)| format!("{}{number}{suffix}", sign.unwrap_or_default()))
}

fn quantity() -> impl Strategy<Value = Quantity> {
    prop_oneof![
        any::<i64>().prop_map(Quantity::from_i64),
        (0i64..1 << 40).prop_map(Quantity::from_i64_binary),
        quantity_text().prop_map(|text| Quantity::parse(&text).expect("generated from the grammar")),
    ]
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,10}(/[a-z0-9_.]{1,8})?"
}

fn resource() -> impl Strategy<Value = ResourceInfo> {
    (name(), quantity(), quantity(), quantity()).prop_map(|(name, capacity, allocatable, available)| ResourceInfo {
        name: name.into(),
        capacity,
        allocatable,
        available,
    })
}

fn attribute() -> impl Strategy<Value = AttributeInfo> {
    (name(), ".{0,16}").prop_map(|(name, value)| AttributeInfo { name: name.into(), value: value.into() })
}

fn zone() -> impl Strategy<Value = Zone> {
    (
        (0u32..64).prop_map(|id| format!("node-{id}")),
        prop::sample::select(vec!["Node", "Socket"]),
        prop::option::of(name()),
        prop::collection::vec(
            (name(), 0i64..256).prop_map(|(name, value)| CostInfo { name: name.into(), value }),
            0..4,
        ),
        prop::collection::vec(attribute(), 0..3),
        prop::collection::vec(resource(), 0..5),
    )
        .prop_map(|(name, zone_type, parent, costs, attributes, resources)| Zone {
            name: name.into(),
            zone_type: zone_type.into(),
            parent: parent.unwrap_or_default().into(),
            costs,
            attributes,
            resources,
        })
}

fn topology() -> impl Strategy<Value = NodeResourceTopology> {
    (
        name(),
        prop::collection::btree_map("[a-z]{1,8}", "[a-z0-9]{0,8}", 0..3),
        prop::collection::vec(prop::sample::select(vec!["SingleNUMANodeContainerLevel", "None"]), 0..2),
        prop::collection::vec(zone(), 0..4),
        prop::collection::vec(attribute(), 0..4),
    )
        .prop_map(|(node, labels, policies, zones, attributes)| NodeResourceTopology {
            metadata: ObjectMeta {
                name: Some(node),
                labels: (!labels.is_empty()).then_some(labels as BTreeMap<_, _>),
                ..ObjectMeta::default()
            },
            topology_policies: policies.into_iter().map(String::from).collect(),
            zones,
            attributes,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn json_round_trip_preserves_every_topology(nrt in topology()) {
        let json = serde_json::to_string(&nrt).unwrap();
        let back: NodeResourceTopology = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&back, &nrt);
        // What we print reads back as itself: a replayed version shows what the live one did.
        prop_assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }

    #[test]
    fn yaml_round_trip_preserves_every_topology(nrt in topology()) {
        let yaml = serde_norway::to_string(&nrt).unwrap();
        let back: NodeResourceTopology = serde_norway::from_str(&yaml).unwrap();
        prop_assert_eq!(back, nrt);
    }

    #[test]
    fn canonical_form_is_the_same_topology_and_idempotent(nrt in topology()) {
        let canonical = nrt.clone().canonical();
        prop_assert!(canonical.same_topology(&nrt));
        prop_assert_eq!(canonical.clone().canonical(), canonical);
    }

    #[test]
    fn canonical_quantity_text_is_a_fixed_point(text in quantity_text()) {
        let q = Quantity::parse(&text).unwrap();
        let printed = q.to_string();
        let again = Quantity::parse(&printed).unwrap();
        prop_assert_eq!(again, q, "{} printed as {}", text, printed);
        prop_assert_eq!(again.to_string(), printed);
    }

    #[test]
    fn any_accepted_quantity_prints_text_that_reads_back_as_itself(text in wide_quantity_text()) {
        if let Ok(q) = Quantity::parse(&text) {
            let printed = q.to_string();
            let again = Quantity::parse(&printed);
            prop_assert_eq!(again.clone(), Ok(q), "{} printed as {}", text, printed);
            prop_assert_eq!(again.unwrap().to_string(), printed);
        }
    }

    #[test]
    fn quantity_parser_never_panics(text in ".{0,24}") {
        let _ = Quantity::parse(&text);
    }
}

#[test]
fn zones_are_always_an_array() {
    let json = serde_json::to_value(NodeResourceTopology::new("n")).unwrap();
    assert_eq!(json["zones"], serde_json::json!([]));
    assert!(json.get("attributes").is_none() && json.get("topologyPolicies").is_none());
    let read: NodeResourceTopology =
        serde_json::from_str(r#"{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology","metadata":{"name":"n"},"zones":null}"#)
            .unwrap();
    assert!(read.zones.is_empty());
}
