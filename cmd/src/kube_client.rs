//! The kube-apiserver client every in-cluster subcommand uses.

use std::path::Path;

use anyhow::Context;

/// A client from `kubeconfig` when given, else the in-cluster configuration, then
/// `$KUBECONFIG`/`~/.kube/config`.
pub(crate) async fn kube_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await.context("finding a kube-apiserver (in-cluster or kubeconfig)")?,
    };
    Ok(kube::Client::try_from(config)?)
}
