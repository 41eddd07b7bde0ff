//! `loadmodel-replay`: the load model against one real vLLM replica (issue 22;
//! docs/benchmarks/real-vllm.md, "The load model against one real replica").
//!
//! - `replay --sequence CSV --profile YAML --out JSON`: replays the request sequence (Azure trace
//!   format) open-loop into one modelled replica with the profile's parameters, sampling its
//!   gauges every second as `e2e/real-vllm.d/calibrate.py replay` samples the real `/metrics`.
//! - `compare --real JSON --model JSON --window-seconds S --out-dir DIR`: the figures of both runs
//!   side by side (`DIR/figures.json`, a Markdown table on stdout) and the plots (`DIR/queue.png`,
//!   `DIR/ttft-cdf.png`).
//!
//! The real run file is the one `calibrate.py replay` writes (`requests` with `ttft_s` and
//! `done_s`, `samples` with `t`, `waiting`, `running`, `kv`); the model run file is a
//! [`llmscaler_loadmodel::calibration::Run`]. Trace data: see
//! [`llmscaler_loadmodel::ATTRIBUTION`].

mod plot;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use llmscaler_loadmodel::calibration::{self, Figures, Run, Sample};
use llmscaler_loadmodel::{Params, Profile};
use serde::{Deserialize, Serialize};

#[derive(Parser, Debug)]
#[command(about = "The load model against one real vLLM replica")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a sequence into one modelled replica.
    Replay {
        /// The request sequence (Azure trace format).
        #[arg(long)]
        sequence: PathBuf,
        /// The model profile (loadmodel/src/profile.rs).
        #[arg(long)]
        profile: PathBuf,
        /// Where to write the run (JSON).
        #[arg(long)]
        out: PathBuf,
    },
    /// Compare a real and a modelled run; write the figures and the plots.
    Compare {
        /// The real run (calibrate.py replay).
        #[arg(long)]
        real: PathBuf,
        /// The modelled run (`replay`).
        #[arg(long)]
        model: PathBuf,
        /// The sequence's length, seconds: the window of completions/s and the time series.
        #[arg(long, default_value_t = 600.0)]
        window_seconds: f64,
        /// Where to write figures.json, queue.png and ttft-cdf.png.
        #[arg(long)]
        out_dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Replay {
            sequence,
            profile,
            out,
        } => replay(&sequence, &profile, &out),
        Command::Compare {
            real,
            model,
            window_seconds,
            out_dir,
        } => compare(&real, &model, window_seconds, &out_dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadmodel-replay: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn replay(sequence: &Path, profile: &Path, out: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::open(sequence)
        .with_context(|| format!("opening the sequence {}", sequence.display()))?;
    let requests = llmscaler_loadmodel::trace::read_azure(file)
        .with_context(|| format!("reading the sequence {}", sequence.display()))?;
    let params = Profile::from_file(profile)?.apply(Params::default());
    let run = calibration::replay_one(&requests, params, 1.0);
    write_json(out, &run)
}

/// One request of a real run (`calibrate.py replay`); failed requests carry `error` instead of
/// the times.
#[derive(Debug, Deserialize)]
struct RealRequest {
    ttft_s: Option<f64>,
    done_s: Option<f64>,
    error: Option<String>,
}

/// One `/metrics` sample of a real run; a failed scrape carries `error` instead of the gauges.
#[derive(Debug, Deserialize)]
struct RealSample {
    t: f64,
    waiting: Option<f64>,
    running: Option<f64>,
    kv: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct RealRun {
    requests: Vec<RealRequest>,
    samples: Vec<RealSample>,
}

/// The real run as a [`Run`], and how many requests failed and how many scrapes were missed.
fn read_real(path: &Path) -> anyhow::Result<(Run, usize, usize)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let real: RealRun =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let failed = real.requests.iter().filter(|r| r.error.is_some()).count();
    let mut run = Run::default();
    for r in &real.requests {
        if let (Some(ttft), Some(done)) = (r.ttft_s, r.done_s) {
            run.ttfts_s.push(ttft);
            run.done_s.push(done);
        }
    }
    let mut missed = 0;
    for s in &real.samples {
        match (s.waiting, s.running, s.kv) {
            (Some(waiting), Some(running), Some(kv)) => run.samples.push(Sample {
                t: s.t,
                waiting,
                running,
                kv,
            }),
            _ => missed += 1,
        }
    }
    Ok((run, failed, missed))
}

fn read_model(path: &Path) -> anyhow::Result<Run> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Both runs' figures, their relative errors and the time-series correlations.
#[derive(Debug, Serialize)]
struct Comparison {
    window_seconds: f64,
    real: Figures,
    model: Figures,
    /// (model − real) / real of completions/s and the TTFT percentiles.
    error: Errors,
    /// Pearson correlation of the per-second series, real against model.
    correlation: Correlations,
    /// The same of the series' 10-second means.
    correlation_10s: Correlations,
    real_failed_requests: usize,
    real_missed_samples: usize,
    attribution: &'static str,
}

#[derive(Debug, Serialize)]
struct Errors {
    completions_per_s: f64,
    ttft_p50_s: f64,
    ttft_p95_s: f64,
    ttft_p99_s: f64,
}

#[derive(Debug, Serialize)]
struct Correlations {
    waiting: f64,
    running: f64,
    kv: f64,
}

fn compare(real: &Path, model: &Path, window_s: f64, out_dir: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        window_s.is_finite() && window_s > 0.0,
        "--window-seconds must be above 0, got {window_s}"
    );
    let (real_run, failed, missed) = read_real(real)?;
    let model_run = read_model(model)?;
    let (r, m) = (real_run.figures(window_s), model_run.figures(window_s));
    let err = |real: f64, model: f64| (model - real) / real;
    let corr = |g: fn(&Sample) -> f64, k: usize| {
        calibration::correlation(
            &calibration::window_means(&calibration::per_second(&real_run, window_s, g), k),
            &calibration::window_means(&calibration::per_second(&model_run, window_s, g), k),
        )
    };
    let c = Comparison {
        window_seconds: window_s,
        real: r,
        model: m,
        error: Errors {
            completions_per_s: err(r.completions_per_s, m.completions_per_s),
            ttft_p50_s: err(r.ttft_p50_s, m.ttft_p50_s),
            ttft_p95_s: err(r.ttft_p95_s, m.ttft_p95_s),
            ttft_p99_s: err(r.ttft_p99_s, m.ttft_p99_s),
        },
        correlation: Correlations {
            waiting: corr(|s| s.waiting, 1),
            running: corr(|s| s.running, 1),
            kv: corr(|s| s.kv, 1),
        },
        correlation_10s: Correlations {
            waiting: corr(|s| s.waiting, 10),
            running: corr(|s| s.running, 10),
            kv: corr(|s| s.kv, 10),
        },
        real_failed_requests: failed,
        real_missed_samples: missed,
        attribution: llmscaler_loadmodel::ATTRIBUTION,
    };
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    write_json(&out_dir.join("figures.json"), &c)?;
    print!("{}", table(&c));
    plot::queue(&out_dir.join("queue.png"), &real_run, &model_run, window_s)?;
    plot::ttft_cdf(&out_dir.join("ttft-cdf.png"), &real_run, &model_run)?;
    Ok(())
}

/// The Markdown table of the comparison.
fn table(c: &Comparison) -> String {
    let (r, m, e) = (&c.real, &c.model, &c.error);
    let pct = |x: f64| format!("{:+.1} %", x * 100.0);
    let mut out = String::from("| figure | real | model | error |\n|---|---|---|---|\n");
    out += &format!(
        "| completions/s (first {:.0} s) | {:.3} | {:.3} | {} |\n",
        c.window_seconds,
        r.completions_per_s,
        m.completions_per_s,
        pct(e.completions_per_s)
    );
    for (name, real, model, error) in [
        ("TTFT p50 (s)", r.ttft_p50_s, m.ttft_p50_s, e.ttft_p50_s),
        ("TTFT p95 (s)", r.ttft_p95_s, m.ttft_p95_s, e.ttft_p95_s),
        ("TTFT p99 (s)", r.ttft_p99_s, m.ttft_p99_s, e.ttft_p99_s),
    ] {
        out += &format!("| {name} | {real:.3} | {model:.3} | {} |\n", pct(error));
    }
    let rows = [
        ("last completion (s)", r.last_done_s, m.last_done_s),
        ("waiting, mean", r.waiting_mean, m.waiting_mean),
        ("waiting, peak", r.waiting_peak, m.waiting_peak),
        ("running, mean", r.running_mean, m.running_mean),
        ("KV usage, mean", r.kv_mean, m.kv_mean),
        ("KV usage, peak", r.kv_peak, m.kv_peak),
    ];
    for (name, real, model) in rows {
        out += &format!(
            "| {name} | {real:.4} | {model:.4} | {} |\n",
            pct((model - real) / real)
        );
    }
    for (name, k) in [
        ("1 s samples", &c.correlation),
        ("10 s means", &c.correlation_10s),
    ] {
        out += &format!(
            "| correlation real/model, {name} | waiting {:.3} | running {:.3} | KV {:.3} |\n",
            k.waiting, k.running, k.kv
        );
    }
    out
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("==> wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation fails it
    use super::*;

    #[test]
    fn a_real_run_counts_failed_requests_and_missed_scrapes_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("real.json");
        std::fs::write(
            &path,
            r#"{"source": "real",
                "requests": [
                  {"arrival_s": 0.5, "prompt": 10, "output": 4, "sent_s": 0.5, "ttft_s": 0.02, "done_s": 0.6},
                  {"arrival_s": 0.7, "prompt": 10, "output": 4, "error": "HTTP 500"}],
                "samples": [
                  {"t": 1.001, "waiting": 1.0, "running": 2.0, "kv": 0.01},
                  {"t": 2.003, "error": "timeout"}]}"#,
        )
        .unwrap();
        let (run, failed, missed) = read_real(&path).unwrap();
        assert_eq!((failed, missed), (1, 1));
        assert_eq!(run.ttfts_s, vec![0.02]);
        assert_eq!(run.done_s, vec![0.6]);
        assert_eq!(run.samples.len(), 1);
        assert_eq!(run.samples[0].running, 2.0);
    }

    #[test]
    fn a_run_file_that_is_not_json_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.json");
        std::fs::write(&path, "not json").unwrap();
        let e = format!("{:#}", read_model(&path).unwrap_err());
        assert!(e.contains("model.json"), "{e}");
    }
}
