//! The direct write path: the contract between the exporter (`numaresources rte`), the API
//! server and the controllers that render both.
//!
//! Exporters publish their NodeResourceTopology to our API server's Service directly instead of
//! through kube-apiserver's aggregator, which would otherwise terminate TLS, authenticate,
//! authorize and proxy every write. The exporter proves who it is with a projected
//! ServiceAccount token whose audience is ours alone, so the token is useless against
//! kube-apiserver; our server reviews it with that audience (TokenReview) and lets a bound pod
//! write only the object of the node it runs on.

/// The exporter's flag (and, as `NUMARESOURCES_NRT_SERVER`, environment variable) naming our
/// API server's base URL, e.g. `https://numaresources-apiserver.numaresources.svc:443`.
/// Absent: the exporter publishes through kube-apiserver.
pub const NRT_SERVER_FLAG: &str = "--nrt-server";

/// The exporter's flag naming the host name our server's certificate is checked against, when
/// it differs from `--nrt-server`'s host (as kubeconfig's `tls-server-name`). The exporters
/// write through [`WRITE_SERVICE`], whose name the serving certificate need not carry (OLM's
/// and service-ca's certificates name only the Service they were issued for), so they check
/// the certificate against the Service the APIService uses.
pub const NRT_SERVER_TLS_NAME_FLAG: &str = "--nrt-server-tls-name";

/// The exporter's flag naming the plain-HTTP base URL of our server's admin port through
/// [`WRITE_SERVICE`] (`http://<write Service>:<ADMIN_PORT>`), where it asks every few seconds
/// whether the server holds its node's object ([`held_path`]). The agent publishes only on
/// change and at its heartbeat (a minute apart), so after a cold start (every replica
/// restarted, the store empty) an unchanged node's object would come back only at its next
/// heartbeat; asked, the agent publishes again within seconds. The same question notices an
/// object deleted by hand. Plain HTTP without a token: a question costs the server tens of
/// microseconds where one over TLS would cost a handshake, and the answer tells nothing but
/// whether a node's object exists.
pub const NRT_SERVER_ADMIN_URL_FLAG: &str = "--nrt-server-admin-url";

/// The API server's plain-HTTP admin port: `/metrics`, the probes, and [`held_path`].
pub const ADMIN_PORT: u16 = 8081;

/// The admin port's path prefix of the question "do you hold this node's object?": `200` with
/// [`HELD`], `404` with [`NOT_HELD`] (publish again), anything else: this replica cannot tell
/// (it is not in sync with the leader, or predates the question; ask again later). The bodies
/// are part of the answer: a server without the route answers a bare `404` too, which must not
/// make a fleet republish every few seconds.
pub const HELD_PATH_PREFIX: &str = "/held-topologies/";
/// The body of a `200` answer to [`held_path`].
pub const HELD: &str = "held";
/// The body of a `404` answer to [`held_path`].
pub const NOT_HELD: &str = "not held";

/// The question for `node`'s object ([`HELD_PATH_PREFIX`]).
pub fn held_path(node: &str) -> String {
    format!("{HELD_PATH_PREFIX}{node}")
}

/// The exporter's flag naming the PEM bundle that verifies our server's certificate.
pub const NRT_SERVER_CA_FILE_FLAG: &str = "--nrt-server-ca-file";

/// The exporter's flag naming the projected token file it presents (re-read on every refresh,
/// since the kubelet rotates it).
pub const NRT_TOKEN_FILE_FLAG: &str = "--nrt-token-file";

/// The audience of the projected token. kube-apiserver's own audience differs, so a stolen
/// token of this audience cannot be replayed against it.
pub const TOKEN_AUDIENCE: &str = "numaresources-apiserver";

/// How long the kubelet makes the projected token live before rotating it (the minimum
/// kube-apiserver accepts is 10 minutes).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// Where the rendered DaemonSet mounts the projected token and the CA bundle.
pub const TOKEN_MOUNT_DIR: &str = "/var/run/secrets/numaresources/nrt-server";
/// The file names inside [`TOKEN_MOUNT_DIR`].
pub const TOKEN_FILE_NAME: &str = "token";
pub const CA_FILE_NAME: &str = "ca.crt";

/// The TokenReview extras a bound service-account token carries (kube-apiserver sets them for
/// pod-bound tokens; `node-name` only from 1.30 with the pod-node token feature).
pub const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";

/// The Service the exporters write through: the API server's pods like the Service the
/// APIService uses, but with `publishNotReadyAddresses`, so that a replica that is not Ready
/// yet still gets the writes that will make it Ready. A cold store (every replica restarted)
/// is warm only once the exporters have written to it; through a Service that routes only to
/// Ready pods they never could, and neither through kube-apiserver, whose APIService is
/// unavailable meanwhile. Reads and the APIService keep the Ready-gated Service.
pub const WRITE_SERVICE: &str = "numaresources-apiserver-writes";

/// The base URL of our API server's Service, as the controllers render it.
pub fn service_url(service: &str, namespace: &str) -> String {
    format!("https://{}:443", service_host(service, namespace))
}

/// The admin port's base URL through the Service `service` ([`NRT_SERVER_ADMIN_URL_FLAG`]).
pub fn admin_url(service: &str, namespace: &str) -> String {
    format!("http://{}:{ADMIN_PORT}", service_host(service, namespace))
}

/// The DNS name of a Service inside the cluster (what serving certificates name).
pub fn service_host(service: &str, namespace: &str) -> String {
    format!("{service}.{namespace}.svc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_url_names_the_service_in_its_namespace() {
        assert_eq!(
            service_url("numaresources-apiserver", "numaresources"),
            "https://numaresources-apiserver.numaresources.svc:443"
        );
    }
}
