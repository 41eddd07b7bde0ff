//! `llmscaler backtest` on bad input (docs/backtest.md#errors): an unreachable Prometheus, a
//! 401 (the message names the server, never a header value from `--header-file` or the
//! environment), hostile bodies (oversized, malformed JSON, NaN and negative counters, more
//! series than the limit), a range over the step limit and a selector that is not label
//! matchers. Each ends with a clear message and exit status 1 or 2, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

mod support;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use support::TestServer;

const SCALER: &str = "apiVersion: autoscaling.modelsphere.dev/v1alpha1
kind: LLMScaler
metadata:
  name: chat
  namespace: inference
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  serverAddress: http://127.0.0.1:9090
  minReplicas: 1
  maxReplicas: 8
  metrics:
  - name: running
    query: avg(vllm:num_requests_running{app=\"vllm\"})
    target: \"3\"
";

const BASE: i64 = 1_793_577_600;
const SECRET: &str = "s3cr3t-token-value";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn backtest(url: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let scaler = dir.path().join("scaler.yaml");
    std::fs::write(&scaler, SCALER).unwrap();
    let headers = dir.path().join("headers");
    std::fs::write(&headers, format!("Authorization: Bearer {SECRET}\n")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .arg("backtest")
        .args(["--prometheus", url])
        .arg("--scaler")
        .arg(&scaler)
        .arg("--header-file")
        .arg(&headers)
        .args([
            "--from",
            "2026-11-02T00:00:00Z",
            "--to",
            "2026-11-02T01:00:00Z",
        ])
        .args(["--timeout-seconds", "5", "--quiet"])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains(SECRET) && !run.stdout.contains(SECRET),
        "a header value was echoed: {}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run
}

#[derive(Clone, Copy)]
enum Mode {
    Unauthorised,
    Oversized,
    Malformed,
    NanCounter,
    NegativeCounter,
    ManySeries,
}

const LOOKUP: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"inference","model_name":"m"},"value":[1793581200,"1"]}]}}"#;

fn matrix(value: &str) -> String {
    format!(
        r#"{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{"pod":"a"}},"values":[[{BASE},"1"],[{},"{value}"]]}}]}}}}"#,
        BASE + 60
    )
}

async fn answer(
    State(mode): State<Mode>,
    Query(_q): Query<std::collections::BTreeMap<String, String>>,
    uri: axum::http::Uri,
) -> Response {
    let range = uri.path().ends_with("query_range");
    let json = |body: String| {
        (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    };
    match mode {
        Mode::Unauthorised => (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
        Mode::Oversized => json(format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[],"pad":"{}"}}}}"#,
            "x".repeat(2 * 1024 * 1024)
        )),
        Mode::Malformed => json(r#"{"status":"success","data":{"resultType":"#.to_owned()),
        Mode::NanCounter if range => json(matrix("NaN")),
        Mode::NegativeCounter if range => json(matrix("-5")),
        Mode::ManySeries if range => {
            let series: Vec<String> = (0..2100)
                .map(|i| format!(r#"{{"metric":{{"pod":"p{i}"}},"values":[[{BASE},"1"]]}}"#))
                .collect();
            json(format!(
                r#"{{"status":"success","data":{{"resultType":"matrix","result":[{}]}}}}"#,
                series.join(",")
            ))
        }
        Mode::NanCounter | Mode::NegativeCounter | Mode::ManySeries => json(LOOKUP.to_owned()),
    }
}

async fn serve(mode: Mode) -> TestServer {
    let router = Router::new()
        .route("/api/v1/query", get(answer))
        .route("/api/v1/query_range", get(answer))
        .with_state(mode);
    TestServer::start(router).await
}

async fn run_blocking(
    url: String,
    extra: Vec<&'static str>,
    env: Vec<(&'static str, String)>,
) -> Run {
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        backtest(&url, &extra, &env)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_prometheus_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let run = run_blocking(url.clone(), vec![], vec![]).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("cannot reach Prometheus at {url}")),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_names_the_server_never_the_header() {
    let server = serve(Mode::Unauthorised).await;
    let env = vec![(
        "LLMSCALER_BACKTEST_HEADERS",
        format!("X-Scope-OrgID: {SECRET}\n"),
    )];
    let run = run_blocking(server.url(), vec![], env).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&server.url()) && run.stderr.contains("HTTP 401"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_are_bounded_and_named() {
    for (mode, want) in [
        (Mode::Oversized, "reply larger than 1048576 bytes"),
        (Mode::Malformed, "cannot be decoded"),
        (Mode::NanCounter, "returned NaN"),
        (Mode::NegativeCounter, "returned -5"),
        (Mode::ManySeries, "more than the limit of 2000"),
    ] {
        let server = serve(mode).await;
        let run = run_blocking(server.url(), vec![], vec![]).await;
        assert_eq!(run.code, 1, "{want}: {}", run.stderr);
        assert!(run.stderr.contains(want), "{want}: {}", run.stderr);
        assert!(
            run.stderr.contains("query `"),
            "names the query: {}",
            run.stderr
        );
        eprintln!("{}", run.stderr.trim());
    }
}

#[test]
fn a_range_over_the_limit_and_a_bad_selector_are_refused_before_any_request() {
    let url = "http://127.0.0.1:9";
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .args([
            "backtest",
            "--prometheus",
            url,
            "--since",
            "1000d",
            "--step",
            "60s",
        ])
        .arg("--scaler")
        .arg({
            let p = dir.path().join("s.yaml");
            std::fs::write(&p, SCALER).unwrap();
            p
        })
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("more than the limit of 100800"), "{stderr}");
    let run = backtest(url, &["--selector", "a=\"b\"} or vector(1"], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--selector"), "{}", run.stderr);
}
