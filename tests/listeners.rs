//! Issue 11, item 4 (`docs/security.md#listeners`): the webhook's HTTPS listener (the real
//! `llmscaler webhook` binary) and the operator's `/metrics` listener cut off a client that
//! trickles one byte a second within 10 s, while other clients are served meanwhile; an idle
//! keep-alive connection is closed; past the connection limit a client gets 503.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmscaler_certs::{CertConfig, CertState, pki};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client must be cut off within this.
const CUT_OFF: Duration = Duration::from_secs(10);

fn init() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

fn certs() -> CertState {
    let mut cfg = CertConfig::new("llmscaler-system", "unused", "llmscaler-webhook");
    cfg.extra_sans = vec!["127.0.0.1".to_string()];
    pki::new_state(&cfg, time::OffsetDateTime::now_utc()).expect("certificates")
}

/// The real `llmscaler webhook` on a free loopback port, killed on drop.
struct Webhook {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Webhook {
    fn start(certs: &CertState) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        std::fs::write(&cert, &certs.tls_cert_pem).expect("write cert");
        std::fs::write(&key, &certs.tls_key_pem).expect("write key");
        let mut child = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
            .args(["webhook", "--listen", "127.0.0.1:0"])
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start llmscaler webhook");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
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
            _dir: dir,
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `bytes` one per second until the peer closes (a write or a read fails or reads EOF);
/// returns how long the peer took to close, or `None` when it never did within 3 × `CUT_OFF`.
async fn trickle<S>(mut stream: S, bytes: &[u8]) -> Option<Duration>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let start = Instant::now();
    let mut buf = [0u8; 256];
    for byte in bytes.iter().cycle() {
        if start.elapsed() > 3 * CUT_OFF {
            return None;
        }
        if stream.write_all(&[*byte]).await.is_err() || stream.flush().await.is_err() {
            return Some(start.elapsed());
        }
        // Wait one second for the peer to say something (it should only ever close).
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => return Some(start.elapsed()),
            Err(_) => {}
        }
    }
    None
}

/// Requests `url` every 200 ms until `stop`; returns (served, failed).
async fn keep_asking(
    client: reqwest::Client,
    url: String,
    stop: Arc<tokio::sync::Notify>,
) -> (u32, u32) {
    let (mut ok, mut failed) = (0, 0);
    loop {
        tokio::select! {
            () = stop.notified() => return (ok, failed),
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        match client.get(&url).send().await {
            Ok(r) if r.status().is_success() => ok += 1,
            _ => failed += 1,
        }
    }
}

fn tls_client_config(ca_pem: &str) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("ca")).expect("add ca");
    }
    rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

use rustls::pki_types::pem::PemObject;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_cuts_off_tricklers_and_serves_others() {
    init();
    let certs = certs();
    let webhook = Webhook::start(&certs);
    let ca = reqwest::Certificate::from_pem(certs.ca_cert_pem.as_bytes()).expect("ca");
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let url = format!("https://{}/healthz", webhook.addr);
    let stop = Arc::new(tokio::sync::Notify::new());
    let others = tokio::spawn(keep_asking(client, url, stop.clone()));

    // 1. A trickler inside the TLS handshake (a ClientHello-like prefix, a byte a second).
    let tcp = TcpStream::connect(webhook.addr).await.expect("connect");
    let handshake = tokio::spawn(trickle(tcp, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]));

    // 2. A trickler of an HTTP request head over an established TLS session.
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(tls_client_config(&certs.ca_cert_pem)));
    let tcp = TcpStream::connect(webhook.addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = connector.connect(name, tcp).await.expect("tls handshake");
    let head = tokio::spawn(trickle(
        tls,
        b"POST /validate HTTP/1.1\r\nHost: x\r\nX-Slow: ",
    ));

    // 3. A trickler of a request body.
    let tcp = TcpStream::connect(webhook.addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector.connect(name, tcp).await.expect("tls handshake");
    tls.write_all(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
    )
    .await
    .expect("head");
    let body = tokio::spawn(trickle(tls, b"{\"a\":"));

    for (what, task) in [("handshake", handshake), ("head", head), ("body", body)] {
        let took = task.await.expect("trickler task");
        eprintln!("webhook {what} trickler cut off after {took:?}");
        assert!(
            took.is_some_and(|t| t <= CUT_OFF),
            "{what} trickler held the connection: {took:?}"
        );
    }
    stop.notify_one();
    let (ok, failed) = others.await.expect("other client");
    eprintln!("other client meanwhile: {ok} served, {failed} failed");
    assert!(ok >= 10 && failed == 0, "{ok} served, {failed} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_listener_cuts_off_tricklers_idles_and_limits_connections() {
    init();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    let limits = llmscaler_webhooks::listener::Limits {
        max_connections: 3,
        ..llmscaler_webhooks::listener::METRICS_LIMITS
    };
    let stop_server = Arc::new(tokio::sync::Notify::new());
    let stopper = stop_server.clone();
    let server = tokio::spawn(llmscaler_webhooks::listener::serve_plain(
        listener,
        router,
        limits,
        async move { stopper.notified().await },
        Duration::from_secs(1),
    ));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(1)
        .build()
        .expect("client");
    let url = format!("http://{addr}/healthz");
    let stop = Arc::new(tokio::sync::Notify::new());
    let others = tokio::spawn(keep_asking(client, url.clone(), stop.clone()));

    let tcp = TcpStream::connect(addr).await.expect("connect");
    let head = tokio::spawn(trickle(
        tcp,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",
    ));
    let took = head.await.expect("trickler");
    eprintln!("metrics head trickler cut off after {took:?}");
    assert!(took.is_some_and(|t| t <= CUT_OFF), "{took:?}");

    // An idle keep-alive connection is closed too (the header-read timeout runs between
    // requests).
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let start = Instant::now();
    let mut buf = vec![0u8; 4096];
    let mut closed = false;
    while start.elapsed() < 3 * CUT_OFF {
        match tokio::time::timeout(CUT_OFF, idle.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(_)) => {}
            Err(_) => break,
        }
    }
    eprintln!(
        "idle keep-alive connection closed after {:?}",
        start.elapsed()
    );
    assert!(
        closed && start.elapsed() <= CUT_OFF + Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );

    stop.notify_one();
    let (ok, failed) = others.await.expect("other client");
    eprintln!("other client meanwhile: {ok} served, {failed} failed");
    assert!(ok >= 10 && failed == 0, "{ok} served, {failed} failed");

    // Connection limit: three open connections hold every slot; a fourth gets 503.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = TcpStream::connect(addr).await.expect("connect");
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("req");
        let n = c.read(&mut buf).await.expect("reply");
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        held.push(c);
    }
    let reply = reqwest::get(&url).await.expect("fourth");
    assert_eq!(reply.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    drop(held);
    stop_server.notify_one();
    server.await.expect("server task").expect("served");
}

/// Reads one short answer on `stream` (a `/healthz` head and body fit one read).
async fn healthz(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.expect("answer");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Waits up to `limit` for the peer to close `stream` (EOF or an error); how long it took.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 256];
    match tokio::time::timeout(limit, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Some(start.elapsed()),
        Ok(Ok(n)) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(_) => None,
    }
}

/// Issue 29 (`docs/security.md#keep-alive-and-shutdown`): the idle keep-alive limit and the
/// request-head limit are separate. A connection idle past the head limit is reused; a head
/// trickled on it afterwards is still cut at the head limit from its first byte; an idle
/// connection is closed at the idle limit, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_limit_and_head_limit_are_separate() {
    init();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    let limits = llmscaler_webhooks::listener::Limits {
        header_read: Duration::from_secs(1),
        idle: Duration::from_secs(4),
        ..llmscaler_webhooks::listener::METRICS_LIMITS
    };
    tokio::spawn(llmscaler_webhooks::listener::serve_plain(
        listener,
        router,
        limits,
        std::future::pending(),
        Duration::from_secs(1),
    ));

    let mut conn = TcpStream::connect(addr).await.expect("connect");
    assert!(healthz(&mut conn).await.starts_with("HTTP/1.1 200"));
    let idle = 2 * limits.header_read;
    let closed = closed_within(&mut conn, idle).await;
    assert!(closed.is_none(), "closed after {closed:?} idle");
    assert!(healthz(&mut conn).await.starts_with("HTTP/1.1 200"));
    // A head trickled a byte every 200 ms after that: cut about 1 s after its first byte.
    let start = Instant::now();
    let mut cut = None;
    for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa".iter() {
        if conn.write_all(&[*byte]).await.is_err() {
            cut = Some(start.elapsed());
            break;
        }
        if closed_within(&mut conn, Duration::from_millis(200))
            .await
            .is_some()
        {
            cut = Some(start.elapsed());
            break;
        }
    }
    eprintln!("trickled head after a reuse cut after {cut:?}");
    assert!(
        cut.is_some_and(|t| t <= limits.header_read + Duration::from_secs(1)),
        "{cut:?}"
    );

    let mut idle_conn = TcpStream::connect(addr).await.expect("connect");
    assert!(healthz(&mut idle_conn).await.starts_with("HTTP/1.1 200"));
    let closed = closed_within(&mut idle_conn, 3 * limits.idle).await;
    eprintln!("idle connection closed after {closed:?}");
    assert!(
        closed.is_some_and(|t| t >= limits.idle - Duration::from_millis(500)
            && t <= limits.idle + Duration::from_secs(1)),
        "{closed:?}"
    );
}
