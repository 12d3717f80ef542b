//! Feeding the engine: NRTs and bound pods watched through kube-apiserver, each event applied at
//! once (an NRT created after the start is used on the next filter). Holds are rebuilt once both
//! lists are read.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use numaresources_api::nrt::NodeResourceTopology;
use tokio::sync::watch;

use crate::server::Shared;

/// Follows NRTs and bound pods until the streams end; `scheduler` is the name the pods the
/// extender places carry (for rebuilding holds after a restart).
pub async fn follow(client: kube::Client, shared: Arc<Shared>, scheduler: String) {
    let (nrts_listed, mut nrts_seen) = watch::channel(false);
    let (pods_listed, mut pods_seen) = watch::channel(false);
    let nrts = follow_nrts(Api::all(client.clone()), shared.clone(), nrts_listed);
    let pods = async {
        let api: Api<Pod> = Api::all(client);
        if pods_served(&api).await {
            follow_pods(api, shared.clone(), pods_listed).await;
        } else {
            // `numaresources local`: an NRT API alone. Nothing is bound, nothing is held.
            tracing::warn!("pods are not served here: no pod is counted, and binding is refused");
            pods_listed.send_replace(true);
            std::future::pending::<()>().await;
        }
    };
    let synced = async {
        let _ = nrts_seen.wait_for(|listed| *listed).await;
        let _ = pods_seen.wait_for(|listed| *listed).await;
        shared.engine.write().await.rebuild_holds(&scheduler);
        shared.synced.store(true, Ordering::Release);
        tracing::info!("NRTs and pods read: filtering");
        std::future::pending::<()>().await;
    };
    tokio::join!(nrts, pods, synced);
}

async fn follow_nrts(api: Api<NodeResourceTopology>, shared: Arc<Shared>, listed: watch::Sender<bool>) {
    let mut relisted = Vec::new();
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(nrt)) => shared.engine.write().await.nrt_changed(nrt),
            Ok(watcher::Event::Delete(nrt)) => {
                shared.engine.write().await.nrt_deleted(nrt.metadata.name.as_deref().unwrap_or_default());
            }
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(nrt)) => relisted.push(nrt),
            Ok(watcher::Event::InitDone) => {
                shared.engine.write().await.replace_nrts(std::mem::take(&mut relisted));
                listed.send_replace(true);
            }
            Err(error) => tracing::warn!(%error, "watching NRTs"),
        }
    }
}

/// Whether the server serves pods (kube-apiserver does; our API server alone does not).
async fn pods_served(api: &Api<Pod>) -> bool {
    !matches!(
        api.list(&kube::api::ListParams::default().limit(1)).await,
        Err(kube::Error::Api(status)) if status.code == 404
    )
}

async fn follow_pods(api: Api<Pod>, shared: Arc<Shared>, listed: watch::Sender<bool>) {
    // Only pods bound to a node count: in a fingerprint, or against a zone.
    let config = watcher::Config::default().fields("spec.nodeName!=");
    let mut relisted = Vec::new();
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(pod)) => shared.engine.write().await.pod_changed(Arc::new(pod)),
            Ok(watcher::Event::Delete(pod)) => {
                shared.engine.write().await.pod_deleted(pod.metadata.uid.as_deref().unwrap_or_default());
            }
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(pod)) => relisted.push(Arc::new(pod)),
            Ok(watcher::Event::InitDone) => {
                shared.engine.write().await.replace_pods(std::mem::take(&mut relisted));
                listed.send_replace(true);
            }
            Err(error) => tracing::warn!(%error, "watching pods"),
        }
    }
}
