//! `numaresources bundle`: the checked-in OLM bundle is what the binary writes, and `--check`
//! catches a stale, missing or stray file.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::path::Path;
use std::process::Output;

use support::stderr;

fn bundle(args: &[&str]) -> Output {
    support::numaresources(&["bundle"]).args(args).output().expect("the binary runs")
}

#[test]
fn the_checked_in_bundle_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/bundle");
    let out = bundle(&["--output-dir", dir.to_str().unwrap(), "--check"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn check_catches_edited_missing_and_stray_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let write = bundle(&["--output-dir", path]);
    assert!(write.status.success(), "{}", stderr(&write));
    assert!(bundle(&["--output-dir", path, "--check"]).status.success());

    let csv = dir.path().join("manifests/numaresources-operator.clusterserviceversion.yaml");
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.contains("--certificate-mode=olm"), "the controllers run in OLM mode");
    std::fs::write(&csv, text.replace("containerPort: 6443", "containerPort: 6444")).unwrap();
    let edited = bundle(&["--output-dir", path, "--check"]);
    assert_eq!(edited.status.code(), Some(1));
    assert!(stderr(&edited).contains("clusterserviceversion.yaml differs"), "{}", stderr(&edited));
    assert!(stderr(&edited).contains("run `numaresources bundle --output-dir"), "{}", stderr(&edited));

    std::fs::remove_file(&csv).unwrap();
    std::fs::write(dir.path().join("manifests/extra.yaml"), "kind: ConfigMap\n").unwrap();
    let broken = bundle(&["--output-dir", path, "--check"]);
    assert_eq!(broken.status.code(), Some(1));
    assert!(stderr(&broken).contains("extra.yaml is not part of the generated bundle"), "{}", stderr(&broken));
    assert!(stderr(&broken).contains("clusterserviceversion.yaml: "), "the missing CSV: {}", stderr(&broken));

    // A release names its image once; it reaches every container and the exporters.
    let release = tempfile::tempdir().unwrap();
    let out =
        bundle(&["--output-dir", release.path().to_str().unwrap(), "--image", "registry.example/numa@sha256:0123"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv =
        std::fs::read_to_string(release.path().join("manifests/numaresources-operator.clusterserviceversion.yaml"))
            .unwrap();
    assert!(!csv.contains("quay.io/numaresources"), "the default image is left somewhere");
    assert_eq!(
        csv.matches("registry.example/numa@sha256:0123").count(),
        6,
        "3 containers, the exporters, containerImage, relatedImages"
    );
}
