//! Delegated authentication and authorization against a mock kube-apiserver (tower-test, as
//! kube-rs tests its clients): TokenReview and SubjectAccessReview answered by a small, faithful
//! double; the request-header path is covered with real certificates in the unit tests.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use numaresources_apiserver::auth::{Auth, AuthenticationConfig, Delegated, RequestHeaderConfig};
use numaresources_apiserver::{AppState, Store, router};
use serde_json::{Value, json};
use support::{BASE, in_process, nrt};

/// What the stand-in for kube-apiserver has been asked, and whether it is reachable.
#[derive(Default)]
struct StandIn {
    token_reviews: AtomicUsize,
    access_reviews: AtomicUsize,
    /// While set, every request fails as an unreachable server's would.
    down: AtomicBool,
}

/// A kube-apiserver that knows three tokens (`alice-token` → alice; `bob-token` → bob;
/// `rte-token` → the exporter's service account on worker-0), all of our audience, and allows
/// alice and the service account everything, nobody else anything.
fn fake_kube_apiserver(stand_in: Arc<StandIn>) -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<kube::client::Body>, Response<kube::client::Body>>();
    tokio::spawn(async move {
        while let Some((request, respond)) = handle.next_request().await {
            if stand_in.down.load(Ordering::SeqCst) {
                drop(respond); // the client sees a failed connection
                continue;
            }
            let path = request.uri().path().to_owned();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let mut review: Value = serde_json::from_slice(&body).unwrap();
            match path.as_str() {
                "/apis/authentication.k8s.io/v1/tokenreviews" => {
                    stand_in.token_reviews.fetch_add(1, Ordering::SeqCst);
                    let user = match review["spec"]["token"].as_str() {
                        Some("alice-token") => json!({"username": "alice", "uid": "u-1", "groups": ["dev"]}),
                        Some("bob-token") => json!({"username": "bob", "uid": "u-2"}),
                        Some("rte-token") => {
                            json!({"username": "system:serviceaccount:numaresources:numaresources-rte",
                            "extra": {"authentication.kubernetes.io/node-name": ["worker-0"]}})
                        }
                        _ => Value::Null,
                    };
                    assert_eq!(review["spec"]["audiences"], json!(["numaresources-apiserver"]));
                    review["status"] = json!({"authenticated": !user.is_null(), "user": user,
                                              "audiences": ["numaresources-apiserver"]});
                }
                "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
                    stand_in.access_reviews.fetch_add(1, Ordering::SeqCst);
                    let user = review["spec"]["user"].as_str().unwrap_or_default();
                    let allowed = user == "alice" || user.starts_with("system:serviceaccount:");
                    review["status"] = json!({"allowed": allowed});
                }
                other => panic!("unexpected request to {other}"),
            }
            let body = kube::client::Body::from(serde_json::to_vec(&review).unwrap());
            respond.send_response(Response::builder().status(200).body(body).unwrap());
        }
    });
    kube::Client::new(service, "default")
}

fn app(stand_in: Arc<StandIn>, loaded: bool) -> axum::Router {
    let delegated = Arc::new(Delegated::new(fake_kube_apiserver(stand_in), None));
    if loaded {
        delegated.set_config(AuthenticationConfig::default());
    }
    let mut state = AppState::new(Arc::new(Store::starting_at(0, 10)), "test", "test");
    state.auth = Auth::Delegated(delegated);
    router(Arc::new(state))
}

async fn call(
    app: &axum::Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let authorization = token.map(|token| format!("Bearer {token}"));
    let mut headers = vec![("content-type", "application/json")];
    headers.extend(authorization.as_deref().map(|value| ("authorization", value)));
    let answer = in_process::call(app, method, uri, &headers, body).await;
    (answer.status, answer.body)
}

#[tokio::test]
async fn anonymous_callers_are_denied_with_kube_wording() {
    let app = app(Arc::default(), true);
    let (status, body) = call(&app, "GET", BASE, None, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "noderesourcetopologies.topology.node.k8s.io is forbidden: User \"system:anonymous\" cannot list resource \"noderesourcetopologies\" in API group \"topology.node.k8s.io\" at the cluster scope"
    );
}

#[tokio::test]
async fn tokens_are_reviewed_and_decisions_cached() {
    let stand_in = Arc::new(StandIn::default());
    let app = app(stand_in.clone(), true);
    for _ in 0..3 {
        let (status, _) = call(&app, "GET", BASE, Some("alice-token"), None).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(stand_in.token_reviews.load(Ordering::SeqCst), 1, "one TokenReview, then the cache");
    assert_eq!(stand_in.access_reviews.load(Ordering::SeqCst), 1, "one SubjectAccessReview, then the cache");
    // Negative answers are cached too: a client retrying a bad token costs one review.
    for _ in 0..3 {
        let (status, body) = call(&app, "GET", BASE, Some("stolen-token"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["reason"], "Unauthorized");
    }
    assert_eq!(stand_in.token_reviews.load(Ordering::SeqCst), 2);
    for _ in 0..3 {
        let (status, _) = call(&app, "GET", BASE, Some("bob-token"), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    assert_eq!(stand_in.access_reviews.load(Ordering::SeqCst), 2, "a denial is cached like an allowance");
}

#[tokio::test]
async fn an_unreachable_kube_apiserver_fails_requests_clearly_and_is_not_remembered() {
    let stand_in = Arc::new(StandIn::default());
    let app = app(stand_in.clone(), true);
    let (status, _) = call(&app, "GET", BASE, Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::OK);

    stand_in.down.store(true, Ordering::SeqCst);
    // What is cached still answers.
    let (status, _) = call(&app, "GET", BASE, Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::OK);
    // A decision not yet made cannot be: 503, to retry.
    let (status, body) = call(&app, "GET", &format!("{BASE}/worker-0"), Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["reason"], "ServiceUnavailable");
    assert!(body["message"].as_str().unwrap().contains("authorization is unavailable"), "{body}");
    // A token not yet reviewed cannot be: 401.
    let (status, body) = call(&app, "GET", BASE, Some("bob-token"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["reason"], "Unauthorized");

    // Back: the failures were not cached, the same requests get their real answers at once.
    stand_in.down.store(false, Ordering::SeqCst);
    let (status, body) = call(&app, "GET", &format!("{BASE}/worker-0"), Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "authorized, and there is no such object: {body}");
    let (status, _) = call(&app, "GET", BASE, Some("bob-token"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "bob is authenticated now, and denied");
}

#[tokio::test]
async fn a_node_bound_identity_writes_only_its_own_node() {
    let app = app(Arc::default(), true);
    let (status, _) = call(&app, "POST", BASE, Some("rte-token"), Some(nrt("worker-0", 1))).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = call(&app, "POST", BASE, Some("rte-token"), Some(nrt("worker-1", 1))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = call(&app, "DELETE", &format!("{BASE}/worker-1"), Some("rte-token"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(&app, "DELETE", BASE, Some("rte-token"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Reading other nodes is fine.
    let (status, _) = call(&app, "GET", BASE, Some("rte-token"), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn health_is_open_and_nothing_else_is_served_before_the_configuration_loads() {
    let app = app(Arc::default(), false);
    let (status, _) = call(&app, "GET", "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&app, "GET", BASE, Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["reason"], "ServiceUnavailable");
}

#[tokio::test]
async fn subject_access_reviews_go_to_the_authorization_kubeconfig_when_given() {
    let (through_authentication, through_authorization) = (Arc::new(StandIn::default()), Arc::new(StandIn::default()));
    let delegated = Delegated::new(fake_kube_apiserver(through_authentication.clone()), None)
        .with_authorization_client(fake_kube_apiserver(through_authorization.clone()));
    delegated.set_config(AuthenticationConfig::default());
    let mut state = AppState::new(Arc::new(Store::starting_at(0, 10)), "test", "test");
    state.auth = Auth::Delegated(Arc::new(delegated));
    let app = router(Arc::new(state));
    let (status, _) = call(&app, "GET", BASE, Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(through_authorization.access_reviews.load(Ordering::SeqCst), 1);
    assert_eq!(through_authentication.access_reviews.load(Ordering::SeqCst), 0);
    assert_eq!(through_authentication.token_reviews.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn requestheader_flags_replace_the_configmap_front_proxy_settings() {
    let ca = numaresources_certs::CertificateAuthority::generate("front-proxy-ca", Duration::from_secs(3600)).unwrap();
    let flags = RequestHeaderConfig {
        client_ca: Some(numaresources_certs::CaBundle::from_pem(ca.cert_pem().as_bytes()).unwrap()),
        allowed_names: vec!["aggregator".to_owned()],
        username_headers: vec!["X-Remote-User".to_owned()],
        ..RequestHeaderConfig::default()
    };
    let client_ca = numaresources_certs::CertificateAuthority::generate("clients", Duration::from_secs(3600)).unwrap();
    let client_ca = numaresources_certs::CaBundle::from_pem(client_ca.cert_pem().as_bytes()).unwrap();
    let delegated = Delegated::new(fake_kube_apiserver(Arc::default()), None)
        .with_request_header(flags)
        .with_client_ca(client_ca.clone());
    let from_configmap = AuthenticationConfig {
        request_header: RequestHeaderConfig {
            allowed_names: vec!["front-proxy-client".to_owned()],
            ..RequestHeaderConfig::default()
        },
        ..AuthenticationConfig::default()
    };
    delegated.set_config(from_configmap);
    let config = delegated.config().unwrap();
    assert_eq!(config.request_header.allowed_names, ["aggregator"]);
    assert_eq!(config.request_header.username_headers, ["X-Remote-User"]);
    assert!(config.request_header.client_ca.is_some());
    // --client-ca-file, like the --requestheader-* flags, wins over the ConfigMap.
    assert_eq!(config.client_ca.as_ref().map(|c| c.certificates().to_vec()), Some(client_ca.certificates().to_vec()));
}

/// The authentication ConfigMap at `version` (1 or 2), with that version's allowed proxy names.
fn auth_configmap(version: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system",
                     "resourceVersion": version.to_string()},
        "data": {"requestheader-allowed-names": format!("[\"front-proxy-v{version}\"]")}
    })
}

#[tokio::test]
async fn a_changed_authentication_configmap_is_applied_from_the_watch() {
    let version = Arc::new(AtomicUsize::new(1));
    let (service, mut handle) = tower_test::mock::pair::<Request<kube::client::Body>, Response<kube::client::Body>>();
    let served = version.clone();
    tokio::spawn(async move {
        let mut parked = Vec::new(); // later watches: left open, as an idle watch is
        let mut watches = 0;
        while let Some((request, respond)) = handle.next_request().await {
            let query = request.uri().query().unwrap_or_default().to_owned();
            let path = request.uri().path().to_owned();
            assert!(path.starts_with("/api/v1/namespaces/kube-system/configmaps"), "unexpected {path}");
            let body = if query.contains("watch=true") {
                watches += 1;
                if watches > 1 {
                    parked.push(respond);
                    continue;
                }
                served.store(2, Ordering::SeqCst);
                let event = json!({"type": "MODIFIED", "object": auth_configmap(2)});
                format!("{event}\n")
            } else if path.ends_with("/extension-apiserver-authentication") {
                auth_configmap(served.load(Ordering::SeqCst)).to_string()
            } else {
                assert!(query.contains("fieldSelector=metadata.name%3Dextension-apiserver-authentication"), "{query}");
                json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "1"},
                       "items": [auth_configmap(1)]})
                .to_string()
            };
            respond.send_response(
                Response::builder().status(200).body(kube::client::Body::from(body.into_bytes())).unwrap(),
            );
        }
    });
    let delegated = Arc::new(Delegated::new(kube::Client::new(service, "default"), None));
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (follower, flag) = (delegated.clone(), ready.clone());
    let following = tokio::spawn(async move {
        follower.keep_config_current(Duration::from_secs(3600), |ok| flag.store(ok, Ordering::SeqCst)).await;
    });
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let names = delegated.config().map(|c| c.request_header.allowed_names.clone()).unwrap_or_default();
            if names == ["front-proxy-v2"] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the watched change was applied without waiting for the hourly re-read");
    assert!(ready.load(Ordering::SeqCst));
    following.abort();
}
