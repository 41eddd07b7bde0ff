//! The one load model of docs/load-model.md, shared by the vLLM emulator, the demo and (later)
//! `llmscaler simulate` with a request trace: given requests and serving replicas, what the vLLM
//! metrics look like.
//!
//! - [`trace`]: the Azure trace format, `--scale` (seeded duplicate/thin) and `--speed`.
//! - [`replica`]: one replica under continuous batching ([`replica::Params`] has every knob).
//! - [`fleet`]: least-outstanding routing over Ready replicas, drain on removal, the run
//!   [`fleet::Report`].
//! - [`profile`]: a model's parameters read from a YAML or JSON file (`--model FILE`).
//! - [`calibration`]: one replica replayed against a real one, sampled each second, and the
//!   figures both runs are compared by.
//! - [`exposition`]: the Prometheus text of the replicas' metrics under vLLM's names.
//!
//! Everything runs in trace time and is deterministic: same trace, seed and Ready-set changes
//! give the same metrics. The crate is pure computation: no Kubernetes client and no drawing
//! (the demo draws its timeline itself).

pub mod calibration;
pub mod exposition;
pub mod fleet;
pub mod profile;
pub mod replica;
pub mod trace;

pub use fleet::{Fleet, Replay, Report};
pub use profile::Profile;
pub use replica::{Params, ReplicaMetrics};
pub use trace::{ATTRIBUTION, Request};
