//! The kube-apiserver client every in-cluster subcommand uses: the runtime's
//! ([`numaresources_certs::kube_client`]), for the subcommands not yet wired through it directly.

use std::path::Path;

/// [`numaresources_certs::kube_client`], as an `anyhow` error.
pub(crate) async fn kube_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(numaresources_certs::kube_client(kubeconfig).await?)
}
