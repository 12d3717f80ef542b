//! `numaresources numa top|fit` and `kubectl numa …` against `numaresources local`, with real
//! NRT fixtures and NRTs written for the scheduler plugin's cases, read through the real kubectl
//! plugin mechanism too.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use support::local::{Server, start_with};
use support::{BINARY, Process, kubectl_command, nrt_fixture, output_with_stdin, poll, stdout};

/// Runs `numaresources numa ARGS` against the server.
fn numa(server: &Server, args: &[&str]) -> Output {
    numa_with_stdin(server, args, None)
}

/// `numaresources numa ARGS` against the server, colours left to the binary.
fn numa_command(server: &Server, args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command.arg("numa").args(args).env("KUBECONFIG", &server.kubeconfig).env_remove("KUBERNETES_SERVICE_HOST");
    command.env_remove("NO_COLOR");
    command
}

fn numa_with_stdin(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    output_with_stdin(&mut numa_command(server, args), stdin.unwrap_or_default())
}

fn apply(server: &Server, object: &Value) {
    let mut apply = kubectl_command("kubectl", &server.kubeconfig, &["apply", "-f", "-"]);
    let out = output_with_stdin(&mut apply, &object.to_string());
    assert!(out.status.success(), "{}", support::stderr(&out));
}

/// An NRT for the plugin's cases: (cpu, memory GiB) available per zone, allocatable the same.
fn nrt(name: &str, policy: &str, scope: &str, zones: &[(i64, i64)]) -> Value {
    let zones: Vec<Value> = zones
        .iter()
        .enumerate()
        .map(|(id, (cpu, gib))| {
            let memory = (gib << 30).to_string();
            json!({"name": format!("node-{id}"), "type": "Node", "resources": [
                {"name": "cpu", "capacity": cpu.to_string(), "allocatable": cpu.to_string(), "available": cpu.to_string()},
                {"name": "memory", "capacity": memory, "allocatable": memory, "available": memory},
            ]})
        })
        .collect();
    json!({"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": name, "labels": {"case": "plugin"}},
        "attributes": [{"name": "topologyManagerPolicy", "value": policy}, {"name": "topologyManagerScope", "value": scope}],
        "zones": zones})
}

fn container(name: &str, cpu: &str, memory: &str) -> Value {
    json!({"name": name, "image": "x", "resources": {"limits": {"cpu": cpu, "memory": memory}}})
}

fn pod(init: &[Value], containers: &[Value]) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": "team"},
        "spec": {"initContainers": init, "containers": containers}})
    .to_string()
}

/// The verdict line of `node` in `fit`'s answer for `pod`.
fn verdicts(server: &Server, pod: &str) -> String {
    let out = numa_with_stdin(server, &["fit", "-f", "-"], Some(pod));
    assert!(out.status.code().is_some(), "{}", String::from_utf8_lossy(&out.stderr));
    stdout(&out)
}

fn line<'a>(answer: &'a str, node: &str) -> &'a str {
    let prefix = format!("{node}: ");
    answer.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no line for {node}: {answer}"))
}

#[test]
fn top_shows_each_zone_with_bars_policy_and_report_age() {
    let server = start_with(&["--simulate-nodes", "3"]);
    server.kubectl_ok(&["apply", "-f", &nrt_fixture()]);

    let out = numa(&server, &["top", "--sort-by", "name"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    assert!(!text.contains('\x1b'), "no colour when stdout is not a terminal: {text:?}");
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("5 nodes, 8 NUMA zones, 0 stale; cpu "), "summary line first: {text}");
    assert!(first.ends_with("sorted by name"), "{first}");
    // The real fixture: hugepages and a device per zone; one zone partly used.
    let block: Vec<&str> = text.split("\n\n").find(|b| b.starts_with("worker-0 ")).unwrap().lines().collect();
    assert!(
        block[0].starts_with("worker-0  single-numa-node/container  reported ") && block[0].ends_with("s ago"),
        "{block:?}"
    );
    assert_eq!(block[1].split_whitespace().collect::<Vec<_>>(), ["ZONE", "CPU", "MEMORY", "HUGEPAGES", "DEVICES"]);
    assert_eq!(
        block[2].split_whitespace().collect::<Vec<_>>(),
        [
            "node-0",
            "22/30",
            "[#######---]",
            "155.4Gi/171.4Gi",
            "[#########-]",
            "12Gi/16Gi",
            "[########--]",
            "example.com/sriov_vf",
            "7/8"
        ],
        "{block:?}"
    );
    assert!(block[3].starts_with("  node-1  30/30 [##########]  173Gi/173Gi     [##########]  16Gi/16Gi"), "{block:?}");

    // Headroom: the node with the most CPUs free on one zone first.
    let by_headroom = stdout(&numa(&server, &["top"]));
    let first_block = by_headroom.split("\n\n").nth(1).unwrap();
    assert!(first_block.starts_with("worker-0 "), "30 free CPUs on one zone: {by_headroom}");

    // Selector, --top, wide and JSON.
    server.kubectl_ok(&["label", "nrt", "worker-0", "pool=cnf"]);
    let selected = stdout(&numa(&server, &["top", "-l", "pool=cnf"]));
    assert!(selected.starts_with("1 nodes, 2 NUMA zones") && selected.contains("\nworker-0 "), "{selected}");
    let top1 = stdout(&numa(&server, &["top", "--top", "1", "--sort-by", "name"]));
    assert!(top1.lines().next().unwrap().ends_with("(top 1 shown)"), "{top1}");
    assert_eq!(top1.matches(" ago").count(), 1, "{top1}");
    let wide = stdout(&numa(&server, &["top", "-o", "wide", "-l", "pool=cnf"]));
    assert!(wide.contains("HUGEPAGES-1GI") && wide.contains("EXAMPLE.COM/SRIOV_VF"), "{wide}");
    let json: Value =
        serde_json::from_str(&stdout(&numa(&server, &["top", "-o", "json", "--sort-by", "name"]))).unwrap();
    assert_eq!(json["summary"]["nodes"], 5);
    let worker = json["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "worker-0").unwrap();
    assert_eq!(worker["reportAgeSource"], "reported");
    assert_eq!(worker["zones"][0]["resources"][0], json!({"name": "cpu", "available": "22", "allocatable": "30"}));
    let yaml = stdout(&numa(&server, &["top", "-o", "yaml"]));
    assert!(yaml.contains("sortedBy: headroom"), "{yaml}");

    // A report older than --stale-after is marked.
    poll(Duration::from_secs(30), || {
        let stale = stdout(&numa(&server, &["top", "-l", "pool=cnf", "--stale-after", "1s"]));
        let marked = stale.contains(", 1 stale;") && stale.contains("STALE");
        marked.then_some(()).ok_or_else(|| format!("worker-0 is never reported again, so it becomes stale: {stale}"))
    });
}

#[test]
fn fit_gives_the_plugins_verdict_for_each_case() {
    let server = start_with(&[]);
    server.kubectl_ok(&["apply", "-f", &nrt_fixture()]);
    apply(&server, &nrt("snn-container", "single-numa-node", "container", &[(4, 8), (8, 2)]));
    apply(&server, &nrt("snn-pod", "single-numa-node", "pod", &[(4, 8), (4, 8)]));

    // Fits, and a full zone. Scores (LeastAllocated, whole units): snn-container NUMA 0 cannot
    // hold 6 CPUs but scores its memory, (0 + 7*100/8) / 2 = 43; NUMA 1 (2*100/8 + 1*100/2) / 2
    // = 37; the node gets the lowest non-zero, 37.
    let answer = verdicts(&server, &pod(&[], &[container("app", "6", "1Gi")]));
    assert!(answer.starts_with("pod team/app (Guaranteed)\n"), "{answer}");
    assert_eq!(line(&answer, "snn-container"), "snn-container: fits on NUMA 1 (score 37)");
    assert_eq!(line(&answer, "worker-0"), "worker-0: fits on NUMA 0 (score 85)");
    assert_eq!(
        line(&answer, "snn-pod"),
        r#"snn-pod: does not fit: cpu 4 available < 6 requested by the pod (4 on NUMA 0, 4 on NUMA 1)"#
    );
    // local's own node runs the kubelet default policy: the filter does not look.
    assert_eq!(
        line(&answer, "fixture-node"),
        "fixture-node: passes unchecked: topology manager policy none (only single-numa-node is filtered) (score 0)"
    );
    assert!(answer.ends_with("2 of 4 nodes fit, best worker-0 (score 85)\n"), "{answer}");
    let hugepages = json!({"name": "app", "image": "x", "resources": {"limits": {"cpu": "2", "memory": "1Gi", "hugepages-1Gi": "20Gi"}}});
    let answer = verdicts(&server, &pod(&[], &[hugepages]));
    assert_eq!(
        line(&answer, "worker-0"),
        r#"worker-0: does not fit: hugepages-1Gi 16Gi available < 20Gi requested by container "app" (12Gi on NUMA 0, 16Gi on NUMA 1)"#
    );

    // Split resources: CPUs on one zone, memory on the other.
    let answer = verdicts(&server, &pod(&[], &[container("app", "6", "4Gi")]));
    assert_eq!(
        line(&answer, "snn-container"),
        r#"snn-container: does not fit: no single NUMA node has everything container "app" requests: cpu on NUMA 1; memory on NUMA 0"#
    );

    // Init containers: alone, before the app, nothing accumulated (container scope); in the
    // pod's effective request (pod scope).
    let answer = verdicts(&server, &pod(&[container("setup", "8", "1Gi")], &[container("app", "2", "1Gi")]));
    assert_eq!(line(&answer, "snn-container"), "snn-container: fits on NUMA 0 (score 43)");
    assert_eq!(
        line(&answer, "snn-pod"),
        r#"snn-pod: does not fit: cpu 4 available < 8 requested by the pod (4 on NUMA 0, 4 on NUMA 1)"#
    );

    // Pod scope: 3+3 CPUs fit two zones one container each, not one zone.
    let answer = verdicts(&server, &pod(&[], &[container("a", "3", "1Gi"), container("b", "3", "1Gi")]));
    assert_eq!(line(&answer, "snn-container"), "snn-container: fits: a on NUMA 0, b on NUMA 1 (score 56)");
    assert_eq!(
        line(&answer, "snn-pod"),
        r#"snn-pod: does not fit: cpu 4 available < 6 requested by the pod (4 on NUMA 0, 4 on NUMA 1)"#
    );

    // Best-effort and fractional pods: the pod's own problem comes first.
    let best_effort = verdicts(&server, &pod(&[], &[json!({"name": "app", "image": "x"})]));
    assert!(best_effort.contains("note: the pod is BestEffort"), "{best_effort}");
    assert_eq!(line(&best_effort, "snn-pod"), "snn-pod: passes unchecked: BestEffort pod (score 100)");
    let fractional = verdicts(&server, &pod(&[], &[container("app", "1500m", "1Gi")]));
    assert!(fractional.contains(r#"note: container "app" requests a fractional cpu (1500m)"#), "{fractional}");

    // Nowhere to go: exit code 1, and JSON for scripts.
    let nowhere = pod(&[], &[container("app", "64", "1Gi")]);
    let out = numa_with_stdin(&server, &["fit", "-f", "-", "-o", "json"], Some(&nowhere));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["qos"], "Guaranteed");
    let snn = json["nodes"].as_array().unwrap().iter().find(|n| n["node"] == "snn-container").unwrap();
    assert_eq!(snn["verdict"], "rejected");
    assert_eq!(snn["reason"], "insufficient");
    assert_eq!(snn["requested"], 64_000);
    let fixture = json["nodes"].as_array().unwrap().iter().find(|n| n["node"] == "fixture-node").unwrap();
    assert_eq!(fixture["verdict"], "unchecked");
    assert_eq!(out.status.code(), Some(0), "fixture-node lets it through unchecked");

    // An existing pod needs the Pods API, which local does not serve: a clear error.
    let missing = numa(&server, &["fit", "pod/app", "-n", "team"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("getting pod team/app"), "{missing:?}");
}

/// Nodes whose kubelet runs without the Static memory manager, as the upstream exporter
/// publishes them (no memory per zone) and as ours does (the node's total in every zone,
/// `memoryNUMAManaged=false`): `top` says so in words for each, and `fit` refuses the first
/// with the reason, not "0 available ... ()".
#[test]
fn top_and_fit_say_when_memory_is_not_numa_managed() {
    let server = start_with(&[]);
    let mut omitted = nrt("upstream-node", "single-numa-node", "container", &[(4, 8), (4, 8)]);
    for zone in omitted["zones"].as_array_mut().unwrap() {
        zone["resources"].as_array_mut().unwrap().retain(|r| r["name"] == "cpu");
    }
    apply(&server, &omitted);
    let mut node_level = nrt("our-node", "single-numa-node", "container", &[(4, 16), (4, 16)]);
    for zone in node_level["zones"].as_array_mut().unwrap() {
        zone["attributes"] = json!([{"name": "memoryNUMAManaged", "value": "false"}]);
    }
    apply(&server, &node_level);

    let text = stdout(&numa(&server, &["top", "--sort-by", "name"]));
    assert!(
        text.contains("memory is not NUMA-managed on upstream-node (its kubelet's memory manager is not Static) and its exporter publishes none per zone"),
        "{text}"
    );
    assert!(
        text.contains("memory is not NUMA-managed on our-node (its kubelet's memory manager is not Static): MEMORY is the node's total in each zone"),
        "{text}"
    );
    let answer = verdicts(&server, &pod(&[], &[container("app", "1", "64Mi")]));
    let refused = line(&answer, "upstream-node");
    assert!(
        refused.contains(r#"memory requested by container "app" is in no NUMA zone of the node's topology"#),
        "{answer}"
    );
    assert!(!refused.contains("()"), "{refused}");
    assert_eq!(line(&answer, "our-node"), "our-node: fits on NUMA 0 (score 87)", "{answer}");
}

/// Against `local`: what a lone API server cannot tell is skipped, the rest judged, and a node
/// whose memory is in no zone fails the run.
#[test]
fn doctor_checks_what_local_serves_and_skips_the_rest() {
    let server = start_with(&[]);
    apply(&server, &nrt("worker-0", "single-numa-node", "container", &[(4, 8), (4, 8)]));
    let healthy = numa(&server, &["doctor"]);
    let text = stdout(&healthy);
    assert!(healthy.status.success(), "{text}");
    assert!(
        text.contains(
            "skip  APIService: cannot get APIService v1alpha2.topology.node.k8s.io: APIServices are not served here"
        ),
        "{text}"
    );
    assert!(text.contains("ok    NRT freshness:"), "{text}");
    let mut omitted = nrt("upstream-node", "single-numa-node", "container", &[(4, 8)]);
    omitted["zones"][0]["resources"].as_array_mut().unwrap().retain(|r| r["name"] == "cpu");
    apply(&server, &omitted);
    let failing = numa(&server, &["doctor", "-o", "json"]);
    assert_eq!(failing.status.code(), Some(1));
    let checks: Value = serde_json::from_slice(&failing.stdout).unwrap();
    let memory = checks.as_array().unwrap().iter().find(|c| c["name"] == "memory per NUMA zone").unwrap();
    assert_eq!(memory["status"], "fail", "{checks}");
    assert!(memory["fix"].as_str().unwrap().contains("memoryManagerPolicy: Static"), "{checks}");
}

#[test]
fn kubectl_runs_the_binary_as_its_numa_plugin() {
    let server = start_with(&[]);
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_numaresources"), bin.path().join("kubectl-numa")).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let kubectl = |args: &[&str]| {
        Command::new("kubectl").args(args).env("PATH", &path).env("KUBECONFIG", &server.kubeconfig).output().unwrap()
    };

    let plugins = kubectl(&["plugin", "list"]);
    assert!(String::from_utf8_lossy(&plugins.stdout).contains("kubectl-numa"), "{plugins:?}");
    let top = kubectl(&["numa", "top"]);
    assert!(top.status.success(), "{}", String::from_utf8_lossy(&top.stderr));
    let text = stdout(&top);
    assert!(text.starts_with("1 nodes, 2 NUMA zones, 0 stale; cpu 24/24 available"), "{text}");
    assert!(text.contains("\nfixture-node  none/container  reported "), "{text}");
    // kubectl's global --context reaches the plugin as an argument.
    let context = kubectl(&["numa", "top", "--context", "no-such-context"]);
    assert!(!context.status.success());
    assert!(String::from_utf8_lossy(&context.stderr).contains("no-such-context"), "{context:?}");
}

#[test]
fn top_watch_redraws_when_an_nrt_changes() {
    let server = start_with(&[]);
    let top = Process::spawn_stdout(&mut numa_command(&server, &["top", "--watch", "--sort-by", "name"]));
    top.wait_for(&["1 nodes, 2 NUMA zones"]);
    server.kubectl_ok(&["apply", "-f", &nrt_fixture()]);
    top.wait_for(&["2 nodes, 4 NUMA zones"]);
    top.wait_for(&["worker-0  single-numa-node/container"]);
}

/// POSTs `body` to `path` on `address` (HTTP/1.1, one request per connection); the status and
/// the body.
fn http(address: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The scheduler extender run against `local` (real processes: it watches the NRTs through the
/// same kubeconfig `fit` uses) and `numa fit` agree on every single-numa-node node, for pods
/// that fit, do not fit, or split their resources across zones; on a node whose kubelet does not
/// filter (policy none) both let the pod through.
#[test]
fn the_scheduler_extender_and_fit_agree_where_the_plugin_filters() {
    let server = start_with(&[]);
    apply(&server, &nrt("snn-container", "single-numa-node", "container", &[(4, 8), (8, 2)]));
    apply(&server, &nrt("snn-pod", "single-numa-node", "pod", &[(4, 8), (4, 8)]));
    let extender = Process::spawn(
        Command::new(BINARY)
            .args(["scheduler-extender", "--port", "0", "--health-port", "0", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST"),
    );
    let address_in =
        |line: String| line.split("address=").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    let address = address_in(extender.wait_for(&["serving the scheduler extender"]));
    // Readiness on its own port (the kubelet's), once the NRTs are read.
    let health = address_in(extender.wait_for(&["serving /healthz and /readyz"]));
    support::poll(Duration::from_secs(30), || {
        let (status, body) = http(&health, "GET", "/readyz", "");
        (status == 200).then_some(()).ok_or_else(|| format!("not ready: {status} {body}: {:#?}", extender.log()))
    });
    let nodes = ["snn-container", "snn-pod", "fixture-node"];
    let pods = [
        pod(&[], &[container("app", "6", "1Gi")]),
        pod(&[], &[container("app", "6", "4Gi")]),
        pod(&[], &[container("a", "3", "1Gi"), container("b", "3", "1Gi")]),
        pod(&[container("setup", "8", "1Gi")], &[container("app", "2", "1Gi")]),
        pod(&[], &[container("app", "64", "1Gi")]),
    ];
    for pod in &pods {
        let out = numa_with_stdin(&server, &["fit", "-f", "-", "-o", "json"], Some(pod));
        let fit: Value = serde_json::from_slice(&out.stdout).unwrap();
        let fit_passes: Vec<&str> = fit["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["verdict"] != "rejected")
            .map(|n| n["node"].as_str().unwrap())
            .filter(|n| nodes.contains(n))
            .collect();
        let mut as_sent: Value = serde_json::from_str(pod).unwrap();
        // What kube-scheduler sends: the stored pod, requests defaulted from the limits.
        for container in as_sent["spec"]["containers"].as_array_mut().unwrap() {
            container["resources"]["requests"] = container["resources"]["limits"].clone();
        }
        let request = json!({"Pod": as_sent, "Nodes": null, "NodeNames": nodes});
        let (status, body) = http(&address, "POST", "/filter", &request.to_string());
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        let mut extender_passes: Vec<&str> =
            answer["NodeNames"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        let mut fit_passes = fit_passes;
        fit_passes.sort_unstable();
        extender_passes.sort_unstable();
        assert_eq!(extender_passes, fit_passes, "pod {pod}: the extender said {body}");
    }
}
