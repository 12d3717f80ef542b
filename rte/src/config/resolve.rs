//! [`Args`] → [`Config`]: the checks that need the environment, the files or several flags at
//! once. Each part reports its problems and the whole fails with all of them.

use std::path::PathBuf;

use numaresources_api::exporter::{ExporterConfig, TopologyManager};
use numaresources_api::nrt::well_known::{TOPOLOGY_MANAGER_POLICIES, TOPOLOGY_MANAGER_SCOPES};
use numaresources_api::selector::check_dns1123_subdomain;
use numaresources_runtime::InvalidConfig;

use super::environment::{non_empty_var, read_yaml};
use super::{
    Args, Config, Environment, MetricsEndpoint, MetricsMode, MetricsTls, ProcessEnvironment, default_operator_config,
};
use crate::podreadiness::OwnPod;
use crate::podresources::middleware::{ContainerRef, PodExclude};

/// The problems found so far, each `<source>: <what is wrong>`, the source being the flag,
/// variable or file it is about (`--hostname`, `--config podExclude[1]`).
#[derive(Debug, Default)]
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, source: &str, message: impl std::fmt::Display) {
        self.0.push(format!("{source}: {message}"));
    }

    /// The value, or `None` with its problem recorded under `source`.
    fn check<T>(&mut self, source: &str, result: Result<T, String>) -> Option<T> {
        self.take(result.map_err(|message| (source, message)))
    }

    /// The value, or `None` with its problem recorded under the source it names.
    fn take<T>(&mut self, result: Result<T, (&str, String)>) -> Option<T> {
        result.map_err(|(source, message)| self.add(source, message)).ok()
    }
}

impl Args {
    /// Validates the flags against the process's environment and files.
    pub fn resolve(&self) -> Result<Config, InvalidConfig> {
        self.resolve_with(&ProcessEnvironment)
    }

    /// Validates the flags, reading the environment and files through `env`.
    pub fn resolve_with(&self, env: &dyn Environment) -> Result<Config, InvalidConfig> {
        let mut problems = Problems::default();
        let node_name = self.node_name(env, &mut problems);
        self.check_paths(&mut problems);
        let exporter = self.exporter_config(env, &mut problems);
        let topology_manager = self.topology_manager(env, &exporter, &mut problems);
        let pod_excludes = pod_excludes(&exporter, &mut problems);
        let resource_excludes = ["*", node_name.as_str()]
            .iter()
            .filter_map(|key| exporter.resource_exclude.get(*key))
            .flatten()
            .cloned()
            .collect();
        let fingerprint_status_file = self.fingerprint_status_file(env, &mut problems);
        let reference_container = match &self.reference_container {
            Some(reference) => Some(reference.clone()),
            None => problems.check("REFERENCE_*", reference_from_env(env)).flatten(),
        };
        let own_pod = own_pod_from_env(env, reference_container.as_ref());
        let metrics = self.metrics(&mut problems);
        let nrt_server = problems.take(self.direct.resolve()).flatten();
        let config = Config {
            node_name,
            sysfs: self.sysfs.clone(),
            sleep_interval: self.sleep_interval.0,
            notify_file: self.notify_file.clone(),
            allocation_poll: self.podresources_poll_interval.0,
            topology_manager,
            pod_excludes,
            resource_excludes,
            fingerprint: self.pods_fingerprint.then_some(self.pods_fingerprint_method),
            fingerprint_status_file,
            reference_container,
            max_events_per_second: self.max_events_per_second,
            heartbeat: self.heartbeat.0,
            own_pod,
            metrics,
            nrt_server,
            flags: self.clone(),
        };
        InvalidConfig::check(config, problems.0)
    }

    /// `--hostname`, else NODE_NAME, else the host name; it must be able to name an object.
    fn node_name(&self, env: &dyn Environment, problems: &mut Problems) -> String {
        let node_name = self
            .hostname
            .clone()
            .filter(|h| !h.is_empty())
            .or_else(|| non_empty_var(env, "NODE_NAME"))
            .or_else(|| env.host_name())
            .unwrap_or_default();
        if node_name.is_empty() {
            problems.add("--hostname", "no node name: set --hostname or NODE_NAME");
        } else if let Err(why) = check_dns1123_subdomain(&node_name) {
            problems.add("--hostname", format!("{node_name:?} cannot name an object: {why}"));
        }
        node_name
    }

    /// The paths and the flags that only make sense together.
    fn check_paths(&self, problems: &mut Problems) {
        if self.sysfs.as_os_str().is_empty() {
            problems.add("--sysfs", "must not be empty");
        }
        if self.output.is_some() && !self.oneshot {
            problems.add("--output", "prints the one topology of --oneshot; add --oneshot");
        }
        if let Some(path) = &self.notify_file
            && (path.as_os_str().is_empty() || path.file_name().is_none())
        {
            problems.add("--notify-file", format!("{} is not a file path", path.display()));
        }
    }

    /// The operator's ConfigMap file (`--config`, else the default path if it is there).
    fn exporter_config(&self, env: &dyn Environment, problems: &mut Problems) -> ExporterConfig {
        let read = match &self.config {
            Some(path) => read_yaml::<ExporterConfig>(env, path, true),
            None => read_yaml::<ExporterConfig>(env, &default_operator_config(), false),
        };
        problems.check("--config", read).flatten().unwrap_or_default()
    }

    /// Policy and scope, each from the first source that sets it (see the module's doc).
    fn topology_manager(
        &self,
        env: &dyn Environment,
        exporter: &ExporterConfig,
        problems: &mut Problems,
    ) -> TopologyManager {
        // The kubelet's configuration file: missing fields are the kubelet's defaults.
        let kubelet = self.kubelet_config_file.as_ref().and_then(|path| {
            let read =
                env.read_file(path).map_err(|e| format!("cannot read {}: {e}", path.display())).and_then(|text| {
                    crate::topology::read_kubelet_config(&text).map_err(|e| format!("{}: {e}", path.display()))
                });
            problems.check("--kubelet-config-file", read)
        });
        let defaults = TopologyManager::kubelet_defaults();
        let first_set = |flag: &Option<String>, var: &str, kubelet: Option<&String>, operator: &Option<String>| {
            [flag.clone(), env.var(var), kubelet.cloned(), operator.clone()]
                .into_iter()
                .flatten()
                .find(|v| !v.is_empty())
        };
        let policy = first_set(
            &self.topology_manager_policy,
            "TOPOLOGY_MANAGER_POLICY",
            kubelet.as_ref().map(|k| &k.policy),
            &exporter.kubelet.topology_manager_policy,
        )
        .unwrap_or(defaults.policy);
        let scope = first_set(
            &self.topology_manager_scope,
            "TOPOLOGY_MANAGER_SCOPE",
            kubelet.as_ref().map(|k| &k.scope),
            &exporter.kubelet.topology_manager_scope,
        )
        .unwrap_or(defaults.scope);
        for (flag, what, value, known) in [
            ("--topology-manager-policy", "policy", &policy, TOPOLOGY_MANAGER_POLICIES),
            ("--topology-manager-scope", "scope", &scope, TOPOLOGY_MANAGER_SCOPES),
        ] {
            if !known.contains(&value.as_str()) {
                problems.add(flag, format!("unsupported {what} {value:?}: expected one of {known:?}"));
            }
        }
        TopologyManager { policy, scope }
    }

    /// `--pods-fingerprint-status-file`, else PFP_STATUS_FILE.
    fn fingerprint_status_file(&self, env: &dyn Environment, problems: &mut Problems) -> Option<PathBuf> {
        let path = self
            .pods_fingerprint_status_file
            .clone()
            .or_else(|| non_empty_var(env, "PFP_STATUS_FILE").map(PathBuf::from));
        if let Some(path) = &path
            && path.file_name().is_none()
        {
            problems.add("--pods-fingerprint-status-file", format!("{} is not a file path", path.display()));
        }
        path
    }

    /// The metrics endpoint; `None` when disabled.
    fn metrics(&self, problems: &mut Problems) -> Option<MetricsEndpoint> {
        let tls = match self.metrics_mode {
            MetricsMode::Disabled => return None,
            MetricsMode::Http => None,
            MetricsMode::HttpTls => Some(problems.take(self.metrics_tls())?),
        };
        Some(MetricsEndpoint { address: (self.metrics_address, self.metrics_port).into(), tls })
    }

    /// The `httptls` settings, or the flag at fault and why.
    fn metrics_tls(&self) -> Result<MetricsTls, (&'static str, String)> {
        let policy = numaresources_runtime::tls::TlsPolicy::from_flags(
            self.metrics_tls_min_version.as_deref(),
            self.metrics_tls_cipher_suites.as_deref(),
        )
        .map_err(|error| ("--metrics-tls-min-version/--metrics-tls-cipher-suites", error.to_string()))?;
        let client_ca_file = match (self.metrics_want_cli_auth, &self.metrics_client_ca_file) {
            (false, _) => None,
            (true, Some(file)) => Some(file.clone()),
            (true, None) => {
                return Err(("--metrics-want-cli-auth", "needs --metrics-client-ca-file to verify clients".into()));
            }
        };
        Ok(MetricsTls {
            cert_file: self.metrics_certs_dir.join(&self.metrics_cert_file),
            key_file: self.metrics_certs_dir.join(&self.metrics_key_file),
            client_ca_file,
            policy,
        })
    }
}

/// The ConfigMap's `podExclude` globs, each checked.
fn pod_excludes(exporter: &ExporterConfig, problems: &mut Problems) -> Vec<PodExclude> {
    let checked = exporter.pod_exclude.iter().enumerate().filter_map(|(i, rule)| {
        let exclude = PodExclude::new(&rule.namespace_pattern, &rule.name_pattern).map_err(|e| e.to_string());
        problems.check(&format!("--config podExclude[{i}]"), exclude)
    });
    checked.collect()
}

/// The reference container from the three variables the DaemonSet sets; all or none.
fn reference_from_env(env: &dyn Environment) -> Result<Option<ContainerRef>, String> {
    let names = ["REFERENCE_NAMESPACE", "REFERENCE_POD_NAME", "REFERENCE_CONTAINER_NAME"];
    let values: Vec<Option<String>> = names.iter().map(|n| non_empty_var(env, n)).collect();
    match values.as_slice() {
        [Some(namespace), Some(pod), Some(container)] => {
            Ok(Some(ContainerRef { namespace: namespace.clone(), pod: pod.clone(), container: container.clone() }))
        }
        [None, None, None] => Ok(None),
        _ => {
            let missing: Vec<&str> = names.iter().zip(&values).filter(|(_, v)| v.is_none()).map(|(n, _)| *n).collect();
            Err(format!("set all three of {names:?} or none; missing {missing:?}"))
        }
    }
}

/// The agent's own Pod: POD_NAMESPACE/POD_NAME, else REFERENCE_NAMESPACE/REFERENCE_POD_NAME
/// (upstream's source), else the reference container's pod (it is a sidecar of the agent's pod).
fn own_pod_from_env(env: &dyn Environment, reference: Option<&ContainerRef>) -> Option<OwnPod> {
    let pair = |namespace: &str, name: &str| match (non_empty_var(env, namespace), non_empty_var(env, name)) {
        (Some(namespace), Some(name)) => Some(OwnPod { namespace, name }),
        _ => None,
    };
    pair("POD_NAMESPACE", "POD_NAME")
        .or_else(|| pair("REFERENCE_NAMESPACE", "REFERENCE_POD_NAME"))
        .or_else(|| reference.map(|r| OwnPod { namespace: r.namespace.clone(), name: r.pod.clone() }))
}
