//! The kube-apiserver client of every in-cluster component: `--kubeconfig` when given, else the
//! in-cluster configuration, then `$KUBECONFIG`/`~/.kube/config`.

use std::path::{Path, PathBuf};

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    /// The kubeconfig given could not be read or parsed.
    #[error("reading the kubeconfig {}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: kube::config::KubeconfigError,
    },
    /// A kubeconfig that was read does not make a configuration.
    #[error("loading the kubeconfig")]
    Load(#[source] kube::config::KubeconfigError),
    /// No kubeconfig given, and neither the in-cluster configuration nor a default kubeconfig.
    #[error("finding a kube-apiserver (in-cluster or kubeconfig)")]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration does not make a client (TLS material, proxy, ...).
    #[error("building the kube-apiserver client")]
    Client(#[source] kube::Error),
}

/// A client from `kubeconfig` when given, else the in-cluster configuration, then
/// `$KUBECONFIG`/`~/.kube/config`.
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, KubeClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|source| KubeClientError::Kubeconfig { path: path.to_owned(), source })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(KubeClientError::Load)?
        }
        None => kube::Config::infer().await.map_err(KubeClientError::Infer)?,
    };
    kube::Client::try_from(config).map_err(KubeClientError::Client)
}
