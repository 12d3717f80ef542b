//! `numaresources crds`: the operator CRDs as YAML, printed, written to a directory, or checked
//! against one.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use numaresources_api::crds;

use crate::generated;

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
            generated::write(dir, &with_kustomization(&rendered))?;
            Ok(ExitCode::SUCCESS)
        }
        (Some(dir), true) => {
            let stale = generated::stale(dir, &with_kustomization(&rendered), "the generated CRD");
            Ok(generated::verdict(dir, &stale, "CRDs are up to date", "numaresources crds"))
        }
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
