//! Hot reload: a server built once serves whatever pair its files hold now.

use std::sync::Arc;
use std::time::Duration;

use numaresources_runtime::tls::{
    CertificateAuthority, Error, PemPair, Reloaded, ReloadingCertificate, ServerConfigBuilder, WatchOptions,
};

use crate::shared::{kubelet_mount, kubelet_swap};
use crate::support::{
    TestServer, app, bounded, ca, der_of, eventually, loaded, localhost_pair, served_leaf, write_plain,
};

/// Watches with directory events only: the poll is too rare to matter within a test.
fn events_only() -> WatchOptions {
    WatchOptions::default().debounce(Duration::from_millis(50)).poll_interval(Duration::from_secs(3600))
}

async fn serving(certificate: &ReloadingCertificate) -> TestServer {
    let tls = ServerConfigBuilder::new(Arc::new(certificate.clone())).build().unwrap();
    TestServer::start(tls, app()).await
}

async fn wait_until_served(server: &TestServer, ca: &CertificateAuthority, pair: &PemPair, what: &str) {
    let expected = der_of(&pair.cert_pem);
    eventually(what, || async { served_leaf(server.addr, ca.cert_pem()).await.ok().as_ref() == Some(&expected) }).await;
}

#[tokio::test]
async fn a_pair_rewritten_in_place_is_served_to_the_next_connection() {
    let ca = ca("reload-ca");
    let (first, second) = (localhost_pair(&ca), localhost_pair(&ca));
    let (dir, certificate) = loaded(&first);
    let watcher = certificate.watch(events_only()).unwrap();
    let server = serving(&certificate).await;
    assert_eq!(served_leaf(server.addr, ca.cert_pem()).await.unwrap(), der_of(&first.cert_pem));

    write_plain(dir.path(), &second);
    wait_until_served(&server, &ca, &second, "the rewritten pair to be served").await;

    bounded("watcher stop", watcher.stop()).await;
    server.stop().await;
}

#[tokio::test]
async fn a_kubelet_symlink_swap_is_served_to_the_next_connection() {
    let ca = ca("reload-ca");
    let (first, second, third) = (localhost_pair(&ca), localhost_pair(&ca), localhost_pair(&ca));
    let dir = tempfile::tempdir().unwrap();
    kubelet_mount(dir.path(), "..2026_11_22_05_00_00.1", &first);
    let certificate = ReloadingCertificate::load(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap();
    let _watcher = certificate.watch(events_only()).unwrap();
    let server = serving(&certificate).await;
    assert_eq!(served_leaf(server.addr, ca.cert_pem()).await.unwrap(), der_of(&first.cert_pem));

    kubelet_swap(dir.path(), "..2026_11_22_05_00_00.1", "..2026_11_22_06_00_00.2", &second);
    wait_until_served(&server, &ca, &second, "the swapped-in pair to be served").await;

    // And again: the watch must survive the removal of the directory it first resolved to.
    kubelet_swap(dir.path(), "..2026_11_22_06_00_00.2", "..2026_11_22_07_00_00.3", &third);
    wait_until_served(&server, &ca, &third, "the second swapped-in pair to be served").await;
    server.stop().await;
}

#[tokio::test]
async fn polling_alone_picks_up_a_new_pair() {
    let ca = ca("reload-ca");
    let (first, second) = (localhost_pair(&ca), localhost_pair(&ca));
    let (dir, certificate) = loaded(&first);
    let options = WatchOptions::default().file_events(false).poll_interval(Duration::from_millis(100));
    let watcher = certificate.watch(options).unwrap();
    let server = serving(&certificate).await;

    write_plain(dir.path(), &second);
    wait_until_served(&server, &ca, &second, "the polled pair to be served").await;
    drop(watcher);
    server.stop().await;
}

#[tokio::test]
async fn a_broken_new_pair_keeps_the_old_one_serving_until_a_good_one_arrives() {
    let ca = ca("reload-ca");
    let (good, other, recovered) = (localhost_pair(&ca), localhost_pair(&ca), localhost_pair(&ca));
    let (dir, certificate) = loaded(&good);
    let _watcher = certificate.watch(events_only()).unwrap();
    let server = serving(&certificate).await;
    let served = || async { served_leaf(server.addr, ca.cert_pem()).await.unwrap() };

    // A certificate with someone else's key.
    write_plain(dir.path(), &PemPair { cert_pem: other.cert_pem.clone(), key_pem: good.key_pem.clone() });
    assert!(matches!(certificate.reload(), Err(Error::KeyMismatch { .. })));
    assert_eq!(served().await, der_of(&good.cert_pem));

    // Garbage, an empty file, a missing file.
    std::fs::write(dir.path().join("tls.crt"), b"\x00garbage").unwrap();
    assert!(matches!(certificate.reload(), Err(Error::NoCertificate { .. })));
    std::fs::write(dir.path().join("tls.key"), b"").unwrap();
    std::fs::write(dir.path().join("tls.crt"), &good.cert_pem).unwrap();
    assert!(matches!(certificate.reload(), Err(Error::NoPrivateKey { .. })));
    std::fs::remove_file(dir.path().join("tls.key")).unwrap();
    assert!(matches!(certificate.reload(), Err(Error::Read { .. })));
    assert_eq!(served().await, der_of(&good.cert_pem));

    // An expired pair does not replace a valid one.
    write_plain(dir.path(), &expired_pair());
    assert!(matches!(certificate.reload(), Err(Error::Expired { .. })));
    assert_eq!(served().await, der_of(&good.cert_pem));
    assert_eq!(certificate.current().certified_key().cert[0], der_of(&good.cert_pem));

    // The watcher keeps going after failures.
    write_plain(dir.path(), &recovered);
    wait_until_served(&server, &ca, &recovered, "the recovered pair to be served").await;
    server.stop().await;
}

#[tokio::test]
async fn an_expired_pair_at_start_is_served_and_replaced_by_any_newer_one() {
    let ca = ca("reload-ca");
    let (dir, certificate) = loaded(&expired_pair());
    assert!(certificate.not_after() < std::time::SystemTime::now());

    let renewed = localhost_pair(&ca);
    write_plain(dir.path(), &renewed);
    assert_eq!(certificate.reload().unwrap(), Reloaded::Replaced);
    assert_eq!(certificate.reload().unwrap(), Reloaded::Unchanged);
    let validity = certificate.current().validity();
    assert_eq!(certificate.not_after(), validity.not_after);
    assert!(validity.contains(std::time::SystemTime::now()));
}

#[tokio::test]
async fn the_watcher_stops_when_asked_and_when_dropped() {
    let ca = ca("reload-ca");
    let (_dir, certificate) = loaded(&localhost_pair(&ca));
    let watcher = certificate.watch(WatchOptions::default()).unwrap();
    bounded("watcher stop", watcher.stop()).await;
    drop(certificate.watch(WatchOptions::default()).unwrap());
}

#[test]
fn watching_outside_a_runtime_is_an_error_not_a_panic() {
    let ca = ca("reload-ca");
    let (_dir, certificate) = loaded(&localhost_pair(&ca));
    assert!(matches!(certificate.watch(WatchOptions::default()), Err(Error::NoRuntime(_))));
}

/// A pair for `localhost` whose notAfter is long past.
fn expired_pair() -> PemPair {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    PemPair { cert_pem: params.self_signed(&key).unwrap().pem(), key_pem: key.serialize_pem() }
}

#[tokio::test]
async fn rotation_under_load_fails_no_request() {
    let ca = ca("rotation-ca");
    let pairs: Vec<PemPair> = (0..4).map(|_| localhost_pair(&ca)).collect();
    let dir = tempfile::tempdir().unwrap();
    kubelet_mount(dir.path(), "..v0", &pairs[0]);
    let certificate = ReloadingCertificate::load(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap();
    let _watcher = certificate.watch(events_only()).unwrap();
    let server = serving(&certificate).await;
    let addr = server.addr;

    // Four clients loop on GET (a new TLS connection each time, so every request sees whatever
    // pair is current) until told to stop; every request must succeed.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (stop, roots) = (stop.clone(), ca.cert_pem().to_owned());
        clients.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            let config = crate::support::client(&roots, None, &[b"http/1.1"]);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match crate::support::fetch(addr, config.clone(), "/whoami").await {
                    Ok((status, _)) if status.is_success() => ok += 1,
                    Ok((status, body)) => failed.push(format!("{status}: {body}")),
                    Err(error) => failed.push(error.to_string()),
                }
            }
            (ok, failed)
        }));
    }
    for (i, window) in pairs.windows(2).enumerate() {
        kubelet_swap(dir.path(), &format!("..v{i}"), &format!("..v{}", i + 1), &window[1]);
        wait_until_served(&server, &ca, &window[1], "the rotated pair to be served under load").await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for client in clients {
        let (ok, failed) = bounded("a load client to finish", client).await.unwrap();
        assert!(failed.is_empty(), "requests failed during rotation: {failed:?}");
        total += ok;
    }
    assert!(total > 0, "the clients made requests");
    server.stop().await;
}

/// An optional Secret volume whose Secret does not exist yet: the server starts on a generated
/// pair, then serves the mounted files as soon as the kubelet writes them, with no restart.
#[tokio::test]
async fn a_generated_fallback_serves_until_the_mounted_files_appear() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let fallback = numaresources_runtime::tls::self_signed(&[], Duration::from_secs(3600)).unwrap();
    let generated = fallback.clone();
    let certificate = ReloadingCertificate::load_or_fallback(&cert_path, &key_path, || {
        numaresources_runtime::tls::ServingCertificate::from_pem(
            generated.cert_pem.as_bytes(),
            generated.key_pem.as_bytes(),
        )
    })
    .unwrap();
    assert!(certificate.is_fallback());
    let _watcher = certificate.watch(events_only()).unwrap();
    let server = serving(&certificate).await;

    // Only the generated pair is served, so a client trusting the later CA fails for now.
    let later = ca("mounted-later-ca");
    assert_eq!(served_leaf(server.addr, &fallback.cert_pem).await.unwrap(), der_of(&fallback.cert_pem));
    assert!(served_leaf(server.addr, later.cert_pem()).await.is_err());
    // Polling while the files are missing is quiet, not an error.
    assert_eq!(certificate.reload().unwrap(), Reloaded::Unchanged);

    let mounted = localhost_pair(&later);
    kubelet_mount(dir.path(), "..2026_11_24_05_00_00.1", &mounted);
    wait_until_served(&server, &later, &mounted, "the mounted pair to replace the fallback").await;
    assert!(!certificate.is_fallback());
    assert!(served_leaf(server.addr, &fallback.cert_pem).await.is_err(), "the fallback is gone");

    // Once the files served, losing them is a reload error again (the pair in service stays).
    std::fs::remove_file(&cert_path).unwrap();
    assert!(matches!(certificate.reload(), Err(Error::Read { .. })));
    assert_eq!(served_leaf(server.addr, later.cert_pem()).await.unwrap(), der_of(&mounted.cert_pem));
    server.stop().await;
}

#[test]
fn files_that_exist_but_do_not_load_are_an_error_not_a_fallback() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), b"garbage").unwrap();
    std::fs::write(dir.path().join("tls.key"), b"garbage").unwrap();
    let result = ReloadingCertificate::load_or_fallback(dir.path().join("tls.crt"), dir.path().join("tls.key"), || {
        panic!("the fallback is for missing files only")
    });
    assert!(matches!(result, Err(Error::NoCertificate { .. })), "{result:?}");
}
