//! The process: discover the platform, win the leader election, run the three controllers and
//! the certificate lifecycle until shutdown (or until leadership is lost), then release the Lease.

use std::sync::Arc;

use futures_util::future::join4;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::{Recorder, Reporter};
use numaresources_api::operator::defaults::Platform;

use crate::context::{Context, Error, Result, Settings};
use crate::health::Readiness;
use crate::leader::{LeaderLease, LeaseTimings};
use crate::metrics::Metrics;
use crate::names::{CONTROLLERS_LEASE, EVENT_REPORTER};
use crate::render::rte::MetricsMode;
use crate::{certificates, kubeletconfig, operator, scheduler};

/// Leader election settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Where the Lease lives.
    pub namespace: String,
    /// This candidate's identity (the pod name).
    pub identity: String,
}

/// What discovery says about the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Discovered {
    /// The flavour and, on OpenShift, its version.
    pub platform: Platform,
    /// MachineConfigPools exist.
    pub machine_config_pools: bool,
    /// MCO KubeletConfigs exist.
    pub kubelet_configs: bool,
}

/// Reads the API groups (and OpenShift's ClusterVersion) once at start.
pub async fn discover(client: &kube::Client) -> Result<Discovered> {
    let groups = client.list_api_groups().await.map_err(|e| Error::kube("list API groups", e))?;
    let has = |name: &str| groups.groups.iter().any(|g| g.name == name);
    let mco = has("machineconfiguration.openshift.io");
    let platform = if has("config.openshift.io") {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("config.openshift.io", "v1", "ClusterVersion"));
        let versions: kube::Api<DynamicObject> = kube::Api::all_with(client.clone(), &resource);
        let version = match versions.get_opt("version").await {
            Ok(found) => found
                .and_then(|v| v.data.pointer("/status/desired/version").and_then(|s| s.as_str()).map(str::to_owned)),
            Err(error) => {
                tracing::warn!(%error, "cannot read the OpenShift version; assuming 4.0");
                None
            }
        };
        let (major, minor) = parse_major_minor(version.as_deref().unwrap_or("4.0"));
        Platform::OpenShift(major, minor)
    } else {
        Platform::Kubernetes
    };
    Ok(Discovered { platform, machine_config_pools: mco, kubelet_configs: mco })
}

/// `4.20.3` → (4, 20); anything unparsable is (4, 0).
pub fn parse_major_minor(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor),
        _ => (4, 0),
    }
}

/// Runs the controllers until `shutdown` completes, counting passes in `metrics` and reporting
/// progress to `readiness`. Returns an error when leadership is lost, so the process exits and
/// its restart campaigns again.
pub async fn run(
    client: kube::Client,
    mut settings: Settings,
    leader: Option<LeaderElection>,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let discovered = discover(&client).await?;
    readiness.api_reachable();
    settings.platform = discovered.platform;
    settings.machine_config_pools = discovered.machine_config_pools;
    settings.kubelet_configs = discovered.kubelet_configs;
    if settings.is_openshift() {
        // The service-ca operator issues the exporters' metrics certificate (nro.md §3.1); the
        // TLS profile's values are left to the exporter's defaults (TLS 1.2+).
        settings.rte_metrics = MetricsMode::HttpTls { min_version: String::new(), cipher_suites: String::new() };
    }
    tracing::info!(
        platform = ?settings.platform,
        namespace = %settings.namespace,
        image = %settings.image,
        certificate_mode = %settings.certificate_mode,
        apiserver_deployment = %settings.apiserver_deployment,
        "starting the controllers"
    );

    let identity = leader.as_ref().map(|l| l.identity.clone());
    let reporter = Reporter { controller: EVENT_REPORTER.to_owned(), instance: identity };
    let mut ctx = Context::new(client.clone(), settings, Some(Recorder::new(client.clone(), reporter)));
    ctx.metrics = metrics;
    ctx.readiness = readiness.clone();
    let ctx = Arc::new(ctx);

    let mut shutdown = std::pin::pin!(shutdown);
    let lease =
        leader.map(|l| LeaderLease::new(client, &l.namespace, CONTROLLERS_LEASE, &l.identity, LeaseTimings::default()));
    if let Some(lease) = &lease {
        tokio::select! {
            () = lease.acquire() => {}
            () = &mut shutdown => return Ok(()),
        }
    }
    readiness.leading();

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let stop_signal = || {
        let mut stopped = stopped.clone();
        async move {
            // An error means the sender is gone: stop as well.
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    };
    let controllers = tokio::spawn(join4(
        operator::run(ctx.clone(), stop_signal()),
        scheduler::run(ctx.clone(), stop_signal()),
        kubeletconfig::run(ctx.clone(), stop_signal()),
        certificates::run(ctx, stop_signal()),
    ));
    let hold = async {
        match &lease {
            Some(lease) => lease.hold().await,
            None => std::future::pending().await,
        }
    };
    let lost = tokio::select! {
        () = &mut shutdown => false,
        () = hold => true,
    };
    let _ = stop.send(true);
    if let Err(error) = controllers.await {
        tracing::error!(%error, "a controller task failed");
    }
    if lost {
        return Err(Error::NotYet("lost the leader election; exiting so a restart campaigns again".into()));
    }
    if let Some(lease) = &lease {
        lease.release().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openshift_versions() {
        assert_eq!(parse_major_minor("4.20.3"), (4, 20));
        assert_eq!(parse_major_minor("5.0.0-rc.1"), (5, 0));
        assert_eq!(parse_major_minor("garbage"), (4, 0));
    }
}
