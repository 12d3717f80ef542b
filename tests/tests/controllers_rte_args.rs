//! The exporter DaemonSet the controllers render runs `numaresources rte` with arguments the
//! agent accepts, for every node-group configuration knob (a flag the agent does not know would
//! crash-loop every exporter pod).

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::time::Duration;

use clap::Parser;
use numaresources_api::GoDuration;
use numaresources_api::operator::{InfoRefreshMode, InfoRefreshPauseMode, NodeGroupConfig, PodsFingerprintingMode};
use numaresources_controllers::render::rte::{MetricsMode as RenderedMetrics, args};
use numaresources_rte::config::{Interval, MetricsMode};
use numaresources_rte::fingerprint::Method;

#[derive(Debug, Parser)]
#[command(name = "numaresources")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    Rte(Box<numaresources_rte::config::Args>),
}

fn parse(config: &NodeGroupConfig, metrics: &RenderedMetrics) -> numaresources_rte::config::Args {
    let rendered = args(&config.normalized(), 4, metrics);
    let argv = std::iter::once("numaresources".to_owned()).chain(rendered.clone());
    match Cli::try_parse_from(argv) {
        Ok(Cli { command: Command::Rte(args) }) => *args,
        Err(error) => panic!("{rendered:?} rejected: {error}"),
    }
}

#[test]
fn every_rendered_configuration_parses_as_the_agent_expects() {
    let defaults = parse(&NodeGroupConfig::default(), &RenderedMetrics::Http);
    assert_eq!(defaults.sleep_interval, Interval::every(Duration::from_secs(10)));
    assert!(defaults.pods_fingerprint && !defaults.no_publish && !defaults.add_nrt_owner);
    assert_eq!(defaults.pods_fingerprint_method, Method::WithExclusiveResources);
    assert_eq!(defaults.verbosity, Some(4));
    assert_eq!(defaults.sysfs.to_str(), Some("/host-sys"));
    assert_eq!(defaults.podresources_poll_interval, Interval(None), "Periodic: periodic scans only");

    let events = parse(
        &NodeGroupConfig {
            info_refresh_mode: Some(InfoRefreshMode::Events),
            pods_fingerprinting: Some(PodsFingerprintingMode::Disabled),
            info_refresh_pause: Some(InfoRefreshPauseMode::Enabled),
            ..Default::default()
        },
        &RenderedMetrics::HttpTls { min_version: "VersionTLS13".into(), cipher_suites: String::new() },
    );
    assert_eq!(events.sleep_interval, Interval(None));
    let poll = numaresources_controllers::render::rte::ALLOCATION_POLL_INTERVAL;
    assert_eq!(events.podresources_poll_interval, poll.parse().unwrap());
    assert!(events.notify_file.is_some() && !events.pods_fingerprint && events.no_publish);
    assert_eq!(events.metrics_mode, MetricsMode::HttpTls);
    assert_eq!(events.metrics_tls_min_version.as_deref(), Some("VersionTLS13"));

    let all = parse(
        &NodeGroupConfig {
            pods_fingerprinting: Some(PodsFingerprintingMode::Enabled),
            info_refresh_mode: Some(InfoRefreshMode::PeriodicAndEvents),
            info_refresh_period: Some(GoDuration::from_secs(90)),
            ..Default::default()
        },
        &RenderedMetrics::Http,
    );
    assert_eq!(
        (all.sleep_interval, all.pods_fingerprint_method),
        (Interval::every(Duration::from_secs(90)), Method::All)
    );
    assert!(all.notify_file.is_some());
}

#[test]
fn the_direct_write_flags_parse_and_name_the_files_the_daemonset_mounts() {
    use numaresources_api::direct_write::{
        CA_FILE_NAME, TOKEN_FILE_NAME, TOKEN_MOUNT_DIR, WRITE_SERVICE, admin_url, service_host, service_url,
    };
    use numaresources_controllers::render::rte::DirectWrite;

    let direct = DirectWrite {
        url: service_url(WRITE_SERVICE, "numaresources"),
        tls_server_name: service_host("numaresources-apiserver", "numaresources"),
        admin_url: admin_url(WRITE_SERVICE, "numaresources"),
        ca_config_map: "numaresources-apiserver-ca".into(),
        ca_key: "ca.crt".into(),
    };
    let rendered = args(&NodeGroupConfig::default().normalized(), 2, &RenderedMetrics::Http);
    let argv = std::iter::once("numaresources".to_owned()).chain(rendered).chain(direct.args());
    let Command::Rte(parsed) = Cli::try_parse_from(argv).unwrap().command;
    let server = parsed.direct.resolve().unwrap().unwrap();
    assert_eq!(server.url.to_string(), "https://numaresources-apiserver-writes.numaresources.svc:443/");
    assert_eq!(server.tls_server_name.as_deref(), Some("numaresources-apiserver.numaresources.svc"));
    let admin = server.admin_url.unwrap();
    assert_eq!(admin.to_string(), "http://numaresources-apiserver-writes.numaresources.svc:8081/");
    let mount = std::path::Path::new(TOKEN_MOUNT_DIR);
    assert_eq!((server.ca_file, server.token_file), (mount.join(CA_FILE_NAME), mount.join(TOKEN_FILE_NAME)));
}

/// The group's ConfigMap as the controllers render it (the text in its data key, written to a
/// real file as the kubelet projects it) is what the agent reads with `--config`.
#[test]
fn the_rendered_configmap_is_what_the_agent_reads() {
    use numaresources_api::exporter::{CONFIG_FILE, TopologyManager};
    use numaresources_api::operator::NamespacedName;
    use numaresources_controllers::render::kubeletconfig::{config_map, config_yaml};

    let dir = tempfile::tempdir().unwrap();
    let read = |tm: &TopologyManager, excludes: &[NamespacedName]| {
        let rendered =
            config_map("numaresources", "nro", "worker", config_yaml(tm, excludes), Default::default()).unwrap();
        let path = dir.path().join(CONFIG_FILE);
        std::fs::write(&path, &rendered.data.unwrap()[CONFIG_FILE]).unwrap();
        let argv = ["numaresources", "rte", "--hostname=worker-0", &format!("--config={}", path.display())];
        let Command::Rte(args) = Cli::try_parse_from(argv).unwrap().command;
        args.resolve().unwrap()
    };

    let tm = TopologyManager { policy: "single-numa-node".into(), scope: "pod".into() };
    let excludes = [
        NamespacedName { namespace: "kube-*".into(), name: "*".into() },
        NamespacedName { namespace: String::new(), name: "canary-*".into() },
    ];
    let config = read(&tm, &excludes);
    assert_eq!(config.topology_manager, tm);
    assert_eq!(config.pod_excludes.len(), 2);
    assert!(config.pod_excludes[0].matches("kube-system", "anything"));
    assert!(!config.pod_excludes[0].matches("default", "anything"));
    assert!(config.pod_excludes[1].matches("default", "canary-1"));

    // Settings the controllers could not tell are left out, and the agent runs with the kubelet's.
    let config = read(&TopologyManager::default(), &[]);
    assert_eq!(config.topology_manager, TopologyManager::kubelet_defaults());
    assert!(config.pod_excludes.is_empty());
}
