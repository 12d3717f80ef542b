//! The process: discover the platform, win the leader election, run the three controllers and
//! the certificate lifecycle until shutdown (or until leadership is lost), then release the Lease.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join, join4};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::Reporter;
use numaresources_api::operator::defaults::Platform;
use numaresources_runtime::InvalidConfig;
use numaresources_runtime::admin::{Checks, Registry};
use numaresources_runtime::shutdown::{Shutdown, Trigger};
use tokio::task::JoinHandle;

use crate::context::{Context, Error, Readiness, Result, Settings};
use crate::metrics::Metrics;
use crate::mode::check_compatible;
use crate::names::{CONTROLLERS_LEASE, EVENT_REPORTER};
use crate::render::rte::MetricsMode;
use crate::{certificates, kubeletconfig, operator, placement, scheduler};
use numaresources_runtime::leader::{LeaderLease, LeaseTimings};

/// Leader election settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Where the Lease lives.
    pub namespace: String,
    /// This candidate's identity (the pod name).
    pub identity: String,
}

/// The controllers' configuration, validated ([`Config::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    settings: Settings,
    leader: Option<LeaderElection>,
}

impl Config {
    /// `settings` (what the process was started with; discovery fills in the rest) and the
    /// leader election (`None`: a single replica), refused with every problem at once: the
    /// namespaces must be namespace names, the image and the identity set, and the certificate
    /// mode must work with who deploys the NRT API server.
    pub fn new(settings: Settings, leader: Option<LeaderElection>) -> Result<Self, InvalidConfig> {
        let mut problems = Vec::new();
        let mut namespace = |what: &str, namespace: &str| {
            let invalid = numaresources_api::metadata::dns1123_subdomain(namespace);
            problems.extend(invalid.into_iter().map(|problem| format!("{what} {namespace:?}: {problem}")));
        };
        namespace("namespace", &settings.namespace);
        if let Some(leader) = &leader {
            namespace("leader election namespace", &leader.namespace);
        }
        if settings.image.is_empty() {
            problems.push("the image must be set: the exporters and the API server run it".to_owned());
        }
        if leader.as_ref().is_some_and(|leader| leader.identity.is_empty()) {
            problems.push("the leader election identity must be set".to_owned());
        }
        if let Err(problem) = check_compatible(settings.certificate_mode, settings.apiserver_deployment) {
            problems.push(problem);
        }
        InvalidConfig::check(Self { settings, leader }, problems)
    }
}

/// The controllers as a process runs them: [`Controllers::new`], then its readiness and metrics
/// served by the runtime's admin router while [`Controllers::run`] runs.
pub struct Controllers {
    client: kube::Client,
    config: Config,
    metrics: Metrics,
    readiness: Readiness,
}

impl std::fmt::Debug for Controllers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controllers").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Controllers {
    /// The controllers of `config`, talking to kube-apiserver through `client`.
    pub fn new(config: Config, client: kube::Client) -> Self {
        Self { client, config, metrics: Metrics::default(), readiness: Readiness::default() }
    }

    /// What `/readyz` checks: kube-apiserver answered and, once leading, each controller synced.
    pub fn readiness(&self) -> Checks {
        self.readiness.checks()
    }

    /// Registers the reconcilers' metrics (`numaresources_controllers_*`) in the process's
    /// registry.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    /// Runs the controllers until `shutdown` completes. Returns an error when leadership is lost,
    /// so the process exits and its restart campaigns again.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let Self { client, config: Config { mut settings, leader }, metrics, readiness } = self;
        let discovered = discover(&client).await?;
        readiness.api_reachable.set();
        settings.platform = discovered.platform;
        settings.machine_config_pools = discovered.machine_config_pools;
        settings.kubelet_configs = discovered.kubelet_configs;
        let version = crate::server_version::read(&client).await;
        settings.kubernetes_version = version.as_ref().and_then(crate::server_version::version_of);
        settings.stock_scheduler_image = version.and_then(|info| {
            numaresources_api::operator::scheduler_image::stock_kube_scheduler_image(&info.git_version)
        });
        if settings.is_openshift() {
            // On OpenShift the exporters serve metrics over TLS with a certificate the service-ca
            // operator issues (an annotation on their metrics Service); the TLS profile's values are
            // left to the exporter's defaults (TLS 1.2+).
            settings.rte_metrics = MetricsMode::HttpTls { min_version: String::new(), cipher_suites: String::new() };
        }
        tracing::info!(
            platform = ?settings.platform,
            kubernetes = ?settings.kubernetes_version,
            stock_scheduler_image = ?settings.stock_scheduler_image,
            namespace = %settings.namespace,
            image = %settings.image,
            certificate_mode = %settings.certificate_mode,
            apiserver_deployment = %settings.apiserver_deployment,
            "starting the controllers"
        );

        let identity = leader.as_ref().map(|l| l.identity.clone());
        let reporter = Reporter { controller: EVENT_REPORTER.to_owned(), instance: identity };
        let mut ctx = Context::new(client.clone(), settings, Some(reporter));
        ctx.metrics = metrics;
        ctx.readiness = readiness.clone();
        let ctx = Arc::new(ctx);

        let mut shutdown = std::pin::pin!(shutdown);
        let lease = leader
            .map(|l| LeaderLease::new(client, &l.namespace, CONTROLLERS_LEASE, &l.identity, LeaseTimings::default()));
        if let Some(lease) = &lease {
            tokio::select! {
                () = lease.acquire() => {}
                () = &mut shutdown => return Ok(()),
            }
        }
        readiness.leading.set();

        let (stop, stopped) = Shutdown::manual();
        let controllers = tokio::spawn(async move {
            join4(
                operator::run(ctx.clone(), stopped.signaled()),
                scheduler::run(ctx.clone(), stopped.signaled()),
                kubeletconfig::run(ctx.clone(), stopped.signaled()),
                join(certificates::run(ctx.clone(), stopped.signaled()), placement::run(ctx, stopped.signaled())),
            )
            .await;
        });
        supervise(lease.as_ref(), controllers, stop, shutdown).await
    }
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

/// How long the controllers get to finish what they are doing at shutdown: well inside the
/// Lease's duration, since the Lease is no longer renewed meanwhile.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Leads while the controllers run. Three endings:
/// - `shutdown`: the controllers are told to stop and get [`SHUTDOWN_GRACE`], then the Lease is
///   released;
/// - leadership lost: the controllers are aborted at once (a new leader may act as soon as our
///   Lease expires) and an error returned, so the process exits and its restart campaigns again;
/// - the controllers' task ended by itself (a panic: they only end when told): an error, so the
///   process restarts instead of holding the Lease (and reporting ready) with nothing running.
async fn supervise(
    lease: Option<&LeaderLease>,
    mut controllers: JoinHandle<()>,
    stop: Trigger,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let hold = async {
        match lease {
            Some(lease) => lease.hold().await,
            None => std::future::pending().await,
        }
    };
    let ended = tokio::select! {
        () = shutdown => None,
        () = hold => {
            controllers.abort();
            let _ = controllers.await;
            return Err(Error::Leadership("lost the leader election; exiting so a restart campaigns again".into()));
        }
        result = &mut controllers => Some(result),
    };
    let result = match ended {
        None => {
            stop.fire();
            match tokio::time::timeout(SHUTDOWN_GRACE, &mut controllers).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(Error::Leadership(format!("a controller failed while stopping: {error}"))),
                Err(_) => {
                    tracing::warn!(grace = ?SHUTDOWN_GRACE, "the controllers did not stop in time; aborting them");
                    controllers.abort();
                    let _ = controllers.await;
                    Ok(())
                }
            }
        }
        Some(Ok(())) => Err(Error::Leadership("the controllers stopped unasked; exiting so a restart resumes".into())),
        Some(Err(error)) => {
            Err(Error::Leadership(format!("the controllers failed: {error}; exiting so a restart resumes")))
        }
    };
    if let Err(error) = &result {
        tracing::error!(%error, "giving leadership up");
    }
    // Nothing of ours acts any more: let the next leader start without waiting for the expiry.
    if let Some(lease) = lease {
        lease.release().await;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::coordination::v1::Lease;

    use crate::fake::FakeApi;

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/numaresources/leases/numaresources-controllers";

    async fn leading(identity: &str) -> (FakeApi, LeaderLease) {
        let (fake, client) = crate::fake::start();
        let lease = LeaderLease::new(client, "numaresources", CONTROLLERS_LEASE, identity, LeaseTimings::default());
        assert!(lease.try_acquire_or_renew().await.unwrap());
        (fake, lease)
    }

    fn holder(fake: &FakeApi) -> Option<String> {
        fake.typed::<Lease>(LEASE).spec.unwrap().holder_identity
    }

    /// [`supervise`] under an hour of paused time as a guard: without the branch under test, the
    /// Lease is held forever.
    async fn supervised(
        lease: &LeaderLease,
        controllers: JoinHandle<()>,
        stop: Trigger,
        shutdown: impl Future<Output = ()>,
    ) -> Result<()> {
        tokio::time::timeout(Duration::from_secs(3600), supervise(Some(lease), controllers, stop, shutdown))
            .await
            .expect("supervise returns")
    }

    /// Sets its flag when dropped: tells whether a task's future was torn down.
    struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_in_the_controllers_ends_leadership_with_an_error() {
        let (fake, lease) = leading("a").await;
        let (stop, _) = Shutdown::manual();
        let controllers = tokio::spawn(async { panic!("a controller bug") });
        let ended = supervised(&lease, controllers, stop, std::future::pending()).await;
        assert!(matches!(ended, Err(Error::Leadership(_))), "{ended:?}");
        assert_eq!(holder(&fake), None, "released for the next leader");
    }

    #[tokio::test(start_paused = true)]
    async fn losing_the_lease_aborts_controllers_that_do_not_stop() {
        let (fake, lease) = leading("a").await;
        let (stop, _) = Shutdown::manual();
        let torn_down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = DropFlag(torn_down.clone());
        // Deaf to the stop signal, like a pass stuck on a slow API call.
        let controllers = tokio::spawn(async move {
            let _flag = flag;
            std::future::pending::<()>().await;
        });
        fake.edit(LEASE, |lease| {
            lease["spec"]["holderIdentity"] = serde_json::json!("b");
            lease["spec"]["renewTime"] = serde_json::json!(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                k8s_openapi::jiff::Timestamp::now()
            ));
        });
        let ended = supervised(&lease, controllers, stop, std::future::pending()).await;
        assert!(matches!(ended, Err(Error::Leadership(_))), "{ended:?}");
        assert!(torn_down.load(std::sync::atomic::Ordering::SeqCst), "the controllers were aborted");
        assert_eq!(holder(&fake).as_deref(), Some("b"), "the new leader's Lease is left alone");
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_stops_the_controllers_and_releases_the_lease() {
        let (fake, lease) = leading("a").await;
        let (stop, stopped) = Shutdown::manual();
        let controllers = tokio::spawn(stopped.signaled());
        let ended = supervised(&lease, controllers, stop, async {}).await;
        assert!(ended.is_ok(), "{ended:?}");
        assert_eq!(holder(&fake), None);
    }

    #[test]
    fn a_config_is_refused_with_every_problem_at_once() {
        let mut settings = Settings::kubernetes("Not_A_Namespace", "");
        settings.certificate_mode = crate::CertificateMode::Olm;
        let leader = LeaderElection { namespace: "numaresources".into(), identity: String::new() };
        let problems = Config::new(settings, Some(leader)).unwrap_err().0;
        assert_eq!(problems.len(), 4, "{problems:#?}");
        for (problem, wanted) in
            problems.iter().zip(["namespace \"Not_A_Namespace\"", "image", "identity", "installed"])
        {
            assert!(problem.contains(wanted), "{problem} names {wanted}");
        }
        let valid = Settings::kubernetes("numaresources", "registry.example/numaresources:1");
        assert!(Config::new(valid, None).is_ok());
    }

    #[test]
    fn openshift_versions() {
        assert_eq!(parse_major_minor("4.20.3"), (4, 20));
        assert_eq!(parse_major_minor("5.0.0-rc.1"), (5, 0));
        assert_eq!(parse_major_minor("garbage"), (4, 0));
    }
}
