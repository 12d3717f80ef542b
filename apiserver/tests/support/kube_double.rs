//! A small, faithful stand-in for what our server asks of kube-apiserver: TokenReview,
//! SubjectAccessReview, and the exporter pods (list and watch).
//!
//! What it copies of kube-apiserver:
//! - TokenReview: a token is valid for the intersection of the audiences it was issued for and
//!   the ones the review asks for (kube-apiserver's own API audience when the review names
//!   none); an empty intersection is `authenticated: false`. `status.audiences` is that
//!   intersection. A pod-bound token is valid only while its pod (same UID) exists, and carries
//!   the `pod-name`/`pod-uid` extras, plus `node-name` on clusters that name nodes (1.30+).
//! - SubjectAccessReview: allows service accounts and `kubernetes-admin`, denies the rest.
//! - Pods: a list with a resourceVersion, then a watch from it whose events carry increasing
//!   resourceVersions; a deleted pod's watch event is DELETED with its last state.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use numaresources_api::direct_write::{EXTRA_NODE_NAME, EXTRA_POD_NAME, EXTRA_POD_UID, TOKEN_AUDIENCE};
use serde_json::{Value, json};

/// kube-apiserver's own audience (`--api-audiences`, default the issuer).
pub const KUBE_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// Where the exporters run.
pub const EXPORTER_NAMESPACE: &str = "numaresources";
/// The exporters' service account.
pub const EXPORTER_ACCOUNT: &str = "numaresources-rte";
/// Their labels.
pub const EXPORTER_LABELS: [(&str, &str); 2] =
    [("app.kubernetes.io/component", "rte"), ("app.kubernetes.io/part-of", "numaresources")];
/// The selector our server is given.
pub const EXPORTER_SELECTOR: &str = "app.kubernetes.io/component=rte,app.kubernetes.io/part-of=numaresources";

/// Who a token stands for.
#[derive(Clone, Debug)]
struct Issued {
    user: String,
    groups: Vec<String>,
    audiences: Vec<String>,
    /// The pod (name, uid, node) it is bound to.
    pod: Option<(String, String, String)>,
}

#[derive(Default)]
struct Pods {
    revision: u64,
    pods: BTreeMap<String, Value>,
    /// Every event so far, for watches that start from an older revision.
    events: Vec<(u64, &'static str, Value)>,
}

/// The double. Counters say what it was asked.
pub struct KubeDouble {
    /// Whether tokens carry the `node-name` extra (kube-apiserver 1.30+).
    names_nodes: bool,
    tokens: Mutex<HashMap<String, Issued>>,
    pods: Mutex<Pods>,
    events: tokio::sync::broadcast::Sender<(u64, &'static str, Value)>,
    next: AtomicUsize,
    pub token_reviews: AtomicUsize,
    pub access_reviews: AtomicUsize,
    /// While set, every request fails as an unreachable server's would.
    pub down: AtomicBool,
}

type DoubleBody = UnsyncBoxBody<Bytes, Infallible>;

impl KubeDouble {
    pub fn new(names_nodes: bool) -> Arc<Self> {
        Arc::new(Self {
            names_nodes,
            tokens: Mutex::default(),
            pods: Mutex::default(),
            events: tokio::sync::broadcast::channel(4096).0,
            next: AtomicUsize::new(1),
            token_reviews: AtomicUsize::new(0),
            access_reviews: AtomicUsize::new(0),
            down: AtomicBool::new(false),
        })
    }

    /// A client of the double.
    pub fn client(self: &Arc<Self>) -> kube::Client {
        let double = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let double = double.clone();
            async move {
                if double.down.load(Ordering::SeqCst) {
                    return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
                }
                Ok(double.answer(request).await)
            }
        });
        kube::Client::new(service, "default")
    }

    /// A new exporter pod on `node`; returns its UID.
    pub fn add_pod(&self, name: &str, node: &str) -> String {
        let uid = format!("uid-{name}-{}", self.next.fetch_add(1, Ordering::SeqCst));
        let labels: BTreeMap<&str, &str> = EXPORTER_LABELS.into_iter().collect();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": EXPORTER_NAMESPACE, "uid": uid, "labels": labels},
            "spec": {"nodeName": node, "serviceAccountName": EXPORTER_ACCOUNT, "containers": [{"name": "rte"}]},
            "status": {"phase": "Running"}});
        self.change("ADDED", pod);
        uid
    }

    /// Deletes an exporter pod.
    pub fn delete_pod(&self, name: &str) {
        let pod = self.pods.lock().unwrap().pods.get(name).cloned();
        if let Some(pod) = pod {
            self.change("DELETED", pod);
        }
    }

    fn change(&self, kind: &'static str, mut pod: Value) {
        let mut pods = self.pods.lock().unwrap();
        pods.revision += 1;
        let revision = pods.revision;
        pod["metadata"]["resourceVersion"] = json!(revision.to_string());
        let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        if kind == "DELETED" {
            pods.pods.remove(&name);
        } else {
            pods.pods.insert(name, pod.clone());
        }
        pods.events.push((revision, kind, pod.clone()));
        // Sent under the lock, so a watch that subscribes under it misses nothing.
        let _ = self.events.send((revision, kind, pod));
    }

    /// A token of the exporters' service account bound to pod `pod` (as the kubelet projects it),
    /// for `audiences`.
    pub fn exporter_token(&self, pod: &str, audiences: &[&str]) -> String {
        let bound = {
            let pods = self.pods.lock().unwrap();
            let pod = pods.pods.get(pod).expect("a token is bound to an existing pod");
            let field = |path: &str| pod.pointer(path).and_then(Value::as_str).unwrap_or_default().to_owned();
            (field("/metadata/name"), field("/metadata/uid"), field("/spec/nodeName"))
        };
        self.issue(Issued {
            user: format!("system:serviceaccount:{EXPORTER_NAMESPACE}:{EXPORTER_ACCOUNT}"),
            groups: vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{EXPORTER_NAMESPACE}")],
            audiences: audiences.iter().map(|a| (*a).to_owned()).collect(),
            pod: Some(bound),
        })
    }

    /// A token for a person, valid against kube-apiserver (and, if asked, us).
    pub fn user_token(&self, user: &str, audiences: &[&str]) -> String {
        self.issue(Issued {
            user: user.to_owned(),
            groups: vec![],
            audiences: audiences.iter().map(|a| (*a).to_owned()).collect(),
            pod: None,
        })
    }

    fn issue(&self, issued: Issued) -> String {
        // About the length of a real projected token (a signed JWT).
        let token = format!("eyJhbGciOiJSUzI1NiJ9.{:06}.{}", self.next.fetch_add(1, Ordering::SeqCst), "x".repeat(900));
        self.tokens.lock().unwrap().insert(token.clone(), issued);
        token
    }

    async fn answer(&self, request: Request<kube::client::Body>) -> Response<DoubleBody> {
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or_default().to_owned();
        let body = request.into_body().collect_bytes().await.unwrap();
        match path.as_str() {
            "/apis/authentication.k8s.io/v1/tokenreviews" => {
                self.token_reviews.fetch_add(1, Ordering::SeqCst);
                let mut review: Value = serde_json::from_slice(&body).unwrap();
                review["status"] = self.review_token(&review["spec"]);
                json_response(&review)
            }
            "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
                self.access_reviews.fetch_add(1, Ordering::SeqCst);
                let mut review: Value = serde_json::from_slice(&body).unwrap();
                let user = review["spec"]["user"].as_str().unwrap_or_default();
                let allowed = user == "kubernetes-admin" || user.starts_with("system:serviceaccount:");
                review["status"] = json!({"allowed": allowed});
                json_response(&review)
            }
            p if p == format!("/api/v1/namespaces/{EXPORTER_NAMESPACE}/pods") => {
                let selector = query_value(&query, "labelSelector").unwrap_or_default();
                assert_eq!(selector, EXPORTER_SELECTOR, "the exporters are selected by their labels");
                if query_value(&query, "watch").as_deref() == Some("true") {
                    let from = query_value(&query, "resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
                    self.watch_pods(from)
                } else {
                    let pods = self.pods.lock().unwrap();
                    json_response(&json!({"apiVersion": "v1", "kind": "PodList",
                        "metadata": {"resourceVersion": pods.revision.to_string()},
                        "items": pods.pods.values().collect::<Vec<_>>()}))
                }
            }
            other => panic!("the double does not serve {other}"),
        }
    }

    fn review_token(&self, spec: &Value) -> Value {
        let unauthenticated = |error: String| json!({"authenticated": false, "error": error});
        let token = spec["token"].as_str().unwrap_or_default();
        let Some(issued) = self.tokens.lock().unwrap().get(token).cloned() else {
            return unauthenticated("invalid bearer token".into());
        };
        let wanted: Vec<String> = match spec["audiences"].as_array() {
            Some(list) if !list.is_empty() => list.iter().filter_map(|a| a.as_str().map(str::to_owned)).collect(),
            _ => vec![KUBE_AUDIENCE.to_owned()],
        };
        let audiences: Vec<&String> = wanted.iter().filter(|a| issued.audiences.contains(a)).collect();
        if audiences.is_empty() {
            return unauthenticated(format!(
                "[invalid bearer token, token audiences {:?} is invalid for the target audiences {wanted:?}]",
                issued.audiences
            ));
        }
        let mut extra = serde_json::Map::new();
        if let Some((pod, uid, node)) = &issued.pod {
            let alive = self.pods.lock().unwrap().pods.get(pod).is_some_and(|p| p["metadata"]["uid"] == json!(uid));
            if !alive {
                return unauthenticated(format!("[invalid bearer token, pod \"{pod}\" not found or its uid differs]"));
            }
            extra.insert(EXTRA_POD_NAME.into(), json!([pod]));
            extra.insert(EXTRA_POD_UID.into(), json!([uid]));
            if self.names_nodes {
                extra.insert(EXTRA_NODE_NAME.into(), json!([node]));
            }
        }
        json!({"authenticated": true, "audiences": audiences,
               "user": {"username": issued.user, "uid": format!("uid-of-{}", issued.user),
                        "groups": issued.groups, "extra": extra}})
    }

    fn watch_pods(&self, from: u64) -> Response<DoubleBody> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel::<Result<Frame<Bytes>, Infallible>>();
        let (backlog, mut live) = {
            let pods = self.pods.lock().unwrap();
            let backlog: Vec<_> = pods.events.iter().filter(|(rv, _, _)| *rv > from).cloned().collect();
            (backlog, self.events.subscribe())
        };
        let line = |kind: &str, object: &Value| {
            let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
            line.push(b'\n');
            Ok(Frame::data(Bytes::from(line)))
        };
        let mut last = from;
        for (revision, kind, object) in backlog {
            last = revision;
            let _ = sender.send(line(kind, &object));
        }
        tokio::spawn(async move {
            while let Ok((revision, kind, object)) = live.recv().await {
                if revision > last && sender.send(line(kind, &object)).is_err() {
                    break;
                }
            }
        });
        let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(receiver);
        Response::builder().status(200).body(BodyExt::boxed_unsync(StreamBody::new(stream))).unwrap()
    }
}

fn json_response(value: &Value) -> Response<DoubleBody> {
    let body = Full::new(Bytes::from(serde_json::to_vec(value).unwrap()));
    Response::builder().status(200).body(BodyExt::boxed_unsync(body)).unwrap()
}

fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.replace("%2C", ",").replace("%3D", "=").replace("%2F", "/"))
    })
}

/// The audience our server wants, for tests' readability.
pub const OUR_AUDIENCE: &str = TOKEN_AUDIENCE;
