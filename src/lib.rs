//! llmscaler: a Kubernetes operator that autoscales LLM inference servers (vLLM, SGLang,
//! llama.cpp, TGI) on queue depth, KV-cache usage and TTFT.
//!
//! The library holds the logic; `src/main.rs` only wires the command line.
//! - [`controller`]: the reconcile loop (docs/scaling.md, docs/scale-down.md,
//!   docs/writing-replicas.md, docs/conditions.md); [`run`]: the `llmscaler run` process;
//!   [`telemetry`]: the operator's own metrics.
//! - [`step`]: one sync of one scaler as a pure state machine (sans I/O) returning a plan of
//!   effects; the controller, `simulate` and `probe` all run it.
//! - [`engine`]: the pure decision engine of docs/scaling.md (ratio, clamp, stabilization,
//!   step cap, guards), shared by the controller, `simulate` and `probe`.
//! - [`simulate`]: offline replay of a metric trace (`llmscaler simulate`; `--plot` needs the
//!   `plot` cargo feature, on by default and off in the operator's image).
//! - [`metrics`]: the Prometheus and decision-server metric sources (docs/providers.md).
//! - [`backtest`]: a scaler and its comparators replayed on a cluster's own Prometheus history
//!   (`llmscaler backtest`).
//! - [`probe`]: one evaluation of a scaler's metrics (`llmscaler probe`).
//! - [`convert`]: KEDA ScaledObject / HPA manifests to LLMScalers (`llmscaler convert`).
//! - [`release`]: handing a workload's `spec.replicas` back (`llmscaler release`).
//! - [`activator`]: `llmscaler activator`, which holds a Service's requests while its fleet
//!   wakes from zero (docs/scaling.md#holding-requests-while-waking-from-zero).
//! - [`process`]: the one process set-up (crypto provider, tracing, runtime, signals).
//! - [`scaler_file`]: reading a manifest file the way admission treats an apply.

pub mod activator;
pub mod backtest;
pub mod controller;
pub mod convert;
pub mod engine;
pub mod kubeclient;
mod lease;
pub mod metrics;
pub mod probe;
pub mod process;
pub mod promql;
pub mod release;
pub mod run;
pub mod scaler_file;
pub mod simulate;
pub mod step;
pub mod telemetry;
