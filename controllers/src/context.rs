//! What every reconciler shares: the client, the settings the process was started with, the
//! Event recorder, readiness, the error type, and the per-object backoff of `error_policy`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use numaresources_api::operator::defaults::Platform;
use numaresources_runtime::admin::{Checks, Flag};

use crate::mode::{ApiserverDeployment, CertificateMode};
use crate::render::RenderError;
use crate::render::rte::MetricsMode;

/// How the process was started and what the cluster offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The namespace operands run in.
    pub namespace: String,
    /// The controllers' own image: the exporter and the API server run it too.
    pub image: String,
    /// The cluster flavour (scheduler defaults, SELinux, TLS metrics).
    pub platform: Platform,
    /// Whether `NUMAResourcesOperator.spec.imageSpec` may replace the exporter image
    /// (upstream's `EXPORTER_IMAGE_RESTRICTION=false`).
    pub allow_custom_rte_image: bool,
    /// How exporters serve metrics.
    pub rte_metrics: MetricsMode,
    /// `machineconfiguration.openshift.io/v1` MachineConfigPools exist (from discovery).
    pub machine_config_pools: bool,
    /// `machineconfiguration.openshift.io/v1` KubeletConfigs exist (from discovery).
    pub kubelet_configs: bool,
    /// Where serving certificates and `caBundle` come from (`--certificate-mode`).
    pub certificate_mode: CertificateMode,
    /// Who deploys the NRT API server (`--apiserver-deployment`).
    pub apiserver_deployment: ApiserverDeployment,
    /// kube-apiserver's version as read at start (`None`: unknown, nothing is refused).
    pub kubernetes_version: Option<crate::server_version::KubeVersion>,
    /// The stock kube-scheduler image of that release, the extender engine's default (`None`:
    /// the version is unknown, and the NUMAResourcesScheduler must name its image).
    pub stock_scheduler_image: Option<String>,
}

impl Settings {
    /// Plain-Kubernetes settings for `namespace` and `image`.
    pub fn kubernetes(namespace: &str, image: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            image: image.to_owned(),
            platform: Platform::Kubernetes,
            allow_custom_rte_image: false,
            rte_metrics: MetricsMode::Http,
            machine_config_pools: false,
            kubelet_configs: false,
            certificate_mode: CertificateMode::SelfManaged,
            apiserver_deployment: ApiserverDeployment::Operator,
            kubernetes_version: None,
            stock_scheduler_image: None,
        }
    }

    /// OpenShift or HyperShift.
    pub fn is_openshift(&self) -> bool {
        !matches!(self.platform, Platform::Kubernetes)
    }
}

/// The state reconcilers share.
pub struct Context {
    /// The API client.
    pub client: kube::Client,
    /// Process settings.
    pub settings: Settings,
    /// Who publishes Events for people; `None` disables them (tests).
    reporter: Option<Reporter>,
    /// One recorder per note (see [`Context::event`]).
    recorders: Mutex<HashMap<u64, Recorder>>,
    /// Reconcile metrics.
    pub metrics: crate::metrics::Metrics,
    /// What `/readyz` reports; each controller marks its cache synced here.
    pub readiness: Readiness,
    /// Held by whoever writes the self-managed certificates or a `caBundle` from them (the
    /// certificate lifecycle, the operator's APIService), so one never writes a stale bundle
    /// over the other's.
    pub certificates: tokio::sync::Mutex<()>,
    failures: Mutex<HashMap<String, u32>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// The most notes whose recorders are kept (see [`Context::event`]).
const RECORDERS_KEPT: usize = 1024;

/// One recorder's key: the reason and the note.
fn note_key(reason: &str, note: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (reason, note).hash(&mut hasher);
    hasher.finish()
}

/// First retry after a failure; doubles per consecutive failure up to [`BACKOFF_MAX`].
pub const BACKOFF_BASE: Duration = Duration::from_secs(5);
/// The longest wait between retries.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

impl Context {
    /// A context; `reporter` is `None` to publish no Events.
    pub fn new(client: kube::Client, settings: Settings, reporter: Option<Reporter>) -> Self {
        Self {
            client,
            settings,
            reporter,
            recorders: Mutex::new(HashMap::new()),
            metrics: crate::metrics::Metrics::default(),
            readiness: Readiness::default(),
            certificates: tokio::sync::Mutex::new(()),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The requeue after one more failure of `key`: 5 s, 10 s, 20 s, … capped at 5 min.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = failures.entry(key.to_owned()).or_insert(0);
        let delay = BACKOFF_BASE.saturating_mul(1u32 << (*count).min(6));
        *count = count.saturating_add(1);
        delay.min(BACKOFF_MAX)
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn reset_backoff(&self, key: &str) {
        self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }

    /// Publishes an Event about `regarding`; failures are logged, never fatal.
    ///
    /// An Events v1 recorder (kube-runtime's, as client-go's) counts an Event with the object,
    /// reason and action of a recent one as a repeat of it (its `series`), whatever its note, and
    /// the series keeps the first note: a new explanation would show as "(x2)" of the old words.
    /// One recorder per note keeps a repeated note a series and a new note a new Event.
    pub async fn event(&self, regarding: &ObjectReference, type_: EventType, reason: &str, action: &str, note: String) {
        let Some(reporter) = &self.reporter else { return };
        let recorder = {
            let mut recorders = self.recorders.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if recorders.len() >= RECORDERS_KEPT {
                // Each recorder remembers its Events for minutes only; a fresh start costs at
                // most one Event that could have been a repeat.
                recorders.clear();
            }
            let key = note_key(reason, &note);
            recorders.entry(key).or_insert_with(|| Recorder::new(self.client.clone(), reporter.clone())).clone()
        };
        let event =
            Event { type_, reason: reason.to_owned(), note: Some(note), action: action.to_owned(), secondary: None };
        if let Err(error) = recorder.publish(&event, regarding).await {
            tracing::warn!(%error, reason, "failed to publish an Event");
        }
    }
}

/// What `/readyz` checks. Ready means the process can do its job: kube-apiserver answered
/// (discovery went through), and, once this replica leads, every controller has listed what it
/// watches (its cache is synced, so it acts on the cluster as it is, not on an empty view). A
/// standby replica that reached kube-apiserver and waits for the Lease is ready too: it is
/// healthy, and a rollout must not stall on it. Clones share state.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    /// kube-apiserver answered.
    pub api_reachable: Flag,
    /// This replica holds the Lease (or runs without an election) and starts its controllers.
    pub leading: Flag,
    /// The operator controller's cache synced.
    pub operator: Flag,
    /// The scheduler controller's cache synced.
    pub scheduler: Flag,
    /// The kubeletconfig controller's cache synced.
    pub kubeletconfig: Flag,
}

impl Readiness {
    /// The named checks: `kube-apiserver`, then `<controller>-cache` for each controller.
    pub fn checks(&self) -> Checks {
        let synced = |flag: &Flag| {
            let (leading, flag) = (self.leading.clone(), flag.clone());
            move || match leading.is_set() && !flag.is_set() {
                true => Err("leading, and its cache has not synced yet".to_owned()),
                false => Ok(()),
            }
        };
        Checks::new()
            .with_flag("kube-apiserver", &self.api_reachable, "the Kubernetes API server has not answered yet")
            .with("operator-cache", synced(&self.operator))
            .with("scheduler-cache", synced(&self.scheduler))
            .with("kubeletconfig-cache", synced(&self.kubeletconfig))
    }
}

/// What a reconcile can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("failed to {action}: {source}")]
    Kube {
        /// What was being done (`apply DaemonSet numaresources/x`).
        action: String,
        /// The client's error (API status included).
        #[source]
        source: kube::Error,
    },
    /// A desired object could not be rendered (a bug).
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A serving certificate or the CA could not be issued.
    #[error("failed to issue a serving certificate: {0}")]
    Certificate(#[source] numaresources_runtime::tls::Error),
    /// Something this pass waits for has not happened yet; retried with backoff.
    #[error("{0}")]
    NotYet(String),
    /// Leadership ended (lost, or the controllers stopped unasked): the process must exit so
    /// that its restart campaigns again.
    #[error("{0}")]
    Leadership(String),
    /// Adding or removing our finalizer failed.
    #[error("failed to manage the finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl From<kube::runtime::finalizer::Error<Error>> for Error {
    /// Our own step's failure is reported as itself, not as a finalizer problem.
    fn from(error: kube::runtime::finalizer::Error<Error>) -> Self {
        match error {
            kube::runtime::finalizer::Error::ApplyFailed(e) | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
            other => Self::Finalizer(Box::new(other)),
        }
    }
}

impl Error {
    /// An API failure while doing `action`.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube { action: action.into(), source }
    }

    /// A low-cardinality label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "kube",
            Self::Render(_) => "render",
            Self::Certificate(_) => "certificate",
            Self::Finalizer(_) => "finalizer",
            Self::NotYet(_) => "waiting",
            Self::Leadership(_) => "leadership",
        }
    }

    /// The message a person sees in a Degraded condition: the cause, unwrapped one level (as
    /// the upstream operator does), so an API rejection reads as the API server worded it.
    pub fn condition_message(&self) -> String {
        match self {
            Self::Kube { action, source: kube::Error::Api(status) } => format!("{action}: {}", status.message),
            // Not `Finalizer`: it never holds our own step's failure (`From` unwraps that).
            other => other.to_string(),
        }
    }
}

/// Result of a reconcile step.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `error_policy` of every controller: count, log, then retry with a per-object backoff.
/// `key` is `<controller>/<name>`.
pub fn error_policy_for(key: &str, error: &Error, ctx: &Context) -> Action {
    ctx.metrics.failure(key.split('/').next().unwrap_or(key), error);
    let delay = ctx.backoff(key);
    tracing::warn!(object = key, error = %error, kind = error.metric_label(), retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// True when the API answered 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repeated note is a series of one Event; a new note on the same object, reason and
    /// action is an Event of its own, with its own words (kube-runtime's recorder alone would
    /// count it as a repeat of the first and keep the first note).
    #[tokio::test]
    async fn a_new_note_is_a_new_event_and_a_repeated_one_a_series() {
        let (fake, client) = crate::fake::start();
        let ctx = crate::fake::recording(&Context::new(client, Settings::kubernetes("numaresources", "image"), None));
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some("dpdk".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-dpdk".into()),
            ..ObjectReference::default()
        };
        for note in ["first words", "first words", "new words"] {
            ctx.event(&regarding, EventType::Warning, "NUMAPlacement", "Scheduling", note.to_owned()).await;
        }
        let mut events: Vec<(String, i64)> = fake
            .events("NUMAPlacement")
            .iter()
            .map(|e| (e["note"].as_str().unwrap().to_owned(), e["series"]["count"].as_i64().unwrap_or(1)))
            .collect();
        events.sort();
        assert_eq!(events, [("first words".to_owned(), 2), ("new words".to_owned(), 1)]);
    }

    #[test]
    fn ready_once_the_api_answers_and_a_leader_has_synced_every_controller() {
        let readiness = Readiness::default();
        let checks = readiness.checks();
        let failing =
            || checks.run_all().err().unwrap_or_default().into_iter().map(|(name, _)| name).collect::<Vec<_>>();
        assert_eq!(failing(), ["kube-apiserver"], "nothing known yet");
        readiness.api_reachable.set();
        assert_eq!(failing(), [""; 0], "standby: waiting for the leader Lease");
        readiness.leading.set();
        readiness.operator.set();
        readiness.scheduler.set();
        assert_eq!(failing(), ["kubeletconfig-cache"]);
        readiness.clone().kubeletconfig.set();
        assert_eq!(checks.run_all(), Ok(()), "clones share state");
    }
}
