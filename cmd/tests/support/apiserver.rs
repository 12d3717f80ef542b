//! `numaresources apiserver` on a free loopback port, for the `apiserver_*` and `standalone_*`
//! tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Process, address_in, numaresources};

/// A running `numaresources apiserver`, killed when dropped.
pub struct ApiServer {
    pub process: Process,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
}

impl ApiServer {
    /// Starts `numaresources apiserver` on 127.0.0.1 with a free port, certificates generated
    /// into `dir/certs`, and `flags`; returns once it listens.
    pub fn start(dir: &Path, flags: &[&str]) -> Self {
        let process = Process::spawn(
            numaresources(&["apiserver", "--bind-address", "127.0.0.1", "--secure-port", "0", "--health-port", "0"])
                .arg("--tls-cert-file")
                .arg(dir.join("missing.crt"))
                .arg("--tls-private-key-file")
                .arg(dir.join("missing.key"))
                .arg("--cert-dir")
                .arg(Self::cert_dir(dir))
                .args(flags),
        );
        let serving = process.wait_for(&["serving HTTPS", "address="]);
        Self { process, url: format!("https://{}", address_in(&serving)) }
    }

    /// Where [`ApiServer::start`] has the certificates generated.
    pub fn cert_dir(dir: &Path) -> PathBuf {
        dir.join("certs")
    }

    /// Sends SIGTERM and waits (at most 30 s) for a clean exit.
    pub fn stop(&mut self) {
        let status = self.process.terminate(Duration::from_secs(30));
        assert!(status.success(), "{status}");
    }
}
