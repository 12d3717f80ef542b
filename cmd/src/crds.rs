//! `numaresources crds`: the operator CRDs as YAML, printed, written to a directory, or checked
//! against one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use numaresources_api::crds;

/// Options of `numaresources crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory (e.g. `manifests/crds`) instead of printing
    /// a multi-document YAML stream.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// With --output-dir: change nothing; exit 1 if any file there differs from what would be
    /// written.
    #[arg(long, requires = "output_dir")]
    check: bool,
}

/// Runs the subcommand.
pub fn run(args: &CrdsArgs) -> anyhow::Result<ExitCode> {
    let rendered = render()?;
    match (&args.output_dir, args.check) {
        (None, _) => {
            let mut stdout = std::io::stdout().lock();
            for (i, (_, yaml)) in rendered.iter().enumerate() {
                if i > 0 {
                    writeln!(stdout, "---")?;
                }
                stdout.write_all(yaml.as_bytes())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        (Some(dir), false) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (file, yaml) in with_kustomization(&rendered) {
                let path = dir.join(file);
                std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                tracing::info!(path = %path.display(), "wrote");
            }
            Ok(ExitCode::SUCCESS)
        }
        (Some(dir), true) => check(dir, &with_kustomization(&rendered)),
    }
}

fn render() -> anyhow::Result<Vec<(String, String)>> {
    crds::all().iter().map(|crd| Ok((crds::file_name(crd), crds::to_yaml(crd)?))).collect()
}

/// The CRD files plus the kustomization that lists them (written only into a directory).
fn with_kustomization(rendered: &[(String, String)]) -> Vec<(String, String)> {
    let files: Vec<String> = rendered.iter().map(|(file, _)| file.clone()).collect();
    let mut all = rendered.to_vec();
    all.push((crds::KUSTOMIZATION_FILE.to_owned(), crds::kustomization(&files)));
    all
}

fn check(dir: &Path, rendered: &[(String, String)]) -> anyhow::Result<ExitCode> {
    let mut stale = Vec::new();
    for (file, yaml) in rendered {
        let path = dir.join(file);
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing == *yaml => {}
            Ok(_) => stale.push(format!("{} differs from the generated CRD", path.display())),
            Err(error) => stale.push(format!("{}: {error}", path.display())),
        }
    }
    if stale.is_empty() {
        tracing::info!(dir = %dir.display(), "CRDs are up to date");
        return Ok(ExitCode::SUCCESS);
    }
    for problem in &stale {
        tracing::error!("{problem}");
    }
    tracing::error!("run `numaresources crds --output-dir {}` and commit the result", dir.display());
    Ok(ExitCode::FAILURE)
}
