//! Optional client certificates against replaceable CA bundles, seen by handlers.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use numaresources_runtime::PeerInfo;
use numaresources_runtime::tls::{CaBundle, ClientCaVerifier, ServerConfigBuilder};

use crate::support::{TestServer, app, ca, client, client_with_versions, fetch, loaded, localhost_pair};

/// A server for `localhost` (its serving CA returned) that verifies clients against `verifier`.
async fn server_with(
    verifier: Arc<ClientCaVerifier>,
    app: Router,
) -> (TestServer, numaresources_runtime::tls::CertificateAuthority, tempfile::TempDir) {
    let serving_ca = ca("serving-ca");
    let (dir, certificate) = loaded(&localhost_pair(&serving_ca));
    let tls = ServerConfigBuilder::new(Arc::new(certificate)).client_cas(verifier).build().unwrap();
    (TestServer::start(tls, app).await, serving_ca, dir)
}

fn bundle(ca: &numaresources_runtime::tls::CertificateAuthority) -> CaBundle {
    CaBundle::from_pem(ca.cert_pem().as_bytes()).unwrap()
}

#[tokio::test]
async fn clients_with_a_trusted_certificate_are_identified_and_others_are_anonymous_or_refused() {
    let front_proxy = ca("front-proxy-ca");
    let stranger = ca("someone-else");
    let verifier = Arc::new(ClientCaVerifier::new(&[bundle(&front_proxy)]).unwrap());
    let (server, serving_ca, _dir) = server_with(verifier, app()).await;
    let roots = serving_ca.cert_pem();

    let aggregator = front_proxy.issue_client("front-proxy-client", &[], Duration::from_secs(600)).unwrap();
    let (status, body) = fetch(server.addr, client(roots, Some(&aggregator), &[]), "/whoami").await.unwrap();
    assert_eq!((status.as_u16(), body.as_str()), (200, "front-proxy-client HTTP/1.1"));

    let (_, body) = fetch(server.addr, client(roots, None, &[]), "/whoami").await.unwrap();
    assert_eq!(body, "anonymous HTTP/1.1");

    let intruder = stranger.issue_client("front-proxy-client", &[], Duration::from_secs(600)).unwrap();
    let refused = fetch(server.addr, client(roots, Some(&intruder), &[]), "/whoami").await;
    assert!(refused.is_err(), "a certificate from an unknown CA was accepted: {refused:?}");
    // Over TLS 1.2 the refusal happens inside the handshake itself.
    let tls12 = client_with_versions(roots, Some(&intruder), &[], &[&rustls::version::TLS12]);
    assert!(crate::support::connect(server.addr, tls12).await.is_err());

    server.stop().await;
}

#[tokio::test]
async fn replacing_the_ca_bundle_applies_to_new_connections() {
    let old_ca = ca("front-proxy-ca-1");
    let new_ca = ca("front-proxy-ca-2");
    let verifier = Arc::new(ClientCaVerifier::new(&[bundle(&old_ca)]).unwrap());
    let (server, serving_ca, _dir) = server_with(Arc::clone(&verifier), app()).await;
    let roots = serving_ca.cert_pem();
    let old_client = old_ca.issue_client("front-proxy-client", &[], Duration::from_secs(600)).unwrap();
    let new_client = new_ca.issue_client("front-proxy-client", &[], Duration::from_secs(600)).unwrap();
    let old_config = client(roots, Some(&old_client), &[]);
    let new_config = client(roots, Some(&new_client), &[]);

    assert!(fetch(server.addr, Arc::clone(&old_config), "/whoami").await.is_ok());
    assert!(fetch(server.addr, Arc::clone(&new_config), "/whoami").await.is_err());

    verifier.replace(&[bundle(&new_ca)]).unwrap();
    assert!(fetch(server.addr, Arc::clone(&old_config), "/whoami").await.is_err());
    let (_, body) = fetch(server.addr, Arc::clone(&new_config), "/whoami").await.unwrap();
    assert_eq!(body, "front-proxy-client HTTP/1.1");

    // No bundle at all: nobody is asked for a certificate, everybody is anonymous.
    verifier.replace(&[]).unwrap();
    let (_, body) = fetch(server.addr, new_config, "/whoami").await.unwrap();
    assert_eq!(body, "anonymous HTTP/1.1");
    server.stop().await;
}

#[tokio::test]
async fn with_two_bundles_a_handler_can_tell_which_one_vouches_for_the_client() {
    let front_proxy_ca = ca("front-proxy-ca");
    let client_ca = ca("kubernetes");
    let front_proxy = bundle(&front_proxy_ca);
    let verifier = Arc::new(ClientCaVerifier::new(&[front_proxy.clone(), bundle(&client_ca)]).unwrap());
    let app = Router::new().route(
        "/who-vouches",
        get(move |Extension(peer): Extension<PeerInfo>| {
            let front_proxy = front_proxy.clone();
            async move {
                match (peer.client_chain().is_empty(), front_proxy.verifies_client(peer.client_chain())) {
                    (true, _) => "nobody",
                    (false, true) => "front proxy",
                    (false, false) => "client CA",
                }
            }
        }),
    );
    let (server, serving_ca, _dir) = server_with(verifier, app).await;
    let roots = serving_ca.cert_pem();

    let aggregator = front_proxy_ca.issue_client("front-proxy-client", &[], Duration::from_secs(600)).unwrap();
    let jane = client_ca.issue_client("jane", &["admins".to_owned()], Duration::from_secs(600)).unwrap();
    let answer =
        |identity| async move { fetch(server.addr, client(roots, identity, &[]), "/who-vouches").await.unwrap().1 };
    assert_eq!(answer(Some(&aggregator)).await, "front proxy");
    assert_eq!(answer(Some(&jane)).await, "client CA");
    assert_eq!(answer(None).await, "nobody");
    server.stop().await;
}
