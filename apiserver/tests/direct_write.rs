//! The direct write path's identity and node restriction, over real TLS against a faithful
//! kube-apiserver double (TokenReview, SubjectAccessReview, exporter pods): exporters present
//! projected tokens for our audience straight to us, or come through the aggregator's front
//! proxy with the same extras; either way they write only their own node's object.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use http::StatusCode;
use numaresources_api::direct_write::{EXTRA_POD_NAME, EXTRA_POD_UID};
use numaresources_apiserver::auth::CacheLifetimes;
use numaresources_apiserver::exporter_pods::Lookup;
use numaresources_testkit::kube_double::{
    AccessAsked, EXPORTER_ACCOUNT, EXPORTER_NAMESPACE, KUBE_AUDIENCE, KubeDouble, OUR_AUDIENCE,
};
use serde_json::{Value, json};
use support::BASE;
use support::tls::{Answer, Connection, Protocol, TlsServer, start, start_remembering};

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

async fn create(connection: &mut Connection, headers: &[(&str, &str)], name: &str) -> Answer {
    let mut headers = headers.to_vec();
    headers.push(("content-type", "application/json"));
    connection.send("POST", BASE, &headers, serde_json::to_vec(&support::nrt(name, 30)).unwrap()).await
}

async fn patch(connection: &mut Connection, headers: &[(&str, &str)], name: &str) -> Answer {
    let mut headers = headers.to_vec();
    headers.push(("content-type", "application/merge-patch+json"));
    let body = serde_json::to_vec(&json!({"attributes": [{"name": "x", "value": "y"}]})).unwrap();
    connection.send("PATCH", &format!("{BASE}/{name}"), &headers, body).await
}

/// A 403 Status that names the node restriction.
fn assert_refused_by_the_rule(answer: &Answer, says: &str) {
    let status: Value = answer.json();
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{status}");
    assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("Forbidden")), "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains("node restriction") && message.contains(says), "{message}");
}

/// Waits until the server's pod cache sees `pod` as `wanted` says.
async fn until_the_cache_sees(server: &TlsServer, pod: &str, wanted: impl Fn(&Lookup) -> bool) {
    support::eventually(pod, || wanted(&server.exporter_pods.lookup(pod))).await;
}

/// A cluster with one exporter pod `rte-a` on worker-a, our server, and that pod's token for
/// our audience as an Authorization header.
async fn exporter_on_worker_a(names_nodes: bool) -> (KubeDouble, TlsServer, String) {
    let double = KubeDouble::new(names_nodes);
    double.add_pod("rte-a", "worker-a");
    let server = start(&double, |_| {}).await;
    let auth = bearer(&double.exporter_token("rte-a", &[OUR_AUDIENCE]));
    (double, server, auth)
}

#[tokio::test]
async fn an_exporter_writes_only_its_own_node_whether_the_token_names_it_or_its_pod_does() {
    for (names_nodes, protocol) in [(true, Protocol::Http1), (false, Protocol::Http2)] {
        let (double, server, auth) = exporter_on_worker_a(names_nodes).await;
        let headers = [("authorization", auth.as_str())];
        let mut connection = server.connect(protocol, false).await;

        assert_eq!(create(&mut connection, &headers, "worker-a").await.status, StatusCode::CREATED);
        assert_eq!(patch(&mut connection, &headers, "worker-a").await.status, StatusCode::OK);
        let other = create(&mut connection, &headers, "worker-b").await;
        assert_refused_by_the_rule(&other, "bound to node \"worker-a\"");
        server.store.create(numaresources_api::nrt::NodeResourceTopology::new("worker-b"), false).unwrap();
        assert_refused_by_the_rule(&patch(&mut connection, &headers, "worker-b").await, "worker-a");
        let deleted = connection.send("DELETE", &format!("{BASE}/worker-b"), &headers, Vec::new()).await;
        assert_refused_by_the_rule(&deleted, "worker-a");
        // Reading is not restricted.
        let read = connection.send("GET", &format!("{BASE}/worker-b"), &headers, Vec::new()).await;
        assert_eq!(read.status, StatusCode::OK, "names_nodes={names_nodes}");
        assert_eq!(double.token_reviews(), 1, "one review, then the cache");
    }
}

/// [`exporter_on_worker_a`] on kube-apiserver 1.30+, once our server's pod cache holds `rte-a`,
/// with a token the cluster's issuer signed for `audience`.
async fn signed_exporter_on_worker_a(audience: &str) -> (KubeDouble, TlsServer, String) {
    let double = KubeDouble::new(true);
    double.add_pod("rte-a", "worker-a");
    let server = start(&double, |_| {}).await;
    until_the_cache_sees(&server, "rte-a", |l| matches!(l, Lookup::Found(_))).await;
    let auth = bearer(&double.signed_exporter_token("rte-a", &[audience]));
    (double, server, auth)
}

/// A projected token signed by the cluster's issuer is verified in process: the exporter writes
/// its own node's object, and only that, without a single TokenReview; once its pod is gone the
/// token writes nothing.
#[tokio::test]
async fn a_signed_exporter_token_is_verified_here_without_a_token_review() {
    let (double, server, auth) = signed_exporter_on_worker_a(OUR_AUDIENCE).await;
    let headers = [("authorization", auth.as_str())];
    let mut connection = server.connect(Protocol::Http1, false).await;

    assert_eq!(create(&mut connection, &headers, "worker-a").await.status, StatusCode::CREATED);
    assert_eq!(patch(&mut connection, &headers, "worker-a").await.status, StatusCode::OK);
    assert_refused_by_the_rule(&create(&mut connection, &headers, "worker-b").await, "bound to node \"worker-a\"");
    assert_eq!(double.token_reviews(), 0, "verified against the issuer's keys");

    double.delete_pod("rte-a");
    until_the_cache_sees(&server, "rte-a", |l| *l == Lookup::Missing).await;
    assert_refused_by_the_rule(&patch(&mut connection, &headers, "worker-a").await, "no longer exists");
    // A token the issuer did not sign (its signature replaced) is refused outright.
    let forged = format!("{}AAAA", &auth[..auth.len() - 4]);
    let answer = patch(&mut connection, &[("authorization", forged.as_str())], "worker-a").await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.json());
    assert_eq!(double.token_reviews(), 0);
}

/// A token the issuer signed for kube-apiserver's own audience (what a pod has mounted by
/// default) is not ours to judge: TokenReview accepts it, as for every aggregated API server.
#[tokio::test]
async fn a_signed_token_for_kube_apiservers_audience_goes_to_token_review() {
    let (double, server, auth) = signed_exporter_on_worker_a(KUBE_AUDIENCE).await;
    let mut connection = server.connect(Protocol::Http1, false).await;
    let read = connection.send("GET", BASE, &[("authorization", auth.as_str())], Vec::new()).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.json());
    assert!(double.token_reviews() >= 1, "judged by TokenReview");
}

#[tokio::test]
async fn a_token_whose_pod_is_gone_or_was_recreated_is_refused() {
    for names_nodes in [false, true] {
        let (double, server, auth) = exporter_on_worker_a(names_nodes).await;
        let headers = [("authorization", auth.as_str())];
        let mut connection = server.connect(Protocol::Http1, false).await;
        assert_eq!(create(&mut connection, &headers, "worker-a").await.status, StatusCode::CREATED);

        // The pod goes: its token's review is still cached here, the pod cache refuses it.
        double.delete_pod("rte-a");
        until_the_cache_sees(&server, "rte-a", |l| *l == Lookup::Missing).await;
        let answer = patch(&mut connection, &headers, "worker-a").await;
        assert_refused_by_the_rule(&answer, "no longer exists");
        assert_eq!(double.token_reviews(), 1, "refused by the pod cache, not a new review");

        // A pod of the same name comes back (a new UID): the old token is still not its.
        double.add_pod("rte-a", "worker-a");
        until_the_cache_sees(&server, "rte-a", |l| matches!(l, Lookup::Found(_))).await;
        let answer = patch(&mut connection, &headers, "worker-a").await;
        assert_refused_by_the_rule(&answer, "no longer exists");
        // The new pod's own token writes.
        let fresh = bearer(&double.exporter_token("rte-a", &[OUR_AUDIENCE]));
        let answer = patch(&mut connection, &[("authorization", fresh.as_str())], "worker-a").await;
        assert_eq!(answer.status, StatusCode::OK, "names_nodes={names_nodes}: {}", answer.json());
    }
}

/// kube-apiserver's own tokens are accepted, as every aggregated API server accepts them (a
/// Prometheus scrape with its ServiceAccount's ordinary token), and the node restriction still
/// binds an exporter that presents one. A token valid for neither audience is refused.
#[tokio::test]
async fn kube_apiservers_tokens_are_accepted_and_an_exporters_is_still_bound_to_its_node() {
    let double = KubeDouble::new(true);
    double.add_pod("rte-a", "worker-a");
    let server = start(&double, |_| {}).await;
    let mut connection = server.connect(Protocol::Http2, false).await;
    for audiences in [&[KUBE_AUDIENCE][..], &[KUBE_AUDIENCE, OUR_AUDIENCE], &[OUR_AUDIENCE]] {
        let admin = bearer(&double.user_token("kubernetes-admin", audiences));
        let answer = connection.send("GET", BASE, &[("authorization", admin.as_str())], Vec::new()).await;
        assert_eq!(answer.status, StatusCode::OK, "{audiences:?}: {}", answer.json());
    }
    let exporter = bearer(&double.exporter_token("rte-a", &[KUBE_AUDIENCE]));
    let headers = [("authorization", exporter.as_str())];
    assert_eq!(create(&mut connection, &headers, "worker-a").await.status, StatusCode::CREATED);
    assert_refused_by_the_rule(&create(&mut connection, &headers, "worker-b").await, "worker-a");

    let stranger = bearer(&double.user_token("kubernetes-admin", &["https://vault.example.com"]));
    let answer = connection.send("GET", BASE, &[("authorization", stranger.as_str())], Vec::new()).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.json());
    assert_eq!(answer.json()["reason"], "Unauthorized");
}

#[tokio::test]
async fn the_aggregator_path_keeps_the_rule_for_exporters_and_only_for_them() {
    let double = KubeDouble::new(false);
    let uid = double.add_pod("rte-a", "worker-a");
    let server = start(&double, |_| {}).await;
    let mut proxy = server.connect(Protocol::Http2, true).await;
    let exporter = format!("system:serviceaccount:{EXPORTER_NAMESPACE}:{EXPORTER_ACCOUNT}");
    let pod_name_header = format!("X-Remote-Extra-{}", EXTRA_POD_NAME.replace('/', "%2F"));
    let pod_uid_header = format!("X-Remote-Extra-{}", EXTRA_POD_UID.replace('/', "%2F"));
    let as_exporter = [
        ("x-remote-user", exporter.as_str()),
        ("x-remote-group", "system:serviceaccounts"),
        (pod_name_header.as_str(), "rte-a"),
        (pod_uid_header.as_str(), uid.as_str()),
    ];
    assert_eq!(create(&mut proxy, &as_exporter, "worker-a").await.status, StatusCode::CREATED);
    assert_refused_by_the_rule(&create(&mut proxy, &as_exporter, "worker-b").await, "worker-a");
    // The exporter's account without pod extras cannot be placed: refused.
    assert_refused_by_the_rule(
        &create(&mut proxy, &as_exporter[..2], "worker-a").await,
        "neither its node nor its pod",
    );
    // A person, and another pod-bound account (the controllers'), are not node-bound.
    let admin = [("x-remote-user", "kubernetes-admin"), ("x-remote-group", "system:masters")];
    assert_eq!(create(&mut proxy, &admin, "worker-b").await.status, StatusCode::CREATED);
    let controllers = [
        ("x-remote-user", "system:serviceaccount:numaresources:numaresources-controllers"),
        (pod_name_header.as_str(), "controllers-0"),
        (pod_uid_header.as_str(), "uid-c"),
    ];
    assert_eq!(patch(&mut proxy, &controllers, "worker-b").await.status, StatusCode::OK);
    // Without the front proxy's certificate the same headers are nobody's.
    let mut plain = server.connect(Protocol::Http1, false).await;
    let answer = create(&mut plain, &as_exporter, "worker-a").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert!(answer.json()["message"].as_str().unwrap().contains("system:anonymous"), "{}", answer.json());
    assert_eq!(double.token_reviews(), 0, "the front proxy's identities need no review");
}

/// The exporters' ServiceAccount, as its tokens name it.
fn exporter_account() -> String {
    format!("system:serviceaccount:{EXPORTER_NAMESPACE}:{EXPORTER_ACCOUNT}")
}

/// What a review of the exporters' account alone asks: `verb` on every object, no pod.
fn account_may(verb: &str) -> AccessAsked {
    AccessAsked { user: exporter_account(), verb: verb.to_owned(), name: None, extras: false }
}

/// An exporter's requests on its own node's object are decided here, as kube-apiserver's Node
/// authorizer decides a kubelet's: one SubjectAccessReview per verb of its ServiceAccount (not
/// per pod, not per object) confirms RBAC grants the account that verb; a second exporter of the
/// account asks nothing more; anything else is reviewed as before.
#[tokio::test]
async fn an_exporters_own_object_is_authorized_here_after_one_review_per_verb_of_its_account() {
    let (double, server, auth_a) = signed_exporter_on_worker_a(OUR_AUDIENCE).await;
    double.add_pod("rte-b", "worker-b");
    until_the_cache_sees(&server, "rte-b", |l| matches!(l, Lookup::Found(_))).await;
    let auth_b = bearer(&double.signed_exporter_token("rte-b", &[OUR_AUDIENCE]));
    let mut connection = server.connect(Protocol::Http1, false).await;
    for (auth, node) in [(&auth_a, "worker-a"), (&auth_b, "worker-b")] {
        let headers = [("authorization", auth.as_str())];
        assert_eq!(create(&mut connection, &headers, node).await.status, StatusCode::CREATED);
        for _ in 0..5 {
            assert_eq!(patch(&mut connection, &headers, node).await.status, StatusCode::OK);
        }
        let read = connection.send("GET", &format!("{BASE}/{node}"), &headers, Vec::new()).await;
        assert_eq!(read.status, StatusCode::OK);
    }
    let mut asked = double.access_asked();
    asked.sort_by(|a, b| a.verb.cmp(&b.verb));
    assert_eq!(asked, [account_may("create"), account_may("get"), account_may("patch")]);
    assert_eq!(double.token_reviews(), 0);

    // Another node's object: read as anyone reads (a review of its own), never written.
    let headers = [("authorization", auth_a.as_str())];
    let read = connection.send("GET", &format!("{BASE}/worker-b"), &headers, Vec::new()).await;
    assert_eq!(read.status, StatusCode::OK);
    let own_review =
        AccessAsked { user: exporter_account(), verb: "get".into(), name: Some("worker-b".into()), extras: true };
    assert_eq!(double.access_asked().last(), Some(&own_review));
    let reviews = double.access_reviews();
    assert_refused_by_the_rule(&patch(&mut connection, &headers, "worker-b").await, "bound to node \"worker-a\"");
    assert_eq!(double.access_reviews(), reviews, "refused by the node restriction before any review");
}

/// An account RBAC does not grant the verb leaves each of its exporters' requests to a review
/// of its own (a grant for some objects only may still allow it), and here that review denies.
#[tokio::test]
async fn an_exporter_whose_account_lacks_the_grant_is_reviewed_per_request() {
    let (double, server, auth) = signed_exporter_on_worker_a(OUR_AUDIENCE).await;
    double.deny_user(&exporter_account());
    let mut connection = server.connect(Protocol::Http1, false).await;
    let answer = create(&mut connection, &[("authorization", auth.as_str())], "worker-a").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.json());
    let message = answer.json()["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("cannot create resource \"noderesourcetopologies\""), "{message}");
    let per_request = AccessAsked { extras: true, ..account_may("create") };
    assert_eq!(double.access_asked(), [account_may("create"), per_request]);
}

/// Every identity but an exporter on its own object goes through TokenReview and
/// SubjectAccessReview, their answers remembered as long as the lifetimes say: here a token and
/// an allowed decision for an hour, a denial not at all.
#[tokio::test]
async fn other_identities_are_reviewed_and_remembered_as_long_as_the_lifetimes_say() {
    let double = KubeDouble::new(true);
    let hour = std::time::Duration::from_secs(3600);
    let lifetimes = CacheLifetimes { token: hour, authorized: hour, unauthorized: std::time::Duration::ZERO };
    let server = start_remembering(&double, lifetimes, |_| {}).await;
    let admin = bearer(&double.user_token("kubernetes-admin", &[KUBE_AUDIENCE]));
    let stranger = bearer(&double.user_token("jane", &[KUBE_AUDIENCE]));
    let mut connection = server.connect(Protocol::Http2, false).await;
    for _ in 0..3 {
        let listed = connection.send("GET", BASE, &[("authorization", admin.as_str())], Vec::new()).await;
        assert_eq!(listed.status, StatusCode::OK);
        let denied = connection.send("GET", BASE, &[("authorization", stranger.as_str())], Vec::new()).await;
        assert_eq!(denied.status, StatusCode::FORBIDDEN);
    }
    // Each token reviewed once: for our audience, then for kube-apiserver's.
    assert_eq!(double.token_reviews(), 4);
    let lists_of = |user: &str| double.access_asked().iter().filter(|asked| asked.user == user).count();
    assert_eq!((lists_of("kubernetes-admin"), lists_of("jane")), (1, 3));
}
