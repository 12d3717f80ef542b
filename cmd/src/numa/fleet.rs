//! What the plugin reads from the cluster: NRTs with the age of their last report, Nodes when
//! the caller may list them, and a pod.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use numaresources_api::fit::NodeResources;
use numaresources_api::nrt::NodeResourceTopology;
use serde::Deserialize;

/// The annotation our API server sets to the time an object last changed.
pub use numaresources_api::nrt::well_known::ANNOTATION_LAST_CHANGE as LAST_CHANGE_ANNOTATION;

/// The Table column our API server fills with the time since the exporter's last report
/// (changed or not: heartbeats count).
const REPORTED_COLUMN: &str = "Reported";

/// Asking for a Table with the objects in it gets the report age from our API server in the same
/// request; a CRD-backed cluster answers with its default Table, and a server without Tables
/// with the plain list.
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// One NRT and how old its information is.
#[derive(Debug, Clone)]
pub struct Report {
    /// The object.
    pub nrt: NodeResourceTopology,
    /// Seconds since the node last reported, when anything says.
    pub age: Option<Age>,
}

/// How old a report is and how we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Age {
    /// Seconds.
    pub seconds: u64,
    /// Where the figure comes from.
    pub source: AgeSource,
}

/// Where a report's age comes from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AgeSource {
    /// Our API server's record of the last report, heartbeats included.
    Reported,
    /// The server-set last-change annotation (an unchanged node looks older than it is).
    LastChange,
    /// The newest managedFields time (a CRD-backed cluster).
    ManagedFields,
}

/// The NRTs matching `selector`, with their ages, and the collection's resourceVersion.
pub async fn reports(client: &kube::Client, selector: Option<&str>) -> anyhow::Result<(Vec<Report>, String)> {
    let mut params = ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let mut request =
        kube::core::Request::new(format!("/apis/{}/noderesourcetopologies", "topology.node.k8s.io/v1alpha2"))
            .list(&params)?;
    let uri = format!("{}&includeObject=Object", request.uri());
    *request.uri_mut() = uri.parse().context("building the list request")?;
    request.headers_mut().insert(http::header::ACCEPT, http::HeaderValue::from_static(TABLE_ACCEPT));
    let body = client.request_text(request).await.context("listing noderesourcetopologies")?;
    parse_listing(&body, SystemTime::now())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Listing {
    kind: String,
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    column_definitions: Vec<Column>,
    #[serde(default)]
    rows: Vec<Row>,
    #[serde(default)]
    items: Vec<NodeResourceTopology>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: String,
}

#[derive(Deserialize)]
struct Column {
    name: String,
}

#[derive(Deserialize)]
struct Row {
    cells: Vec<serde_json::Value>,
    object: NodeResourceTopology,
}

/// Reads a Table (with objects) or a plain list.
pub fn parse_listing(body: &str, now: SystemTime) -> anyhow::Result<(Vec<Report>, String)> {
    let listing: Listing = serde_json::from_str(body).context("decoding the noderesourcetopologies list")?;
    let reported = listing.column_definitions.iter().position(|c| c.name == REPORTED_COLUMN);
    let reports = if listing.kind == "Table" {
        listing
            .rows
            .into_iter()
            .map(|row| {
                let table_age = reported
                    .and_then(|i| row.cells.get(i))
                    .and_then(|cell| cell.as_str())
                    .and_then(parse_human_age)
                    .map(|seconds| Age { seconds, source: AgeSource::Reported });
                let age = table_age.or_else(|| age_from_metadata(&row.object, now));
                Report { nrt: row.object, age }
            })
            .collect()
    } else {
        listing
            .items
            .into_iter()
            .map(|nrt| {
                let age = age_from_metadata(&nrt, now);
                Report { nrt, age }
            })
            .collect()
    };
    Ok((reports, listing.metadata.resource_version))
}

/// The age from the object alone: the last-change annotation, else managedFields.
pub fn age_from_metadata(nrt: &NodeResourceTopology, now: SystemTime) -> Option<Age> {
    let since = |text: &str| {
        let then: Timestamp = text.parse().ok()?;
        let now = Timestamp::try_from(now).ok()?;
        u64::try_from(now.as_second().saturating_sub(then.as_second())).ok().or(Some(0))
    };
    let meta = &nrt.metadata;
    if let Some(seconds) = meta.annotations.as_ref().and_then(|a| a.get(LAST_CHANGE_ANNOTATION)).and_then(|t| since(t))
    {
        return Some(Age { seconds, source: AgeSource::LastChange });
    }
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.time.as_ref())
        .filter_map(|time| since(&time.0.to_string()))
        .min()
        .map(|seconds| Age { seconds, source: AgeSource::ManagedFields })
}

/// kube's short human ages (`45s`, `3m`, `5h`, `2d`, and compound forms like `2m30s`, `3y2d`).
pub fn parse_human_age(text: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for c in text.chars() {
        if let Some(digit) = c.to_digit(10) {
            number = Some(number.unwrap_or(0).checked_mul(10)?.checked_add(u64::from(digit))?);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            'y' => 365 * 86_400,
            _ => return None,
        };
        total = total.checked_add(number.take()?.checked_mul(unit)?)?;
    }
    if number.is_some() { None } else { Some(total) }
}

/// Each Node's allocatable resources, or None when Nodes cannot be listed (a server that
/// serves no Nodes, such as `local`, or no permission): the check that needs them is skipped.
pub async fn node_resources(client: &kube::Client) -> Option<BTreeMap<String, NodeResources>> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.list(&ListParams::default()).await {
        Ok(list) => Some(
            list.items
                .into_iter()
                .filter_map(|node| {
                    let name = node.metadata.name?;
                    let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
                    Some((name, NodeResources::new(&allocatable)))
                })
                .collect(),
        ),
        Err(error) => {
            tracing::debug!("listing nodes: {error}");
            None
        }
    }
}

/// `nodes` with the requests of the pods bound to each counted against it (as they are, when
/// the pods are unknown).
pub fn with_bound_pods(
    nodes: Option<BTreeMap<String, NodeResources>>,
    bound: Option<&[Pod]>,
) -> Option<BTreeMap<String, NodeResources>> {
    let Some(bound) = bound else { return nodes };
    let by_node = super::assumed::bound_by_node(bound);
    let counted = |(name, node): (String, NodeResources)| {
        let pods = by_node.get(name.as_str()).map_or(&[][..], Vec::as_slice);
        let node = node.with_pods(pods.iter().copied());
        (name, node)
    };
    nodes.map(|nodes| nodes.into_iter().map(counted).collect())
}

/// Every pod bound to a node and not terminated, or None when Pods cannot be listed (a server
/// that serves none, such as `local`, or no permission).
pub async fn bound_pods(client: &kube::Client) -> Option<Vec<Pod>> {
    let pods: Api<Pod> = Api::all(client.clone());
    let params = ListParams::default().fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
    match pods.list(&params).await {
        Ok(list) => Some(list.items),
        Err(error) => {
            tracing::debug!("listing pods: {error}");
            None
        }
    }
}

/// A refresh period in the Go duration form, for flags.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = numaresources_api::GoDuration::parse(text).map_err(|e| e.to_string())?;
    duration.to_std().ok_or_else(|| format!("{text}: must not be negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_ages_read_back() {
        for (text, seconds) in
            [("45s", 45), ("3m", 180), ("2m30s", 150), ("5h", 18_000), ("2d", 172_800), ("1y2d", 31_708_800)]
        {
            assert_eq!(parse_human_age(text), Some(seconds), "{text}");
        }
        for bad in ["", "<unknown>", "5", "s", "3x"] {
            assert_eq!(parse_human_age(bad).filter(|_| !bad.is_empty()), None, "{bad}");
        }
    }

    #[test]
    fn a_table_gives_the_reported_age_and_a_list_the_annotation() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let table = r#"{"kind":"Table","metadata":{"resourceVersion":"7"},
            "columnDefinitions":[{"name":"Name"},{"name":"Reported"}],
            "rows":[{"cells":["a","5m"],"object":{"metadata":{"name":"a"},"zones":[]}}]}"#;
        let (reports, version) = parse_listing(table, now).unwrap();
        assert_eq!(version, "7");
        assert_eq!(reports[0].age, Some(Age { seconds: 300, source: AgeSource::Reported }));
        let list = r#"{"kind":"NodeResourceTopologyList","metadata":{"resourceVersion":"8"},
            "items":[{"metadata":{"name":"a","annotations":{"nodetopology.openshift.io/last-change":"1970-01-12T13:46:00Z"}},"zones":[]}]}"#;
        let (reports, _) = parse_listing(list, now).unwrap();
        assert_eq!(reports[0].age, Some(Age { seconds: 40, source: AgeSource::LastChange }));
    }
}
