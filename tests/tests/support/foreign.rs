//! Kinds k8s-openapi does not have: the cert-manager `Issuer` and `Certificate` (cert-manager.io/v1)
//! and OpenShift's `SecurityContextConstraints` (security.openshift.io/v1), with the fields the
//! overlays use. Unknown fields are refused, so a misspelling fails like it would on the cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Issuer {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: IssuerSpec,
}

/// Exactly one issuer type is set.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IssuerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_signed: Option<Empty>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<CaIssuer>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CaIssuer {
    pub secret_name: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Certificate {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: CertificateSpec,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CertificateSpec {
    pub secret_name: String,
    pub issuer_ref: IssuerRef,
    #[serde(default, rename = "isCA", skip_serializing_if = "Option::is_none")]
    pub is_ca: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_names: Option<Vec<String>>,
    /// Go durations (`2160h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usages: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<PrivateKey>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IssuerRef {
    pub name: String,
    pub kind: String,
    pub group: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrivateKey {
    pub algorithm: String,
    pub size: u32,
    pub rotation_policy: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecurityContextConstraints {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    #[serde(rename = "allowHostDirVolumePlugin")]
    pub allow_host_dir_volume_plugin: bool,
    #[serde(rename = "allowHostIPC")]
    pub allow_host_ipc: bool,
    pub allow_host_network: bool,
    #[serde(rename = "allowHostPID")]
    pub allow_host_pid: bool,
    pub allow_host_ports: bool,
    pub allow_privilege_escalation: bool,
    pub allow_privileged_container: bool,
    pub read_only_root_filesystem: bool,
    pub required_drop_capabilities: Vec<String>,
    pub run_as_user: Strategy,
    #[serde(rename = "seLinuxContext")]
    pub se_linux_context: Strategy,
    pub fs_group: Strategy,
    pub supplemental_groups: Strategy,
    pub seccomp_profiles: Vec<String>,
    pub volumes: Vec<String>,
    pub users: Vec<String>,
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Strategy {
    #[serde(rename = "type")]
    pub type_: String,
}
