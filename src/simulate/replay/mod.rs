//! The closed loop of `llmscaler simulate --requests` (`docs/simulate/README.md`): a trace served
//! by the load model's fleet, pods that become Ready a start-up time after they are created,
//! Prometheus scraping the Ready pods, and an [`Autoscaler`] setting `spec.replicas` every sync.

mod cluster;
mod scrape;

use llmscaler_loadmodel::{Params, Request};

use crate::promql::Store;
use crate::simulate::hpa::Pod;
pub use cluster::Cluster;
pub use scrape::SeriesLabels;

/// Settings shared by every policy of one run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Load-model parameters (the TTFT objective is `params.slo_ttft_s`).
    pub params: Params,
    /// Creation-to-Ready delay of a new pod, milliseconds.
    pub startup_ms: i64,
    /// Prometheus scrape interval, milliseconds.
    pub scrape_interval_ms: i64,
    /// The run ends this long after the last arrival, milliseconds (so queues drain).
    pub tail_ms: i64,
    /// Labels put on every scraped series besides `pod`.
    pub labels: SeriesLabels,
}

/// What an autoscaler sees at a sync.
#[derive(Debug)]
pub struct View<'a> {
    /// Every scrape so far, as Prometheus holds it.
    pub store: &'a Store,
    /// The target's `spec.replicas`.
    pub spec_replicas: i32,
    /// The target's `status.readyReplicas`.
    pub ready_replicas: i32,
    /// The target's pods: Ready ones are `Running` with metrics, starting ones `Running`
    /// without metrics yet (a model still loading serves no `/metrics`).
    pub pods: Vec<Pod>,
    /// Arrivals in the next `horizon` (only the `ideal` bound may look).
    pub upcoming: &'a [Request],
    /// The fleet (only the `ideal` bound may look).
    pub cluster: &'a Cluster,
}

/// A policy deciding `spec.replicas`.
pub trait Autoscaler {
    /// Milliseconds between syncs.
    fn period_ms(&self) -> i64;
    /// Whether it reads Prometheus (scrapes are skipped otherwise).
    fn reads_metrics(&self) -> bool {
        true
    }
    /// Called once at t = 0 with the replicas the run starts with: a policy with a scale-down
    /// window remembers them as its recommendation at t = 0, as if the fleet had run at that
    /// size before the trace window (without it the first syncs of every windowed policy
    /// would scale down on counters that are only seconds old).
    fn warm_start(&mut self, _replicas: i32) {}
    /// The `spec.replicas` to have after a sync at `now_ms`.
    fn decide(&mut self, now_ms: i64, view: &View<'_>) -> i32;
    /// The pods the policy keeps out of the Service's rotation after its last sync (a drain,
    /// docs/scale-down.md#drain); `None` when it never drains. A scale-down removes them first.
    fn out_of_rotation(&self) -> Option<&std::collections::BTreeSet<String>> {
        None
    }
    /// The pod-deletion-cost marks the policy wrote (pod → cost); `None` when it never marks.
    /// A scale-down removes the lowest cost first, as a ReplicaSet does.
    fn deletion_costs(&self) -> Option<&std::collections::BTreeMap<String, i32>> {
        None
    }
    /// The capacity estimates of `spec.objective` the policy reported, one per sync that had
    /// one (empty for a policy without an objective).
    fn capacity(&self) -> &[CapacityPoint] {
        &[]
    }
}

/// The capacity estimate of `spec.objective` at one sync: the estimate `status.capacity` is
/// written from (docs/objective.md#status; status itself changes only on a material change),
/// what `simulate --report` shows of the calibration over time.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CapacityPoint {
    /// Trace seconds of the sync.
    pub t_seconds: f64,
    /// `status.capacity.basis`: `saturated`, `calibrated`, `extrapolated`, `lowerBound` or
    /// `restored`.
    pub basis: String,
    /// Requests per second one Ready replica completes at full load.
    pub requests_per_second: f64,
}

/// One point of the replica timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimelinePoint {
    /// Trace seconds.
    pub t_s: f64,
    /// `spec.replicas` after the sync.
    pub replicas: i32,
    /// Ready replicas at the sync.
    pub ready: i32,
}

/// What one policy's run produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The load model's report (TTFTs, drops, Ready replica-seconds).
    pub report: llmscaler_loadmodel::Report,
    /// `spec.replicas` integrated over the run (pods from creation to removal),
    /// replica-seconds.
    pub replica_seconds: f64,
    /// Requests whose TTFT was within the objective.
    pub within_slo: u64,
    /// Syncs that changed `spec.replicas`.
    pub scale_events: u64,
    /// Largest `spec.replicas`.
    pub peak_replicas: i32,
    /// `spec.replicas` and readiness at every sync.
    pub timeline: Vec<TimelinePoint>,
    /// The labels of every series Prometheus held at the end (empty for a policy that reads
    /// no metrics): what the scaler's selectors are checked against
    /// ([`crate::simulate::series_check`]).
    pub series: Vec<crate::promql::Labels>,
}

fn ms_to_s(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

fn s_to_ms(s: f64) -> i64 {
    #[allow(clippy::cast_possible_truncation)]
    let ms = (s * 1000.0).round() as i64;
    ms
}

/// Runs `requests` (sorted by arrival) against `policy`, starting with `initial` Ready pods.
pub fn run(
    requests: &[Request],
    settings: &Settings,
    initial: i32,
    policy: &mut dyn Autoscaler,
) -> Outcome {
    run_observed(requests, settings, initial, policy, None)
}

/// A look at the cluster every `every_ms` milliseconds of a run (from `every_ms` on), after the
/// arrivals up to that time: how a test writes the fleet's history as a Prometheus would have
/// scraped it (`tests/backtest.rs`).
pub struct Observer<'a> {
    /// Milliseconds between two looks (> 0).
    pub every_ms: i64,
    /// Called with the time (milliseconds) and the cluster.
    pub look: &'a mut dyn FnMut(i64, &Cluster),
}

/// [`run`], calling `observer` (when given) at its interval.
pub fn run_observed(
    requests: &[Request],
    settings: &Settings,
    initial: i32,
    policy: &mut dyn Autoscaler,
    mut observer: Option<Observer<'_>>,
) -> Outcome {
    let span_ms = requests.last().map_or(0, |r| s_to_ms(r.arrival_s));
    let end_ms = span_ms + settings.tail_ms;
    let period_ms = policy.period_ms().max(1);
    let scrape_ms = settings.scrape_interval_ms.max(1);
    let reads = policy.reads_metrics();
    let mut cluster = Cluster::new(settings, initial.max(0));
    policy.warm_start(initial.max(0));
    let mut store = Store::new();
    let mut next_arrival = 0usize;
    // Scrapes fall half an interval before syncs, so a sync reads data of mean age.
    let mut next_scrape = scrape_ms / 2;
    let mut next_sync = 0;
    let mut next_look = observer.as_ref().map_or(i64::MAX, |o| o.every_ms.max(1));
    let mut timeline = Vec::new();
    let mut scale_events = 0u64;
    let mut peak = initial.max(0);
    loop {
        let mut t = end_ms.min(next_sync);
        if reads {
            t = t.min(next_scrape);
        }
        if let Some(ready_at) = cluster.next_ready_ms() {
            t = t.min(ready_at);
        }
        t = t.min(next_look);
        let t_s = ms_to_s(t);
        while let Some(req) = requests.get(next_arrival) {
            if req.arrival_s > t_s {
                break;
            }
            cluster.fleet_mut().arrive(*req);
            next_arrival += 1;
        }
        cluster.advance_to(t);
        if t >= end_ms {
            break;
        }
        if t == next_look
            && let Some(o) = observer.as_mut()
        {
            (o.look)(t, &cluster);
            next_look += o.every_ms.max(1);
        }
        if reads && t == next_scrape {
            scrape::scrape(&cluster, &settings.labels, &mut store, t);
            next_scrape += scrape_ms;
        }
        if t == next_sync {
            let horizon_end =
                requests[next_arrival..].partition_point(|r| r.arrival_s <= ms_to_s(t + period_ms));
            let view = View {
                store: &store,
                spec_replicas: cluster.spec_replicas(),
                ready_replicas: cluster.ready_replicas(),
                pods: cluster.pods(),
                upcoming: &requests[next_arrival..next_arrival + horizon_end],
                cluster: &cluster,
            };
            let ready = view.ready_replicas;
            let before = view.spec_replicas;
            let wanted = policy.decide(t, &view).max(0);
            if let Some(out) = policy.out_of_rotation() {
                cluster.set_out_of_rotation(t, out);
            }
            if let Some(costs) = policy.deletion_costs() {
                cluster.set_deletion_costs(costs);
            }
            if wanted != before {
                scale_events += 1;
                cluster.scale(t, wanted);
            }
            peak = peak.max(wanted);
            timeline.push(TimelinePoint {
                t_s,
                replicas: wanted,
                ready,
            });
            next_sync += period_ms;
        }
    }
    Outcome {
        report: cluster.fleet().report(),
        replica_seconds: cluster.replica_seconds(end_ms),
        within_slo: cluster.fleet().served_within().1,
        scale_events,
        peak_replicas: peak,
        timeline,
        series: store.label_sets(),
    }
}
