//! Defaults, as pure functions (upstream's `SetDefaults`/`Normalize`).
//!
//! Upstream never persists these: the controllers normalize a copy of the spec and work from
//! it, and report the normalized node group config in status. We do the same. The only default
//! that the CRD schema itself applies is `logLevel: Normal`.
//!
//! `preemptionMode` and `replicas` are deliberately left unset by normalization: "unset" means
//! "disabled" and "autodetect" respectively, which a filled-in value could not express.

use super::{
    CacheResyncDebugMode, CacheResyncDetectionMode, InfoRefreshMode, InfoRefreshPauseMode, LogLevel,
    NUMAResourcesOperatorSpec, NUMAResourcesSchedulerSpec, NodeGroup, NodeGroupConfig, PodRouting, PodRoutingMode,
    PodsFingerprintingMode, SchedulerEngine, SchedulerInformerMode, ScoringStrategyParams, ScoringStrategyType,
    UnmanagedMemoryMode,
};
use crate::duration::GoDuration;

/// Default exporter refresh period.
pub const INFO_REFRESH_PERIOD: GoDuration = GoDuration::from_secs(10);
/// Default scheduler cache resync period.
pub const CACHE_RESYNC_PERIOD: GoDuration = GoDuration::from_secs(5);

/// The cluster flavour, where a default depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    /// Plain Kubernetes.
    Kubernetes,
    /// OpenShift at the given (major, minor) version.
    OpenShift(u32, u32),
    /// HyperShift hosted control planes at the given (major, minor) version.
    HyperShift(u32, u32),
}

impl Platform {
    /// From OpenShift 4.20 the kubelet's podresources API reports what the shared informer
    /// needs, so the scheduler no longer needs its own.
    fn has_podresources_fix(&self) -> bool {
        match *self {
            Self::Kubernetes => false,
            Self::OpenShift(major, minor) | Self::HyperShift(major, minor) => (major, minor) >= (4, 20),
        }
    }
}

impl NodeGroupConfig {
    /// The configuration a node group gets when it says nothing.
    pub fn defaults() -> Self {
        Self {
            pods_fingerprinting: Some(PodsFingerprintingMode::EnabledExclusiveResources),
            info_refresh_mode: Some(InfoRefreshMode::Periodic),
            info_refresh_period: Some(INFO_REFRESH_PERIOD),
            info_refresh_pause: Some(InfoRefreshPauseMode::Disabled),
            unmanaged_memory: Some(UnmanagedMemoryMode::NodeLevel),
            tolerations: Vec::new(),
        }
    }

    /// The defaults overlaid with every field this config sets; tolerations pass through.
    pub fn normalized(&self) -> Self {
        let defaults = Self::defaults();
        Self {
            pods_fingerprinting: self.pods_fingerprinting.clone().or(defaults.pods_fingerprinting),
            info_refresh_mode: self.info_refresh_mode.clone().or(defaults.info_refresh_mode),
            info_refresh_period: self.info_refresh_period.or(defaults.info_refresh_period),
            info_refresh_pause: self.info_refresh_pause.clone().or(defaults.info_refresh_pause),
            unmanaged_memory: self.unmanaged_memory.clone().or(defaults.unmanaged_memory),
            tolerations: self.tolerations.clone(),
        }
    }
}

impl NodeGroup {
    /// The group's effective exporter configuration (upstream's `NormalizeConfig`).
    pub fn normalized_config(&self) -> NodeGroupConfig {
        self.config.as_ref().map_or_else(NodeGroupConfig::defaults, NodeGroupConfig::normalized)
    }
}

impl NUMAResourcesOperatorSpec {
    /// The effective spec: `logLevel` set and every node group's config normalized.
    pub fn normalized(&self) -> Self {
        Self {
            log_level: Some(effective_log_level(&self.log_level)),
            node_groups: self
                .node_groups
                .iter()
                .map(|group| NodeGroup { config: Some(group.normalized_config()), ..group.clone() })
                .collect(),
            ..self.clone()
        }
    }
}

impl NUMAResourcesSchedulerSpec {
    /// The effective spec on `platform`. `replicas` and `preemptionMode` stay as given.
    pub fn normalized(&self, platform: Platform) -> Self {
        let informer = if platform.has_podresources_fix() {
            SchedulerInformerMode::Shared
        } else {
            SchedulerInformerMode::Dedicated
        };
        let scoring_strategy = match &self.scoring_strategy {
            None => ScoringStrategyParams { type_: Some(ScoringStrategyType::LeastAllocated), resources: Vec::new() },
            Some(given) => given.clone(),
        };
        let pod_routing = PodRouting {
            mode: Some(self.pod_routing_mode()),
            namespace_selector: self.pod_routing.as_ref().and_then(|r| r.namespace_selector.clone()),
        };
        Self {
            log_level: Some(effective_log_level(&self.log_level)),
            cache_resync_period: self.cache_resync_period.or(Some(CACHE_RESYNC_PERIOD)),
            cache_resync_debug: self.cache_resync_debug.clone().or(Some(CacheResyncDebugMode::DumpJSONFile)),
            scheduler_informer: self.scheduler_informer.clone().or(Some(informer)),
            cache_resync_detection: self.cache_resync_detection.clone().or(Some(CacheResyncDetectionMode::Relaxed)),
            scoring_strategy: Some(scoring_strategy),
            pod_routing: Some(pod_routing),
            ..self.clone()
        }
    }

    /// The engine in force (`Plugin` when unset).
    pub fn engine(&self) -> SchedulerEngine {
        self.engine.clone().unwrap_or(SchedulerEngine::Plugin)
    }

    /// The pod routing mode in force (`Disabled` when unset).
    pub fn pod_routing_mode(&self) -> PodRoutingMode {
        self.pod_routing.as_ref().and_then(|r| r.mode.clone()).unwrap_or(PodRoutingMode::Disabled)
    }

    /// The scheduler name pods must carry to be scheduled by it.
    pub fn effective_scheduler_name(&self) -> &str {
        if self.scheduler_name.is_empty() { super::DEFAULT_SCHEDULER_NAME } else { &self.scheduler_name }
    }
}

/// An unset or empty log level means `Normal`.
fn effective_log_level(level: &Option<LogLevel>) -> LogLevel {
    match level {
        None | Some(LogLevel::Unset) => LogLevel::Normal,
        Some(level) => level.clone(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Toleration;

    use super::*;

    fn secs(s: i64) -> Option<GoDuration> {
        Some(GoDuration::from_secs(s))
    }

    #[test]
    fn node_group_config_defaults_one_row_per_field() {
        type Row = (&'static str, fn(&NodeGroupConfig) -> bool);
        let rows: [Row; 6] = [
            ("podsFingerprinting defaults to EnabledExclusiveResources", |c| {
                c.pods_fingerprinting == Some(PodsFingerprintingMode::EnabledExclusiveResources)
            }),
            ("infoRefreshMode defaults to Periodic", |c| c.info_refresh_mode == Some(InfoRefreshMode::Periodic)),
            ("infoRefreshPeriod defaults to 10s", |c| c.info_refresh_period == secs(10)),
            ("infoRefreshPause defaults to Disabled", |c| c.info_refresh_pause == Some(InfoRefreshPauseMode::Disabled)),
            ("unmanagedMemory defaults to NodeLevel", |c| c.unmanaged_memory == Some(UnmanagedMemoryMode::NodeLevel)),
            ("tolerations default to none", |c| c.tolerations.is_empty()),
        ];
        for (name, check) in rows {
            assert!(check(&NodeGroupConfig::default().normalized()), "{name}");
            assert!(check(&NodeGroup::default().normalized_config()), "{name} (no config at all)");
        }
    }

    #[test]
    fn node_group_config_keeps_what_the_user_set() {
        let toleration = Toleration { key: Some("k".into()), operator: Some("Exists".into()), ..Toleration::default() };
        let given = NodeGroupConfig {
            pods_fingerprinting: Some(PodsFingerprintingMode::Disabled),
            info_refresh_mode: Some(InfoRefreshMode::Events),
            info_refresh_period: Some(GoDuration::ZERO),
            info_refresh_pause: Some(InfoRefreshPauseMode::Enabled),
            unmanaged_memory: Some(UnmanagedMemoryMode::Omit),
            tolerations: vec![toleration],
        };
        assert_eq!(given.normalized(), given);
        let partial = NodeGroupConfig {
            info_refresh_mode: Some(InfoRefreshMode::PeriodicAndEvents),
            ..NodeGroupConfig::default()
        };
        let normalized = partial.normalized();
        assert_eq!(normalized.info_refresh_mode, Some(InfoRefreshMode::PeriodicAndEvents));
        assert_eq!(normalized.info_refresh_period, secs(10));
    }

    #[test]
    fn operator_spec_defaults() {
        let spec = NUMAResourcesOperatorSpec {
            node_groups: vec![NodeGroup { pool_name: Some("worker".into()), ..NodeGroup::default() }],
            ..NUMAResourcesOperatorSpec::default()
        };
        let normalized = spec.normalized();
        assert_eq!(normalized.log_level, Some(LogLevel::Normal));
        assert_eq!(normalized.node_groups[0].config, Some(NodeGroupConfig::defaults()));
        assert_eq!(normalized.node_groups[0].pool_name.as_deref(), Some("worker"));
        let empty_level =
            NUMAResourcesOperatorSpec { log_level: Some(LogLevel::Unset), ..NUMAResourcesOperatorSpec::default() };
        assert_eq!(empty_level.normalized().log_level, Some(LogLevel::Normal));
        let debug =
            NUMAResourcesOperatorSpec { log_level: Some(LogLevel::Debug), ..NUMAResourcesOperatorSpec::default() };
        assert_eq!(debug.normalized().log_level, Some(LogLevel::Debug));
    }

    #[test]
    fn scheduler_spec_defaults_one_row_per_field() {
        type Row = (&'static str, Platform, fn(&NUMAResourcesSchedulerSpec) -> bool);
        let rows: [Row; 11] = [
            ("logLevel Normal", Platform::Kubernetes, |s| s.log_level == Some(LogLevel::Normal)),
            ("cacheResyncPeriod 5s", Platform::Kubernetes, |s| s.cache_resync_period == secs(5)),
            ("cacheResyncDebug DumpJSONFile", Platform::Kubernetes, |s| {
                s.cache_resync_debug == Some(CacheResyncDebugMode::DumpJSONFile)
            }),
            ("schedulerInformer Dedicated on Kubernetes", Platform::Kubernetes, |s| {
                s.scheduler_informer == Some(SchedulerInformerMode::Dedicated)
            }),
            ("schedulerInformer Dedicated on OpenShift 4.19", Platform::OpenShift(4, 19), |s| {
                s.scheduler_informer == Some(SchedulerInformerMode::Dedicated)
            }),
            ("schedulerInformer Shared on OpenShift 4.20", Platform::OpenShift(4, 20), |s| {
                s.scheduler_informer == Some(SchedulerInformerMode::Shared)
            }),
            ("schedulerInformer Shared on HyperShift 5.0", Platform::HyperShift(5, 0), |s| {
                s.scheduler_informer == Some(SchedulerInformerMode::Shared)
            }),
            ("cacheResyncDetection Relaxed", Platform::Kubernetes, |s| {
                s.cache_resync_detection == Some(CacheResyncDetectionMode::Relaxed)
            }),
            ("scoringStrategy LeastAllocated", Platform::Kubernetes, |s| {
                s.scoring_strategy.as_ref().and_then(|p| p.type_.clone()) == Some(ScoringStrategyType::LeastAllocated)
            }),
            ("replicas and preemptionMode stay unset", Platform::Kubernetes, |s| {
                s.replicas.is_none() && s.preemption_mode.is_none()
            }),
            ("podRouting mode Disabled", Platform::Kubernetes, |s| {
                s.pod_routing_mode() == PodRoutingMode::Disabled
                    && s.pod_routing.as_ref().is_some_and(|r| r.mode == Some(PodRoutingMode::Disabled))
            }),
        ];
        for (name, platform, check) in rows {
            let spec = NUMAResourcesSchedulerSpec::default().normalized(platform);
            assert!(check(&spec), "{name}: {spec:?}");
        }
    }

    #[test]
    fn scheduler_spec_keeps_what_the_user_set() {
        let given = NUMAResourcesSchedulerSpec {
            scheduler_image: "quay.io/x/scheduler:v1".into(),
            scheduler_name: "numa".into(),
            log_level: Some(LogLevel::Trace),
            cache_resync_period: Some(GoDuration::ZERO),
            cache_resync_debug: Some(CacheResyncDebugMode::Disabled),
            scheduler_informer: Some(SchedulerInformerMode::Shared),
            cache_resync_detection: Some(CacheResyncDetectionMode::Aggressive),
            scoring_strategy: Some(ScoringStrategyParams {
                type_: Some(ScoringStrategyType::MostAllocated),
                resources: Vec::new(),
            }),
            replicas: Some(3),
            preemption_mode: Some(super::super::PreemptionMode::Enabled),
            pod_routing: Some(PodRouting { mode: Some(PodRoutingMode::All), namespace_selector: None }),
            engine: Some(SchedulerEngine::Extender),
        };
        assert_eq!(given.normalized(Platform::OpenShift(4, 20)), given);
        assert_eq!(given.engine(), SchedulerEngine::Extender);
        assert_eq!(NUMAResourcesSchedulerSpec::default().engine(), SchedulerEngine::Plugin);
        assert_eq!(given.effective_scheduler_name(), "numa");
        assert_eq!(NUMAResourcesSchedulerSpec::default().effective_scheduler_name(), "topo-aware-scheduler");
    }
}
