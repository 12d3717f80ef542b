//! A small in-memory Kubernetes API for reconciler tests, behind kube's client through
//! `tower-test` (controller-rs's `ApiServerVerifier`, grown into a stateful fake so a scenario
//! asserts on outcomes — what exists, what changed — instead of the exact request order).
//!
//! It understands GET (object, list with equality label selectors, also across namespaces; a
//! watch is held open, and
//! answered with the changes a test makes through [`FakeApi::insert`], [`FakeApi::edit`] and
//! [`FakeApi::remove`] after its resourceVersion, then closed, as a real server may close a
//! watch; the controllers' own writes are not echoed, so a scenario goes quiet after them), POST,
//! a pod's `binding` (sets `spec.nodeName` once, 409 when the pod is bound already, as
//! kube-apiserver does), DELETE (held by finalizers), and PATCH as
//! server-side apply (object and `/status`; an identical re-apply changes nothing, as on a real
//! server), JSON patch and merge patch. Every object write bumps a global resourceVersion; a
//! spec change bumps `generation`. Failures can be injected per method and path. Every request
//! is authorized against the RBAC the fake is started with first ([`Rbac`]: a component's
//! checked-in manifests).

mod rbac;

pub use rbac::{Attributes, Rbac};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response};
use kube::client::Body;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Method,
    pub path: String,
}

#[derive(Debug)]
struct Failure {
    method: Method,
    path_contains: String,
    code: u16,
    remaining: usize,
}

/// A watch request waiting for a change of its collection.
#[derive(Debug)]
struct HeldWatch {
    collection: String,
    selector: String,
    respond: tower_test::mock::SendResponse<Response<Body>>,
}

/// A change a test made, as a watch event.
#[derive(Debug)]
struct Change {
    version: u64,
    path: String,
    kind: &'static str,
    object: Value,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Value>,
    changes: Vec<Change>,
    watches: Vec<HeldWatch>,
    applied: BTreeMap<String, Value>,
    calls: Vec<Call>,
    failures: Vec<Failure>,
    version: u64,
    uids: u64,
}

/// The fake; clones share state.
#[derive(Debug, Clone)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
    rbac: Arc<Rbac>,
}

impl FakeApi {
    /// A fake that authorizes every request against `rbac`, and a client talking to it.
    pub fn start(rbac: Arc<Rbac>) -> (Self, kube::Client) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let fake = Self { state: Arc::default(), rbac };
        let server = fake.clone();
        tokio::spawn(async move {
            while let Some((request, respond)) = handle.next_request().await {
                if let Some(forbidden) = server.authorize(&request) {
                    respond.send_response(forbidden);
                    continue;
                }
                let watch = request.uri().query().is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
                if watch {
                    server.hold_watch(&request, respond);
                    continue;
                }
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let response = server.handle(&parts, &bytes);
                respond.send_response(response);
            }
        });
        (fake, kube::Client::new(service, "default"))
    }

    /// Seeds an object at its path.
    pub fn insert(&self, path: &str, mut object: Value) {
        let mut state = self.state.lock().unwrap();
        state.version += 1;
        state.uids += 1;
        let meta = &mut object["metadata"];
        meta["uid"] = json!(format!("uid-{}", state.uids));
        meta["resourceVersion"] = json!(state.version.to_string());
        if meta.get("generation").is_none() {
            meta["generation"] = json!(1);
        }
        let kind = if state.objects.contains_key(path) { "MODIFIED" } else { "ADDED" };
        state.objects.insert(path.to_owned(), object.clone());
        state.record(path, kind, object);
    }

    /// Seeds the Node `name` with `labels`.
    pub fn insert_node(&self, name: &str, labels: Value) {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}});
        self.insert(&format!("/api/v1/nodes/{name}"), node);
    }

    /// Removes the object at `path`, as someone deleting it by hand would.
    pub fn remove(&self, path: &str) {
        let mut state = self.state.lock().unwrap();
        state.applied.remove(path);
        if let Some(mut object) = state.objects.remove(path) {
            state.version += 1;
            object["metadata"]["resourceVersion"] = json!(state.version.to_string());
            state.record(path, "DELETED", object);
        }
    }

    /// Holds a watch until a change of its collection after its resourceVersion (answered at
    /// once when one is already there).
    fn hold_watch(&self, request: &Request<Body>, respond: tower_test::mock::SendResponse<Response<Body>>) {
        let query = request.uri().query().unwrap_or_default();
        let since = query_param(query, "resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let watch = HeldWatch {
            collection: request.uri().path().to_owned(),
            selector: query_param(query, "labelSelector").unwrap_or_default(),
            respond,
        };
        let mut state = self.state.lock().unwrap();
        let state = &mut *state;
        match watch_events(&state.changes, &watch, since) {
            Some(body) => watch.respond.send_response(Response::new(Body::from(body))),
            None => state.watches.push(watch),
        }
    }

    /// The object at `path`.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(path).cloned()
    }

    /// The object at `path`, typed.
    pub fn typed<K: DeserializeOwned>(&self, path: &str) -> K {
        serde_json::from_value(self.get(path).unwrap_or_else(|| panic!("no object at {path}"))).unwrap()
    }

    /// Every object path.
    pub fn paths(&self) -> Vec<String> {
        self.state.lock().unwrap().objects.keys().cloned().collect()
    }

    /// The Events published with `reason`.
    pub fn events(&self, reason: &str) -> Vec<Value> {
        let paths = self.paths().into_iter().filter(|path| path.contains("/events/"));
        paths.filter_map(|path| self.get(&path)).filter(|event| event["reason"] == reason).collect()
    }

    /// path → resourceVersion.
    pub fn versions(&self) -> BTreeMap<String, String> {
        let state = self.state.lock().unwrap();
        state
            .objects
            .iter()
            .map(|(k, v)| (k.clone(), v["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned()))
            .collect()
    }

    /// Changes an object as a user or another controller would (bumps resourceVersion, and
    /// generation when `spec` changes).
    pub fn edit(&self, path: &str, change: impl FnOnce(&mut Value)) {
        let mut state = self.state.lock().unwrap();
        state.version += 1;
        let version = state.version;
        let object = state.objects.get_mut(path).unwrap_or_else(|| panic!("no object at {path}"));
        let spec_before = object.get("spec").cloned();
        change(object);
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        if object.get("spec").cloned() != spec_before {
            let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
            object["metadata"]["generation"] = json!(generation + 1);
        }
        let object = object.clone();
        state.record(path, "MODIFIED", object);
    }

    /// Requests seen so far (and forgets them).
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.state.lock().unwrap().calls)
    }

    /// The next `times` requests of `method` whose path contains `path_contains` fail with `code`.
    pub fn fail(&self, method: Method, path_contains: &str, code: u16, times: usize) {
        self.state.lock().unwrap().failures.push(Failure {
            method,
            path_contains: path_contains.to_owned(),
            code,
            remaining: times,
        });
    }

    /// What the workload controllers would do: every DaemonSet fully rolled out and ready, every
    /// Deployment available, for their current generation.
    pub fn roll_out(&self) {
        let mut state = self.state.lock().unwrap();
        for (path, object) in state.objects.iter_mut() {
            let generation = object["metadata"]["generation"].clone();
            if path.contains("/daemonsets/") {
                object["status"] = json!({
                    "observedGeneration": generation, "desiredNumberScheduled": 2, "currentNumberScheduled": 2,
                    "updatedNumberScheduled": 2, "numberReady": 2, "numberMisscheduled": 0,
                });
            } else if path.contains("/deployments/") {
                object["status"] = json!({
                    "observedGeneration": generation,
                    "conditions": [{"type": "Available", "status": "True"}],
                });
            }
        }
    }

    /// `403 Forbidden` when the controllers' RBAC ([`rbac`]) does not allow the request. A
    /// server-side apply that creates the object needs `create` as well as `patch`.
    fn authorize(&self, request: &Request<Body>) -> Option<Response<Body>> {
        let path = request.uri().path();
        let query = request.uri().query().unwrap_or_default();
        let attributes = rbac::attributes(request.method(), path, query)?;
        let apply = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/apply-patch"));
        let creates =
            apply && matches!(classify(path), Target::Object) && !self.state.lock().unwrap().objects.contains_key(path);
        let create = rbac::Attributes { verb: "create".into(), name: String::new(), ..attributes.clone() };
        let denied = [Some(attributes), creates.then_some(create)]
            .into_iter()
            .flatten()
            .find(|request| !self.rbac.allows(request))?;
        let message = format!("forbidden by {}: {denied}", self.rbac.source());
        eprintln!("fake API server: {message}");
        Some(status(403, "Forbidden", &message))
    }

    fn handle(&self, parts: &http::request::Parts, body: &[u8]) -> Response<Body> {
        let path = parts.uri.path().to_owned();
        let query = parts.uri.query().unwrap_or_default().to_owned();
        let mut state = self.state.lock().unwrap();
        state.calls.push(Call { method: parts.method.clone(), path: path.clone() });
        if let Some(failure) = state
            .failures
            .iter_mut()
            .find(|f| f.remaining > 0 && f.method == parts.method && path.contains(&f.path_contains))
        {
            failure.remaining -= 1;
            let code = failure.code;
            return status(code, "InternalError", &format!("injected failure of {} {path}", parts.method));
        }
        let body: Option<Value> = serde_json::from_slice(body).ok();
        let content_type =
            parts.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        match parts.method {
            Method::GET => state.get(&path, &query),
            Method::POST if path.ends_with("/binding") => state.bind(&path, body.unwrap_or(Value::Null)),
            Method::POST => state.create(&path, body.unwrap_or(Value::Null)),
            Method::PUT => state.replace(&path, body.unwrap_or(Value::Null)),
            Method::DELETE => state.delete(&path),
            Method::PATCH => state.patch(&path, &content_type, body.unwrap_or(Value::Null)),
            _ => status(405, "MethodNotAllowed", "not supported by the fake"),
        }
    }
}

/// A graceful-shutdown signal for a controller's `run`.
pub type Shutdown = std::pin::Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// Runs a controller (`start(shutdown)`, its real watches against the fake) until `done` holds,
/// then shuts it down gracefully. The timeouts only guard against a hang.
pub async fn run_controller_until<R>(start: impl FnOnce(Shutdown) -> R, done: impl Fn() -> bool)
where
    R: Future<Output = ()> + Send + 'static,
{
    let (stop, stopped) = numaresources_runtime::shutdown::Shutdown::manual();
    let running = tokio::spawn(start(Box::pin(stopped.signaled())));
    let reached = async {
        while !done() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), reached).await.expect("the controller got there");
    stop.fire();
    tokio::time::timeout(std::time::Duration::from_secs(30), running).await.expect("graceful shutdown").unwrap();
}

/// Runs one reconcile pass; the timeout only turns a deadlock into a failure instead of a hang.
pub async fn one_pass<T>(pass: impl Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), pass)
        .await
        .expect("reconcile timed out: likely deadlocked")
}

/// Where a path points.
enum Target {
    Collection,
    Object,
    Sub(String, String),
}

fn classify(path: &str) -> Target {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => &segments[2.min(segments.len())..],
        _ => &segments[3.min(segments.len())..],
    };
    let base = path.len() - rest.iter().map(|s| s.len() + 1).sum::<usize>();
    let (collection_len, object_len) =
        if rest.first() == Some(&"namespaces") && rest.len() >= 3 { (3, 4) } else { (1, 2) };
    if rest.len() <= collection_len {
        if rest.len() == collection_len { Target::Collection } else { Target::Object }
    } else if rest.len() == object_len {
        Target::Object
    } else {
        let object: String = format!("{}/{}", &path[..base], rest[..object_len].join("/"));
        Target::Sub(object, rest[object_len..].join("/"))
    }
}

/// A Secret's `type` cannot change (the API server answers 422 Invalid, "field is immutable").
fn immutable_field_changed(path: &str, existing: &Value, body: &Value) -> Option<Response<Body>> {
    let type_of = |secret: &Value| secret["type"].as_str().unwrap_or("Opaque").to_owned();
    let changed = path.contains("/secrets/") && body.get("type").is_some() && type_of(existing) != type_of(body);
    changed.then(|| status(422, "Invalid", &format!("{path}: type: Invalid value: field is immutable")))
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code});
    respond(code, &body)
}

fn respond(code: u16, body: &Value) -> Response<Body> {
    Response::builder().status(code).body(Body::from(serde_json::to_vec(body).unwrap())).unwrap()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| decode(v))
    })
}

fn matches_selector(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|r| !r.is_empty()).all(|requirement| {
        let labels = &object["metadata"]["labels"];
        match requirement.split_once('=') {
            Some((key, value)) => labels.get(key).and_then(Value::as_str) == Some(value),
            None => labels.get(requirement).is_some(),
        }
    })
}

/// Keys of an object that are its content (not identity or status).
fn content_keys(object: &Value) -> Vec<String> {
    object
        .as_object()
        .map(|m| {
            m.keys().filter(|k| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")).cloned().collect()
        })
        .unwrap_or_default()
}

/// The watch body of the changes after `since` that `watch` sees (one JSON event a line), if any.
/// Whether the object at `path` is in `collection`: directly, or, for a collection without a
/// namespace (`/api/v1/pods`), in that resource's collection of any namespace.
fn in_collection(collection: &str, path: &str) -> bool {
    if path.strip_prefix(collection).and_then(|rest| rest.strip_prefix('/')).is_some_and(|name| !name.contains('/')) {
        return true;
    }
    if collection.contains("/namespaces/") {
        return false;
    }
    let Some((base, resource)) = collection.rsplit_once('/') else { return false };
    let Some(rest) = path.strip_prefix(base).and_then(|rest| rest.strip_prefix("/namespaces/")) else { return false };
    let parts: Vec<&str> = rest.split('/').collect();
    parts.len() == 3 && parts[1] == resource
}

fn watch_events(changes: &[Change], watch: &HeldWatch, since: u64) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    for change in changes.iter().filter(|c| c.version > since) {
        if in_collection(&watch.collection, &change.path) && matches_selector(&change.object, &watch.selector) {
            body.extend(serde_json::to_vec(&json!({"type": change.kind, "object": change.object})).unwrap());
            body.push(b'\n');
        }
    }
    (!body.is_empty()).then_some(body)
}

impl State {
    /// Records a change a test made and answers the held watches that see it.
    fn record(&mut self, path: &str, kind: &'static str, object: Value) {
        let version = self.version;
        self.changes.push(Change { version, path: path.to_owned(), kind, object });
        let (answered, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.watches)
            .into_iter()
            .map(|watch| (watch_events(&self.changes[self.changes.len() - 1..], &watch, version - 1), watch))
            .partition(|(body, _)| body.is_some());
        self.watches = held.into_iter().map(|(_, watch)| watch).collect();
        for (body, watch) in answered {
            watch.respond.send_response(Response::new(Body::from(body.unwrap_or_default())));
        }
    }

    fn bump(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    fn get(&self, path: &str, query: &str) -> Response<Body> {
        if let Some(object) = self.objects.get(path) {
            return respond(200, object);
        }
        match classify(path) {
            Target::Collection => {
                let selector = query_param(query, "labelSelector").unwrap_or_default();
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|(k, _)| in_collection(path, k))
                    .map(|(_, v)| v.clone())
                    .filter(|v| matches_selector(v, &selector))
                    .collect();
                respond(
                    200,
                    &json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": self.version.to_string()}, "items": items}),
                )
            }
            _ => status(404, "NotFound", &format!("{path} not found")),
        }
    }

    /// A pod's `binding` subresource: the pod gets the target node, once.
    fn bind(&mut self, path: &str, binding: Value) -> Response<Body> {
        let pod_path = path.trim_end_matches("/binding").to_owned();
        let Some(pod) = self.objects.get(&pod_path) else {
            return status(404, "NotFound", &format!("{pod_path} not found"));
        };
        if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            return status(409, "Conflict", &format!("pod {name} is already assigned to node {node:?}"));
        }
        let mut pod = pod.clone();
        pod["spec"]["nodeName"] = binding["target"]["name"].clone();
        pod["metadata"]["resourceVersion"] = json!(self.bump());
        self.objects.insert(pod_path.clone(), pod.clone());
        self.record(&pod_path, "MODIFIED", pod);
        respond(201, &json!({"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201}))
    }

    fn create(&mut self, path: &str, mut body: Value) -> Response<Body> {
        let name = body["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let object_path = format!("{path}/{name}");
        if self.objects.contains_key(&object_path) {
            return status(409, "AlreadyExists", &format!("{object_path} already exists"));
        }
        self.uids += 1;
        body["metadata"]["uid"] = json!(format!("uid-{}", self.uids));
        body["metadata"]["resourceVersion"] = json!(self.bump());
        self.objects.insert(object_path, body.clone());
        respond(201, &body)
    }

    /// PUT: optimistic concurrency on `metadata.resourceVersion`, as the API server does.
    fn replace(&mut self, path: &str, mut body: Value) -> Response<Body> {
        let Some(existing) = self.objects.get(path) else {
            return status(404, "NotFound", &format!("{path} not found"));
        };
        let expected = &existing["metadata"]["resourceVersion"];
        let given = &body["metadata"]["resourceVersion"];
        if !given.is_null() && given != expected {
            return status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version",
            );
        }
        if let Some(refused) = immutable_field_changed(path, existing, &body) {
            return refused;
        }
        body["metadata"]["uid"] = existing["metadata"]["uid"].clone();
        body["metadata"]["resourceVersion"] = json!(self.bump());
        self.objects.insert(path.to_owned(), body.clone());
        respond(200, &body)
    }

    /// An object with finalizers is only marked (`deletionTimestamp`), as on a real server; it
    /// goes once they are removed (see [`Self::patch`]).
    fn delete(&mut self, path: &str) -> Response<Body> {
        let held = self
            .objects
            .get(path)
            .is_some_and(|object| object["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty()));
        if held {
            let version = self.bump();
            let object = self.objects.get_mut(path).unwrap();
            object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            object["metadata"]["resourceVersion"] = json!(version);
            return respond(200, object);
        }
        match self.objects.remove(path) {
            Some(object) => {
                self.applied.remove(path);
                respond(200, &object)
            }
            None => status(404, "NotFound", &format!("{path} not found")),
        }
    }

    fn patch(&mut self, path: &str, content_type: &str, body: Value) -> Response<Body> {
        let (object_path, subresource) = match classify(path) {
            Target::Sub(object, sub) => (object, Some(sub)),
            _ => (path.to_owned(), None),
        };
        if content_type.starts_with("application/apply-patch") {
            return match subresource.as_deref() {
                Some("status") => self.apply_status(&object_path, &body),
                _ => self.apply(&object_path, body),
            };
        }
        let Some(mut object) = self.objects.get(&object_path).cloned() else {
            return status(404, "NotFound", &format!("{object_path} not found"));
        };
        if content_type.starts_with("application/json-patch") {
            // Kubernetes' JSON patch treats a missing field as null for `test`; json-patch does not.
            for op in body.as_array().into_iter().flatten() {
                if op["op"] == "test" && op["value"].is_null() {
                    let pointer = op["path"].as_str().unwrap_or_default();
                    if object.pointer(pointer).is_none()
                        && let Some((parent, key)) = pointer.rsplit_once('/')
                        && let Some(Value::Object(map)) = object.pointer_mut(parent)
                    {
                        map.insert(key.to_owned(), Value::Null);
                    }
                }
            }
            let patch: json_patch::Patch = match serde_json::from_value(body) {
                Ok(patch) => patch,
                Err(e) => return status(400, "BadRequest", &e.to_string()),
            };
            if let Err(e) = json_patch::patch(&mut object, &patch) {
                return status(422, "Invalid", &e.to_string());
            }
        } else {
            json_patch::merge(&mut object, &body);
        }
        let finalized = object["metadata"].get("deletionTimestamp").is_some()
            && object["metadata"]["finalizers"].as_array().is_none_or(Vec::is_empty);
        if finalized {
            self.objects.remove(&object_path);
            return respond(200, &object);
        }
        object["metadata"]["resourceVersion"] = json!(self.bump());
        self.objects.insert(object_path, object.clone());
        respond(200, &object)
    }

    fn apply(&mut self, path: &str, body: Value) -> Response<Body> {
        if self.applied.get(path) == Some(&body)
            && let Some(object) = self.objects.get(path)
        {
            return respond(200, object);
        }
        if let Some(refused) =
            self.objects.get(path).and_then(|existing| immutable_field_changed(path, existing, &body))
        {
            return refused;
        }
        let previous = self.applied.insert(path.to_owned(), body.clone());
        let mut object = match self.objects.get(path) {
            Some(existing) => existing.clone(),
            None => {
                self.uids += 1;
                json!({"metadata": {"uid": format!("uid-{}", self.uids), "generation": 0, "creationTimestamp": "2026-01-01T00:00:00Z"}})
            }
        };
        let before = object.clone();
        for key in previous.as_ref().map(content_keys).unwrap_or_default() {
            if body.get(&key).is_none() {
                object.as_object_mut().unwrap().remove(&key);
            }
        }
        for key in content_keys(&body).into_iter().chain(["apiVersion".to_owned(), "kind".to_owned()]) {
            if let Some(value) = body.get(&key) {
                object[key.as_str()] = value.clone();
            }
        }
        for key in ["name", "namespace", "labels", "annotations", "ownerReferences"] {
            match body["metadata"].get(key) {
                Some(value) => object["metadata"][key] = value.clone(),
                None => {
                    object["metadata"].as_object_mut().unwrap().remove(key);
                }
            }
        }
        if object == before {
            return respond(200, &object);
        }
        let content_changed = content_keys(&object).iter().any(|k| object.get(k) != before.get(k))
            || content_keys(&before).len() != content_keys(&object).len();
        if content_changed {
            let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
            object["metadata"]["generation"] = json!(generation + 1);
        }
        object["metadata"]["resourceVersion"] = json!(self.bump());
        self.objects.insert(path.to_owned(), object.clone());
        respond(200, &object)
    }

    fn apply_status(&mut self, path: &str, body: &Value) -> Response<Body> {
        let Some(mut object) = self.objects.get(path).cloned() else {
            return status(404, "NotFound", &format!("{path} not found"));
        };
        let status_value = body.get("status").cloned().unwrap_or(Value::Null);
        if object.get("status") != Some(&status_value) {
            object["status"] = status_value;
            object["metadata"]["resourceVersion"] = json!(self.bump());
            self.objects.insert(path.to_owned(), object.clone());
        }
        respond(200, &object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_classified_like_the_api_server_does() {
        assert!(matches!(classify("/api/v1/nodes"), Target::Collection));
        assert!(matches!(classify("/api/v1/nodes/a"), Target::Object));
        assert!(matches!(classify("/api/v1/namespaces/ns/configmaps"), Target::Collection));
        assert!(in_collection("/api/v1/pods", "/api/v1/namespaces/ns/pods/a"), "every namespace's");
        assert!(in_collection("/api/v1/namespaces/ns/pods", "/api/v1/namespaces/ns/pods/a"));
        assert!(!in_collection("/api/v1/namespaces/other/pods", "/api/v1/namespaces/ns/pods/a"));
        assert!(!in_collection("/api/v1/pods", "/api/v1/namespaces/ns/configmaps/a"));
        assert!(!in_collection("/api/v1/pods", "/api/v1/namespaces/ns/pods/a/status"));
        assert!(matches!(classify("/api/v1/namespaces/ns/configmaps/x"), Target::Object));
        assert!(matches!(classify("/apis/apps/v1/namespaces/ns/daemonsets/x"), Target::Object));
        match classify("/apis/g/v1/things/x/status") {
            Target::Sub(object, sub) => assert_eq!((object.as_str(), sub.as_str()), ("/apis/g/v1/things/x", "status")),
            _ => panic!("subresource"),
        }
        assert_eq!(decode("a%3Db%2Cc"), "a=b,c");
    }
}
