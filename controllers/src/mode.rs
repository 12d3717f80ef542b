//! Who provides the serving certificates, and who deploys the NRT API server: the two choices
//! the controllers are started with (`--certificate-mode`, `--apiserver-deployment`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::names::{APISERVER, APISERVER_TLS_SECRET, WEBHOOK};

/// Where serving certificates and `caBundle` come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CertificateMode {
    /// The controllers make a CA and the serving certificates, keep them in Secrets and inject
    /// `caBundle` (plain Kubernetes).
    #[default]
    SelfManaged,
    /// OLM generates, mounts and rotates them and injects `caBundle` (from the CSV).
    Olm,
    /// cert-manager writes the Secrets; its cainjector fills `caBundle` (annotations).
    CertManager,
    /// OpenShift's service-ca operator writes the Secrets and injects `caBundle` (annotations).
    ServiceCa,
}

impl CertificateMode {
    /// The flag values, in the order the help lists them.
    pub const NAMES: [&'static str; 4] = ["self-managed", "olm", "cert-manager", "service-ca"];

    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SelfManaged => "self-managed",
            Self::Olm => "olm",
            Self::CertManager => "cert-manager",
            Self::ServiceCa => "service-ca",
        }
    }

    /// The annotations that ask this mode's injector for the API server's certificate, on the
    /// APIService and on the Service, when the operator renders them (empty when nothing is
    /// asked for by annotation).
    pub fn apiserver_annotations(self, namespace: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        match self {
            Self::CertManager => (
                BTreeMap::from([(CERT_MANAGER_INJECT_CA_FROM.to_owned(), format!("{namespace}/{APISERVER}"))]),
                BTreeMap::new(),
            ),
            Self::ServiceCa => (
                BTreeMap::from([(SERVICE_CA_INJECT_CABUNDLE.to_owned(), "true".to_owned())]),
                BTreeMap::from([(SERVICE_CA_SERVING_CERT_SECRET.to_owned(), APISERVER_TLS_SECRET.to_owned())]),
            ),
            Self::SelfManaged | Self::Olm => (BTreeMap::new(), BTreeMap::new()),
        }
    }

    /// Where the CA bundle that verifies the API server lies in the ConfigMap
    /// [`crate::names::APISERVER_CA_CONFIG_MAP`] (the exporters' direct write path): the key,
    /// and the annotations that ask this mode's injector to fill it (service-ca injects into an
    /// annotated ConfigMap under its own key; in the other modes the controllers write it).
    pub fn ca_config_map(self) -> (&'static str, BTreeMap<String, String>) {
        match self {
            Self::ServiceCa => (
                SERVICE_CA_CONFIG_MAP_KEY,
                BTreeMap::from([(SERVICE_CA_INJECT_CABUNDLE.to_owned(), "true".to_owned())]),
            ),
            Self::SelfManaged | Self::Olm | Self::CertManager => (CA_CONFIG_MAP_KEY, BTreeMap::new()),
        }
    }

    /// The annotations that ask this mode's injector for the webhook's CA on a webhook
    /// configuration the controllers render (the pod routing one); empty when nothing is asked
    /// for by annotation.
    pub fn webhook_annotations(self, namespace: &str) -> BTreeMap<String, String> {
        match self {
            Self::CertManager => {
                BTreeMap::from([(CERT_MANAGER_INJECT_CA_FROM.to_owned(), format!("{namespace}/{WEBHOOK}"))])
            }
            Self::ServiceCa => BTreeMap::from([(SERVICE_CA_INJECT_CABUNDLE.to_owned(), "true".to_owned())]),
            Self::SelfManaged | Self::Olm => BTreeMap::new(),
        }
    }
}

/// cert-manager's cainjector: copy the CA of this `<namespace>/<Certificate>` into `caBundle`.
pub const CERT_MANAGER_INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";
/// service-ca: inject the service CA into `caBundle`.
pub const SERVICE_CA_INJECT_CABUNDLE: &str = "service.beta.openshift.io/inject-cabundle";
/// The key the controllers write a CA bundle under in a ConfigMap.
pub const CA_CONFIG_MAP_KEY: &str = "ca.crt";
/// The key service-ca injects its CA bundle under in an annotated ConfigMap.
pub const SERVICE_CA_CONFIG_MAP_KEY: &str = "service-ca.crt";
/// service-ca: write a serving certificate for this Service into the named Secret.
pub const SERVICE_CA_SERVING_CERT_SECRET: &str = "service.beta.openshift.io/serving-cert-secret-name";

/// Who creates the NRT API server's Deployment, Service, APIService and RBAC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ApiserverDeployment {
    /// The `NUMAResourcesOperator` controller renders them from its CR.
    #[default]
    Operator,
    /// The install ships them (the kustomize base or the OLM CSV); the operator only reports them.
    Installed,
}

impl ApiserverDeployment {
    /// The flag values.
    pub const NAMES: [&'static str; 2] = ["operator", "installed"];

    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Operator => "operator",
            Self::Installed => "installed",
        }
    }
}

/// A flag value that is not one of the choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown value {value:?}; expected one of: {}", expected.join(", "))]
pub struct UnknownChoice {
    value: String,
    expected: &'static [&'static str],
}

impl FromStr for CertificateMode {
    type Err = UnknownChoice;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        [Self::SelfManaged, Self::Olm, Self::CertManager, Self::ServiceCa]
            .into_iter()
            .find(|mode| mode.as_str() == value)
            .ok_or_else(|| UnknownChoice { value: value.to_owned(), expected: &Self::NAMES })
    }
}

impl FromStr for ApiserverDeployment {
    type Err = UnknownChoice;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        [Self::Operator, Self::Installed]
            .into_iter()
            .find(|choice| choice.as_str() == value)
            .ok_or_else(|| UnknownChoice { value: value.to_owned(), expected: &Self::NAMES })
    }
}

impl fmt::Display for CertificateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for ApiserverDeployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Refuses combinations that cannot work: under OLM the CSV owns the API server's Deployment,
/// Service and APIService, so the operator rendering its own would fight OLM over them.
pub fn check_compatible(mode: CertificateMode, deployment: ApiserverDeployment) -> Result<(), String> {
    if mode == CertificateMode::Olm && deployment == ApiserverDeployment::Operator {
        return Err("--certificate-mode=olm needs --apiserver-deployment=installed: OLM creates the API server's \
                    Deployment, Service and APIService from the CSV and would fight the operator over them"
            .to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_round_trip_and_unknown_ones_list_the_choices() {
        for name in CertificateMode::NAMES {
            assert_eq!(name.parse::<CertificateMode>().unwrap().to_string(), name);
        }
        for name in ApiserverDeployment::NAMES {
            assert_eq!(name.parse::<ApiserverDeployment>().unwrap().to_string(), name);
        }
        let err = "selfmanaged".parse::<CertificateMode>().unwrap_err().to_string();
        assert_eq!(err, "unknown value \"selfmanaged\"; expected one of: self-managed, olm, cert-manager, service-ca");
        assert!("Operator".parse::<ApiserverDeployment>().is_err(), "values are case-sensitive like kubectl's");
    }

    #[test]
    fn olm_certificates_need_an_installed_api_server() {
        assert!(check_compatible(CertificateMode::Olm, ApiserverDeployment::Operator).is_err());
        assert!(check_compatible(CertificateMode::Olm, ApiserverDeployment::Installed).is_ok());
        assert!(check_compatible(CertificateMode::default(), ApiserverDeployment::default()).is_ok());
    }

    #[test]
    fn injectors_are_asked_by_annotation_only_where_they_inject() {
        let (api_service, service) = CertificateMode::CertManager.apiserver_annotations("ns");
        assert_eq!(api_service[CERT_MANAGER_INJECT_CA_FROM], "ns/numaresources-apiserver");
        assert!(service.is_empty());
        let (api_service, service) = CertificateMode::ServiceCa.apiserver_annotations("ns");
        assert_eq!(api_service[SERVICE_CA_INJECT_CABUNDLE], "true");
        assert_eq!(service[SERVICE_CA_SERVING_CERT_SECRET], "numaresources-apiserver-tls");
        assert_eq!(CertificateMode::SelfManaged.apiserver_annotations("ns"), (BTreeMap::new(), BTreeMap::new()));
        let webhook = CertificateMode::CertManager.webhook_annotations("ns");
        assert_eq!(webhook[CERT_MANAGER_INJECT_CA_FROM], "ns/numaresources-webhook");
        assert_eq!(CertificateMode::ServiceCa.webhook_annotations("ns")[SERVICE_CA_INJECT_CABUNDLE], "true");
        assert!(CertificateMode::SelfManaged.webhook_annotations("ns").is_empty());
        let (key, annotations) = CertificateMode::ServiceCa.ca_config_map();
        assert_eq!((key, annotations[SERVICE_CA_INJECT_CABUNDLE].as_str()), ("service-ca.crt", "true"));
        for mode in [CertificateMode::SelfManaged, CertificateMode::Olm, CertificateMode::CertManager] {
            assert_eq!(mode.ca_config_map(), ("ca.crt", BTreeMap::new()), "{mode}: written by the controllers");
        }
    }
}
