//! What the direct-write tests and the TLS cost bench share: the kube-apiserver double and our
//! server over real TLS with its clients.

pub mod fleet;
pub mod kube_double;
pub mod tls;
