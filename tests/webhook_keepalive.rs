//! Issue 29 (`docs/security.md#keep-alive-and-shutdown`): the webhook (the real
//! `llmscaler webhook` binary) never closes a keep-alive connection under a client that may be
//! writing a request on it. kube-apiserver's webhook client keeps idle HTTP/1.1 connections
//! 90 s and reuses them; a server that closes one earlier, or at shutdown, races the request
//! the API server writes at that moment (`write: broken pipe`, a refused `kubectl apply`).
//!
//! - A connection left idle past the request-head timeout is still open and served.
//! - After SIGTERM: an idle connection stays open and its next request is answered with
//!   `Connection: close`; a request in flight finishes with `Connection: close`; a new
//!   connection is still served; the process exits once every connection is closed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmscaler_certs::{CertConfig, CertState, pki};
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The request-head timeout of the webhook listener; before issue 29 it also closed idle
/// keep-alive connections.
const HEAD_TIMEOUT: Duration = llmscaler_webhooks::listener::WEBHOOK_LIMITS.header_read;

fn certs() -> CertState {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut cfg = CertConfig::new("llmscaler-system", "unused", "llmscaler-webhook");
    cfg.extra_sans = vec!["127.0.0.1".to_string()];
    pki::new_state(&cfg, time::OffsetDateTime::now_utc()).expect("certificates")
}

/// The real `llmscaler webhook` on a free loopback port, its log lines forwarded to the test's
/// stderr and to `log`; killed on drop.
struct Webhook {
    child: Child,
    addr: SocketAddr,
    log: tokio::sync::mpsc::UnboundedReceiver<String>,
    _dir: tempfile::TempDir,
}

impl Webhook {
    fn start(certs: &CertState) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, &certs.tls_cert_pem).expect("write cert");
        std::fs::write(&key, &certs.tls_key_pem).expect("write key");
        let mut child = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
            .args(["webhook", "--listen", "127.0.0.1:0"])
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start llmscaler webhook");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, log) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("webhook: {line}");
                let _ = tx.send(line);
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("first line");
        let addr = line
            .trim()
            .strip_prefix("listening on https://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("address");
        Self {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success(), "kill -TERM: {status}");
    }

    /// Waits for a log line containing `needle`; `None` when the log ends or after `limit`.
    async fn logged(&mut self, needle: &str, limit: Duration) -> Option<String> {
        tokio::time::timeout(limit, async {
            while let Some(line) = self.log.recv().await {
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
    }

    /// Waits up to `limit` for the process to exit; its status, or `None` if still running.
    async fn exited(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if start.elapsed() > limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 client connection over TLS (ALPN `http/1.1` only, like kube-apiserver's).
async fn connect(addr: SocketAddr, certs: &CertState) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(certs.ca_cert_pem.as_bytes()) {
        roots.add(cert.expect("ca")).expect("add ca");
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    connector.connect(name, tcp).await.expect("tls handshake")
}

/// A `POST /validate` head for a body of `len` bytes.
fn review_head(len: usize) -> String {
    format!(
        "POST /validate?timeout=10s HTTP/1.1\r\nHost: llmscaler-webhook.llmscaler-system.svc:443\r\n\
         Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
}

/// A body the webhook answers with `200` (an AdmissionReview it denies: a parse error).
const REVIEW: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"group":"autoscaling.modelsphere.dev","version":"v1alpha1","kind":"LLMScaler"},"resource":{"group":"autoscaling.modelsphere.dev","version":"v1alpha1","resource":"llmscalers"},"name":"a","namespace":"b","operation":"CREATE","userInfo":{"username":"u"},"object":{}}}"#;

/// One answer: status line and lower-cased headers, body read to its `Content-Length`.
#[derive(Debug)]
struct Answer {
    status: String,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one answer; `Err` with what was read when the connection closes before it is whole.
async fn read_answer<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Answer, String> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let status = lines.next().unwrap_or_default().to_string();
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let answer = Answer { status, headers };
            let len: usize = answer
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while data.len() < end + 4 + len {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return Err(format!("closed inside the body: {answer:?}")),
                    Ok(n) => data.extend_from_slice(&buf[..n]),
                }
            }
            return Ok(answer);
        }
        match stream.read(&mut buf).await {
            Ok(0) => {
                return Err(format!(
                    "connection closed before an answer (read {:?})",
                    String::from_utf8_lossy(&data)
                ));
            }
            Err(err) => return Err(format!("connection failed before an answer: {err}")),
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends one review and reads its answer.
async fn review(stream: &mut TlsStream<TcpStream>) -> Result<Answer, String> {
    let request = format!("{}{REVIEW}", review_head(REVIEW.len()));
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|err| format!("writing the request: {err}"))?;
    read_answer(stream).await
}

/// Whether the server closes `stream` within `limit` (reading EOF or an error); the time it
/// took. Reads nothing else: the connection is idle.
async fn closed_within<S: AsyncRead + Unpin>(stream: &mut S, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 256];
    match tokio::time::timeout(limit, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Some(start.elapsed()),
        Ok(Ok(n)) => panic!(
            "unexpected bytes on an idle connection: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(_) => None,
    }
}

/// The idle-boundary race, made deterministic: the API server keeps an idle connection 90 s and
/// may reuse it at any moment of that time. A connection idle for twice the head timeout (the
/// old idle limit) must still be open, and a request on it answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_outlives_the_head_timeout_and_is_reused() {
    let certs = certs();
    let webhook = Webhook::start(&certs);
    let mut conn = connect(webhook.addr, &certs).await;
    let first = review(&mut conn).await.expect("first review");
    assert!(first.status.starts_with("HTTP/1.1 200"), "{first:?}");
    assert_ne!(first.header("connection"), Some("close"), "{first:?}");

    let idle = 2 * HEAD_TIMEOUT;
    if let Some(after) = closed_within(&mut conn, idle).await {
        panic!(
            "the webhook closed an idle keep-alive connection after {after:?}; kube-apiserver keeps \
             it 90 s and a request it writes then fails with `write: broken pipe`"
        );
    }
    let reused = review(&mut conn)
        .await
        .unwrap_or_else(|err| panic!("reusing the connection after {idle:?} idle: {err}"));
    assert!(reused.status.starts_with("HTTP/1.1 200"), "{reused:?}");
}

/// The shutdown race, made deterministic: after SIGTERM, an idle connection stays open and a
/// request written on it is answered (`Connection: close`), an in-flight request finishes, a
/// new connection is served, and the process exits once all are closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_every_request_then_closes() {
    let certs = certs();
    let mut webhook = Webhook::start(&certs);
    // An idle keep-alive connection, as the API server leaves them between reviews.
    let mut idle = connect(webhook.addr, &certs).await;
    let first = review(&mut idle).await.expect("first review");
    assert!(first.status.starts_with("HTTP/1.1 200"), "{first:?}");
    // A request in flight: its head and half its body sent.
    let mut busy = connect(webhook.addr, &certs).await;
    let half = REVIEW.len() / 2;
    busy.write_all(format!("{}{}", review_head(REVIEW.len()), &REVIEW[..half]).as_bytes())
        .await
        .expect("head and half the body");
    busy.flush().await.expect("flush");

    webhook.terminate();
    // The server announces its drain; an old server closed the idle connection instead.
    {
        let drain = webhook.logged("draining the admission webhook", Duration::from_secs(5));
        tokio::pin!(drain);
        tokio::select! {
            line = &mut drain => {
                assert!(line.is_some(), "the webhook did not start draining after SIGTERM");
            }
            after = closed_within(&mut idle, Duration::from_secs(5)) => {
                panic!(
                    "the webhook closed an idle keep-alive connection {after:?} after SIGTERM: a \
                     request the API server writes on it then fails with `write: broken pipe`"
                );
            }
        }
    }

    // The pod may still be an endpoint somewhere: a new connection is accepted (served below).
    let mut late = connect(webhook.addr, &certs).await;

    // The in-flight request finishes and says the connection closes.
    busy.write_all(&REVIEW.as_bytes()[half..])
        .await
        .expect("rest of the body");
    let answer = read_answer(&mut busy).await.expect("in-flight answer");
    assert!(answer.status.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");
    assert!(
        closed_within(&mut busy, Duration::from_secs(5))
            .await
            .is_some()
    );

    // A request on the idle connection is answered, with `Connection: close`, then it closes.
    let answer = review(&mut idle)
        .await
        .expect("review on the idle connection");
    assert!(answer.status.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");
    assert!(
        closed_within(&mut idle, Duration::from_secs(5))
            .await
            .is_some()
    );

    // The new connection is served, with `Connection: close` too.
    let answer = review(&mut late).await.expect("review on a new connection");
    assert!(answer.status.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");
    assert!(
        closed_within(&mut late, Duration::from_secs(5))
            .await
            .is_some()
    );

    // No connection is left: the process exits on its own, well before the drain limit.
    let status = webhook.exited(Duration::from_secs(10)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "the webhook did not exit cleanly once every connection was closed: {status:?}"
    );
}
