//! `llmscaler backtest` against a real Prometheus holding history (docs/backtest.md): a fleet
//! run by the load model under an HPA on a day (a week: `#[ignore]`d, timed in
//! docs/benchmarks/backtest.md) of the Azure conversation trace tiled with a daily shape, written
//! as vLLM-like and kube-state-metrics-like series in OpenMetrics, backfilled with `promtool tsdb
//! create-blocks-from openmetrics`, served by `/usr/bin/prometheus`; then the real binary reads
//! it back. Checks: the rebuilt per-minute arrivals and mean sizes are within 5 % of the source,
//! the replay of the rebuilt trace is within 10 % in replica-hours and 1 point of attainment of
//! the replay of the source trace, "as it ran" matches the history's GPU-hours exactly, a gap is
//! reported, selectors matching no or several workloads are refused.
//!
//! Trace data: Microsoft Azure, "Azure LLM inference trace 2023" (CC BY 4.0); Patel et al.,
//! "Splitwise", ISCA 2024. The series written here derive from it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use llmscaler::simulate::compare::{self, Extras};
use llmscaler::simulate::policies::{HpaPolicy, shapes};
use llmscaler::simulate::replay::{self, Observer, Settings};
use llmscaler_loadmodel::replica::TTFT_BUCKETS_S;
use llmscaler_loadmodel::{Params, Profile, Request};

const SCALER: &str = "apiVersion: autoscaling.modelsphere.dev/v1alpha1
kind: LLMScaler
metadata:
  name: chat
  namespace: inference
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  serverAddress: http://127.0.0.1:9090
  minReplicas: 1
  maxReplicas: 24
  metrics:
  - name: running
    query: avg(vllm:num_requests_running{app=\"vllm\"})
    target: \"3\"
  - name: waiting
    query: avg(vllm:num_requests_waiting{app=\"vllm\"}) or vector(0)
    target: \"1\"
  scaleDown:
    stabilizationWindowSeconds: 300
";

/// A small, slow model: 4 sequences at a time, ~0.3 s prefill of a typical prompt, ~10 s per
/// request: a replica serves ~0.4 requests per second, so the trace needs several replicas.
const PROFILE: &str = "maxNumSeqs: 4
prefillTokensPerSecond: 4000
stepBaseSeconds: 0.03
stepPerSeqSeconds: 0.005
";

/// Range start: 2026-11-02T00:00:00Z (in the past, whole days).
const BASE: i64 = 1_793_577_600;
const STEP: i64 = 60;
const MODEL: &str = "chat-model";
/// A gap in the vLLM series (Prometheus could not scrape): minutes [GAP_FROM, GAP_TO).
const GAP_FROM: i64 = 600;
const GAP_TO: i64 = 610;

/// vLLM's 1-2-5 buckets of the request size histograms (up to a 8,192-token model length).
const SIZE_BUCKETS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn profile() -> Profile {
    Profile::parse(PROFILE, "<test>").unwrap()
}

fn scaler() -> llmscaler_api::LLMScaler {
    serde_yaml::from_str(SCALER).unwrap()
}

/// `days` of the conversation trace's hour tiled, each hour thinned by a daily shape (0.08 at
/// night to 0.4 at midday), seeded.
fn source_trace(days: usize) -> Vec<Request> {
    let file = std::fs::File::open(root().join("traces/azure-llm-2023/conv.csv")).unwrap();
    let hour = llmscaler_loadmodel::trace::read_azure(file).unwrap();
    let mut out = Vec::new();
    for h in 0..days * 24 {
        let phase = (h % 24) as f64 / 24.0 * std::f64::consts::TAU;
        let factor = 0.08 + 0.32 * (1.0 - phase.cos()) / 2.0;
        for r in llmscaler_loadmodel::trace::scale(&hour, factor, h as u64 + 1) {
            if r.arrival_s < 3600.0 {
                out.push(Request {
                    arrival_s: r.arrival_s + h as f64 * 3600.0,
                    ..r
                });
            }
        }
    }
    out.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    out
}

fn settings(tail_s: f64) -> Settings {
    Settings {
        params: profile().apply(Params {
            slo_ttft_s: 2.0,
            drain_s: 0.0,
            ..Params::default()
        }),
        startup_ms: 90_000,
        scrape_interval_ms: 15_000,
        tail_ms: (tail_s * 1000.0) as i64,
        labels: vec![
            ("namespace".into(), "inference".into()),
            ("app".into(), "vllm".into()),
            ("job".into(), "vllm".into()),
        ],
    }
}

/// One OpenMetrics family being written: its `# TYPE` line and its samples.
struct Family {
    file: std::io::BufWriter<std::fs::File>,
}

/// Per-pod cumulative size histograms (bucket counts by index, sum, count).
#[derive(Default, Clone)]
struct SizeHist {
    buckets: Vec<u64>,
    sum: u64,
    count: u64,
}

impl SizeHist {
    fn add(&mut self, tokens: u32) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; SIZE_BUCKETS.len() + 1];
        }
        let i = SIZE_BUCKETS
            .iter()
            .position(|b| f64::from(tokens) <= *b)
            .unwrap_or(SIZE_BUCKETS.len());
        self.buckets[i] += 1;
        self.sum += u64::from(tokens);
        self.count += 1;
    }
}

fn le_text(b: f64) -> String {
    format!("{b:.1}")
}

/// Writes the history of the fleet (an HPA on `requests`) as OpenMetrics into `path`, plus a
/// second workload in another namespace; returns the HPA's spec replica-seconds.
fn write_history(requests: &[Request], days: usize, path: &Path, dir: &Path) -> f64 {
    let span = (days * 86_400) as f64;
    let last = requests.last().unwrap().arrival_s;
    let s = settings(span - last);
    let spec = scaler().spec;
    let mut policy = HpaPolicy::new(&spec, shapes(&spec).unwrap());
    let names = [
        ("vllm:request_prompt_tokens", "histogram"),
        ("vllm:request_generation_tokens", "histogram"),
        ("vllm:time_to_first_token_seconds", "histogram"),
        ("vllm:num_requests_running", "gauge"),
        ("kube_deployment_spec_replicas", "gauge"),
        ("kube_deployment_status_replicas_ready", "gauge"),
    ];
    let mut families: BTreeMap<&str, Family> = names
        .iter()
        .map(|(name, kind)| {
            let file = std::fs::File::create(dir.join(name.replace(':', "_"))).unwrap();
            let mut file = std::io::BufWriter::new(file);
            writeln!(file, "# TYPE {name} {kind}").unwrap();
            (*name, Family { file })
        })
        .collect();
    let mut prompt: BTreeMap<String, SizeHist> = BTreeMap::new();
    let mut output: BTreeMap<String, SizeHist> = BTreeMap::new();
    let mut next = 0usize;
    let mut pending: Vec<Request> = Vec::new();
    let mut turn = 0usize;
    let mut look = |t_ms: i64, cluster: &replay::Cluster| {
        let t_s = t_ms as f64 / 1000.0;
        let ts = BASE + t_ms / 1000;
        while next < requests.len() && requests[next].arrival_s <= t_s {
            pending.push(requests[next]);
            next += 1;
        }
        let pods = cluster.fleet().metrics_alive();
        let minute = t_ms / 60_000;
        let in_gap = (GAP_FROM..GAP_TO).contains(&minute);
        if !pods.is_empty() && !in_gap {
            for r in pending.drain(..) {
                let pod = &pods[turn % pods.len()].name;
                turn += 1;
                prompt.entry(pod.clone()).or_default().add(r.prompt_tokens);
                output
                    .entry(pod.clone())
                    .or_default()
                    .add(r.output_tokens.max(1));
            }
        }
        let ksm = "namespace=\"inference\",deployment=\"vllm\"";
        let f = families.get_mut("kube_deployment_spec_replicas").unwrap();
        writeln!(
            f.file,
            "kube_deployment_spec_replicas{{{ksm}}} {} {ts}",
            cluster.spec_replicas()
        )
        .unwrap();
        let f = families
            .get_mut("kube_deployment_status_replicas_ready")
            .unwrap();
        writeln!(
            f.file,
            "kube_deployment_status_replicas_ready{{{ksm}}} {} {ts}",
            cluster.ready_replicas()
        )
        .unwrap();
        if in_gap {
            return;
        }
        for m in &pods {
            let labels = format!(
                "namespace=\"inference\",job=\"vllm\",pod=\"vllm-{}\",engine=\"0\",model_name=\"{MODEL}\"",
                m.name
            );
            for (name, hist) in [
                ("vllm:request_prompt_tokens", prompt.get(&m.name)),
                ("vllm:request_generation_tokens", output.get(&m.name)),
            ] {
                let h = hist.cloned().unwrap_or_default();
                let f = families.get_mut(name).unwrap();
                let mut cumulative = 0;
                let mut text = String::new();
                for (i, b) in SIZE_BUCKETS
                    .iter()
                    .map(|b| le_text(*b))
                    .chain(["+Inf".into()])
                    .enumerate()
                {
                    cumulative += h.buckets.get(i).copied().unwrap_or(0);
                    writeln!(
                        text,
                        "{name}_bucket{{{labels},le=\"{b}\"}} {cumulative} {ts}"
                    )
                    .unwrap();
                }
                writeln!(text, "{name}_sum{{{labels}}} {} {ts}", h.sum).unwrap();
                writeln!(text, "{name}_count{{{labels}}} {} {ts}", h.count).unwrap();
                f.file.write_all(text.as_bytes()).unwrap();
            }
            let name = "vllm:time_to_first_token_seconds";
            let f = families.get_mut(name).unwrap();
            let mut cumulative = 0;
            let mut text = String::new();
            for (b, n) in TTFT_BUCKETS_S
                .iter()
                .map(|b| format!("{b}"))
                .chain(["+Inf".into()])
                .zip(&m.counters.ttft_bucket_counts)
            {
                cumulative += n;
                writeln!(
                    text,
                    "{name}_bucket{{{labels},le=\"{b}\"}} {cumulative} {ts}"
                )
                .unwrap();
            }
            writeln!(
                text,
                "{name}_sum{{{labels}}} {} {ts}",
                m.counters.ttft_sum_s
            )
            .unwrap();
            writeln!(
                text,
                "{name}_count{{{labels}}} {} {ts}",
                m.counters.ttft_count
            )
            .unwrap();
            f.file.write_all(text.as_bytes()).unwrap();
            let f = families.get_mut("vllm:num_requests_running").unwrap();
            writeln!(
                f.file,
                "vllm:num_requests_running{{{labels}}} {} {ts}",
                m.running
            )
            .unwrap();
        }
        // A second workload elsewhere, for the selector checks.
        if minute % 30 == 0 {
            let labels =
                "namespace=\"other\",job=\"vllm\",pod=\"qwen-0\",engine=\"0\",model_name=\"qwen\"";
            let f = families.get_mut("vllm:num_requests_running").unwrap();
            writeln!(f.file, "vllm:num_requests_running{{{labels}}} 0 {ts}").unwrap();
            let f = families.get_mut("vllm:request_prompt_tokens").unwrap();
            let name = "vllm:request_prompt_tokens";
            for b in SIZE_BUCKETS.iter().map(|b| le_text(*b)) {
                writeln!(f.file, "{name}_bucket{{{labels},le=\"{b}\"}} 0 {ts}").unwrap();
            }
            writeln!(
                f.file,
                "{name}_bucket{{{labels},le=\"+Inf\"}} {minute} {ts}"
            )
            .unwrap();
            writeln!(f.file, "{name}_sum{{{labels}}} 0 {ts}").unwrap();
            writeln!(f.file, "{name}_count{{{labels}}} {minute} {ts}").unwrap();
        }
    };
    let outcome = replay::run_observed(
        requests,
        &s,
        2,
        &mut policy,
        Some(Observer {
            every_ms: STEP * 1000,
            look: &mut look,
        }),
    );
    let mut out = std::fs::File::create(path).unwrap();
    for (name, _) in names {
        let mut f = families.remove(name).unwrap();
        f.file.flush().unwrap();
        drop(f);
        let mut part = std::fs::File::open(dir.join(name.replace(':', "_"))).unwrap();
        std::io::copy(&mut part, &mut out).unwrap();
    }
    writeln!(out, "# EOF").unwrap();
    outcome.replica_seconds
}

/// A Prometheus serving backfilled blocks on a loopback port, killed on drop.
struct Prometheus {
    child: Child,
    url: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn backfill_and_serve(openmetrics: &Path, data: &Path, port: u16, block_hours: u64) -> Prometheus {
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(format!("--max-block-duration={block_hours}h"))
        .arg(openmetrics)
        .arg(data)
        .output()
        .expect("promtool is installed (e2e/install-deps installs Debian's prometheus)");
    assert!(
        out.status.success(),
        "promtool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = data.join("prometheus.yml");
    std::fs::write(&config, "global: {}\nscrape_configs: []\n").unwrap();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new("/usr/bin/prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg("--storage.tsdb.retention.time=100y")
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let url = format!("http://{addr}");
    let prometheus = Prometheus { child, url };
    let deadline = Instant::now() + Duration::from_secs(120);
    let ready = format!("{}/-/ready", prometheus.url);
    let _ = ready;
    loop {
        if http_ok(&addr, "/-/ready") {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus not ready on {addr}");
        std::thread::sleep(Duration::from_millis(200));
    }
    prometheus
}

/// Whether `GET path` on `addr` answers 200.
fn http_ok(addr: &str, path: &str) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
}

fn rfc3339(t: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(t)
        .unwrap()
        .to_string()
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn backtest(dir: &Path, url: &str, days: i64, extra: &[&str]) -> Run {
    let scaler = dir.join("scaler.yaml");
    std::fs::write(&scaler, SCALER).unwrap();
    let model = dir.join("model.yaml");
    std::fs::write(&model, PROFILE).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .arg("backtest")
        .arg("--prometheus")
        .arg(url)
        .arg("--scaler")
        .arg(&scaler)
        .arg("--model")
        .arg(&model)
        .args([
            "--from",
            &rfc3339(BASE),
            "--to",
            &rfc3339(BASE + days * 86_400),
        ])
        .args(["--step", "60s", "--quiet"])
        .args(extra)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn per_minute(trace: &[Request], minutes: usize) -> Vec<f64> {
    let mut out = vec![0.0; minutes];
    for r in trace {
        // Source arrivals count in the window (60(k−1), 60k] their scrape closes; rebuilt ones
        // land in [60(k−1), 60k).
        let k = (r.arrival_s / 60.0).ceil().max(1.0) as usize - 1;
        if let Some(slot) = out.get_mut(k) {
            *slot += 1.0;
        }
    }
    out
}

fn per_minute_rebuilt(trace: &[Request], minutes: usize) -> Vec<f64> {
    let mut out = vec![0.0; minutes];
    for r in trace {
        if let Some(slot) = out.get_mut((r.arrival_s / 60.0).floor() as usize) {
            *slot += 1.0;
        }
    }
    out
}

/// The rebuilt trace with arrivals from the range start (read_azure counts from the first row).
fn read_rebuilt(path: &Path) -> Vec<Request> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|line| {
            let mut cells = line.split(',');
            let t = cells.next().unwrap().replace(' ', "T");
            let at: k8s_openapi::jiff::civil::DateTime = t.parse().unwrap();
            let ms = at
                .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
                .unwrap()
                .timestamp()
                .as_millisecond();
            Request {
                arrival_s: (ms - BASE * 1000) as f64 / 1000.0,
                prompt_tokens: cells.next().unwrap().parse().unwrap(),
                output_tokens: cells.next().unwrap().parse().unwrap(),
            }
        })
        .collect()
}

fn mean(trace: &[Request], f: fn(&Request) -> u32) -> f64 {
    trace.iter().map(|r| f64::from(f(r))).sum::<f64>() / trace.len() as f64
}

fn scenario(days: usize, port: u16, compare: &str) -> String {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let source = source_trace(days);
    let openmetrics = dir.path().join("history.om");
    let hpa_replica_s = write_history(&source, days, &openmetrics, dir.path());
    let generated = started.elapsed();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let prometheus = backfill_and_serve(&openmetrics, &data, port, (days * 24) as u64);
    let served = started.elapsed();

    // Selectors matching no or several workloads are refused, naming what matched.
    let none = backtest(
        dir.path(),
        &prometheus.url,
        days as i64,
        &["--selector", "namespace=\"nope\""],
    );
    assert_eq!(none.code, 2, "{}", none.stderr);
    assert!(
        none.stderr.contains("no vLLM workload matches"),
        "{}",
        none.stderr
    );
    let several = backtest(
        dir.path(),
        &prometheus.url,
        days as i64,
        &["--selector", "job=\"vllm\""],
    );
    assert_eq!(several.code, 2, "{}", several.stderr);
    assert!(
        several.stderr.contains("2 workloads")
            && several.stderr.contains("qwen")
            && several.stderr.contains(MODEL),
        "{}",
        several.stderr
    );

    let report = dir.path().join("report.json");
    let rebuilt = dir.path().join("rebuilt.csv");
    let run = backtest(
        dir.path(),
        &prometheus.url,
        days as i64,
        &[
            "--compare",
            compare,
            "--price-per-gpu-hour",
            "2.5",
            "--report",
            report.to_str().unwrap(),
            "--trace-out",
            rebuilt.to_str().unwrap(),
        ],
    );
    assert_eq!(
        run.code, 0,
        "stderr: {}\nstdout: {}",
        run.stderr, run.stdout
    );
    let backtested = started.elapsed();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();

    // The gap is reported, not read as zero traffic.
    let gaps = json["observed"]["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{}", run.stdout);
    assert_eq!(gaps[0][1], GAP_TO - GAP_FROM, "{}", run.stdout);
    assert!(
        run.stdout.contains("gaps: 1 inside the range"),
        "{}",
        run.stdout
    );

    // Arrivals and sizes.
    let trace = read_rebuilt(&rebuilt);
    let minutes = days * 1440;
    let src = per_minute(&source, minutes);
    let got = per_minute_rebuilt(&trace, minutes);
    let off: f64 = src
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .sum::<f64>()
        / src.iter().sum::<f64>();
    assert!(
        off < 0.05,
        "per-minute arrivals differ by {:.2} %",
        off * 100.0
    );
    let total_ratio = trace.len() as f64 / source.len() as f64;
    let prompt_ratio = mean(&trace, |r| r.prompt_tokens) / mean(&source, |r| r.prompt_tokens);
    let output_ratio =
        mean(&trace, |r| r.output_tokens) / mean(&source, |r| r.output_tokens.max(1));
    for (what, ratio) in [
        ("requests", total_ratio),
        ("prompt", prompt_ratio),
        ("output", output_ratio),
    ] {
        assert!(
            (ratio - 1.0).abs() < 0.05,
            "{what}: rebuilt / source = {ratio:.4}"
        );
    }

    // "As it ran": the history's GPU-hours exactly; no misfit warning.
    let observed_h = json["observed"]["replica_hours"].as_f64().unwrap();
    let ran = &json["replay"]["policies"]["as it ran"];
    let ran_h = ran["replica_hours"].as_f64().unwrap();
    assert!(
        (ran_h - observed_h).abs() < 1e-6 * observed_h,
        "{ran_h} vs {observed_h}"
    );
    assert!(
        ((observed_h * 3600.0) / hpa_replica_s - 1.0).abs() < 0.02,
        "{observed_h} h vs the HPA's {hpa_replica_s} s"
    );
    assert!(
        run.stdout.contains("validation: as it ran"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("does not fit"), "{}", run.stdout);
    assert!(
        run.stdout.contains("2.50") || run.stdout.contains("cost"),
        "{}",
        run.stdout
    );

    // The replay of the rebuilt trace against the replay of the source.
    let initial = json["replay"]["initial_replicas"].as_i64().unwrap() as i32;
    let last = source.last().unwrap().arrival_s;
    let options = compare::Options {
        startup_seconds: 90.0,
        slo_ttft_seconds: 2.0,
        scrape_interval_seconds: 15.0,
        initial_replicas: Some(initial),
        compare: Vec::new(),
        tail_seconds: (days * 86_400) as f64 - last,
        termination_grace_seconds: 0.0,
        comparators_scaler: None,
        model_name: None,
        state_max_num_seqs: true,
    };
    let extras = Extras {
        profile: Some(profile()),
        schedules: Vec::new(),
    };
    let truth = compare::run_with(&scaler(), &source, &options, 1.0, 1, &extras).unwrap();
    let truth = &truth.policies["llmscaler"];
    let rebuilt_llmscaler = &json["replay"]["policies"]["llmscaler"];
    let hours = rebuilt_llmscaler["replica_hours"].as_f64().unwrap();
    let attain = rebuilt_llmscaler["slo_attainment"].as_f64().unwrap();
    let summary = format!(
        "source: {} requests, llmscaler {:.2} replica-h, {:.2} % SLO; rebuilt: {} requests, {:.2} replica-h ({:+.1} %), {:.2} % SLO ({:+.2} points); timings: history {:.0?}, backfill+start {:.0?}, backtest {:.0?}, total {:.0?}",
        source.len(),
        truth.replica_hours,
        truth.slo_attainment * 100.0,
        trace.len(),
        hours,
        (hours / truth.replica_hours - 1.0) * 100.0,
        attain * 100.0,
        (attain - truth.slo_attainment) * 100.0,
        generated,
        served - generated,
        backtested - served,
        started.elapsed(),
    );
    eprintln!("{summary}");
    eprintln!("{}", run.stdout);
    assert!(
        (hours / truth.replica_hours - 1.0).abs() < 0.10,
        "{summary}"
    );
    assert!((attain - truth.slo_attainment).abs() < 0.01, "{summary}");
    format!("{summary}\n\n{}", run.stdout)
}

#[test]
fn a_day_of_history_backtests_within_bounds_of_the_source() {
    scenario(1, 38_510, "hpa");
}

#[test]
#[ignore = "a week of history: minutes; run by hand and timed in docs/benchmarks/backtest.md"]
fn week() {
    let out = scenario(7, 38_511, "hpa,keda,ideal,static");
    println!("{out}");
}
