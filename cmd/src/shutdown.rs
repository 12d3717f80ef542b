//! Graceful shutdown on SIGTERM (what the kubelet sends) or Ctrl-C: the runtime's
//! ([`numaresources_certs::shutdown`]), for the subcommands not yet wired through it directly.

/// Completes when the process is asked to stop.
pub async fn signal() {
    numaresources_certs::shutdown::Shutdown::on_signals().signaled().await;
}
