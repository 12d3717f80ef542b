//! The parts of an OLM ClusterServiceVersion (operators.coreos.com/v1alpha1) the bundle uses,
//! with unknown fields refused: a misspelled field would be silently dropped by OLM.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;
use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterServiceVersion {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: CsvSpec,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CsvSpec {
    pub display_name: String,
    pub description: String,
    pub version: String,
    pub maturity: String,
    pub min_kube_version: String,
    pub provider: Provider,
    pub keywords: Vec<String>,
    pub install_modes: Vec<InstallMode>,
    pub related_images: Vec<RelatedImage>,
    pub customresourcedefinitions: Owned<CrdDescription>,
    pub apiservicedefinitions: Owned<ApiServiceDescription>,
    pub webhookdefinitions: Vec<WebhookDescription>,
    pub install: Install,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    pub name: String,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RelatedImage {
    pub name: String,
    pub image: String,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InstallMode {
    #[serde(rename = "type")]
    pub type_: String,
    pub supported: bool,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Owned<T> {
    pub owned: Vec<T>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CrdDescription {
    pub name: String,
    pub version: String,
    pub kind: String,
    pub display_name: String,
    pub description: String,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiServiceDescription {
    pub name: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    pub display_name: String,
    pub description: String,
    pub deployment_name: String,
    pub container_port: i32,
}

/// OLM's `WebhookDescription` (no `clientConfig`, no `namespaceSelector`: OLM makes those).
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookDescription {
    pub generate_name: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub deployment_name: String,
    pub container_port: i32,
    pub target_port: i32,
    pub webhook_path: String,
    pub admission_review_versions: Vec<String>,
    pub side_effects: String,
    pub failure_policy: String,
    pub match_policy: String,
    pub timeout_seconds: i32,
    pub rules: Vec<RuleWithOperations>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reinvocation_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_selector: Option<LabelSelector>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Install {
    pub strategy: String,
    pub spec: InstallSpec,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstallSpec {
    pub deployments: Vec<StrategyDeployment>,
    pub cluster_permissions: Vec<Permission>,
    pub permissions: Vec<Permission>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyDeployment {
    pub name: String,
    pub label: BTreeMap<String, String>,
    pub spec: DeploymentSpec,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Permission {
    pub service_account_name: String,
    pub rules: Vec<PolicyRule>,
}
