//! Several real `numaresources apiserver` processes on loopback, replicating one store, with the
//! Lease they elect their leader on served by the kube-apiserver double ([`KubeDouble`]): what the
//! replication test and the HA bench share.
//!
//! The replicas run in standalone mode (static tokens, so no kube-apiserver is needed for
//! authentication) with `--leader-elect`; the kubeconfig they get points at the double and is used
//! for the Lease only. With [`ReplicaOptions::delegated`] they run as in a cluster instead: no
//! token file, tokens reviewed and requests authorized by the double (which then also knows
//! [`ADMIN_TOKEN`]), exporters placed through their pods. Certificates come from one [`CertificateAuthority`]: a serving pair for
//! `localhost`/`127.0.0.1` shared by the public ports, and a peer pair (serverAuth and clientAuth)
//! for the mutual-TLS peer ports, verified as `localhost`.
//!
//! The binary: this crate cannot name it with `CARGO_BIN_EXE_*` (Cargo gives that only to the
//! package that owns the binary), so [`numaresources_binary`] builds it once per test process
//! with the cargo that builds the tests, and takes the path from cargo's own report;
//! `NUMARESOURCES_BIN` overrides that with a prebuilt binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use numaresources_runtime::tls::CertificateAuthority;

use numaresources_testkit::kube_double::KubeDouble;

/// The Lease's namespace and name (the design's defaults).
pub const LEASE_NAMESPACE: &str = "numaresources";
pub const LEASE_NAME: &str = "numaresources-apiserver";
/// The NRT collection.
pub const NRT_PATH: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";
/// A member of `system:masters` (may write).
pub const ADMIN_TOKEN: &str = "admin-token";
/// The name peers verify on each other's peer certificate.
pub const PEER_SERVER_NAME: &str = "localhost";
/// How long a replica may take from spawn to listening (a debug binary on a busy machine).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Log lines kept per replica (the newest), so a long bench cannot grow them without bound.
const LOG_LINES_KEPT: usize = 10_000;

/// The `numaresources` binary, built once per process (see the module's notes).
pub fn numaresources_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| std::env::var_os("NUMARESOURCES_BIN").map_or_else(build_binary, PathBuf::from)).clone()
}

fn build_binary() -> PathBuf {
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let mut command = Command::new(cargo);
    command.args(["build", "-p", "numaresources", "--bin", "numaresources", "--message-format=json"]);
    // Cargo sets these for the test binary; inherited, build scripts that watch them (ring's
    // watches CARGO_MANIFEST_DIR) would see a change and rebuild, and the next `cargo test`
    // would rebuild them back: half a minute of compiling per alternation.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if is_set_by_cargo_for_the_running_crate(&name) {
            command.env_remove(&*name);
        }
    }
    if !cfg!(debug_assertions) {
        // A bench measures the optimised binary.
        command.arg("--release");
    }
    let output = command
        .current_dir(crate::workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|error| panic!("running {cargo} build: {error}"));
    assert!(output.status.success(), "building the numaresources binary failed (see the messages above)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact" && message["target"]["name"] == "numaresources")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo did not report the numaresources executable"))
}

/// The variables cargo sets when it runs a crate's tests, which describe that crate and not
/// the build a nested `cargo build` makes.
fn is_set_by_cargo_for_the_running_crate(name: &str) -> bool {
    const PREFIXES: [&str; 3] = ["CARGO_PKG_", "CARGO_BIN_EXE_", "CARGO_MANIFEST_"];
    const NAMES: [&str; 5] = [
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
    ];
    PREFIXES.iter().any(|prefix| name.starts_with(prefix)) || NAMES.contains(&name)
}

/// The loopback ports [`free_port`] picks from: below Linux's ephemeral range (32768–60999),
/// where the kernel puts every outgoing connection's local port and every `:0` bind. A port
/// released there was seen taken by another test's connection before the replica bound it.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free loopback port (bound, then released), picked at random from [`TEST_PORTS`].
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seed = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let span = u64::from(TEST_PORTS.end - TEST_PORTS.start);
    for _ in 0..1_000 {
        let draw = seed.wrapping_add(NEXT.fetch_add(0x6A09_E667_F3BC_C909, std::sync::atomic::Ordering::Relaxed));
        let port = TEST_PORTS.start + u16::try_from((draw >> 17) % span).unwrap_or(0);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {TEST_PORTS:?}")
}

/// The resident memory (VmRSS) in KiB of the process `pid` (`self`: this one).
pub fn rss_kib(pid: &str) -> Option<u64> {
    proc_status::status_kib(pid, "VmRSS")
}

use numaresources_testkit::proc_status;

/// Where the replicas' system trust store points (`SSL_CERT_FILE`, `SSL_CERT_DIR`): an empty
/// file and an empty directory, as in an image without CA certificates.
const EMPTY_TRUST_STORE_FILE: &str = "empty-trust-store.pem";
const EMPTY_TRUST_STORE_DIR: &str = "empty-trust-store";

/// The files every replica of one cluster reads.
#[derive(Debug, Clone)]
pub struct ClusterFiles {
    pub dir: PathBuf,
    /// The CA that issued both pairs: clients trust it, peers verify each other with it.
    pub ca: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub peer_cert: PathBuf,
    pub peer_key: PathBuf,
    pub tokens: PathBuf,
    /// Points at the kube-apiserver double.
    pub lease_kubeconfig: PathBuf,
}

impl ClusterFiles {
    /// Generates the CA, both pairs and the token file into `dir`.
    pub fn write(dir: &Path, double: &KubeDouble) -> Self {
        let day = Duration::from_secs(24 * 3600);
        let ca = CertificateAuthority::generate("replication-test-ca", day).unwrap_or_else(|e| panic!("CA: {e}"));
        let names = [PEER_SERVER_NAME.to_owned(), "127.0.0.1".to_owned()];
        let files = Self {
            dir: dir.to_owned(),
            ca: dir.join("ca.crt"),
            serving_cert: dir.join("serving.crt"),
            serving_key: dir.join("serving.key"),
            peer_cert: dir.join("peer.crt"),
            peer_key: dir.join("peer.key"),
            tokens: dir.join("tokens.csv"),
            lease_kubeconfig: dir.join("lease.kubeconfig"),
        };
        let write = |path: &Path, text: &str| std::fs::write(path, text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        write(&files.ca, ca.cert_pem());
        write(&dir.join(EMPTY_TRUST_STORE_FILE), "");
        std::fs::create_dir_all(dir.join(EMPTY_TRUST_STORE_DIR)).unwrap_or_else(|e| panic!("trust store dir: {e}"));
        let serving = ca.issue_serving(&names, day).unwrap_or_else(|e| panic!("serving pair: {e}"));
        serving.write(&files.serving_cert, &files.serving_key).unwrap_or_else(|e| panic!("serving pair: {e}"));
        let peer = ca.issue_peer(&names, day).unwrap_or_else(|e| panic!("peer pair: {e}"));
        peer.write(&files.peer_cert, &files.peer_key).unwrap_or_else(|e| panic!("peer pair: {e}"));
        write(&files.tokens, &format!("{ADMIN_TOKEN},admin,uid-admin,\"system:masters\"\n"));
        double.write_kubeconfig(&files.lease_kubeconfig, LEASE_NAMESPACE).unwrap_or_else(|e| panic!("kubeconfig: {e}"));
        files
    }

    /// A kube-rs client for `url` as the admin, trusting the CA, without kube-rs' own retries
    /// (the tests look at every 503 themselves).
    pub async fn client(&self, url: &str) -> kube::Client {
        self.client_with_token(url, ADMIN_TOKEN).await
    }

    /// [`ClusterFiles::client`] presenting `token`.
    pub async fn client_with_token(&self, url: &str, token: &str) -> kube::Client {
        let ca_pem = std::fs::read_to_string(&self.ca).unwrap_or_else(|e| panic!("{}: {e}", self.ca.display()));
        let mut config = crate::served::kube_config(url, &ca_pem, token).await;
        config.default_retry = false;
        kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
    }
}

/// Per-replica options beyond the shared ones.
#[derive(Debug, Clone)]
pub struct ReplicaOptions {
    /// `--store-warmup`: how long a cold replica waits for exporters before it calls itself warm.
    pub store_warmup: String,
    /// Any other flags.
    pub extra: Vec<String>,
    /// Delegated mode (TokenReview and SubjectAccessReview by the double) instead of the token
    /// file.
    pub delegated: bool,
}

impl Default for ReplicaOptions {
    fn default() -> Self {
        Self { store_warmup: "2s".to_owned(), extra: Vec::new(), delegated: false }
    }
}

/// One `numaresources apiserver` process; killed when dropped. Its ports stay the same across
/// restarts, and so does the address in its Lease identity (`<hostname>_127.0.0.1:<peer port>…`).
#[derive(Debug)]
pub struct Replica {
    pub index: usize,
    pub secure_port: u16,
    pub peer_port: u16,
    /// The plain-HTTP admin port (`/metrics` and the probes).
    pub health_port: u16,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Replica {
    /// Starts replica `index` on fresh ports; returns once it listens.
    pub fn start(files: &ClusterFiles, index: usize, options: &ReplicaOptions) -> Self {
        let mut replica = Self {
            index,
            secure_port: free_port(),
            peer_port: free_port(),
            health_port: free_port(),
            child: None,
            log: Arc::default(),
        };
        replica.spawn(files, options);
        replica
    }

    /// The public URL.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.secure_port)
    }

    /// Whether `holder` (a Lease's holderIdentity, `<hostname>_<ip>:<port>`, possibly followed by
    /// `_<incarnation>`) is this replica.
    pub fn is(&self, holder: &str) -> bool {
        let address = format!("_127.0.0.1:{}", self.peer_port);
        holder.ends_with(&address) || holder.contains(&format!("{address}_"))
    }

    /// Whether the process runs.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Resident memory in KiB, while it runs.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(&self.pid()?.to_string())
    }

    /// The log lines so far (the newest [`LOG_LINES_KEPT`]).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().map(|lines| lines.clone()).unwrap_or_default()
    }

    /// (Re)starts the process with the same ports; returns once it listens.
    pub fn spawn(&mut self, files: &ClusterFiles, options: &ReplicaOptions) {
        self.kill();
        let port = |port: u16| port.to_string();
        let mut command = Command::new(numaresources_binary());
        command
            .args(["apiserver", "--bind-address", "127.0.0.1", "--secure-port", &port(self.secure_port)])
            .args(["--health-port", &port(self.health_port)])
            .arg("--tls-cert-file")
            .arg(&files.serving_cert)
            .arg("--tls-private-key-file")
            .arg(&files.serving_key)
            .arg("--cert-dir")
            .arg(files.dir.join(format!("cert-dir-{}", self.index)))
            .args(["--store-warmup", &options.store_warmup])
            .arg("--leader-elect")
            .arg("--kubeconfig")
            .arg(&files.lease_kubeconfig)
            .args(["--peer-advertise-ip", "127.0.0.1", "--peer-advertise-port", &port(self.peer_port)])
            .arg("--peer-ca-file")
            .arg(&files.ca)
            .arg("--peer-client-cert-file")
            .arg(&files.peer_cert)
            .arg("--peer-client-key-file")
            .arg(&files.peer_key)
            .args(["--peer-server-name", PEER_SERVER_NAME])
            .args(&options.extra)
            .env("NUMARESOURCES_LOG", std::env::var("NUMARESOURCES_REPLICA_LOG").unwrap_or_else(|_| "info".into()))
            // As the Deployment runs them (glibc's default arena count inflates every replica's
            // memory by a different amount, which the memory figures compare).
            .env("MALLOC_ARENA_MAX", "2")
            .env("NO_COLOR", "1")
            // As our image has it: no system trust store. Whatever the replicas connect to (the
            // leader's peer port) they must trust through the CA files they are given.
            .env("SSL_CERT_FILE", files.dir.join(EMPTY_TRUST_STORE_FILE))
            .env("SSL_CERT_DIR", files.dir.join(EMPTY_TRUST_STORE_DIR))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if !options.delegated {
            command.arg("--token-auth-file").arg(&files.tokens);
        }
        let mut child = command.spawn().unwrap_or_else(|e| panic!("starting replica {}: {e}", self.index));
        let stderr = child.stderr.take();
        self.child = Some(child);
        let log = Arc::new(Mutex::new(Vec::new()));
        self.log = log.clone();
        // NUMARESOURCES_REPLICA_LOG_DIR keeps every replica's whole log on disk as well
        // (replica-<index>.log, appended across restarts), to look into a bench run afterwards.
        let mut on_disk = std::env::var_os("NUMARESOURCES_REPLICA_LOG_DIR").and_then(|dir| {
            let path = std::path::Path::new(&dir).join(format!("replica-{}.log", self.index));
            std::fs::OpenOptions::new().create(true).append(true).open(path).ok()
        });
        if let Some(stderr) = stderr {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(file) = on_disk.as_mut() {
                        use std::io::Write;
                        let _ = writeln!(file, "{line}");
                    }
                    let Ok(mut lines) = log.lock() else { break };
                    if lines.len() == LOG_LINES_KEPT {
                        lines.remove(0);
                    }
                    lines.push(line);
                }
            });
        }
        self.wait_for_log("serving HTTPS", START_TIMEOUT);
    }

    /// Waits for a log line containing `needle`; panics (with the log) otherwise.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.log().into_iter().find(|line| line.contains(needle)) {
                return line;
            }
            assert!(self.running(), "replica {} exited; its log:\n{}", self.index, self.log().join("\n"));
            assert!(
                Instant::now() < deadline,
                "replica {}: no {needle:?} within {timeout:?}; its log:\n{}",
                self.index,
                self.log().join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and waits (at most `timeout`) for it to exit; its exit status, None when it had
    /// to be killed (or was not running).
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

/// A kube-apiserver double and `n` replicas, each with its own client.
#[derive(Debug)]
pub struct Cluster {
    pub double: KubeDouble,
    pub files: ClusterFiles,
    pub replicas: Vec<Replica>,
    pub options: ReplicaOptions,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the double and `n` replicas.
    pub async fn start(n: usize, options: ReplicaOptions) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary directory: {e}"));
        let double = KubeDouble::start().await.unwrap_or_else(|e| panic!("the kube-apiserver double: {e}"));
        let files = ClusterFiles::write(dir.path(), &double);
        if options.delegated {
            double.issue_admin_token(ADMIN_TOKEN, "admin");
        }
        let replicas = tokio::task::block_in_place(|| {
            (0..n).map(|index| Replica::start(&files, index, &options)).collect::<Vec<_>>()
        });
        Self { double, files, replicas, options, _dir: dir }
    }

    /// The Lease's holder, if any.
    pub fn holder(&self) -> Option<String> {
        self.double.holder(LEASE_NAMESPACE, LEASE_NAME)
    }

    /// The followers the Lease names as in sync (they hold every acknowledged write; only they
    /// may take over).
    pub fn in_sync(&self) -> Vec<String> {
        let lease = self.double.lease(LEASE_NAMESPACE, LEASE_NAME);
        let annotations = lease.and_then(|lease| lease.metadata.annotations).unwrap_or_default();
        let listed = annotations.get(numaresources_apiserver::replication::IN_SYNC_ANNOTATION);
        listed.map(|list| list.split(',').filter(|id| !id.is_empty()).map(str::to_owned).collect()).unwrap_or_default()
    }

    /// Waits (polling the double every 20 ms) until the Lease names every running replica but
    /// the leader as in sync: the cluster is as highly available as it can be. Panics with the
    /// Lease and the logs after `patience`.
    pub async fn wait_all_in_sync(&self, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let in_sync = self.in_sync();
            let leader = self.leader();
            let followers = self.replicas.iter().enumerate().filter(|(i, r)| r.child.is_some() && Some(*i) != leader);
            if leader.is_some() && followers.clone().all(|(_, r)| in_sync.iter().any(|id| r.is(id))) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("the Lease names {in_sync:?} in sync, not every follower\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The index of the replica holding the Lease, if a running one does.
    pub fn leader(&self) -> Option<usize> {
        let holder = self.holder()?;
        self.replicas.iter().position(|replica| replica.child.is_some() && replica.is(&holder))
    }

    /// Waits (polling the double every 20 ms) for a leader other than `not`; its index.
    pub async fn wait_for_leader(&self, not: Option<usize>, timeout: Duration) -> Option<usize> {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if let Some(leader) = self.leader().filter(|leader| Some(*leader) != not) {
                return Some(leader);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Every replica's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for replica in &self.replicas {
            text.push_str(&format!(
                "--- replica {} (peer port {}):\n{}\n",
                replica.index,
                replica.peer_port,
                replica.log().join("\n")
            ));
        }
        text
    }

    /// Waits until every running replica is Ready; panics with the logs after `patience`.
    pub async fn wait_all_ready(&self, patience: Duration) {
        for index in 0..self.replicas.len() {
            if !wait_ready(&self.client(index).await, patience).await {
                panic!("replica {index} not Ready within {patience:?}\n{}", self.logs());
            }
        }
    }

    /// `n` replicas in delegated mode that list exporter pods on `nodes` when they start, as in
    /// a cluster whose exporters run already (started once, stopped, and started again with
    /// the pods in place), with a leader elected and all Ready; the leader's index.
    pub async fn start_with_exporter_pods(n: usize, nodes: &[&str], patience: Duration) -> (Self, usize) {
        let options = ReplicaOptions { delegated: true, ..ReplicaOptions::default() };
        let mut cluster = Self::start(n, options).await;
        for replica in &mut cluster.replicas {
            replica.kill();
        }
        cluster.double.set_exporter_pods(nodes.iter().map(|node| (*node).to_owned()).collect());
        for index in 0..n {
            cluster.respawn(index);
        }
        let leader = cluster.wait_for_leader(None, patience).await;
        let leader = leader.unwrap_or_else(|| panic!("no leader elected\n{}", cluster.logs()));
        cluster.wait_all_ready(patience).await;
        (cluster, leader)
    }

    /// Every replica as a Service's endpoint (their ports stay the same across restarts).
    pub async fn backends(&self) -> Vec<crate::service::Backend> {
        let mut backends = Vec::new();
        for (index, replica) in self.replicas.iter().enumerate() {
            backends.push(crate::service::Backend { port: replica.secure_port, probe: self.client(index).await });
        }
        backends
    }

    /// The replicas' admin ports as a Service's endpoints (a Service's second port), each
    /// probed on its `/readyz` as [`Cluster::backends`] are.
    pub async fn admin_backends(&self) -> Vec<crate::service::Backend> {
        let mut backends = Vec::new();
        for (index, replica) in self.replicas.iter().enumerate() {
            backends.push(crate::service::Backend { port: replica.health_port, probe: self.client(index).await });
        }
        backends
    }

    /// A client for replica `index`.
    pub async fn client(&self, index: usize) -> kube::Client {
        self.files.client(&self.replicas[index].url()).await
    }

    /// Restarts replica `index` (same ports), in a blocking section.
    pub fn respawn(&mut self, index: usize) {
        let (files, options) = (self.files.clone(), self.options.clone());
        tokio::task::block_in_place(|| self.replicas[index].spawn(&files, &options));
    }
}

/// One answer of a replica.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// The Retry-After header, if any.
    pub retry_after: Option<String>,
    /// Every Content-Type header, in order (clients read the first).
    pub content_types: Vec<String>,
    /// The JSON body (Null when empty or not JSON).
    pub body: serde_json::Value,
}

impl Answer {
    /// The object's resourceVersion, if the body is an object.
    pub fn resource_version(&self) -> Option<String> {
        self.body["metadata"]["resourceVersion"].as_str().map(str::to_owned)
    }

    /// A success (2xx).
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// One request; transport failures are `Err`, every HTTP answer is `Ok`.
pub async fn request(
    client: &kube::Client,
    method: http::Method,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<Answer, kube::Error> {
    request_as(client, method, path, body, "application/json").await
}

/// `GET path` over plain HTTP/1.1 on 127.0.0.1:`port` with no credentials: the status and the
/// body as text.
pub async fn plain_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let status = answer.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// [`request`] with a body of `content_type` (a patch's).
pub async fn request_as(
    client: &kube::Client,
    method: http::Method,
    path: &str,
    body: Option<&serde_json::Value>,
    content_type: &str,
) -> Result<Answer, kube::Error> {
    use http_body_util::BodyExt;
    let bytes = body.map(|b| serde_json::to_vec(b).unwrap_or_default()).unwrap_or_default();
    let mut builder = http::Request::builder().method(method).uri(path);
    if body.is_some() {
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    let request = builder.body(bytes).map_err(kube::Error::HttpError)?;
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status().as_u16();
    let retry_after =
        response.headers().get(http::header::RETRY_AFTER).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let content_types = response
        .headers()
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .collect();
    let collected = response.into_body().collect().await.map_err(|e| kube::Error::Service(e.into()))?;
    let body = serde_json::from_slice(&collected.to_bytes()).unwrap_or(serde_json::Value::Null);
    Ok(Answer { status, retry_after, content_types, body })
}

/// Whether `client`'s replica answers /readyz with 200.
pub async fn is_ready(client: &kube::Client) -> bool {
    request(client, http::Method::GET, "/readyz", None).await.is_ok_and(|answer| answer.status == 200)
}

/// Waits (at most `timeout`, asking every 100 ms) until `client`'s replica [`is_ready`]; whether
/// it became so.
pub async fn wait_ready(client: &kube::Client, timeout: Duration) -> bool {
    let ready = async {
        while !is_ready(client).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(timeout, ready).await.is_ok()
}

/// A GET by a client that retries a 503 with Retry-After every 100 ms until `deadline`, as
/// client-go's retries would: what a replica answers while it has not yet learnt who leads
/// after an election, or while the new leader's store is still being declared warm. Returns the
/// first other answer (or the last 503 at the deadline).
pub async fn read_retrying(
    client: &kube::Client,
    path: &str,
    deadline: tokio::time::Instant,
) -> Result<Answer, kube::Error> {
    loop {
        let answer = request(client, http::Method::GET, path, None).await?;
        let for_now = answer.status == 503 && answer.retry_after.is_some();
        if !for_now || tokio::time::Instant::now() >= deadline {
            return Ok(answer);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The longest wait between two attempts of [`write_retrying`], whatever Retry-After says.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(1);

/// A write by a client that retries on 503 as client-go does (after Retry-After, at most
/// [`MAX_RETRY_WAIT`]), until `deadline`. Returns the last answer and every 503 seen before it.
pub async fn write_retrying(
    client: &kube::Client,
    method: http::Method,
    path: &str,
    body: &serde_json::Value,
    deadline: tokio::time::Instant,
) -> Result<(Answer, Vec<Answer>), kube::Error> {
    let mut refusals = Vec::new();
    loop {
        let answer = request(client, method.clone(), path, Some(body)).await?;
        if answer.status != 503 || tokio::time::Instant::now() >= deadline {
            return Ok((answer, refusals));
        }
        let wait = answer
            .retry_after
            .as_deref()
            .and_then(|seconds| seconds.parse::<u64>().ok())
            .map_or(MAX_RETRY_WAIT, Duration::from_secs)
            .min(MAX_RETRY_WAIT)
            // Retry-After has a resolution of a second; an election is usually shorter.
            .min(Duration::from_millis(200));
        refusals.push(answer);
        tokio::time::sleep(wait).await;
    }
}

/// A 2-zone NRT named `name`: 12 CPUs per zone, 10 allocatable, `available` free.
pub fn two_zone_nrt(name: &str, available: [i64; 2]) -> numaresources_api::nrt::NodeResourceTopology {
    use numaresources_api::nrt::{CostInfo, NodeResourceTopology, ResourceInfo, Zone};
    use numaresources_api::quantity::Quantity;
    let zone = |id: u32, free: i64| Zone {
        name: format!("node-{id}").into(),
        zone_type: "Node".into(),
        costs: (0..2)
            .map(|to| CostInfo { name: format!("node-{to}").into(), value: if to == id { 10 } else { 20 } })
            .collect(),
        resources: vec![ResourceInfo {
            name: "cpu".into(),
            capacity: Quantity::from_i64(12),
            allocatable: Quantity::from_i64(10),
            available: Quantity::from_i64(free),
        }],
        ..Zone::default()
    };
    let mut object = NodeResourceTopology::new(name);
    object.zones = vec![zone(0, available[0]), zone(1, available[1])];
    object
}

/// A [`two_zone_nrt`] named `name` whose attribute `sequence` carries `sequence` (so every write
/// changes it and a watcher can tell the writes apart).
pub fn nrt(name: &str, sequence: u64) -> serde_json::Value {
    let free = i64::try_from(sequence % 10).unwrap_or(0);
    let mut object = two_zone_nrt(name, [free, free]);
    object.attributes = vec![numaresources_api::nrt::AttributeInfo::new("sequence", sequence.to_string())];
    serde_json::to_value(object).unwrap_or_default()
}

/// The `sequence` attribute of an NRT (see [`nrt`]).
pub fn sequence_of(object: &serde_json::Value) -> Option<u64> {
    object["attributes"].as_array()?.iter().find(|a| a["name"] == "sequence")?["value"].as_str()?.parse().ok()
}
