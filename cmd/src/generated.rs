//! Generated files written into a directory, or that directory checked against them (the
//! `--check` of `numaresources crds` and `numaresources bundle`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

/// Writes each `(relative path, text)` under `dir`, creating directories as needed.
pub(crate) fn write(dir: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    for (relative, text) in files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        tracing::info!(path = %path.display(), "wrote");
    }
    Ok(())
}

/// What is wrong with the copies under `dir`: a file that cannot be read, or that differs from
/// `generated` (e.g. "the generated bundle").
pub(crate) fn stale(dir: &Path, files: &[(String, String)], generated: &str) -> Vec<String> {
    let mut stale = Vec::new();
    for (relative, text) in files {
        let path = dir.join(relative);
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing == *text => {}
            Ok(_) => stale.push(format!("{} differs from {generated}", path.display())),
            Err(error) => stale.push(format!("{}: {error}", path.display())),
        }
    }
    stale
}

/// Logs `up_to_date` when nothing is `stale`; otherwise each problem and the `command` whose
/// `--output-dir dir` run fixes them, and fails.
pub(crate) fn verdict(dir: &Path, stale: &[String], up_to_date: &str, command: &str) -> ExitCode {
    if stale.is_empty() {
        tracing::info!(dir = %dir.display(), "{up_to_date}");
        return ExitCode::SUCCESS;
    }
    for problem in stale {
        tracing::error!("{problem}");
    }
    tracing::error!("run `{command} --output-dir {}` and commit the result", dir.display());
    ExitCode::FAILURE
}
