//! Stamps the binary with the git commit it was built from (`numaresources --version`).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=NUMARESOURCES_GIT_COMMIT");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
    // Image builds without a .git directory pass the commit in explicitly.
    let commit = std::env::var("NUMARESOURCES_GIT_COMMIT").ok().or_else(git_commit);
    println!("cargo:rustc-env=NUMARESOURCES_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}

fn git_commit() -> Option<String> {
    let output = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    Some(if dirty { format!("{commit}-dirty") } else { commit })
}
