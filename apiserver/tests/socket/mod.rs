//! A server on loopback and a raw HTTP/1.1 client for the tests that need a real socket: the
//! requests are written by hand so nothing in a client library smooths over what a hostile or
//! broken client sends. Shared by test binaries with `mod socket;`.

#![allow(dead_code)] // each test binary uses its own part

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use numaresources_apiserver::{AppState, Limits, Store, router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a test waits for what must happen before calling it a failure (a hang guard, not a
/// figure).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The router with `limits`, served by hyper on 127.0.0.1.
pub async fn serve(limits: Limits) -> SocketAddr {
    let mut state = AppState::new(Arc::new(Store::starting_at(1000, 100)), "0.1.0", "test");
    state.limits = limits;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(Arc::new(state))).await });
    address
}

/// An answer as read off the socket.
#[derive(Debug)]
pub struct RawAnswer {
    pub code: u16,
    /// The status line and headers.
    pub head: String,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl RawAnswer {
    /// The values of a header, in order.
    pub fn headers(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .filter_map(|l| l.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.trim().to_owned())
            .collect()
    }
}

/// Sends one request on a fresh connection (`connection: close`) and reads the answer to the end.
pub async fn request(address: SocketAddr, method: &str, path: &str, headers: &str, body: &[u8]) -> RawAnswer {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: {}\r\n{headers}\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        raw
    };
    let raw = tokio::time::timeout(PATIENCE, exchange).await.expect("the server answers");
    parse(&raw)
}

/// Splits a raw answer into its code, head and (de-chunked) body.
pub fn parse(raw: &[u8]) -> RawAnswer {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut answer = RawAnswer { code, head, body: raw[split + 4..].to_vec() };
    if answer.headers("transfer-encoding").iter().any(|t| t.eq_ignore_ascii_case("chunked")) {
        answer.body = dechunk(&answer.body);
    }
    answer
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 4 + size..];
    }
    out
}
