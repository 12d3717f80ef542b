//! What one reconcile pass costs the controllers in CPU, apart from the API round trips: the
//! pure decisions each pass recomputes from scratch.
//!
//! `cargo bench -p numaresources-controllers --bench decisions` prints one line per case
//! (median of 7 rounds). Figures go to BENCHMARKS.md; nothing here asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use numaresources_testkit::median;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use numaresources_api::operator::{NUMAResourcesSchedulerSpec, NodeGroup};
use numaresources_controllers::certificates::{Observed, plan};
use numaresources_controllers::hash::config_hash;
use numaresources_controllers::nodegroups::{NodeInfo, resolve};
use numaresources_controllers::render::rte::{MetricsMode, RteSettings, daemon_set};
use numaresources_controllers::render::scheduler::{self, SchedulerSettings};
use numaresources_runtime::tls::rotation::RotationPolicy;

/// Runs `f` in rounds of `iterations` and prints the median time per iteration.
fn bench(name: &str, iterations: u32, f: impl FnMut()) {
    let median = median::median_per_iteration(7, iterations, f);
    println!("{name:<70} {median:>12.2?}");
}

/// A fleet of `count` nodes in four pools (`pool-0` … `pool-3`), each with the labels a real
/// node carries (role, zone, hostname, architecture).
fn fleet(count: usize) -> Vec<NodeInfo> {
    (0..count)
        .map(|i| {
            let name = format!("worker-{i:05}");
            let labels = BTreeMap::from([
                ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
                ("kubernetes.io/hostname".to_owned(), name.clone()),
                ("kubernetes.io/os".to_owned(), "linux".to_owned()),
                ("node-role.kubernetes.io/worker".to_owned(), String::new()),
                ("numa.example.com/pool".to_owned(), format!("pool-{}", i % 4)),
                ("topology.kubernetes.io/zone".to_owned(), format!("zone-{}", i % 3)),
            ]);
            NodeInfo { name, labels }
        })
        .collect()
}

fn groups() -> Vec<NodeGroup> {
    (0..4)
        .map(|i| NodeGroup {
            node_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("numa.example.com/pool".to_owned(), format!("pool-{i}"))])),
                match_expressions: None,
            }),
            ..NodeGroup::default()
        })
        .collect()
}

fn main() {
    let groups = groups();
    for count in [100, 5_000] {
        let nodes = fleet(count);
        bench(&format!("operator: resolve 4 node groups over {count} nodes"), 20, || {
            black_box(resolve(black_box(&groups), black_box(&nodes), None, false).unwrap());
        });
    }

    let nodes = fleet(5_000);
    let resolution = resolve(&groups, &nodes, None, false).unwrap();
    let settings = RteSettings {
        namespace: "numaresources".into(),
        nro_name: "numaresourcesoperator".into(),
        image: "quay.io/numaresources/numaresources:v0.1.0".into(),
        verbosity: 2,
        metrics: MetricsMode::Http,
        openshift_selinux: false,
        direct_write: None,
    };
    bench("operator: render the exporter DaemonSets of 4 groups", 200, || {
        for pool in &resolution.pools {
            black_box(daemon_set(&settings, pool, "SHA256:0").unwrap());
        }
    });

    let spec = NUMAResourcesSchedulerSpec {
        scheduler_image: "quay.io/openshift-kni/scheduler-plugins:4.18-snapshot".into(),
        ..NUMAResourcesSchedulerSpec::default()
    };
    let scheduler_settings = SchedulerSettings {
        namespace: "numaresources".into(),
        capabilities: numaresources_api::operator::scheduler_image::identify(&spec.scheduler_image).capabilities,
        guaranteed_qos: false,
        extender_image: "numaresources:test".into(),
    };
    bench("scheduler: KubeSchedulerConfiguration, its hash, the Deployment", 200, || {
        let yaml = scheduler::config_yaml(&spec, &scheduler_settings, 2);
        let hash = config_hash(&BTreeMap::from([(scheduler::CONFIG_KEY.to_owned(), yaml)]));
        black_box(scheduler::deployment(&spec, &scheduler_settings, 2, &hash, "2026-01-01T00:00:00Z").unwrap());
    });

    // Certificates: the first pass issues a CA and two leaves; every later pass only reads them.
    let policy = RotationPolicy::default();
    let now = SystemTime::now();
    let first = plan(&Observed::default(), "numaresources", &policy, now).unwrap();
    bench("certificates: first pass (generate a CA and 2 leaves)", 5, || {
        black_box(plan(&Observed::default(), "numaresources", &policy, now).unwrap());
    });
    let steady = Observed {
        ca: Some(first.ca.to_secret_data()),
        leaves: first.leaves.iter().cloned().map(Some).collect(),
        bundles: vec![Some(first.bundle()); 4],
        ..Observed::default()
    };
    bench("certificates: steady pass (parse and check, nothing to issue)", 50, || {
        let pass = plan(black_box(&steady), "numaresources", &policy, now).unwrap();
        assert!(pass.issued.iter().all(Option::is_none));
        black_box(pass);
    });

    // Placement: one Pending pod explained against 5,000 two-zone NRTs (each pod at most once a
    // minute, so 100 Pending pods cost 100 of these a minute).
    let nrts: Vec<std::sync::Arc<numaresources_api::nrt::NodeResourceTopology>> =
        (0..5_000).map(|i| std::sync::Arc::new(two_zone_nrt(&format!("worker-{i:05}"), i))).collect();
    let pending: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "dpdk", "namespace": "cnf"},
        "spec": {"schedulerName": "topo-aware-scheduler", "containers": [{"name": "app",
            "resources": {"limits": {"cpu": "16", "memory": "32Gi", "hugepages-1Gi": "8Gi"}}}]}}))
    .unwrap();
    let strategy = numaresources_api::operator::ScoringStrategyParams::default();
    bench("placement: explain a Pending pod against 5,000 NRTs", 3, || {
        let explanation =
            numaresources_controllers::placement::explain_pod(black_box(&pending), black_box(&nrts), &strategy);
        assert!(explanation.message.len() <= 1024);
        black_box(explanation);
    });
    // What a pass costs when nothing changed since the 100 Pending pods' Events: the digest of
    // the NRTs, and each pod's (none is explained again).
    let pods: Vec<k8s_openapi::api::core::v1::Pod> = (0..100)
        .map(|i| {
            let mut pod = pending.clone();
            pod.metadata.name = Some(format!("dpdk-{i}"));
            pod
        })
        .collect();
    bench("placement: a pass over 100 Pending pods, 5,000 NRTs unchanged", 20, || {
        use numaresources_controllers::placement::{basis, nrts_basis};
        let nrts_basis = nrts_basis(black_box(&nrts), &strategy);
        black_box(pods.iter().map(|pod| basis(nrts_basis, pod)).fold(0, u64::wrapping_add));
    });
}

/// A two-zone NRT whose free CPUs and memory vary with `seed` (none fits 16 CPUs on one zone).
fn two_zone_nrt(name: &str, seed: usize) -> numaresources_api::nrt::NodeResourceTopology {
    let zone = |id: usize| {
        let cpus = (seed * 7 + id * 3) % 15 + 1;
        let memory = format!("{}Gi", (seed * 5 + id) % 60 + 4);
        serde_json::json!({"name": format!("node-{id}"), "type": "Node", "resources": [
            {"name": "cpu", "capacity": "32", "allocatable": "30", "available": cpus.to_string()},
            {"name": "memory", "capacity": "128Gi", "allocatable": "120Gi", "available": memory},
            {"name": "hugepages-1Gi", "capacity": "16Gi", "allocatable": "16Gi", "available": "8Gi"}]})
    };
    serde_json::from_value(serde_json::json!({"metadata": {"name": name},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
        "zones": [zone(0), zone(1)]}))
    .unwrap()
}
