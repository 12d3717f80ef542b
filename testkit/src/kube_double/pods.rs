//! The exporter pods, served from an event log as kube-apiserver's watch cache serves them
//! (`GET /api/v1/namespaces/{ns}/pods`): every change takes the next resourceVersion and is kept
//! as an ADDED, MODIFIED or DELETED event (a deleted pod's carries its last state); a list
//! answers the pods of the moment with the revision they are at; a watch from a resourceVersion
//! replays the events after it, then streams new ones as they happen, and stays open and quiet
//! while nothing changes. A watch from no resourceVersion (or "0") starts with the pods of the
//! moment as ADDED events, as kube-apiserver's does.
//!
//! Equality label selectors (`key=value`, `key==value`) filter lists and watches; the double
//! refuses other selectors rather than ignore them.
//!
//! Tests stage the pods in two ways: the exporter of each of a set of nodes, as a DaemonSet
//! runs it, with a name and uid derived from the node ([`KubeDouble::set_exporter_pods`],
//! [`KubeDouble::set_direct_exporter_pods`]), or one pod at a time, each with a fresh uid, so
//! that a pod deleted and created again is another pod ([`KubeDouble::add_pod`],
//! [`KubeDouble::delete_pod`]). Every pod is a Running exporter: its labels, service account,
//! namespace and one container.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::ready;
use std::sync::Mutex;

use axum::Router;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use futures_util::StreamExt as _;
use numaresources_api::direct_write::{TOKEN_AUDIENCE, TOKEN_EXPIRATION_SECONDS, TOKEN_FILE_NAME};
use serde_json::{Value, json};

use super::{KubeDouble, ListOptions, Shared, json_stream, list_options, lock, method_not_allowed, status};

/// Where the exporters run (our server's flag's default).
pub const EXPORTER_NAMESPACE: &str = "numaresources";
/// The exporters' service account (our server's flag's default).
pub const EXPORTER_ACCOUNT: &str = "numaresources-rte";
/// Their labels, which [`EXPORTER_SELECTOR`] selects.
const EXPORTER_LABELS: [(&str, &str); 2] =
    [("app.kubernetes.io/component", "rte"), ("app.kubernetes.io/part-of", "numaresources")];
/// The selector our server is given.
pub const EXPORTER_SELECTOR: &str = "app.kubernetes.io/component=rte,app.kubernetes.io/part-of=numaresources";

/// Live events a watch may fall behind by before it is closed.
const WATCH_BACKLOG: usize = 4096;

/// One change of one pod.
#[derive(Clone, Debug)]
struct Event {
    revision: u64,
    kind: &'static str,
    pod: Value,
}

/// The pods and every change so far; `live` sends each change to the open watches.
#[derive(Debug)]
pub(super) struct Pods {
    log: Mutex<Log>,
    live: tokio::sync::broadcast::Sender<Event>,
}

impl Default for Pods {
    fn default() -> Self {
        Self { log: Mutex::default(), live: tokio::sync::broadcast::channel(WATCH_BACKLOG).0 }
    }
}

#[derive(Debug, Default)]
struct Log {
    by_name: BTreeMap<String, Value>,
    events: Vec<Event>,
}

impl Pods {
    /// The uid and node of the pod `name`, while it exists.
    pub(super) fn uid_and_node(&self, name: &str) -> Option<(String, String)> {
        let log = lock(&self.log);
        let pod = log.by_name.get(name)?;
        let field = |path: &str| pod.pointer(path).and_then(Value::as_str).unwrap_or_default().to_owned();
        Some((field("/metadata/uid"), field("/spec/nodeName")))
    }
}

/// The name and uid of the exporter pod on `node` that [`KubeDouble::set_exporter_pods`] serves.
pub(super) fn exporter_pod_on(node: &str) -> (String, String) {
    (exporter_pod_name(node), format!("uid-{node}"))
}

/// The name of the exporter pod [`KubeDouble::set_exporter_pods`] runs on `node`.
pub fn exporter_pod_name(node: &str) -> String {
    format!("numaresources-rte-{node}")
}

/// A Running exporter pod; `direct`, it mounts a projected token of our server's audience, as
/// the controllers render an exporter that writes to our server directly.
fn exporter_pod(name: &str, uid: &str, node: &str, direct: bool) -> Value {
    let labels: BTreeMap<&str, &str> = EXPORTER_LABELS.into_iter().collect();
    let mut spec = json!({"nodeName": node, "serviceAccountName": EXPORTER_ACCOUNT, "containers": [{"name": "rte"}]});
    if direct {
        spec["volumes"] = json!([{"name": "nrt-server", "projected": {"sources": [{"serviceAccountToken": {
            "path": TOKEN_FILE_NAME, "expirationSeconds": TOKEN_EXPIRATION_SECONDS, "audience": TOKEN_AUDIENCE}}]}}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": EXPORTER_NAMESPACE, "uid": uid, "labels": labels},
           "spec": spec, "status": {"phase": "Running"}})
}

impl KubeDouble {
    /// From now on, one Running exporter pod on each of `nodes` and no other pod, as a stock
    /// exporter (publishing through kube-apiserver only).
    pub fn set_exporter_pods(&self, nodes: Vec<String>) {
        self.replace_pods(&nodes, false);
    }

    /// [`KubeDouble::set_exporter_pods`], each pod as the controllers render an exporter that
    /// writes to our server directly.
    pub fn set_direct_exporter_pods(&self, nodes: Vec<String>) {
        self.replace_pods(&nodes, true);
    }

    /// Changes the pods to the exporters of `nodes` at once (a list sees all of it or none),
    /// each change one event.
    fn replace_pods(&self, nodes: &[String], direct: bool) {
        let wanted: BTreeMap<String, Value> = nodes
            .iter()
            .map(|node| {
                let (name, uid) = exporter_pod_on(node);
                let pod = exporter_pod(&name, &uid, node, direct);
                (name, pod)
            })
            .collect();
        let mut log = lock(&self.store.pods.log);
        let gone: Vec<Value> =
            log.by_name.iter().filter(|(name, _)| !wanted.contains_key(*name)).map(|(_, pod)| pod.clone()).collect();
        for pod in gone {
            self.record(&mut log, "DELETED", pod);
        }
        for (name, pod) in wanted {
            let kind = match log.by_name.get(&name) {
                None => "ADDED",
                Some(current) if unversioned(current) == pod => continue,
                Some(_) => "MODIFIED",
            };
            self.record(&mut log, kind, pod);
        }
    }

    /// A new Running exporter pod `name` on `node`; its uid.
    pub fn add_pod(&self, name: &str, node: &str) -> String {
        let uid = format!("uid-{name}-{}", self.store.next_sequence());
        let pod = exporter_pod(name, &uid, node, false);
        self.record(&mut lock(&self.store.pods.log), "ADDED", pod);
        uid
    }

    /// Deletes the pod `name`, if it exists.
    pub fn delete_pod(&self, name: &str) {
        let mut log = lock(&self.store.pods.log);
        if let Some(pod) = log.by_name.get(name).cloned() {
            self.record(&mut log, "DELETED", pod);
        }
    }

    /// Applies one change under the log's lock and tells the open watches.
    fn record(&self, log: &mut Log, kind: &'static str, mut pod: Value) {
        let revision = self.store.next_revision();
        pod["metadata"]["resourceVersion"] = json!(revision.to_string());
        let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        if kind == "DELETED" {
            log.by_name.remove(&name);
        } else {
            log.by_name.insert(name, pod.clone());
        }
        let event = Event { revision, kind, pod };
        log.events.push(event.clone());
        // Sent under the lock: a watch that subscribes under it has every event either in its
        // replay or live, never both, never neither. None open is no error.
        let _ = self.store.pods.live.send(event);
    }
}

/// `pod` without the resourceVersion the log gave it.
fn unversioned(pod: &Value) -> Value {
    let mut pod = pod.clone();
    if let Some(metadata) = pod["metadata"].as_object_mut() {
        metadata.remove("resourceVersion");
    }
    pod
}

pub(super) fn router() -> Router<Shared> {
    Router::new().route("/api/v1/namespaces/{namespace}/pods", get(list_or_watch).fallback(method_not_allowed))
}

/// What a list or watch selects: its namespace and the labels asked for.
#[derive(Clone, Debug)]
struct Selection {
    namespace: String,
    labels: Vec<(String, String)>,
}

impl Selection {
    fn new(namespace: String, selector: Option<&str>) -> Result<Self, String> {
        let mut labels = Vec::new();
        for requirement in selector.unwrap_or_default().split(',').filter(|r| !r.is_empty()) {
            let equality = requirement.split_once("==").or_else(|| requirement.split_once('='));
            match equality {
                Some((key, value)) if !key.ends_with('!') => {
                    labels.push((key.trim().to_owned(), value.trim().to_owned()))
                }
                _ => return Err(format!("the double reads equality selectors only, not {requirement:?}")),
            }
        }
        Ok(Self { namespace, labels })
    }

    fn selects(&self, pod: &Value) -> bool {
        let metadata = &pod["metadata"];
        metadata["namespace"] == self.namespace.as_str()
            && self.labels.iter().all(|(key, value)| metadata["labels"][key] == value.as_str())
    }
}

async fn list_or_watch(
    State(store): State<Shared>,
    UrlPath(namespace): UrlPath<String>,
    query: Result<Query<ListOptions>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let options = match list_options(query) {
        Ok(options) => options,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message, None),
    };
    let selection = match Selection::new(namespace, options.label_selector.as_deref()) {
        Ok(selection) => selection,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message, None),
    };
    let from = match options.resource_version.as_deref().filter(|rv| !rv.is_empty() && *rv != "0") {
        None => None,
        Some(rv) => match rv.parse::<u64>() {
            Ok(revision) => Some(revision),
            Err(_) => {
                let message = format!("invalid resource version {rv:?}");
                return status(StatusCode::BAD_REQUEST, "BadRequest", &message, None);
            }
        },
    };
    if options.watching() {
        return watch(&store, selection, from);
    }
    let log = lock(&store.pods.log);
    // Pages by name, as kube-apiserver pages by key; a page reads the pods of the moment (not the
    // first page's snapshot, which the tests' pod churn never needs).
    let after = options.continue_after.as_deref().filter(|name| !name.is_empty());
    let mut selected = log
        .by_name
        .iter()
        .filter(|(name, _)| after.is_none_or(|after| name.as_str() > after))
        .filter(|(_, pod)| selection.selects(pod));
    let limit = options.limit.filter(|limit| *limit > 0).unwrap_or(usize::MAX);
    let page: Vec<(&String, &Value)> = selected.by_ref().take(limit).collect();
    let more = selected.next().is_some();
    let revision = store.revision.load(std::sync::atomic::Ordering::SeqCst);
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if let (true, Some((last, _))) = (more, page.last()) {
        metadata["continue"] = json!(last);
    }
    let items: Vec<&Value> = page.into_iter().map(|(_, pod)| pod).collect();
    axum::Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": metadata, "items": items})).into_response()
}

/// The events after `from` (without one, the pods of the moment as ADDED), then live ones.
fn watch(store: &Shared, selection: Selection, from: Option<u64>) -> Response {
    let (replay, receiver) = {
        let log = lock(&store.pods.log);
        let replay: Vec<Event> = match from {
            Some(from) => log.events.iter().filter(|event| event.revision > from).cloned().collect(),
            None => {
                let added = |pod: &Value| Event { revision: 0, kind: "ADDED", pod: pod.clone() };
                log.by_name.values().map(added).collect()
            }
        };
        (replay, store.pods.live.subscribe())
    };
    // A watch that falls behind by more than WATCH_BACKLOG is closed, as kube-apiserver closes a
    // watcher too slow to keep up; its client watches again from the last version it saw.
    let live = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.ok().map(|event| (event, receiver))
    });
    let after = from.unwrap_or(0);
    let events = futures_util::stream::iter(replay)
        .chain(live.filter(move |event| ready(event.revision > after)))
        .filter(move |event| ready(selection.selects(&event.pod)))
        .map(|event| {
            let mut line = serde_json::to_vec(&json!({"type": event.kind, "object": event.pod})).unwrap_or_default();
            line.push(b'\n');
            Ok::<_, Infallible>(Bytes::from(line))
        });
    json_stream(events)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;
    use kube::api::ListParams;

    use super::*;

    /// A list in pages, as kube-rs' watcher asks for it: every pod once, in name order.
    #[tokio::test]
    async fn a_list_comes_in_pages_of_the_limit_asked() {
        let double = KubeDouble::new(false);
        let nodes: Vec<String> = (0..7).map(|i| format!("worker-{i}")).collect();
        double.set_exporter_pods(nodes.clone());
        let pods: Api<Pod> = Api::namespaced(double.client(), EXPORTER_NAMESPACE);
        let (mut names, mut pages, mut from) = (Vec::new(), 0, None::<String>);
        loop {
            let mut params = ListParams::default().limit(3);
            if let Some(token) = from.take() {
                params = params.continue_token(&token);
            }
            let page = pods.list(&params).await.unwrap();
            pages += 1;
            names.extend(page.items.into_iter().filter_map(|pod| pod.metadata.name));
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => from = Some(token),
                _ => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(names, nodes.iter().map(|node| exporter_pod_name(node)).collect::<Vec<_>>());
    }
}
