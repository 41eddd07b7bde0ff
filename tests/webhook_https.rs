//! `llmscaler webhook` over real TLS on loopback (issue 5): the binary serves certificates made
//! by `llmscaler-certs`, a rustls client trusts only the generated CA, and every check waits on
//! a condition with a deadline, never on a fixed sleep.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use llmscaler_certs::{CertConfig, CertState, pki};
use llmscaler_testkit::{Check, wait_for_every};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

fn init() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

fn cert_config() -> CertConfig {
    let mut cfg = CertConfig::new("llmscaler-system", "unused", "llmscaler-webhook");
    cfg.extra_sans = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    cfg
}

fn new_certs() -> CertState {
    pki::new_state(&cert_config(), time::OffsetDateTime::now_utc()).expect("certificates")
}

/// Writes a file the way the kubelet updates a Secret volume: a new file renamed into place.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// A running `llmscaler webhook`, killed on drop.
struct Webhook {
    child: Child,
    base: String,
    cert_file: PathBuf,
    key_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Webhook {
    fn start(certs: &CertState) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert_file = dir.path().join("tls.crt");
        let key_file = dir.path().join("tls.key");
        write_atomically(&cert_file, &certs.tls_cert_pem);
        write_atomically(&key_file, &certs.tls_key_pem);
        let mut child = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
            .args([
                "webhook",
                "--listen",
                "127.0.0.1:0",
                "--cert-reload-interval-ms",
                "100",
            ])
            .arg("--tls-cert-file")
            .arg(&cert_file)
            .arg("--tls-key-file")
            .arg(&key_file)
            // The binary's own defaults, whatever the environment sets.
            .env_remove("LLMSCALER_MIN_SYNC_PERIOD_SECONDS")
            .env_remove("LLMSCALER_MAX_REPLICAS_CAP")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start llmscaler webhook");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(DEADLINE)
            .expect("`listening on` line within the deadline");
        let base = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Self {
            child,
            base,
            cert_file,
            key_file,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn swap(&self, certs: &CertState) {
        // Key first, then certificate: in between the pair does not match and the server keeps
        // the old one, which is the point.
        write_atomically(&self.key_file, &certs.tls_key_pem);
        write_atomically(&self.cert_file, &certs.tls_cert_pem);
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(trusted_cas: &[&str]) -> reqwest::Client {
    let roots = trusted_cas
        .iter()
        .map(|pem| reqwest::Certificate::from_pem(pem.as_bytes()).expect("CA pem"));
    reqwest::Client::builder()
        .tls_certs_only(roots)
        .tls_info(true)
        .pool_max_idle_per_host(4)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

fn review(operation: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "e2c1f0b6-uid",
            "kind": {"group": "autoscaling.modelsphere.dev", "version": "v1alpha1", "kind": "LLMScaler"},
            "resource": {"group": "autoscaling.modelsphere.dev", "version": "v1alpha1", "resource": "llmscalers"},
            "name": "s",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "test"},
            "object": {
                "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
                "kind": "LLMScaler",
                "metadata": {"name": "s", "namespace": "default"},
                "spec": spec,
            },
            "oldObject": null,
        }
    })
}

fn spec(target: &str) -> Value {
    json!({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
        "serverAddress": "http://prometheus:9090",
        "minReplicas": 1,
        "maxReplicas": 4,
        "metrics": [{"query": "avg(vllm:num_requests_waiting)", "target": target}],
    })
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let response = client.post(url).json(body).send().await.expect("request");
    let status = response.status().as_u16();
    let body = response.json().await.expect("JSON body");
    (status, body)
}

async fn assert_served(client: &reqwest::Client, webhook: &Webhook) {
    let (status, body) = post(
        client,
        &webhook.url("/validate"),
        &review("CREATE", spec("2")),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

/// The shared-cluster defaults (docs/security.md#shared-cluster-defaults): with no policy flag,
/// admission refuses a 1 s sync period and a maxReplicas over 128, naming the fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_cluster_defaults_refuse_a_1s_sync_and_more_than_128_replicas() {
    init();
    let certs = new_certs();
    let webhook = Webhook::start(&certs);
    let client = client(&[&certs.ca_cert_pem]);
    let mut fast = spec("2");
    fast["syncPeriodSeconds"] = json!(1);
    fast["maxReplicas"] = json!(129);
    let (status, body) = post(&client, &webhook.url("/validate"), &review("CREATE", fast)).await;
    assert_eq!(status, 200);
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = body["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(
            "spec.syncPeriodSeconds: 1 is below the operator's minimum of 5 seconds \
             (--min-sync-period-seconds)"
        ),
        "{message}"
    );
    assert!(
        message.contains("spec.maxReplicas: 129 is over the operator's replica cap 128"),
        "{message}"
    );
    let mut at_the_bounds = spec("2");
    at_the_bounds["syncPeriodSeconds"] = json!(5);
    at_the_bounds["maxReplicas"] = json!(128);
    let (_, body) = post(
        &client,
        &webhook.url("/validate"),
        &review("CREATE", at_the_bounds),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_mutate_and_warnings_over_tls() {
    init();
    let certs = new_certs();
    let webhook = Webhook::start(&certs);
    let client = client(&[&certs.ca_cert_pem]);

    let health = client
        .get(webhook.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(health.text().await.expect("text"), "ok");

    assert_served(&client, &webhook).await;

    let (status, body) = post(
        &client,
        &webhook.url("/validate"),
        &review("UPDATE", spec("80%")),
    )
    .await;
    assert_eq!(status, 200);
    let response = &body["response"];
    assert_eq!(response["uid"], "e2c1f0b6-uid");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    let message = response["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("spec.metrics[0].target: \"80%\" is not a number"),
        "{message}"
    );

    let mut warned = spec("2");
    warned["preemption"] = json!({"enable": true});
    warned["metrics"][0]["query"] = json!("vllm:num_requests_waiting");
    let (_, body) = post(
        &client,
        &webhook.url("/validate"),
        &review("CREATE", warned),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true);
    assert_eq!(
        body["response"]["warnings"],
        json!([
            "spec.preemption is accepted but has no effect",
            "spec.metrics[0].query has no aggregation at its top; it must return exactly one series (wrap it in avg(...) or sum(...))"
        ])
    );

    let request = review("CREATE", spec("2"));
    let (status, body) = post(&client, &webhook.url("/mutate"), &request).await;
    assert_eq!(status, 200);
    assert_eq!(body["response"]["allowed"], true);
    assert_eq!(body["response"]["patchType"], "JSONPatch");
    let bytes: Vec<u8> = body["response"]["patch"]
        .as_array()
        .expect("patch bytes")
        .iter()
        .map(|b| b.as_u64().expect("byte") as u8)
        .collect();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("patch");
    let mut object = request["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).expect("patch applies");
    let mut want = spec("2");
    want["metricProvider"] = json!("Prometheus");
    want["syncPeriodSeconds"] = json!(15);
    want["retryPeriodSeconds"] = json!(10);
    want["scaleDown"] =
        json!({"stabilizationWindowSeconds": 0, "maxStepReplicas": 0, "behavior": "CacheAware"});
    assert_eq!(object["spec"], want);

    let (_, body) = post(
        &client,
        &webhook.url("/mutate"),
        &review("DELETE", spec("2")),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true);
    assert!(body["response"].get("patch").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_gets_4xx_and_the_next_request_is_served() {
    init();
    let certs = new_certs();
    let webhook = Webhook::start(&certs);
    let client = client(&[&certs.ca_cert_pem]);
    let huge = vec![b'x'; 10 * 1024 * 1024];
    let wrong_kind = json!({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {}});
    let v1beta1 = {
        let mut r = review("CREATE", spec("2"));
        r["apiVersion"] = json!("admission.k8s.io/v1beta1");
        r
    };
    let cases: Vec<(&str, &str, Vec<u8>, u16)> = vec![
        ("empty body", "application/json", vec![], 400),
        (
            "not JSON",
            "application/json",
            b"{\"apiVersion\":".to_vec(),
            400,
        ),
        (
            "JSON but not a review",
            "application/json",
            b"[1,2,3]".to_vec(),
            400,
        ),
        (
            "wrong kind",
            "application/json",
            wrong_kind.to_string().into_bytes(),
            400,
        ),
        (
            "v1beta1 review",
            "application/json",
            v1beta1.to_string().into_bytes(),
            400,
        ),
        ("10 MB body", "application/json", huge.clone(), 413),
        (
            "wrong content type",
            "text/plain",
            review("CREATE", spec("2")).to_string().into_bytes(),
            415,
        ),
        (
            "10 MB of the wrong type",
            "application/octet-stream",
            huge,
            413,
        ),
    ];
    for (name, content_type, body, want) in cases {
        for path in ["/validate", "/mutate"] {
            let response = client
                .post(webhook.url(path))
                .header("content-type", content_type)
                .body(body.clone())
                .send()
                .await
                .unwrap_or_else(|e| panic!("{name} {path}: {e}"));
            assert_eq!(response.status().as_u16(), want, "{name} {path}");
            let status: Value = response.json().await.expect("JSON error body");
            assert_eq!(status["kind"], "Status", "{name}");
            assert_eq!(status["code"], want, "{name}");
            assert!(status["message"].as_str().is_some_and(|m| !m.is_empty()));
            assert_served(&client, &webhook).await;
        }
    }
    let wrong_method = client
        .get(webhook.url("/validate"))
        .send()
        .await
        .expect("GET");
    assert_eq!(wrong_method.status().as_u16(), 405);
    assert_served(&client, &webhook).await;
}

fn tls_client(ca_pem: &str, version: &'static rustls::SupportedProtocolVersion) -> reqwest::Client {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("pem"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_protocol_versions(&[version])
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .build()
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_and_tls13_are_both_served() {
    init();
    let certs = new_certs();
    let webhook = Webhook::start(&certs);
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let client = tls_client(&certs.ca_cert_pem, version);
        assert_served(&client, &webhook).await;
    }
}

/// The certificate the server presents on a new connection.
async fn served_certificate(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let response = client.get(url).send().await.map_err(|e| e.to_string())?;
    let info = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .map(<[u8]>::to_vec);
    info.ok_or_else(|| "no TLS info".to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_swap_during_a_stream_of_requests_fails_none() {
    init();
    let old = new_certs();
    let new = new_certs();
    assert_ne!(old.ca_cert_pem, new.ca_cert_pem);
    let webhook = Arc::new(Webhook::start(&old));
    let both = [old.ca_cert_pem.as_str(), new.ca_cert_pem.as_str()];

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut streams = Vec::new();
    // Two keep-alive streams and one that opens a new connection for every request.
    for fresh_connections in [false, false, true] {
        let (stop, ok, failed, webhook) =
            (stop.clone(), ok.clone(), failed.clone(), webhook.clone());
        let keep_alive = client(&both);
        let cas: Vec<String> = both.iter().map(|s| (*s).to_string()).collect();
        streams.push(tokio::spawn(async move {
            let body = review("CREATE", spec("2"));
            while !stop.load(Ordering::Relaxed) {
                let client = if fresh_connections {
                    client(&cas.iter().map(String::as_str).collect::<Vec<_>>())
                } else {
                    keep_alive.clone()
                };
                let result = client
                    .post(webhook.url("/validate"))
                    .json(&body)
                    .send()
                    .await;
                match result {
                    Ok(r) if r.status().as_u16() == 200 => match r.json::<Value>().await {
                        Ok(v) if v["response"]["allowed"] == true => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        other => failed.lock().expect("lock").push(format!("{other:?}")),
                    },
                    other => failed.lock().expect("lock").push(format!("{other:?}")),
                }
            }
        }));
    }
    let wait_for_requests = |at_least: usize| {
        let ok = ok.clone();
        async move {
            let what = format!("{at_least} admitted requests (the streams stalled)");
            wait_for_every(&what, DEADLINE, POLL, || {
                let admitted = ok.load(Ordering::Relaxed);
                async move {
                    Ok(if admitted >= at_least {
                        Check::Done(())
                    } else {
                        Check::NotYet(format!("{admitted} admitted"))
                    })
                }
            })
            .await
            .expect("requests admitted");
        }
    };
    wait_for_requests(50).await;

    let old_leaf = served_certificate(&client(&[&old.ca_cert_pem]), &webhook.url("/healthz"))
        .await
        .expect("old certificate served");
    webhook.swap(&new);
    let new_only = client(&[&new.ca_cert_pem]);
    let url = webhook.url("/healthz");
    let new_leaf = wait_for_every("the new certificate served", DEADLINE, POLL, || async {
        Ok(match served_certificate(&new_only, &url).await {
            Ok(leaf) => Check::Done(leaf),
            Err(err) => Check::NotYet(err),
        })
    })
    .await
    .expect("new certificate");
    assert_ne!(new_leaf, old_leaf);
    let swapped_at = ok.load(Ordering::Relaxed);
    wait_for_requests(swapped_at + 50).await;
    stop.store(true, Ordering::Relaxed);
    for stream in streams {
        stream.await.expect("stream task");
    }
    let failed = failed.lock().expect("lock").clone();
    assert!(
        failed.is_empty(),
        "{} failed requests: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    // A fresh client that trusts only the old CA is now refused.
    assert!(
        served_certificate(&client(&[&old.ca_cert_pem]), &webhook.url("/healthz"))
            .await
            .is_err()
    );
    eprintln!(
        "{} requests, none failed, across the swap",
        ok.load(Ordering::Relaxed)
    );
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    init();
    let certs = new_certs();
    let mut webhook = Webhook::start(&certs);
    let status = Command::new("kill")
        .args(["-TERM", &webhook.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + DEADLINE;
    let exit = loop {
        if let Some(exit) = webhook.child.try_wait().expect("try_wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        std::thread::sleep(POLL);
    };
    assert!(exit.success(), "{exit}");
}

#[test]
fn unusable_certificate_files_fail_at_start_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, "not a certificate").expect("write");
    std::fs::write(&key, new_certs().tls_key_pem).expect("write");
    for (cert_arg, want) in [
        (cert.clone(), "tls.crt"),
        (dir.path().join("missing.crt"), "missing.crt"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
            .args(["webhook", "--listen", "127.0.0.1:0"])
            .arg("--tls-cert-file")
            .arg(&cert_arg)
            .arg("--tls-key-file")
            .arg(&key)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{stderr}");
    }
}
