//! What [`crate::nodegroups::resolve`] needs from the cluster: its nodes and, when some group
//! names MachineConfigPools and the cluster has them (OpenShift), its pools. Both the operator
//! and the kubeletconfig controller read it the same way.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, ResourceExt};
use numaresources_api::operator::NodeGroup;

use crate::context::{Context, Error, Result};
use crate::nodegroups::{NodeInfo, PoolInfo};

/// Retry a node-group resolution that failed on cluster state (a MachineConfigPool not created
/// yet): we watch node labels but not every pool change, so poll as upstream does for MCPs.
pub const RESOLVE_RETRY: Duration = Duration::from_secs(60);

/// The cluster's nodes, and its pools when `groups` (normalized) need them and the cluster has
/// the MachineConfigPool API (`None` otherwise).
pub async fn observe(ctx: &Context, groups: &[NodeGroup]) -> Result<(Vec<NodeInfo>, Option<Vec<PoolInfo>>)> {
    read(&ctx.client, groups, ctx.settings.machine_config_pools).await
}

/// [`observe`] for any client (`kubectl numa doctor` resolves the groups as the controllers do);
/// `machine_config_pools`: whether the cluster serves the MachineConfigPool API.
pub async fn read(
    client: &kube::Client,
    groups: &[NodeGroup],
    machine_config_pools: bool,
) -> Result<(Vec<NodeInfo>, Option<Vec<PoolInfo>>)> {
    let nodes = list_nodes(client).await?;
    let needs_pools = groups.iter().any(|g| g.node_selector.is_none());
    let pools = if needs_pools && machine_config_pools { Some(list_pools(client).await?) } else { None };
    Ok((nodes, pools))
}

/// The MachineConfigPool API, read dynamically (OpenShift only).
pub fn machine_config_pool_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("machineconfiguration.openshift.io", "v1", "MachineConfigPool"))
}

async fn list_nodes(client: &kube::Client) -> Result<Vec<NodeInfo>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.map_err(|e| Error::kube("list nodes", e))?;
    Ok(list.items.into_iter().map(|n| NodeInfo { name: n.name_any(), labels: n.labels().clone() }).collect())
}

async fn list_pools(client: &kube::Client) -> Result<Vec<PoolInfo>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &machine_config_pool_resource());
    let list = api.list(&ListParams::default()).await.map_err(|e| Error::kube("list MachineConfigPools", e))?;
    Ok(list
        .items
        .into_iter()
        .map(|pool| PoolInfo {
            name: pool.name_any(),
            labels: pool.labels().clone(),
            node_selector: pool.data.pointer("/spec/nodeSelector").and_then(|s| serde_json::from_value(s.clone()).ok()),
        })
        .collect())
}
