//! A server on loopback and a raw HTTP/1.1 client for the tests that need a real socket: the
//! requests are written by hand so nothing in a client library smooths over what a hostile or
//! broken client sends.

use std::net::SocketAddr;
use std::sync::Arc;

use numaresources_apiserver::{Limits, router};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{BASE, PATIENCE, nrt};

/// The router with `limits`, served by hyper on 127.0.0.1.
pub async fn serve(limits: Limits) -> SocketAddr {
    let mut state = super::in_process::state();
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

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {:?}", String::from_utf8_lossy(&self.body)))
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

/// Creates [`nrt`] `name` (with 30 CPUs free).
pub async fn create(address: SocketAddr, name: &str) {
    let body = serde_json::to_vec(&nrt(name, 30)).unwrap();
    let answer = request(address, "POST", BASE, "content-type: application/json\r\n", &body).await;
    assert_eq!(answer.code, 201, "{:?}", String::from_utf8_lossy(&answer.body));
}

/// The server's `/metrics` text.
pub async fn metrics(address: SocketAddr) -> String {
    let answer = request(address, "GET", "/metrics", "", b"").await;
    assert_eq!(answer.code, 200);
    String::from_utf8(answer.body).unwrap()
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

/// One HTTP/1.1 exchange whose answer is read as it streams (a watch's, say).
pub struct Exchange {
    stream: TcpStream,
    received: Vec<u8>,
    closed: bool,
}

impl Exchange {
    pub async fn get(address: SocketAddr, path: &str) -> Self {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        Self { stream, received: Vec::new(), closed: false }
    }

    /// Reads until what was received contains `needle` (true) or the server closes the
    /// connection without sending it (false).
    pub async fn read_until(&mut self, needle: &str) -> bool {
        let found = |received: &[u8]| String::from_utf8_lossy(received).contains(needle);
        while !found(&self.received) && !self.closed {
            let mut buffer = [0u8; 4096];
            let read = tokio::time::timeout(PATIENCE, self.stream.read(&mut buffer))
                .await
                .unwrap_or_else(|_| panic!("nothing more within {PATIENCE:?}; waiting for {needle:?}"))
                .unwrap_or(0);
            self.closed = read == 0;
            self.received.extend_from_slice(&buffer[..read]);
        }
        found(&self.received)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.received).into_owned()
    }
}
