use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use clap::Parser;

use numaresources_runtime::InvalidConfig;

use super::*;

/// The flags after `rte`, as clap parses them.
fn try_parse(flags: &[&str]) -> Result<Args, clap::Error> {
    Args::try_parse_from(std::iter::once("rte").chain(flags.iter().copied()))
}

fn parse(flags: &[&str]) -> Args {
    try_parse(flags).unwrap()
}

/// Why clap refuses the flags after `rte`.
fn refused(flags: &[&str]) -> String {
    try_parse(flags).unwrap_err().to_string()
}

/// A fake environment: variables, a host name and files.
#[derive(Default)]
struct Fake {
    vars: BTreeMap<&'static str, &'static str>,
    host: Option<&'static str>,
    files: BTreeMap<&'static str, &'static str>,
}

impl Environment for Fake {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).map(|v| (*v).to_owned())
    }
    fn host_name(&self) -> Option<String> {
        self.host.map(str::to_owned)
    }
    fn read_file(&self, path: &Path) -> io::Result<String> {
        let path = path.to_str().unwrap();
        self.files.get(path).map(|t| (*t).to_owned()).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

fn host(name: &'static str) -> Fake {
    Fake { host: Some(name), ..Fake::default() }
}

/// What each problem is about: the text before its first `: `.
fn sources(error: &InvalidConfig) -> Vec<&str> {
    error.0.iter().map(|problem| problem.split_once(": ").map_or(problem.as_str(), |(source, _)| source)).collect()
}

#[test]
fn defaults_give_the_upstream_behaviour_with_our_fixes() {
    let config = Args::default().resolve_with(&host("worker-0")).unwrap();
    assert_eq!(config.node_name, "worker-0");
    assert_eq!(config.sysfs, Path::new("/sys"));
    assert_eq!(config.flags.podresources_socket.0.unwrap().path(), Path::new("/podresources/kubelet.sock"));
    assert_eq!(config.sleep_interval, Some(Duration::from_secs(10)));
    assert_eq!(config.heartbeat, Some(Duration::from_secs(60)));
    assert_eq!(config.topology_manager, TopologyManager::kubelet_defaults());
    assert_eq!(config.fingerprint, Some(Method::WithExclusiveResources));
    assert!(!config.flags.no_publish && config.flags.add_nrt_owner && config.flags.podreadiness);
    assert_eq!(config.max_events_per_second.get(), 1);
    assert!(config.reference_container.is_none() && config.pod_excludes.is_empty());
}

#[test]
fn the_node_name_comes_from_the_flag_then_node_name_then_the_host_name() {
    type Case = (Option<&'static str>, Option<&'static str>, Option<&'static str>, &'static str);
    let cases: [Case; 4] = [
        (Some("flag-node"), Some("env-node"), Some("host"), "flag-node"),
        (None, Some("env-node"), Some("host"), "env-node"),
        (Some(""), Some(""), Some("host"), "host"),
        (None, None, Some("host.example.com"), "host.example.com"),
    ];
    for (flag, env, hostname, want) in cases {
        let mut fake = Fake { host: hostname, ..Fake::default() };
        if let Some(env) = env {
            fake.vars.insert("NODE_NAME", env);
        }
        let args = Args { hostname: flag.map(str::to_owned), ..Args::default() };
        assert_eq!(args.resolve_with(&fake).unwrap().node_name, want);
    }
}

#[test]
fn every_invalid_setting_is_reported_at_once() {
    let args = Args {
        hostname: Some("Worker_0".into()),
        topology_manager_policy: Some("numa-please".into()),
        topology_manager_scope: Some("node".into()),
        sysfs: PathBuf::new(),
        output: Some(OutputFormat::Yaml),
        notify_file: Some("/".into()),
        metrics_mode: MetricsMode::HttpTls,
        metrics_want_cli_auth: true,
        ..Args::default()
    };
    let mut fake = Fake::default();
    fake.vars.insert("REFERENCE_NAMESPACE", "rte");
    let error = args.resolve_with(&fake).unwrap_err();
    assert_eq!(
        sources(&error),
        [
            "--hostname",
            "--sysfs",
            "--output",
            "--notify-file",
            "--topology-manager-policy",
            "--topology-manager-scope",
            "REFERENCE_*",
            "--metrics-want-cli-auth",
        ]
    );
    let text = error.to_string();
    assert!(text.starts_with("invalid configuration: --hostname: \"Worker_0\" cannot name an object"), "{text}");
    assert!(text.contains("unsupported policy \"numa-please\""), "{text}");
}

#[test]
fn malformed_values_are_refused_by_their_flag() {
    let cases: [(&str, &str); 8] = [
        ("--podresources-socket=tcp://kubelet:10250", "only unix sockets"),
        ("--sleep-interval=10 seconds", "--sleep-interval"),
        ("--heartbeat=-1s", "is negative"),
        ("--pods-fingerprint-method=some", "unknown pods fingerprint method"),
        ("--reference-container=ns/pod", "--reference-container"),
        ("--max-events-per-second=0", "--max-events-per-second"),
        ("--metrics-mode=https", "--metrics-mode"),
        ("--metrics-address=localhost", "--metrics-address"),
    ];
    for (flag, why) in cases {
        let error = refused(&[flag]);
        let value = flag.split_once('=').unwrap().1;
        assert!(error.contains(why) && error.contains(value), "{flag}: {error}");
    }
}

#[test]
fn a_missing_node_name_is_an_error() {
    let error = Args::default().resolve_with(&Fake::default()).unwrap_err();
    assert_eq!(sources(&error), ["--hostname"]);
}

#[test]
fn zero_turns_periodic_scans_and_heartbeats_off() {
    let config = parse(&["--sleep-interval=0", "--heartbeat=0s"]).resolve_with(&host("n")).unwrap();
    assert_eq!((config.sleep_interval, config.heartbeat), (None, None));
    let args = parse(&["--podresources-poll-interval=0"]);
    assert_eq!(args.resolve_with(&host("n")).unwrap().allocation_poll, None);
    let error = refused(&["--podresources-poll-interval=50ms"]);
    assert!(error.contains("--podresources-poll-interval") && error.contains("below the minimum"), "{error}");
    assert_eq!(Args::default().resolve_with(&host("n")).unwrap().allocation_poll, Some(Duration::from_millis(500)));
    let args = parse(&["--sleep-interval=1m30s"]);
    assert_eq!(args.resolve_with(&host("n")).unwrap().sleep_interval, Some(Duration::from_secs(90)));
}

#[test]
fn topology_manager_settings_follow_flag_then_kubelet_file_then_configmap_then_defaults() {
    let kubelet = "kind: KubeletConfiguration\ntopologyManagerPolicy: restricted\n";
    let configmap = "kubelet:\n  topologyManagerPolicy: best-effort\n  topologyManagerScope: pod\n";
    let files = BTreeMap::from([("/kubelet.yaml", kubelet), ("/cm.yaml", configmap)]);
    type Case = (Option<&'static str>, Option<&'static str>, bool, bool, (&'static str, &'static str));
    let cases: [Case; 6] = [
        (None, None, false, false, ("none", "container")),
        (None, None, false, true, ("best-effort", "pod")),
        // The kubelet file is complete: a field it omits is the kubelet's default.
        (None, None, true, true, ("restricted", "container")),
        (Some("single-numa-node"), None, true, true, ("single-numa-node", "container")),
        (None, Some("pod"), true, false, ("restricted", "pod")),
        (Some("single-numa-node"), Some("pod"), false, false, ("single-numa-node", "pod")),
    ];
    for (policy, scope, with_kubelet, with_configmap, want) in cases {
        let fake = Fake { host: Some("n"), files: files.clone(), ..Fake::default() };
        let args = Args {
            topology_manager_policy: policy.map(str::to_owned),
            topology_manager_scope: scope.map(str::to_owned),
            kubelet_config_file: with_kubelet.then(|| PathBuf::from("/kubelet.yaml")),
            config: with_configmap.then(|| PathBuf::from("/cm.yaml")),
            ..Args::default()
        };
        let tm = args.resolve_with(&fake).unwrap().topology_manager;
        assert_eq!(
            (tm.policy.as_str(), tm.scope.as_str()),
            want,
            "{policy:?} {scope:?} {with_kubelet} {with_configmap}"
        );
    }
}

#[test]
fn upstream_topology_manager_variables_count_as_flags() {
    let mut fake = host("n");
    fake.vars.insert("TOPOLOGY_MANAGER_POLICY", "single-numa-node");
    fake.vars.insert("TOPOLOGY_MANAGER_SCOPE", "pod");
    let tm = Args::default().resolve_with(&fake).unwrap().topology_manager;
    assert_eq!((tm.policy.as_str(), tm.scope.as_str()), ("single-numa-node", "pod"));
}

#[test]
fn the_operator_configmap_gives_pod_and_resource_excludes() {
    let configmap = "podExclude:\n- namespacePattern: kube-*\n  namePattern: '*'\n- namePattern: canary-*\nresourceExclude:\n  '*': [example.com/gpu]\n  n: [hugepages-2Mi]\n  other: [memory]\nunknownKey: 1\n";
    let fake = Fake {
        host: Some("n"),
        files: BTreeMap::from([("/etc/resource-topology-exporter/config.yaml", configmap)]),
        ..Fake::default()
    };
    let config = Args::default().resolve_with(&fake).unwrap();
    assert_eq!(config.pod_excludes.len(), 2);
    assert!(config.pod_excludes[0].matches("kube-system", "x") && config.pod_excludes[1].matches("any", "canary-1"));
    assert_eq!(config.resource_excludes, ["example.com/gpu", "hugepages-2Mi"]);
}

#[test]
fn configmap_and_kubelet_file_problems_name_the_file() {
    let files = BTreeMap::from([
        ("/cm.yaml", "podExclude:\n- namespacePattern: 'kube-['\n"),
        ("/bad.yaml", "{ nope"),
        ("/kubelet.yaml", "topologyManagerScope: node\n"),
    ]);
    let cases: [(Option<&str>, Option<&str>, &[&str]); 5] = [
        (Some("/cm.yaml"), None, &["--config podExclude[0]"]),
        (Some("/bad.yaml"), None, &["--config"]),
        (Some("/missing.yaml"), None, &["--config"]),
        (None, Some("/kubelet.yaml"), &["--kubelet-config-file"]),
        (None, Some("/missing.yaml"), &["--kubelet-config-file"]),
    ];
    for (configmap, kubelet, want) in cases {
        let fake = Fake { host: Some("n"), files: files.clone(), ..Fake::default() };
        let args = Args {
            config: configmap.map(PathBuf::from),
            kubelet_config_file: kubelet.map(PathBuf::from),
            ..Args::default()
        };
        let error = args.resolve_with(&fake).unwrap_err();
        assert_eq!(sources(&error), want, "{error}");
    }
}

#[test]
fn the_reference_container_comes_from_the_flag_or_all_three_variables() {
    let mut fake = host("n");
    fake.vars.extend([
        ("REFERENCE_NAMESPACE", "rte"),
        ("REFERENCE_POD_NAME", "rte-x"),
        ("REFERENCE_CONTAINER_NAME", "shared"),
    ]);
    let config = Args::default().resolve_with(&fake).unwrap();
    assert_eq!(config.reference_container.unwrap().to_string(), "rte/rte-x/shared");
    let args = parse(&["--reference-container=a/b/c"]);
    assert_eq!(args.resolve_with(&fake).unwrap().reference_container.unwrap().to_string(), "a/b/c");
    fake.vars.remove("REFERENCE_POD_NAME");
    let error = Args::default().resolve_with(&fake).unwrap_err();
    assert!(error.to_string().contains("missing [\"REFERENCE_POD_NAME\"]"), "{error}");
}

#[test]
fn fingerprinting_can_be_turned_off_and_its_status_file_set_by_pfp_status_file() {
    let mut fake = host("n");
    fake.vars.insert("PFP_STATUS_FILE", "/run/pfpstatus/dump.json");
    let args = parse(&["--pods-fingerprint=false", "--pods-fingerprint-method=all"]);
    let config = args.resolve_with(&fake).unwrap();
    assert_eq!(config.fingerprint, None);
    assert_eq!(config.fingerprint_status_file.unwrap(), Path::new("/run/pfpstatus/dump.json"));
}

#[test]
fn the_operator_daemonset_arguments_parse() {
    let args = parse(&[
        "--sleep-interval=10s",
        "--sysfs=/host-sys",
        "--podresources-socket=unix:///host-podresources/kubelet.sock",
        "--notify-file=/run/rte/notify",
        "--pods-fingerprint",
        "--pods-fingerprint-method=all",
        "--add-nrt-owner=false",
        "--no-publish",
    ]);
    let config = args.resolve_with(&host("worker-1")).unwrap();
    assert_eq!(config.sysfs, Path::new("/host-sys"));
    assert_eq!(config.notify_file.unwrap(), Path::new("/run/rte/notify"));
    assert_eq!(config.fingerprint, Some(Method::All));
    assert!(!config.flags.add_nrt_owner && config.flags.no_publish);
}

#[test]
fn the_operator_render_and_node_group_arguments_parse_too() {
    let args = parse(&[
        "-v=2",
        "--refresh-node-resources",
        "--exclude-terminal-pods=true",
        "--podreadiness=false",
        "--oneshot",
        "--metrics-ip=127.0.0.1",
        "--metrics-port=9100",
    ]);
    assert_eq!(args.verbosity, Some(2));
    let config = args.resolve_with(&host("worker-1")).unwrap();
    assert!(config.flags.exclude_terminal_pods && config.flags.oneshot && !config.flags.podreadiness);
    assert_eq!(config.metrics.unwrap().address, "127.0.0.1:9100".parse().unwrap());
    for flags in [&["--v=4"][..], &["-v", "4"]] {
        assert_eq!(parse(flags).verbosity, Some(4), "{flags:?}");
    }
    assert_eq!([0, 2, 3, 4, 5, 10].map(klog_log_level), ["info", "info", "debug", "debug", "trace", "trace"]);
}

#[test]
fn metrics_are_served_over_http_by_default_and_can_be_disabled() {
    let config = Args::default().resolve_with(&host("n")).unwrap();
    let endpoint = config.metrics.unwrap();
    assert_eq!((endpoint.address, endpoint.tls), ("0.0.0.0:2112".parse().unwrap(), None));
    let disabled = parse(&["--metrics-mode=disabled"]);
    assert_eq!(disabled.resolve_with(&host("n")).unwrap().metrics, None);
}

#[test]
fn httptls_takes_the_operator_arguments_and_reports_bad_tls_flags() {
    // What the operator renders per node group from an Intermediate cluster TLS profile.
    let args = parse(&[
        "--metrics-mode=httptls",
        "--metrics-tls-min-version=VersionTLS12",
        "--metrics-tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ]);
    let tls = args.resolve_with(&host("n")).unwrap().metrics.unwrap().tls.unwrap();
    assert_eq!(tls.cert_file, Path::new("/etc/secrets/rte/tls.crt"));
    assert_eq!(tls.key_file, Path::new("/etc/secrets/rte/tls.key"));
    assert_eq!(tls.client_ca_file, None);
    // A TLS 1.3 profile renders an empty cipher list.
    let args = parse(&[
        "--metrics-mode=httptls",
        "--metrics-certs-dir=/certs",
        "--metrics-cert-file=serving.pem",
        "--metrics-tls-min-version=VersionTLS13",
        "--metrics-tls-cipher-suites=",
    ]);
    let tls = args.resolve_with(&host("n")).unwrap().metrics.unwrap().tls.unwrap();
    assert_eq!(tls.cert_file, Path::new("/certs/serving.pem"));
    assert_eq!(tls.policy.min_version(), numaresources_runtime::tls::TlsVersion::Tls13);
    // (flags, the problem's source)
    let cases: [(&[&str], &str); 3] = [
        (&["--metrics-tls-min-version=VersionTLS10"], "--metrics-tls-min-version/--metrics-tls-cipher-suites"),
        (&["--metrics-tls-cipher-suites=TLS_NOPE"], "--metrics-tls-min-version/--metrics-tls-cipher-suites"),
        (&["--metrics-want-cli-auth"], "--metrics-want-cli-auth"),
    ];
    for (flags, source) in cases {
        let error = parse(&[&["--metrics-mode=httptls"], flags].concat()).resolve_with(&host("n")).unwrap_err();
        assert_eq!(sources(&error), [source], "{flags:?}");
    }
}

#[test]
fn the_own_pod_comes_from_pod_then_reference_variables_then_the_reference_container() {
    type Case = (&'static [(&'static str, &'static str)], Option<&'static str>, Option<&'static str>);
    let cases: [Case; 5] = [
        (
            &[
                ("POD_NAMESPACE", "rte"),
                ("POD_NAME", "rte-abc"),
                ("REFERENCE_NAMESPACE", "x"),
                ("REFERENCE_POD_NAME", "y"),
                ("REFERENCE_CONTAINER_NAME", "z"),
            ],
            None,
            Some("rte/rte-abc"),
        ),
        (
            &[("REFERENCE_NAMESPACE", "ns"), ("REFERENCE_POD_NAME", "rte-1"), ("REFERENCE_CONTAINER_NAME", "c")],
            None,
            Some("ns/rte-1"),
        ),
        (&[("POD_NAME", "half")], Some("a/b/c"), Some("a/b")),
        (&[("POD_NAME", "only-name")], None, None),
        (&[], None, None),
    ];
    for (vars, reference, want) in cases {
        let mut fake = host("n");
        fake.vars.extend(vars.iter().copied());
        let args = Args { reference_container: reference.map(|r| r.parse().unwrap()), ..Args::default() };
        let own = args.resolve_with(&fake).unwrap().own_pod.map(|p| p.to_string());
        assert_eq!(own.as_deref(), want, "{vars:?}");
    }
}
