use proptest::prelude::*;

use super::*;

fn sign(pods: &[(&str, &str)]) -> String {
    let mut fingerprint = Fingerprint::new();
    for (namespace, name) in pods {
        fingerprint.add(namespace, name);
    }
    fingerprint.sign()
}

// Test vectors from an independent implementation of algorithm v001 that reproduces upstream's
// expected values. Upstream's own vector (its testdata/pods.json, 259 pods,
// `pfp0v001e477a4e3b2fc0ec6`) needs upstream's data file, which we do not have.

#[test]
fn the_empty_pod_set_signs_as_the_hash_of_nothing() {
    assert_eq!(sign(&[]), "pfp0v001ef46db3751d8e999");
}

#[test]
fn one_pod_signs_as_upstream() {
    assert_eq!(sign(&[("default", "pod-a")]), "pfp0v0019131e707ccadb65c");
}

#[test]
fn two_pods_sign_as_upstream_in_either_order() {
    assert_eq!(sign(&[("default", "pod-a"), ("kube-system", "pod-b")]), "pfp0v0013c74a72bae9bd313");
    assert_eq!(sign(&[("kube-system", "pod-b"), ("default", "pod-a")]), "pfp0v0013c74a72bae9bd313");
}

#[test]
fn the_telco_pod_of_the_realistic_nrt_signs_as_upstream() {
    assert_eq!(sign(&[("telco", "dpdk-app-7c9f8b6d5-x2k4q")]), "pfp0v001a9cddfe43845cd3a");
}

#[test]
fn a_pod_hash_seeds_the_name_with_the_namespace_hash() {
    // No separator: moving a character between namespace and name changes the hash.
    assert_ne!(pod_hash("default", "pod-a"), pod_hash("defaul", "tpod-a"));
    assert_eq!(pod_hash("", ""), xxh64(b"", xxh64(b"", 0)));
}

#[test]
fn duplicates_count_twice() {
    assert_ne!(sign(&[("default", "pod-a")]), sign(&[("default", "pod-a"), ("default", "pod-a")]));
}

#[test]
fn check_accepts_the_same_pod_set_and_sorts_the_three_failures() {
    let mut fingerprint = Fingerprint::new();
    fingerprint.add("default", "pod-a");
    assert_eq!(fingerprint.check("pfp0v0019131e707ccadb65c"), Ok(()));
    for malformed in ["", "pfp0v001", "pfp0v0019131e70", "xfp0v0019131e707ccadb65c", "PFP0v0019131e707ccadb65c"] {
        assert_eq!(fingerprint.check(malformed), Err(CheckError::Malformed(malformed.to_owned())), "{malformed}");
    }
    assert_eq!(
        fingerprint.check("pfp0v0029131e707ccadb65c"),
        Err(CheckError::IncompatibleVersion { found: "v002".to_owned() })
    );
    let computed = "pfp0v0019131e707ccadb65c".to_owned();
    for other in
        ["pfp0v001ef46db3751d8e999", "pfp0v0019131E707CCADB65C", "pfp0v0019131e707ccadb65c0", "pfp0v00112345678"]
    {
        assert_eq!(
            fingerprint.check(other),
            Err(CheckError::Mismatch { expected: other.to_owned(), computed: computed.clone() }),
            "{other}"
        );
    }
    // Non-ASCII never panics on the byte slicing.
    assert!(fingerprint.check("pfp0vé01234567890123").is_err());
    assert!(fingerprint.check("pfp0ééééééééééé").is_err());
}

#[test]
fn methods_have_upstreams_wire_strings() {
    for method in [Method::All, Method::WithExclusiveResources] {
        assert_eq!(method.as_str().parse::<Method>(), Ok(method));
        assert_eq!(method.to_string(), method.as_str());
    }
    assert_eq!(Method::All.as_str(), "all");
    assert_eq!(Method::default().as_str(), "with-exclusive-resources");
    assert_eq!("All".parse::<Method>(), Err(UnknownMethod("All".to_owned())));
}

struct Pod {
    namespace: &'static str,
    name: &'static str,
    exclusive: bool,
}

impl FingerprintPod for Pod {
    fn namespace(&self) -> &str {
        self.namespace
    }
    fn name(&self) -> &str {
        self.name
    }
    fn has_exclusive_resources(&self) -> bool {
        self.exclusive
    }
}

#[test]
fn from_pods_selects_by_method() {
    let pods = [
        Pod { namespace: "default", name: "pod-a", exclusive: true },
        Pod { namespace: "kube-system", name: "pod-b", exclusive: false },
    ];
    assert_eq!(Fingerprint::from_pods(Method::All, &pods).sign(), "pfp0v0013c74a72bae9bd313");
    assert_eq!(Fingerprint::from_pods(Method::WithExclusiveResources, &pods).sign(), "pfp0v0019131e707ccadb65c");
}

#[test]
fn a_traced_fingerprint_remembers_its_pods_in_order() {
    let mut fingerprint = Fingerprint::traced();
    fingerprint.add("b", "2");
    fingerprint.add("a", "1");
    let pods: Vec<(&str, &str)> =
        fingerprint.pods().unwrap().iter().map(|p| (p.namespace.as_str(), p.name.as_str())).collect();
    assert_eq!(pods, [("b", "2"), ("a", "1")]);
    assert_eq!((fingerprint.len(), fingerprint.is_empty()), (2, false));
    assert_eq!(Fingerprint::new().pods(), None);
}

proptest! {
    #[test]
    fn the_signature_does_not_depend_on_insertion_order(
        mut pods in proptest::collection::vec(("[a-z0-9-]{0,12}", "[a-z0-9-]{0,20}"), 0..40),
        seed in any::<u64>(),
    ) {
        let mut forward = Fingerprint::new();
        for (namespace, name) in &pods {
            forward.add(namespace, name);
        }
        // A cheap deterministic shuffle.
        let len = pods.len().max(1);
        pods.rotate_left((seed as usize) % len);
        pods.reverse();
        let mut shuffled = Fingerprint::new();
        for (namespace, name) in &pods {
            shuffled.add(namespace, name);
        }
        prop_assert_eq!(forward.sign(), shuffled.sign());
        prop_assert!(forward.check(&shuffled.sign()).is_ok());
        prop_assert_eq!(forward.sign().len(), 24);
    }
}
