//! The Containerfile builds the one binary from exactly the workspace: every member is copied
//! into the build (a missing one fails `cargo build --locked` inside the image, which CI here cannot
//! run), as are the manifests it compiles in, and nothing else is.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::collections::BTreeSet;

use numaresources_tests::workspace_root;

fn workspace_members() -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").expect("a members list") + "members = [".len();
    let end = start + manifest[start..].find(']').unwrap();
    manifest[start..end].split(',').map(|m| m.trim().trim_matches('"').to_owned()).filter(|m| !m.is_empty()).collect()
}

#[test]
fn the_containerfile_copies_every_workspace_member_and_builds_the_binary() {
    let containerfile = std::fs::read_to_string(workspace_root().join("Containerfile")).unwrap();
    let copied: BTreeSet<String> = containerfile
        .lines()
        .filter_map(|line| line.strip_prefix("COPY "))
        .filter(|args| !args.starts_with("--from"))
        .filter_map(|args| {
            let parts: Vec<&str> = args.split_whitespace().collect();
            (parts.len() == 2 && parts[0] == parts[1]).then(|| parts[0].to_owned())
        })
        .collect();
    // Besides the crates, the manifests the binary compiles in (include_str!).
    let mut expected = workspace_members();
    expected.insert("manifests".to_owned());
    assert_eq!(copied, expected, "COPY lines of crate directories (and manifests/) vs workspace members");
    assert!(containerfile.contains("COPY Cargo.toml Cargo.lock rust-toolchain.toml ./"));
    assert!(containerfile.contains("cargo build --release --locked -p numaresources"));
    assert!(containerfile.contains("ENTRYPOINT [\"/usr/bin/numaresources\"]"));
    let toolchain = std::fs::read_to_string(workspace_root().join("rust-toolchain.toml")).unwrap();
    let channel = toolchain.lines().find_map(|l| l.trim().strip_prefix("channel = ")).unwrap().trim_matches('"');
    let minor: String = channel.split('.').take(2).collect::<Vec<_>>().join(".");
    assert!(containerfile.contains(&format!("rust:{minor}-")), "the builder image uses toolchain {channel}");
}

#[test]
fn the_build_context_leaves_out_build_output_and_local_state() {
    for file in [".containerignore", ".dockerignore"] {
        let ignored = std::fs::read_to_string(workspace_root().join(file)).unwrap();
        for entry in ["target/", ".git/", ".numaresources-local/"] {
            assert!(ignored.lines().any(|l| l == entry), "{file} lacks {entry}");
        }
    }
}
