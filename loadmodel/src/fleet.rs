//! The fleet: least-outstanding routing over Ready replicas, start/removal with drain, and the
//! run report (docs/load-model.md, "Fleet" and "What a run reports").

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use super::replica::{Dropped, Params, Replica, ReplicaMetrics};
use super::trace::Request;

/// A replica that takes no new requests and is finishing what it holds: out of rotation while
/// its pod lives (no deadline), or terminating (its pod deleted) for at most `drain_s`.
#[derive(Clone, Debug)]
struct Draining {
    replica: Replica,
    /// Trace time at which whatever is left is dropped, seconds (infinite while the pod lives).
    deadline_s: f64,
}

impl Draining {
    /// Out of rotation, its pod alive (serves what it holds, takes nothing new, is scraped).
    fn parked(&self) -> bool {
        self.deadline_s.is_infinite()
    }
}

/// Replicas serving a trace, stepped in trace time.
#[derive(Clone, Debug)]
pub struct Fleet {
    params: Params,
    now_s: f64,
    ready: BTreeMap<String, Replica>,
    draining: BTreeMap<String, Draining>,
    /// Requests that arrived while no replica was Ready (the gateway holds them).
    backlog: VecDeque<Request>,
    acc: Accumulators,
}

#[derive(Clone, Debug, Default)]
struct Accumulators {
    arrived: u64,
    failed: u64,
    replica_seconds: f64,
    ttfts: Vec<f64>,
    /// Requests whose TTFT was within `slo_ttft_s` (kept as a count so that probes of a fleet
    /// clone need not sort `ttfts`).
    within_slo: u64,
    /// Requests that got their first token (equal to `ttfts.len()` except in a probe copy).
    served: u64,
    peak_queue: usize,
    scale_events: u64,
    peak_ready: usize,
}

impl Accumulators {
    fn clone_without_ttfts(&self) -> Self {
        Self {
            arrived: self.arrived,
            failed: self.failed,
            replica_seconds: self.replica_seconds,
            ttfts: Vec::new(),
            within_slo: self.within_slo,
            served: self.served,
            peak_queue: self.peak_queue,
            scale_events: self.scale_events,
            peak_ready: self.peak_ready,
        }
    }

    /// Counts what a replica dropped as failed; a dropped request whose first token came within
    /// the objective was counted within it then and is taken back: a request cut off is no
    /// request served within the SLO.
    fn drop(&mut self, dropped: Dropped) {
        self.failed += dropped.lost;
        self.within_slo = self
            .within_slo
            .saturating_sub(dropped.lost_after_first_token_within_slo);
    }

    fn record(&mut self, ttfts: Vec<f64>, slo_ttft_s: f64) {
        self.served += ttfts.len() as u64;
        self.within_slo += ttfts.iter().filter(|&&t| t <= slo_ttft_s).count() as u64;
        self.ttfts.extend(ttfts);
    }
}

/// The figures a run is judged by.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Trace seconds covered.
    pub trace_seconds: f64,
    /// Ready replicas integrated over trace time, replica-seconds.
    pub replica_seconds: f64,
    /// Requests that arrived.
    pub arrived: u64,
    /// Requests that got their first token (served).
    pub served: u64,
    /// Requests killed by a scale-down: held by a replica whose pod was deleted, at the end of
    /// its termination grace (`drain_s`).
    pub failed: u64,
    /// Requests still queued or running at the end.
    pub in_flight: u64,
    /// TTFT percentiles, seconds (NaN without observations).
    pub ttft_p50_s: f64,
    /// 95th percentile TTFT, seconds.
    pub ttft_p95_s: f64,
    /// 99th percentile TTFT, seconds.
    pub ttft_p99_s: f64,
    /// The TTFT objective, seconds.
    pub slo_ttft_s: f64,
    /// Share (0..1) of served requests with TTFT ≤ the objective and not dropped afterwards (a
    /// request cut off by a scale-down is a miss whatever its TTFT).
    pub ttft_slo_share: f64,
    /// Largest number of waiting requests over the fleet (including the gateway backlog).
    pub peak_queue: usize,
    /// Changes of the Ready replica count.
    pub scale_events: u64,
    /// Largest Ready replica count.
    pub peak_ready: usize,
}

impl Report {
    /// Replica-minutes.
    pub fn replica_minutes(&self) -> f64 {
        self.replica_seconds / 60.0
    }
}

impl Fleet {
    /// An empty fleet at trace time 0.
    pub fn new(params: Params) -> Self {
        Self {
            params,
            now_s: 0.0,
            ready: BTreeMap::new(),
            draining: BTreeMap::new(),
            backlog: VecDeque::new(),
            acc: Accumulators::default(),
        }
    }

    /// Trace time, seconds.
    pub fn now_s(&self) -> f64 {
        self.now_s
    }

    /// The model parameters.
    pub fn params(&self) -> Params {
        self.params
    }

    /// `(served, within)`: requests that got their first token so far, and how many of them
    /// within `slo_ttft_s`. Cheap (no sorting), for probing clones of a fleet.
    pub fn served_within(&self) -> (u64, u64) {
        (self.acc.served, self.acc.within_slo)
    }

    /// Requests arrived so far.
    pub fn arrived(&self) -> u64 {
        self.acc.arrived
    }

    /// Requests dropped so far by drained-out replicas.
    pub fn failed(&self) -> u64 {
        self.acc.failed
    }

    /// Requests held by the Ready and draining replicas and the gateway (waiting or running).
    pub fn outstanding(&self) -> usize {
        self.ready.values().map(Replica::outstanding).sum::<usize>()
            + self
                .draining
                .values()
                .map(|d| d.replica.outstanding())
                .sum::<usize>()
            + self.backlog.len()
    }

    /// A copy of the fleet for a what-if run: the same replicas, queues and counters, without
    /// the TTFT history (so [`Fleet::report`] percentiles cover only what the copy serves;
    /// [`Fleet::served_within`] keeps counting from the original's totals).
    pub fn probe_copy(&self) -> Self {
        let acc = self.acc.clone_without_ttfts();
        Self {
            params: self.params,
            now_s: self.now_s,
            ready: self.ready.clone(),
            draining: self.draining.clone(),
            backlog: self.backlog.clone(),
            acc,
        }
    }

    /// Names of the Ready replicas, sorted.
    pub fn ready_names(&self) -> Vec<String> {
        self.ready.keys().cloned().collect()
    }

    /// Waiting requests over the Ready replicas, the draining ones and the gateway backlog.
    pub fn queue(&self) -> usize {
        self.ready.values().map(Replica::waiting).sum::<usize>()
            + self
                .draining
                .values()
                .map(|d| d.replica.waiting())
                .sum::<usize>()
            + self.backlog.len()
    }

    /// Steps every replica to `t_s` (trace seconds; earlier times are ignored), drops what
    /// drained-out replicas still hold and integrates replica-seconds.
    pub fn advance_to(&mut self, t_s: f64) {
        if t_s <= self.now_s {
            return;
        }
        self.acc.replica_seconds += self.ready.len() as f64 * (t_s - self.now_s);
        let slo = self.params.slo_ttft_s;
        for replica in self.ready.values_mut() {
            replica.advance_to(t_s);
            self.acc.record(replica.take_ttfts(), slo);
        }
        let mut gone = Vec::new();
        for (name, d) in &mut self.draining {
            d.replica.advance_to(t_s.min(d.deadline_s));
            self.acc.record(d.replica.take_ttfts(), slo);
            if d.deadline_s <= t_s {
                self.acc.drop(d.replica.drop_all());
            }
            if !d.parked() && d.replica.outstanding() == 0 {
                gone.push(name.clone());
            }
        }
        for name in gone {
            self.draining.remove(&name);
        }
        self.now_s = t_s;
        self.acc.peak_queue = self.acc.peak_queue.max(self.queue());
    }

    /// Sets the Ready replicas at trace time `t_s`: new names start idle and take requests at
    /// once (first the gateway backlog); missing names stop taking requests and drain for
    /// `drain_s`, then drop the rest (counted failed). The same as [`Fleet::set_pods`] with every
    /// pod routable.
    pub fn set_ready(&mut self, t_s: f64, names: &BTreeSet<String>) {
        self.set_pods(t_s, names, names);
    }

    /// Sets the pods at trace time `t_s` as a gateway routing over a Service's EndpointSlices
    /// sees them: `routable` (ready endpoints) take requests; `alive` pods that are not routable
    /// (out of rotation) keep serving what they hold, take nothing new and are still scraped;
    /// pods in neither were deleted: they serve what they hold for at most `drain_s` (the
    /// termination grace; 0 = killed at once), then drop the rest (counted failed). A name in
    /// `routable` is taken as alive.
    pub fn set_pods(&mut self, t_s: f64, routable: &BTreeSet<String>, alive: &BTreeSet<String>) {
        self.advance_to(t_s);
        let before = self.ready.len();
        let leaving: Vec<String> = self
            .ready
            .keys()
            .filter(|n| !routable.contains(*n))
            .cloned()
            .collect();
        for name in leaving {
            if let Some(replica) = self.ready.remove(&name) {
                self.draining.insert(
                    name,
                    Draining {
                        replica,
                        deadline_s: f64::INFINITY,
                    },
                );
            }
        }
        let deadline_s = self.now_s + self.params.drain_s.max(0.0);
        let mut killed = Vec::new();
        for (name, d) in &mut self.draining {
            if d.parked() && !alive.contains(name) && !routable.contains(name) {
                d.deadline_s = deadline_s;
                if self.params.drain_s <= 0.0 {
                    self.acc.drop(d.replica.drop_all());
                }
                if d.replica.outstanding() == 0 {
                    killed.push(name.clone());
                }
            }
        }
        for name in killed {
            self.draining.remove(&name);
        }
        for name in routable {
            if !self.ready.contains_key(name) {
                let replica = match self.draining.remove(name) {
                    // A replica that comes back keeps what it was draining.
                    Some(d) => d.replica,
                    None => Replica::new(name.clone(), self.params, self.now_s),
                };
                self.ready.insert(name.clone(), replica);
            }
        }
        if self.ready.len() != before {
            self.acc.scale_events += 1;
        }
        self.acc.peak_ready = self.acc.peak_ready.max(self.ready.len());
        while !self.ready.is_empty() {
            let Some(req) = self.backlog.pop_front() else {
                break;
            };
            self.route(req);
        }
    }

    /// Requests (waiting + running) held by replica `name`, routable or draining; `None` when no
    /// such replica serves (never started, or its pod is gone and it holds nothing).
    pub fn in_flight(&self, name: &str) -> Option<usize> {
        self.ready
            .get(name)
            .map(Replica::outstanding)
            .or_else(|| self.draining.get(name).map(|d| d.replica.outstanding()))
    }

    /// A request arrives (at `req.arrival_s`, not before the fleet's clock): it goes to the
    /// Ready replica with the fewest outstanding requests, ties by name; without any Ready
    /// replica the gateway holds it.
    pub fn arrive(&mut self, req: Request) {
        self.advance_to(req.arrival_s);
        self.acc.arrived += 1;
        self.route(req);
        self.acc.peak_queue = self.acc.peak_queue.max(self.queue());
    }

    fn route(&mut self, req: Request) {
        // BTreeMap iterates by name, and min_by_key keeps the first of equal keys.
        match self.ready.values_mut().min_by_key(|r| r.outstanding()) {
            Some(replica) => replica.enqueue(req),
            None => self.backlog.push_back(req),
        }
    }

    /// Requests the gateway holds because no replica is Ready (the series that exists without
    /// pods, the activation signal of a fleet at zero).
    pub fn gateway_backlog(&self) -> usize {
        self.backlog.len()
    }

    /// Metrics of the Ready replicas, by name.
    pub fn metrics(&self) -> Vec<ReplicaMetrics> {
        self.ready.values().map(Replica::metrics).collect()
    }

    /// Metrics of every replica whose pod lives: the routable ones and those out of rotation
    /// (what Prometheus scrapes), by name.
    pub fn metrics_alive(&self) -> Vec<ReplicaMetrics> {
        let mut out: Vec<ReplicaMetrics> = self
            .ready
            .values()
            .map(Replica::metrics)
            .chain(
                self.draining
                    .values()
                    .filter(|d| d.parked())
                    .map(|d| d.replica.metrics()),
            )
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The report so far.
    pub fn report(&self) -> Report {
        let mut ttfts = self.acc.ttfts.clone();
        ttfts.sort_by(f64::total_cmp);
        // Counted as the TTFTs came, less the requests dropped after a timely first token.
        let within = self.acc.within_slo;
        let in_flight = self.ready.values().map(Replica::outstanding).sum::<usize>()
            + self
                .draining
                .values()
                .map(|d| d.replica.outstanding())
                .sum::<usize>()
            + self.backlog.len();
        Report {
            trace_seconds: self.now_s,
            replica_seconds: self.acc.replica_seconds,
            arrived: self.acc.arrived,
            served: ttfts.len() as u64,
            failed: self.acc.failed,
            in_flight: in_flight as u64,
            ttft_p50_s: percentile(&ttfts, 0.50),
            ttft_p95_s: percentile(&ttfts, 0.95),
            ttft_p99_s: percentile(&ttfts, 0.99),
            slo_ttft_s: self.params.slo_ttft_s,
            ttft_slo_share: if ttfts.is_empty() {
                f64::NAN
            } else {
                within as f64 / ttfts.len() as f64
            },
            peak_queue: self.acc.peak_queue,
            scale_events: self.acc.scale_events,
            peak_ready: self.acc.peak_ready,
        }
    }
}

/// Nearest-rank percentile of sorted values (NaN when empty).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A trace being replayed into a fleet in order.
#[derive(Clone, Debug)]
pub struct Replay {
    requests: Vec<Request>,
    next: usize,
}

impl Replay {
    /// Replays `requests` (sorted by arrival).
    pub fn new(requests: Vec<Request>) -> Self {
        Self { requests, next: 0 }
    }

    /// Whether every request has arrived.
    pub fn finished(&self) -> bool {
        self.next >= self.requests.len()
    }

    /// Delivers every request arriving up to `t_s` and steps the fleet to `t_s`; returns how
    /// many arrived.
    pub fn run_until(&mut self, fleet: &mut Fleet, t_s: f64) -> usize {
        let start = self.next;
        while let Some(req) = self.requests.get(self.next) {
            if req.arrival_s > t_s {
                break;
            }
            fleet.arrive(*req);
            self.next += 1;
        }
        fleet.advance_to(t_s);
        self.next - start
    }
}

/// Replays `requests` on a fixed set of `replicas` replicas (named `r00`, `r01`, …) until
/// `until_s`; returns the report (the tests' fixed-fleet baseline).
#[cfg(test)]
fn run_fixed(requests: Vec<Request>, replicas: usize, params: Params, until_s: f64) -> Report {
    let mut fleet = Fleet::new(params);
    let names: BTreeSet<String> = (0..replicas).map(|i| format!("r{i:02}")).collect();
    fleet.set_ready(0.0, &names);
    Replay::new(requests).run_until(&mut fleet, until_s);
    fleet.report()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{SplitMix64, scale};

    /// Poisson arrivals at `rate` per second for `span_s`, prompt 1000 and output 200 tokens
    /// (about the conversation trace's means), seeded.
    fn poisson(rate: f64, span_s: f64, seed: u64) -> Vec<Request> {
        let mut rng = SplitMix64::new(seed);
        let mut t = 0.0;
        let mut out = Vec::new();
        loop {
            t += -(1.0 - rng.next_f64()).ln() / rate;
            if t > span_s {
                return out;
            }
            out.push(Request {
                arrival_s: t,
                prompt_tokens: 1000,
                output_tokens: 200,
            });
        }
    }

    #[test]
    fn one_replica_saturates_and_its_queue_grows() {
        // ~10 req/s × (1000 prompt + 200 output) is more than one replica can do.
        let report = run_fixed(poisson(10.0, 300.0, 1), 1, Params::default(), 300.0);
        assert!(report.peak_queue > 200, "{report:?}");
        assert!(report.ttft_p95_s > 20.0, "{report:?}");
        assert!(report.in_flight > 200, "{report:?}");
    }

    #[test]
    fn more_replicas_really_lower_the_queue_and_ttft() {
        let reqs = poisson(10.0, 300.0, 2);
        let one = run_fixed(reqs.clone(), 1, Params::default(), 400.0);
        let two = run_fixed(reqs.clone(), 2, Params::default(), 400.0);
        let four = run_fixed(reqs, 4, Params::default(), 400.0);
        assert!(one.peak_queue > two.peak_queue, "{one:?} {two:?}");
        assert!(two.peak_queue >= four.peak_queue, "{two:?} {four:?}");
        assert!(one.ttft_p95_s > two.ttft_p95_s && two.ttft_p95_s > four.ttft_p95_s);
        assert!(four.ttft_slo_share > 0.99, "{four:?}");
        assert_eq!(four.in_flight, 0);
        assert!((four.replica_seconds - 1600.0).abs() < 1e-6);
    }

    #[test]
    fn routing_picks_least_outstanding_then_name() {
        let mut fleet = Fleet::new(Params::default());
        let names: BTreeSet<String> = ["b", "a", "c"].iter().map(|s| s.to_string()).collect();
        fleet.set_ready(0.0, &names);
        let big = |t| Request {
            arrival_s: t,
            prompt_tokens: 10,
            output_tokens: 10_000,
        };
        // All idle: ties broken by name, so a, b, c, then a again.
        for i in 0..4 {
            fleet.arrive(big(f64::from(i) * 1e-3));
        }
        let running: Vec<(String, usize)> = fleet
            .metrics()
            .iter()
            .map(|m| (m.name.clone(), m.running + m.waiting))
            .collect();
        assert_eq!(
            running,
            vec![("a".into(), 2), ("b".into(), 1), ("c".into(), 1)]
        );
        fleet.arrive(big(0.01));
        fleet.arrive(big(0.011));
        let counts: Vec<usize> = fleet
            .metrics()
            .iter()
            .map(|m| m.running + m.waiting)
            .collect();
        assert_eq!(counts, vec![2, 2, 2]);
    }

    #[test]
    fn a_removed_replica_drains_then_drops_the_rest() {
        let params = Params::default();
        let mut fleet = Fleet::new(params);
        let one: BTreeSet<String> = ["a".to_string()].into();
        fleet.set_ready(0.0, &one);
        // Short request finishes inside the drain; a very long one cannot.
        fleet.arrive(Request {
            arrival_s: 0.0,
            prompt_tokens: 100,
            output_tokens: 10,
        });
        fleet.arrive(Request {
            arrival_s: 0.0,
            prompt_tokens: 100,
            output_tokens: 100_000,
        });
        fleet.set_ready(1.0, &BTreeSet::new());
        assert!(
            fleet.metrics().is_empty(),
            "a draining replica is not Ready"
        );
        // New arrivals wait at the gateway, not on the draining replica.
        fleet.arrive(Request {
            arrival_s: 2.0,
            prompt_tokens: 100,
            output_tokens: 10,
        });
        fleet.advance_to(1.0 + params.drain_s - 0.1);
        let r = fleet.report();
        assert_eq!((r.served, r.failed, r.in_flight), (2, 0, 2));
        fleet.advance_to(1.0 + params.drain_s + 0.1);
        let r = fleet.report();
        assert_eq!((r.failed, r.in_flight), (1, 1), "{r:?}");
        // A new replica takes the backlog.
        let two: BTreeSet<String> = ["b".to_string()].into();
        fleet.set_ready(70.0, &two);
        fleet.advance_to(80.0);
        let r = fleet.report();
        assert_eq!(
            (r.served, r.failed, r.in_flight, r.scale_events),
            (3, 1, 0, 3)
        );
    }

    #[test]
    fn out_of_rotation_finishes_its_requests_and_a_deleted_pod_loses_them() {
        let params = Params {
            drain_s: 0.0,
            ..Params::default()
        };
        let long = |t| Request {
            arrival_s: t,
            prompt_tokens: 100,
            output_tokens: 300,
        };
        let set =
            |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| s.to_string()).collect() };
        // Out of rotation: a keeps serving what it holds, new arrivals go to b only.
        let mut fleet = Fleet::new(params);
        fleet.set_ready(0.0, &set(&["a", "b"]));
        fleet.arrive(long(0.0));
        fleet.arrive(long(0.0));
        assert_eq!(
            (fleet.in_flight("a"), fleet.in_flight("b")),
            (Some(1), Some(1))
        );
        fleet.set_pods(0.5, &set(&["b"]), &set(&["a", "b"]));
        fleet.arrive(long(0.6));
        assert_eq!(fleet.in_flight("a"), Some(1));
        assert_eq!(fleet.in_flight("b"), Some(2));
        assert_eq!(fleet.metrics_alive().len(), 2, "a is still scraped");
        assert_eq!(fleet.metrics().len(), 1);
        fleet.advance_to(60.0);
        assert_eq!(fleet.in_flight("a"), Some(0), "a drained");
        // Deleted once idle: nothing lost.
        fleet.set_pods(61.0, &set(&["b"]), &set(&["b"]));
        assert_eq!(fleet.in_flight("a"), None);
        assert_eq!(fleet.report().failed, 0);

        // Without a drain, a pod deleted with requests in flight loses them at once.
        let mut fleet = Fleet::new(params);
        fleet.set_ready(0.0, &set(&["a", "b"]));
        fleet.arrive(long(0.0));
        fleet.arrive(long(0.0));
        fleet.set_ready(0.5, &set(&["b"]));
        let r = fleet.report();
        assert_eq!((r.failed, r.in_flight), (1, 1), "{r:?}");
        // Back in rotation: a parked replica returns with what it holds.
        let mut fleet = Fleet::new(params);
        fleet.set_ready(0.0, &set(&["a"]));
        fleet.arrive(long(0.0));
        fleet.set_pods(0.1, &set(&[]), &set(&["a"]));
        fleet.set_ready(0.2, &set(&["a"]));
        assert_eq!(fleet.in_flight("a"), Some(1));
        assert_eq!(fleet.report().failed, 0);
    }

    #[test]
    fn a_request_cut_off_after_a_timely_first_token_is_an_slo_miss() {
        let params = Params {
            drain_s: 0.0,
            ..Params::default()
        };
        let set =
            |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| s.to_string()).collect() };
        let mut fleet = Fleet::new(params);
        fleet.set_ready(0.0, &set(&["a", "b"]));
        for _ in 0..2 {
            fleet.arrive(Request {
                arrival_s: 0.0,
                prompt_tokens: 100,
                output_tokens: 300,
            });
        }
        // 100 prompt tokens at 12,000 tokens/s and a 12 ms step: both first tokens within 2 s.
        fleet.advance_to(0.5);
        assert_eq!(fleet.served_within(), (2, 2));
        // a is deleted with its request still decoding: lost, and no longer within the SLO.
        fleet.set_ready(0.5, &set(&["b"]));
        let r = fleet.report();
        assert_eq!((r.failed, r.in_flight), (1, 1), "{r:?}");
        assert_eq!(fleet.served_within(), (2, 1));
        assert!((r.ttft_slo_share - 0.5).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn runs_are_deterministic_under_scale() {
        let base = poisson(3.0, 200.0, 3);
        let run = |seed| {
            let reqs = scale(&base, 1.7, seed);
            run_fixed(reqs, 2, Params::default(), 250.0)
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11).arrived, run(12).arrived);
    }
}

/// Capacity of the model on the real conversation trace (`traces/azure-llm-2023/conv.csv`),
/// printed per fleet size. Ignored: four hour-long fleets are slow in a debug build.
#[cfg(test)]
mod conv_trace {
    use super::*;
    use crate::trace::read_azure;

    #[test]
    #[ignore = "slow in a debug build: cargo test --release -p llmscaler-loadmodel -- --ignored"]
    fn conv_trace_needs_one_to_three_replicas_at_scale_1() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../traces/azure-llm-2023/conv.csv"
        );
        let file = std::fs::File::open(path).expect("the shipped conversation trace");
        let reqs = read_azure(file).expect("valid trace");
        let span = reqs.last().map_or(0.0, |r| r.arrival_s);
        let mut reports = Vec::new();
        for n in 1..=4 {
            let r = run_fixed(reqs.clone(), n, Params::default(), span + 120.0);
            println!(
                "{n} replicas: p50 {:.2}s p95 {:.2}s p99 {:.2}s slo {:.3} peak queue {} in flight {}",
                r.ttft_p50_s,
                r.ttft_p95_s,
                r.ttft_p99_s,
                r.ttft_slo_share,
                r.peak_queue,
                r.in_flight
            );
            reports.push(r);
        }
        assert!(reports[3].ttft_slo_share > 0.99, "{:?}", reports[3]);
        assert!(reports[0].ttft_slo_share < reports[3].ttft_slo_share);
    }
}
