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
    kube::Client::try_from(without_system_roots_for_http(config)).map_err(KubeClientError::Client)
}

/// kube builds a TLS configuration for every client, and without a CA it takes the system's
/// trust store, which our image does not have: a kubeconfig for a plain `http://` server (a
/// local proxy, a test double) then made no client at all. Such a server needs no roots, so it
/// gets none. An `https://` server without a CA keeps the system's, as client-go does.
fn without_system_roots_for_http(mut config: kube::Config) -> kube::Config {
    if config.cluster_url.scheme_str() == Some("http") && config.root_cert.is_none() {
        config.root_cert = Some(Vec::new());
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_http_server_gets_an_empty_trust_store_and_an_https_one_keeps_what_it_had() {
        let http = without_system_roots_for_http(kube::Config::new("http://127.0.0.1:8001".parse().unwrap()));
        assert_eq!(http.root_cert, Some(Vec::new()));
        kube::Client::try_from(http).expect("a client for a plain-HTTP server, whatever the system trusts");
        let https = without_system_roots_for_http(kube::Config::new("https://127.0.0.1:6443".parse().unwrap()));
        assert_eq!(https.root_cert, None);
    }
}
