//! The checked-in CRDs are exactly what the code generates, and the samples we document are
//! valid objects of them.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use numaresources_api::crds;
use numaresources_api::operator::{NUMAResourcesOperator, NUMAResourcesScheduler, validation};
use numaresources_tests::workspace_root;

#[test]
fn checked_in_crds_match_the_generated_ones() {
    let dir = workspace_root().join("manifests/crds");
    let mut expected: Vec<String> = Vec::new();
    for crd in crds::all() {
        let file = crds::file_name(&crd);
        let generated = crds::to_yaml(&crd).unwrap();
        let checked_in = std::fs::read_to_string(dir.join(&file)).unwrap_or_else(|e| {
            panic!("manifests/crds/{file}: {e}; run `numaresources crds --output-dir manifests/crds`")
        });
        assert!(
            checked_in == generated,
            "manifests/crds/{file} is stale: run `cargo run -p numaresources -- crds --output-dir manifests/crds` and commit"
        );
        expected.push(file);
    }
    let kustomization = std::fs::read_to_string(dir.join(crds::KUSTOMIZATION_FILE)).unwrap();
    assert_eq!(kustomization, crds::kustomization(&expected), "manifests/crds/kustomization.yaml is stale");
    expected.push(crds::KUSTOMIZATION_FILE.to_owned());
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(present, expected, "manifests/crds holds files the generator does not write");
}

#[test]
fn samples_are_valid() {
    let dir = workspace_root().join("manifests/samples");
    let nro: NUMAResourcesOperator =
        serde_norway::from_str(&std::fs::read_to_string(dir.join("numaresourcesoperator.yaml")).unwrap()).unwrap();
    let errors = validation::validate_operator(&nro);
    assert!(errors.is_empty(), "{errors}");
    let nrs: NUMAResourcesScheduler =
        serde_norway::from_str(&std::fs::read_to_string(dir.join("numaresourcesscheduler.yaml")).unwrap()).unwrap();
    let errors = validation::validate_scheduler(&nrs);
    assert!(errors.is_empty(), "{errors}");
}
