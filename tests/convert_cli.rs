//! `llmscaler convert` through the binary, on real-world manifests (`tests/data/convert/`, each
//! with its source in its header): every case compares the whole stdout (the LLMScaler YAML) and
//! the whole stderr (warnings, or one refusal per field) with `tests/data/convert/expected/`, and
//! the exit status. `LLMSCALER_BLESS=1 cargo test --test convert_cli` rewrites the expected files
//! (review the diff before committing it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use llmscaler_api::{LLMScaler, OperatorPolicy, check_spec};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/convert")
        .join(name)
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn convert(args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .arg("convert")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run llmscaler convert");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        std::io::Write::write_all(&mut pipe, text.as_bytes()).expect("write stdin");
    }
    let output = child.wait_with_output().expect("wait llmscaler convert");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `convert` on `file` with `args`, checks the exit status, and compares stdout and stderr
/// with `expected/<case>.yaml` and `expected/<case>.stderr`.
fn check(case: &str, file: &str, args: &[&str], code: i32) -> Run {
    let path = data(file);
    let mut all = vec![path.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    let run = convert(&all, None);
    compare(case, &run, code);
    run
}

fn compare(case: &str, run: &Run, code: i32) {
    let out = data(&format!("expected/{case}.yaml"));
    let err = data(&format!("expected/{case}.stderr"));
    if std::env::var_os("LLMSCALER_BLESS").is_some() {
        std::fs::create_dir_all(data("expected")).expect("mkdir");
        std::fs::write(&out, &run.stdout).expect("bless stdout");
        std::fs::write(&err, &run.stderr).expect("bless stderr");
    }
    assert_eq!(
        run.code,
        Some(code),
        "{case}: exit\n{}{}",
        run.stdout,
        run.stderr
    );
    let expected_out = std::fs::read_to_string(&out).expect("expected stdout");
    let expected_err = std::fs::read_to_string(&err).expect("expected stderr");
    pretty_assertions::assert_eq!(run.stdout, expected_out, "{case}: stdout");
    pretty_assertions::assert_eq!(run.stderr, expected_err, "{case}: stderr");
    if code == 0 {
        // What was printed is an LLMScaler an apply accepts.
        for doc in run.stdout.split("---\n") {
            let scaler: LLMScaler = serde_yaml::from_str(doc).expect("LLMScaler YAML");
            check_spec(&scaler.spec, &OperatorPolicy::default()).expect("valid spec");
        }
    } else {
        assert!(
            run.stdout.is_empty(),
            "{case}: nothing on stdout when refused"
        );
    }
}

const PROMETHEUS: &str = "--server-address=http://prometheus-operated.monitoring.svc:9090";

#[test]
fn vllm_production_stack_scaled_object() {
    check(
        "keda-vllm-production-stack",
        "keda-vllm-production-stack.yaml",
        &[],
        0,
    );
}

#[test]
fn vllm_production_stack_scale_to_zero_pair() {
    check(
        "keda-vllm-scale-to-zero",
        "keda-vllm-scale-to-zero.yaml",
        &[],
        0,
    );
}

#[test]
fn keda_bearer_authentication_is_refused_then_left_out() {
    check(
        "keda-prometheus-bearer",
        "keda-prometheus-bearer.yaml",
        &[],
        2,
    );
    check(
        "keda-prometheus-bearer-lenient",
        "keda-prometheus-bearer.yaml",
        // The page's placeholder address is not a URL: give the real one.
        &["--lenient", PROMETHEUS],
        0,
    );
}

#[test]
fn keda_cpu_trigger_is_refused_even_lenient() {
    check("keda-cpu", "keda-cpu.yaml", &[], 2);
    // Leaving the trigger out leaves no metric: the result breaks an admission rule.
    check("keda-cpu-lenient", "keda-cpu.yaml", &["--lenient"], 2);
}

#[test]
fn keda_amp_example_with_pod_identity_and_a_total_query() {
    check("keda-amp-behavior", "keda-amp-behavior.yaml", &[], 2);
}

#[test]
fn hpa_vllm_pods_metric() {
    check(
        "hpa-vllm-no-address",
        "hpa-vllm-requests-running.yaml",
        &[],
        2,
    );
    check(
        "hpa-vllm-requests-running",
        "hpa-vllm-requests-running.yaml",
        &[PROMETHEUS],
        0,
    );
}

#[test]
fn hpa_gpu_utilization_with_scale_up_policies() {
    check(
        "hpa-gpu-utilization",
        "hpa-gpu-utilization.yaml",
        &[PROMETHEUS],
        0,
    );
}

#[test]
fn hpa_object_metric_on_a_namespace() {
    check(
        "hpa-production-stack-object",
        "hpa-production-stack-object.yaml",
        &[PROMETHEUS],
        0,
    );
}

#[test]
fn hpa_walkthrough_multiple_metrics() {
    check(
        "hpa-walkthrough",
        "hpa-walkthrough-multiple-metrics.yaml",
        &[PROMETHEUS],
        2,
    );
    check(
        "hpa-walkthrough-lenient-query",
        "hpa-walkthrough-multiple-metrics.yaml",
        &[
            PROMETHEUS,
            "--lenient",
            "--query",
            "packets-per-second=avg(rate(packets_total{namespace=\"default\"}[2m]))",
        ],
        0,
    );
}

#[test]
fn several_documents_from_stdin() {
    let text = format!(
        "{}---\n{}",
        std::fs::read_to_string(data("keda-vllm-production-stack.yaml")).expect("read"),
        std::fs::read_to_string(data("hpa-production-stack-object.yaml")).expect("read"),
    );
    let run = convert(&["-", PROMETHEUS], Some(&text));
    compare("stdin-two-documents", &run, 0);
}

#[test]
fn nothing_to_convert_and_unreadable_files() {
    let run = convert(
        &["-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"),
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert_eq!(
        run.stderr,
        "error: no ScaledObject (keda.sh/v1alpha1) or HorizontalPodAutoscaler (autoscaling/v2) found\n"
    );
    let run = convert(&["/nonexistent/so.yaml"], None);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let run = convert(&["-"], Some("kind: [unclosed\n"));
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.starts_with("error: document 0: "),
        "{}",
        run.stderr
    );
}

#[test]
fn keda_cron_trigger_becomes_a_schedule_floor() {
    // A cron trigger alone leaves nothing to scale on between the schedules.
    check("keda-cron", "keda-cron.yaml", &[], 2);
    check(
        "keda-vllm-business-hours",
        "keda-vllm-business-hours.yaml",
        &[],
        0,
    );
}
