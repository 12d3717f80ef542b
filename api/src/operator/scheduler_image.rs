//! What each scheduler image knows, by image reference: the controllers render only what the
//! chosen image can decode (kube-scheduler reads its configuration strictly and exits on an
//! unknown field or plugin), and the webhook warns about what will be left out.
//!
//! The released images differ in two things we render:
//!
//! | image | `KNIDebug` filter | `preemptionMode` argument |
//! |---|---|---|
//! | `registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.x` | no | no |
//! | `registry.k8s.io/scheduler-plugins/kube-scheduler:v0.34.x` | no | no |
//! | `quay.io/openshift-kni/scheduler-plugins:*`, `registry.redhat.io/openshift4/noderesourcetopology-scheduler-*` | yes | no |
//! | anything else (another tag, a digest only, another registry) | no | no (conservative), with a warning |
//!
//! Every image above knows the rest of what we render: `cacheResyncPeriodSeconds`,
//! `scoringStrategy`, and `cache.resyncMethod`/`foreignPodsDetect`/`informerMode`.
//! `preemptionMode` exists only on scheduler-plugins' development branch (after v0.34), so no
//! released image gets it; the table grows when a release carries it.

use std::fmt;

/// The upstream release repository.
pub const UPSTREAM_REPOSITORY: &str = "registry.k8s.io/scheduler-plugins/kube-scheduler";
/// The upstream minor releases (`v0.<minor>.x`) whose capabilities are known.
pub const UPSTREAM_KNOWN_MINORS: [u32; 2] = [33, 34];
/// The repositories of the OpenShift (KNI) build of scheduler-plugins.
pub const KNI_REPOSITORIES: [&str; 2] =
    ["quay.io/openshift-kni/scheduler-plugins", "registry.redhat.io/openshift4/noderesourcetopology-scheduler"];

/// What a scheduler image can decode beyond the configuration every supported image knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerCapabilities {
    /// The `KNIDebug` filter plugin (OpenShift's build only).
    pub kni_debug: bool,
    /// The `preemptionMode` argument of `NodeResourceTopologyMatch`.
    pub preemption_mode: bool,
}

impl SchedulerCapabilities {
    /// What every supported image knows: nothing optional.
    pub const CONSERVATIVE: Self = Self { kni_debug: false, preemption_mode: false };
}

/// Which image family a reference names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedulerImageKind {
    /// An upstream release `v0.<minor>.<patch>`.
    Upstream { minor: u32 },
    /// The OpenShift (KNI) build.
    Kni,
    /// Not one we know: the conservative set applies.
    Unknown,
}

/// An image reference and what we know of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerImage {
    pub kind: SchedulerImageKind,
    pub capabilities: SchedulerCapabilities,
}

impl fmt::Display for SchedulerImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Upstream { minor } => write!(f, "scheduler-plugins v0.{minor}"),
            Self::Kni => f.write_str("the OpenShift scheduler-plugins build"),
            Self::Unknown => f.write_str("an image whose capabilities are not known"),
        }
    }
}

/// Splits `repo[:tag][@digest]` into the repository and the tag (`None` without one). A `:` in
/// the registry's host part (`host:5000/x`) is not a tag.
fn repository_and_tag(image: &str) -> (&str, Option<&str>) {
    let name = image.split('@').next().unwrap_or_default();
    match name.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => (repository, Some(tag)),
        _ => (name, None),
    }
}

/// `v0.33.5` (and `v0.33.5-rc.1`) → 33.
fn upstream_minor(tag: &str) -> Option<u32> {
    let mut parts = tag.strip_prefix("v0.")?.split('.');
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next()?;
    patch.chars().next().filter(char::is_ascii_digit)?;
    Some(minor)
}

/// What `image` can run.
pub fn identify(image: &str) -> SchedulerImage {
    let (repository, tag) = repository_and_tag(image.trim());
    if KNI_REPOSITORIES.iter().any(|kni| repository == *kni || repository.starts_with(&format!("{kni}-"))) {
        return SchedulerImage {
            kind: SchedulerImageKind::Kni,
            capabilities: SchedulerCapabilities { kni_debug: true, preemption_mode: false },
        };
    }
    if repository == UPSTREAM_REPOSITORY
        && let Some(minor) = tag.and_then(upstream_minor)
        && UPSTREAM_KNOWN_MINORS.contains(&minor)
    {
        return SchedulerImage {
            kind: SchedulerImageKind::Upstream { minor },
            capabilities: SchedulerCapabilities { kni_debug: false, preemption_mode: false },
        };
    }
    SchedulerImage { kind: SchedulerImageKind::Unknown, capabilities: SchedulerCapabilities::CONSERVATIVE }
}

/// The stock kube-scheduler's repository (the extender engine's image).
pub const KUBE_SCHEDULER_REPOSITORY: &str = "registry.k8s.io/kube-scheduler";

/// The Kubernetes minor version (`1.33` → 33) of a stock kube-scheduler image reference
/// (`registry.k8s.io/kube-scheduler:v1.33.0`); None for any other image or tag.
pub fn kube_scheduler_minor(image: &str) -> Option<u32> {
    let (repository, tag) = repository_and_tag(image.trim());
    if repository != KUBE_SCHEDULER_REPOSITORY {
        return None;
    }
    let mut parts = tag?.strip_prefix("v1.")?.split('.');
    parts.next()?.parse().ok()
}

/// The stock kube-scheduler image of the Kubernetes release kube-apiserver reports
/// (`/version`'s `gitVersion`: `v1.33.2`, `v1.33.2+k3s1`, `v1.33.2-eks-4096722`): the release
/// `registry.k8s.io` publishes, without a provider's suffix. None when it is not `vX.Y.Z`.
pub fn stock_kube_scheduler_image(git_version: &str) -> Option<String> {
    let release = git_version.trim().split(['+', '-']).next()?;
    let numbers = release.strip_prefix('v')?.split('.').collect::<Vec<_>>();
    let well_formed =
        numbers.len() == 3 && numbers.iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    well_formed.then(|| format!("{KUBE_SCHEDULER_REPOSITORY}:{release}"))
}

impl SchedulerImage {
    /// Why a configured choice is not rendered for this image, or why the image gets only the
    /// conservative set: each a sentence for a warning, an Event or a condition.
    pub fn warnings(&self, image: &str, preemption_enabled: bool) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.kind == SchedulerImageKind::Unknown {
            warnings.push(format!(
                "spec.imageSpec {image:?} has unknown capabilities: only what every supported image knows is rendered"
            ));
        }
        if preemption_enabled && !self.capabilities.preemption_mode {
            warnings.push(format!("spec.preemptionMode Enabled is not rendered: {} does not know it", self.kind));
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stock_kube_scheduler_images_minor_version_is_read_from_its_tag() {
        assert_eq!(kube_scheduler_minor("registry.k8s.io/kube-scheduler:v1.33.0"), Some(33));
        assert_eq!(kube_scheduler_minor("registry.k8s.io/kube-scheduler:v1.31.4@sha256:00"), Some(31));
        assert_eq!(kube_scheduler_minor("registry.k8s.io/kube-scheduler@sha256:00"), None);
        assert_eq!(kube_scheduler_minor("example.com/kube-scheduler:v1.33.0"), None);
    }

    #[test]
    fn the_stock_image_is_the_release_without_a_providers_suffix() {
        let image = |v: &str| stock_kube_scheduler_image(v);
        assert_eq!(image("v1.33.2").as_deref(), Some("registry.k8s.io/kube-scheduler:v1.33.2"));
        assert_eq!(image("v1.31.4+k3s1").as_deref(), Some("registry.k8s.io/kube-scheduler:v1.31.4"));
        assert_eq!(image("v1.30.1-eks-4096722").as_deref(), Some("registry.k8s.io/kube-scheduler:v1.30.1"));
        assert_eq!(image("v1.32.0-gke.1200").as_deref(), Some("registry.k8s.io/kube-scheduler:v1.32.0"));
        for odd in ["", "v1.33", "1.33.2", "v1.33.x", "v1..2"] {
            assert_eq!(image(odd), None, "{odd}");
        }
    }

    #[test]
    fn released_images_are_identified_by_repository_and_tag() {
        let kinds = [
            ("registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5", SchedulerImageKind::Upstream { minor: 33 }),
            ("registry.k8s.io/scheduler-plugins/kube-scheduler:v0.34.7", SchedulerImageKind::Upstream { minor: 34 }),
            (
                "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.34.7@sha256:0123",
                SchedulerImageKind::Upstream { minor: 34 },
            ),
            ("registry.k8s.io/scheduler-plugins/kube-scheduler:v0.31.8", SchedulerImageKind::Unknown),
            ("registry.k8s.io/scheduler-plugins/kube-scheduler:latest", SchedulerImageKind::Unknown),
            ("registry.k8s.io/scheduler-plugins/kube-scheduler@sha256:0123", SchedulerImageKind::Unknown),
            ("quay.io/openshift-kni/scheduler-plugins:4.20-snapshot", SchedulerImageKind::Kni),
            ("quay.io/openshift-kni/scheduler-plugins@sha256:0123", SchedulerImageKind::Kni),
            ("registry.redhat.io/openshift4/noderesourcetopology-scheduler-rhel9@sha256:0123", SchedulerImageKind::Kni),
            ("localhost:5000/kube-scheduler:v0.33.5", SchedulerImageKind::Unknown),
            ("", SchedulerImageKind::Unknown),
        ];
        for (image, kind) in kinds {
            assert_eq!(identify(image).kind, kind, "{image}");
        }
    }

    #[test]
    fn only_the_kni_build_has_knidebug_and_no_released_image_preemption() {
        assert!(identify("quay.io/openshift-kni/scheduler-plugins:4.18-snapshot").capabilities.kni_debug);
        assert!(!identify("registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5").capabilities.kni_debug);
        assert_eq!(identify("example.com/mine:1").capabilities, SchedulerCapabilities::CONSERVATIVE);
        for image in [
            "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5",
            "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.34.7",
            "quay.io/openshift-kni/scheduler-plugins:4.20-snapshot",
        ] {
            assert!(!identify(image).capabilities.preemption_mode, "{image}");
        }
    }

    #[test]
    fn warnings_say_what_is_left_out_and_why() {
        let upstream = "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5";
        assert!(identify(upstream).warnings(upstream, false).is_empty());
        let left_out = identify(upstream).warnings(upstream, true);
        assert_eq!(left_out.len(), 1);
        assert!(left_out[0].contains("preemptionMode") && left_out[0].contains("v0.33"), "{left_out:?}");
        let unknown = identify("example.com/mine:1").warnings("example.com/mine:1", false);
        assert_eq!(unknown.len(), 1);
        assert!(unknown[0].contains("example.com/mine:1"), "{unknown:?}");
    }
}
