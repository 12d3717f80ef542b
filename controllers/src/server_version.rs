//! The oldest Kubernetes we deploy onto, and what the controllers say on an older one.
//!
//! The Deployments we ship use `lifecycle.preStop.sleep` (beta and on by default from v1.30),
//! which an older kube-apiserver rejects with `field not declared in schema`. Rather than fail
//! at the first apply with that message, the controllers read `/version` at start and report
//! `Degraded` naming the minimum version. A cluster upgraded while we run is noticed: the
//! version is read again on every pass that would refuse.

use std::fmt;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::version::Info;

/// A `major.minor` Kubernetes version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
}

/// The oldest kube-apiserver the rendered objects are valid for.
pub const MINIMUM: KubeVersion = KubeVersion { major: 1, minor: 30 };

/// How often a refusing pass looks at the version again (an upgrade is slow).
pub const RECHECK: Duration = Duration::from_secs(300);

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)
    }
}

impl KubeVersion {
    /// Reads `/version`'s answer: `major`/`minor` (providers write `"28+"`), else `gitVersion`
    /// (`v1.28.3-gke.100`). `None` when neither says.
    pub fn from_info(info: &Info) -> Option<Self> {
        let leading = |text: &str| {
            let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        };
        if let (Some(major), Some(minor)) = (leading(&info.major), leading(&info.minor)) {
            return Some(Self { major, minor });
        }
        let mut parts = info.git_version.trim_start_matches('v').split('.');
        Some(Self { major: leading(parts.next()?)?, minor: leading(parts.next()?)? })
    }
}

/// Why `version` is not supported, for a condition message; `None` when it is.
pub fn unsupported(version: KubeVersion) -> Option<String> {
    (version < MINIMUM).then(|| {
        format!(
            "kube-apiserver is {version}, older than {MINIMUM}, the oldest Kubernetes supported: the Deployments we \
             deploy use lifecycle.preStop.sleep, which kube-apiserver accepts from {MINIMUM}; nothing is deployed \
             until the cluster is upgraded"
        )
    })
}

/// Reads the server's version; `None` (and a warning) when it cannot be read, in which case
/// nothing is refused: an apply then says what is wrong.
pub async fn detect(client: &kube::Client) -> Option<KubeVersion> {
    version_of(&read(client).await?)
}

/// What `/version` answers; `None` (and a warning) when it cannot be read.
pub async fn read(client: &kube::Client) -> Option<Info> {
    client.apiserver_version().await.inspect_err(|error| tracing::warn!(%error, "cannot read /version")).ok()
}

/// The version in `/version`'s answer; `None` (and a warning) when it does not say.
pub fn version_of(info: &Info) -> Option<KubeVersion> {
    let version = KubeVersion::from_info(info);
    if version.is_none() {
        tracing::warn!(?info, "cannot tell the Kubernetes version from /version");
    }
    version
}

/// What a pass reports when the cluster is too old: the message of a `Degraded` condition, or
/// `None` to go on. `known` is the version seen before; only an old one is read again.
pub async fn refusal(client: &kube::Client, known: Option<KubeVersion>) -> Option<String> {
    unsupported(known?)?;
    detect(client).await.and_then(unsupported)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str, git: &str) -> Info {
        Info { major: major.into(), minor: minor.into(), git_version: git.into(), ..Info::default() }
    }

    #[test]
    fn versions_as_providers_write_them() {
        let v = |major, minor| Some(KubeVersion { major, minor });
        assert_eq!(KubeVersion::from_info(&info("1", "30", "v1.30.2")), v(1, 30));
        assert_eq!(KubeVersion::from_info(&info("1", "28+", "v1.28.3-gke.100")), v(1, 28));
        assert_eq!(KubeVersion::from_info(&info("", "", "v1.29.0-eks-1")), v(1, 29));
        assert_eq!(KubeVersion::from_info(&info("", "", "")), None);
    }

    #[test]
    fn only_versions_older_than_the_minimum_are_refused_and_the_message_names_it() {
        let message = unsupported(KubeVersion { major: 1, minor: 29 }).unwrap();
        assert!(message.contains("v1.29") && message.contains("v1.30"), "{message}");
        assert!(message.contains("preStop.sleep"), "{message}");
        assert_eq!(unsupported(MINIMUM), None);
        assert_eq!(unsupported(KubeVersion { major: 1, minor: 34 }), None);
        assert_eq!(unsupported(KubeVersion { major: 2, minor: 0 }), None);
    }
}
