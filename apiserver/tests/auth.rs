//! Delegated authentication and authorization against the kube-apiserver double
//! (`numaresources_testkit::kube_double`): TokenReview and SubjectAccessReview, their caching,
//! and what happens while kube-apiserver is unreachable; the authentication ConfigMap's watch
//! against a mock (tower-test, as kube-rs tests its clients). The request-header path is covered
//! with real certificates in the unit tests.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use numaresources_apiserver::auth::{Auth, AuthenticationConfig, Delegated, RequestHeaderConfig};
use numaresources_apiserver::router;
use numaresources_testkit::kube_double::{KubeDouble, OUR_AUDIENCE};
use serde_json::{Value, json};
use support::{BASE, in_process, nrt};

/// Our server in delegated mode against `double`, its authentication configuration loaded or
/// not yet.
fn app(double: &KubeDouble, loaded: bool) -> axum::Router {
    let delegated = Delegated::new(double.client(), None);
    if loaded {
        delegated.set_config(AuthenticationConfig::default());
    }
    serve(delegated)
}

fn serve(delegated: Delegated) -> axum::Router {
    let mut state = in_process::state();
    state.auth = Auth::Delegated(Arc::new(delegated));
    router(Arc::new(state))
}

/// A token of `user` for our audience: the double allows `kubernetes-admin` (and service
/// accounts) everything, every other user nothing.
fn token(double: &KubeDouble, user: &str) -> String {
    double.user_token(user, &[OUR_AUDIENCE])
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
    let app = app(&KubeDouble::new(true), true);
    let (status, body) = call(&app, "GET", BASE, None, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "noderesourcetopologies.topology.node.k8s.io is forbidden: User \"system:anonymous\" cannot list resource \"noderesourcetopologies\" in API group \"topology.node.k8s.io\" at the cluster scope"
    );
}

#[tokio::test]
async fn tokens_are_reviewed_and_decisions_cached() {
    let double = KubeDouble::new(true);
    let app = app(&double, true);
    let (admin, bob) = (token(&double, "kubernetes-admin"), token(&double, "bob"));
    for _ in 0..3 {
        let (status, _) = call(&app, "GET", BASE, Some(&admin), None).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(double.token_reviews(), 1, "one TokenReview, then the cache");
    assert_eq!(double.access_reviews(), 1, "one SubjectAccessReview, then the cache");
    // Negative answers are cached too: a client retrying a bad token costs one review per
    // audience asked (ours, then kube-apiserver's), once.
    for _ in 0..3 {
        let (status, body) = call(&app, "GET", BASE, Some("stolen-token"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["reason"], "Unauthorized");
    }
    assert_eq!(double.token_reviews(), 3);
    for _ in 0..3 {
        let (status, _) = call(&app, "GET", BASE, Some(&bob), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    assert_eq!(double.access_reviews(), 2, "a denial is cached like an allowance");
}

#[tokio::test]
async fn an_unreachable_kube_apiserver_fails_requests_clearly_and_is_not_remembered() {
    let double = KubeDouble::new(true);
    let app = app(&double, true);
    let (admin, bob) = (token(&double, "kubernetes-admin"), token(&double, "bob"));
    let (status, _) = call(&app, "GET", BASE, Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK);

    double.set_down(true);
    // What is cached still answers.
    let (status, _) = call(&app, "GET", BASE, Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK);
    // A decision not yet made cannot be: 503, to retry.
    let (status, body) = call(&app, "GET", &format!("{BASE}/worker-0"), Some(&admin), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["reason"], "ServiceUnavailable");
    assert!(body["message"].as_str().unwrap().contains("authorization is unavailable"), "{body}");
    // A token not yet reviewed cannot be: 401.
    let (status, body) = call(&app, "GET", BASE, Some(&bob), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["reason"], "Unauthorized");

    // Back: the failures were not cached, the same requests get their real answers at once.
    double.set_down(false);
    let (status, body) = call(&app, "GET", &format!("{BASE}/worker-0"), Some(&admin), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "authorized, and there is no such object: {body}");
    let (status, _) = call(&app, "GET", BASE, Some(&bob), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "bob is authenticated now, and denied");
}

#[tokio::test]
async fn a_node_bound_identity_writes_only_its_own_node() {
    let double = KubeDouble::new(true);
    double.add_pod("rte-0", "worker-0");
    let rte = double.exporter_token("rte-0", &[OUR_AUDIENCE]);
    let app = app(&double, true);
    let (status, _) = call(&app, "POST", BASE, Some(&rte), Some(nrt("worker-0", 1))).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = call(&app, "POST", BASE, Some(&rte), Some(nrt("worker-1", 1))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = call(&app, "DELETE", &format!("{BASE}/worker-1"), Some(&rte), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(&app, "DELETE", BASE, Some(&rte), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Reading other nodes is fine.
    let (status, _) = call(&app, "GET", BASE, Some(&rte), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn health_is_open_and_nothing_else_is_served_before_the_configuration_loads() {
    let double = KubeDouble::new(true);
    let app = app(&double, false);
    let admin = token(&double, "kubernetes-admin");
    let (status, _) = call(&app, "GET", "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&app, "GET", BASE, Some(&admin), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["reason"], "ServiceUnavailable");
}

#[tokio::test]
async fn subject_access_reviews_go_to_the_authorization_kubeconfig_when_given() {
    let (through_authentication, through_authorization) = (KubeDouble::new(true), KubeDouble::new(true));
    let delegated =
        Delegated::new(through_authentication.client(), None).with_authorization_client(through_authorization.client());
    delegated.set_config(AuthenticationConfig::default());
    let app = serve(delegated);
    let admin = token(&through_authentication, "kubernetes-admin");
    let (status, _) = call(&app, "GET", BASE, Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(through_authorization.access_reviews(), 1);
    assert_eq!(through_authentication.access_reviews(), 0);
    assert_eq!(through_authentication.token_reviews(), 1);
}

#[tokio::test]
async fn requestheader_flags_replace_the_configmap_front_proxy_settings() {
    let ca = numaresources_runtime::tls::CertificateAuthority::generate("front-proxy-ca", Duration::from_secs(3600))
        .unwrap();
    let flags = RequestHeaderConfig {
        client_ca: Some(numaresources_runtime::tls::CaBundle::from_pem(ca.cert_pem().as_bytes()).unwrap()),
        allowed_names: vec!["aggregator".to_owned()],
        username_headers: vec!["X-Remote-User".to_owned()],
        ..RequestHeaderConfig::default()
    };
    let client_ca =
        numaresources_runtime::tls::CertificateAuthority::generate("clients", Duration::from_secs(3600)).unwrap();
    let client_ca = numaresources_runtime::tls::CaBundle::from_pem(client_ca.cert_pem().as_bytes()).unwrap();
    let delegated = Delegated::new(KubeDouble::new(true).client(), None)
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
    // Applied from the watch, without waiting for the hourly re-read.
    let applied = || delegated.config().is_some_and(|c| c.request_header.allowed_names == ["front-proxy-v2"]);
    support::eventually("the watched change is applied", applied).await;
    assert!(ready.load(Ordering::SeqCst));
    following.abort();
}
