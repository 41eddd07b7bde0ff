//! The queueing capacity recommender (docs/scaling.md#capacity-recommender): the fewest replicas
//! `c` for which an M/M/c queue with arrival rate `λ` and per-replica service rate `μ` keeps the
//! mean wait in queue, `ErlangC(c, λ/μ) / (cμ − λ)`, within a bound.
//!
//! The recommendation depends on the arrival rate, not on how loaded the Ready replicas are, so
//! replicas requested but still starting count as the capacity they will be: a queue that grows
//! while they start does not raise it again (only the optional backlog term sees the queue, and
//! spreads it over `max(backlogSeconds, start-up time)`).
//!
//! Source: A. K. Erlang's delay formula (Erlang C) via the Erlang B recursion, e.g. Kleinrock,
//! "Queueing Systems", vol. 1, §3.5.

use llmscaler_api::{LLMScalerSpec, parse_positive};

use super::{MetricOutcome, Skip};

/// `maxQueueWaitSeconds` default, seconds.
pub(crate) const DEFAULT_MAX_QUEUE_WAIT_SECONDS: f64 = 0.5;
/// `backlogSeconds` default, seconds.
pub(crate) const DEFAULT_BACKLOG_SECONDS: f64 = 60.0;
/// The outcome's name in status, Events and `simulate` columns.
pub const NAME: &str = "capacity";

/// The model of a (validated) `spec.capacity`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CapacityModel {
    /// `μ`: requests per second one Ready replica completes at full load.
    pub replica_rate: f64,
    /// Bound on the mean wait in queue, seconds.
    pub max_wait_s: f64,
    /// Seconds within which a backlog should be served.
    pub backlog_s: f64,
}

/// One sync's readings of the capacity queries; `E` is the source's error type.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityInput<E> {
    /// The arrival rate, requests/s, or why it could not be read.
    pub arrival: Result<f64, E>,
    /// The backlog, requests (`None` without `backlogQuery`), or why it could not be read.
    pub backlog: Option<Result<f64, E>>,
}

impl CapacityModel {
    /// The model of `spec.capacity`; `None` when unset or when a number does not parse (only
    /// reachable when admission was bypassed; the controller re-checks first).
    pub(crate) fn from_spec(spec: &LLMScalerSpec) -> Option<Self> {
        let capacity = spec.capacity.as_ref()?;
        let replica_rate = parse_positive(&capacity.replica_requests_per_second).ok()?;
        let max_wait_s = match &capacity.max_queue_wait_seconds {
            Some(raw) => parse_positive(raw).ok()?,
            None => DEFAULT_MAX_QUEUE_WAIT_SECONDS,
        };
        let backlog_s = capacity
            .backlog_seconds
            .map_or(DEFAULT_BACKLOG_SECONDS, |s| f64::from(s.max(1)));
        Some(Self {
            replica_rate,
            max_wait_s,
            backlog_s,
        })
    }

    /// The model with the backlog spread over at least `startup_s` seconds (the start-up time
    /// in force, 0 without `spec.startup`): replicas added for a backlog serve it only once
    /// Ready, so sizing it to be served sooner than that buys replicas for a queue the Ready
    /// ones will have served by then (docs/scaling.md#capacity-recommender).
    ///
    /// Worked numbers: 289 requests waiting, `backlogSeconds` 60, start-up 90 s: 3.2
    /// requests/s added to λ instead of 4.8.
    pub(crate) fn with_startup(mut self, startup_s: f64) -> Self {
        self.backlog_s = self.backlog_s.max(startup_s);
        self
    }

    /// The fewest replicas (at most `cap`, then `cap + 1` meaning "more than `cap`") for
    /// `arrival` requests/s plus `backlog` requests spread over the backlog time. 0 without
    /// load. Inputs must be finite and non-negative.
    pub(crate) fn replicas(&self, arrival: f64, backlog: f64, cap: i32) -> i32 {
        let lambda = arrival + backlog / self.backlog_s;
        replicas_for_wait(lambda, self.replica_rate, self.max_wait_s, cap)
    }

    /// The outcome of one sync: the recommendation in replicas, or why the capacity was
    /// skipped (a failed or non-finite/negative reading; never read as zero). `cap` bounds the
    /// search (the policy's `maxReplicas`).
    pub(crate) fn outcome<E: Clone>(&self, input: &CapacityInput<E>, cap: i32) -> MetricOutcome<E> {
        let arrival = match &input.arrival {
            Ok(v) => Ok(*v),
            Err(why) => Err(Skip::Unavailable(why.clone())),
        };
        let backlog = match &input.backlog {
            None => Ok(0.0),
            Some(Ok(v)) => Ok(*v),
            Some(Err(why)) => Err(Skip::Unavailable(why.clone())),
        };
        let measurable = |v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(Skip::NotMeasurable(v))
            }
        };
        let result = arrival
            .and_then(measurable)
            .and_then(|a| backlog.and_then(measurable).map(|b| (a, b)));
        let value = result.as_ref().ok().map(|(a, b)| a + b / self.backlog_s);
        MetricOutcome {
            name: NAME.to_owned(),
            value,
            ratio: None,
            recommendation: result.map(|(a, b)| self.replicas(a, b, cap)),
            guardrail: false,
        }
    }
}

/// The Erlang C probability that an arrival waits, for `servers` servers and offered load
/// `load = λ/μ` (Erlangs); 1 when `load >= servers`. Computed with the Erlang B recursion
/// `B(k) = a·B(k−1) / (k + a·B(k−1))`, stable for any size. The tests' reference for the
/// search of [`fewest_servers`], which carries the same recursion along.
#[cfg(test)]
pub(super) fn erlang_c(servers: i32, load: f64) -> f64 {
    if servers <= 0 || load >= f64::from(servers) {
        return 1.0;
    }
    if load <= 0.0 {
        return 0.0;
    }
    let mut b = 1.0;
    for k in 1..=servers {
        b = load * b / (f64::from(k) + load * b);
    }
    let c = f64::from(servers);
    c * b / (c - load * (1.0 - b))
}

/// The fewest servers `c ≥ 1` whose mean wait in queue `ErlangC(c, λ/μ) / (cμ − λ)` is at most
/// `max_wait_s`; 0 when `lambda` is 0. Searches up to `cap` and returns `cap + 1` (saturating)
/// when even `cap` is not enough. `mu` and `max_wait_s` must be greater than zero.
pub(crate) fn replicas_for_wait(lambda: f64, mu: f64, max_wait_s: f64, cap: i32) -> i32 {
    fewest_servers(lambda, mu, cap, |servers, wait_probability| {
        wait_probability / (servers * mu - lambda) <= max_wait_s
    })
}

/// The M/M/c search shared by [`replicas_for_wait`] and the objective's
/// [`super::objective::replicas_for_ttft`]: the fewest servers `c ≥ 1` above the offered load
/// `λ/μ` for which `enough(c, ErlangC(c, λ/μ))` holds; 0 when `lambda` is 0 (or not finite);
/// `cap + 1` (saturating) when even `cap` is not enough. The Erlang B value is carried along,
/// so the search is linear and stable for any size.
pub(crate) fn fewest_servers(
    lambda: f64,
    mu: f64,
    cap: i32,
    enough: impl Fn(f64, f64) -> bool,
) -> i32 {
    if lambda <= 0.0 || !lambda.is_finite() {
        return 0;
    }
    let load = lambda / mu;
    let cap = cap.max(1);
    if load >= f64::from(cap) {
        return cap.saturating_add(1);
    }
    // The first c above the load.
    #[allow(clippy::cast_possible_truncation)]
    let start = (load.floor() as i32).saturating_add(1).max(1);
    let mut b = 1.0;
    for k in 1..start {
        b = load * b / (f64::from(k) + load * b);
    }
    let mut c = start;
    loop {
        b = load * b / (f64::from(c) + load * b);
        let servers = f64::from(c);
        if enough(servers, servers * b / (servers - load * (1.0 - b))) {
            return c;
        }
        if c >= cap {
            return cap.saturating_add(1);
        }
        c += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erlang_c_matches_worked_values() {
        // Two servers at a = 1: C = (a²/2 · 2/(2−1)) / (1 + a + a²/2 · 2) = 1/3.
        assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
        // One server: C = ρ (M/M/1).
        assert!((erlang_c(1, 0.7) - 0.7).abs() < 1e-12);
        // Textbook call-centre example: 10 agents, 8 Erlangs → C ≈ 0.409.
        assert!((erlang_c(10, 8.0) - 0.4092).abs() < 1e-3);
        assert_eq!(erlang_c(3, 3.0), 1.0);
        assert_eq!(erlang_c(3, 0.0), 0.0);
    }

    #[test]
    fn sizes_for_the_wait_bound() {
        // λ = 8 req/s, μ = 4.5 req/s per replica (a = 1.78):
        // c = 2: C ≈ 0.84, wait = 0.84 / (9 − 8) ≈ 0.84 s; c = 3: C ≈ 0.29, wait ≈ 0.053 s.
        assert_eq!(replicas_for_wait(8.0, 4.5, 0.5, 128), 3);
        assert_eq!(replicas_for_wait(8.0, 4.5, 1.0, 128), 2);
        assert_eq!(replicas_for_wait(0.0, 4.5, 0.5, 128), 0);
        assert_eq!(replicas_for_wait(0.1, 4.5, 0.5, 128), 1);
        // Larger fleets run hotter at the same bound (economy of scale).
        let big = replicas_for_wait(400.0, 4.5, 0.5, 1000);
        assert!(big > 89 && big < 100, "{big}");
        // Beyond the cap: cap + 1.
        assert_eq!(replicas_for_wait(1000.0, 4.5, 0.5, 10), 11);
        assert_eq!(replicas_for_wait(1e300, 4.5, 0.5, i32::MAX), i32::MAX);
    }

    /// The recommended scaler's model: μ 4.5 requests/s, a 0.5 s wait, the backlog over 60 s.
    const CONV: CapacityModel = CapacityModel {
        replica_rate: 4.5,
        max_wait_s: 0.5,
        backlog_s: 60.0,
    };

    #[test]
    fn a_backlog_is_spread_over_the_start_up_time_when_it_is_longer() {
        // The conversation trace's flash crowd at scale 1 (docs/scaling.md#capacity-recommender):
        // 25.1 requests/s arriving, 289 waiting on 2 Ready replicas, start-up 90 s.
        let model = CONV;
        // Over 60 s: λ = 25.1 + 4.82 = 29.92 → 8 replicas.
        assert_eq!(model.replicas(25.1, 289.0, 128), 8);
        // Over the 90 s the added replicas take to start: λ = 25.1 + 3.21 = 28.31 → 7.
        let spread = model.with_startup(90.0);
        assert_eq!(spread.backlog_s, 90.0);
        assert_eq!(spread.replicas(25.1, 289.0, 128), 7);
        // A start-up shorter than backlogSeconds changes nothing.
        assert_eq!(model.with_startup(30.0), model);
        assert_eq!(model.with_startup(0.0), model);
    }

    #[test]
    fn the_backlog_adds_its_spread_rate_and_bad_readings_skip() {
        let model = CONV;
        // 5 req/s + 180 waiting over 60 s = 8 req/s.
        assert_eq!(model.replicas(5.0, 180.0, 128), 3);
        let ok = CapacityInput::<String> {
            arrival: Ok(5.0),
            backlog: Some(Ok(180.0)),
        };
        let outcome = model.outcome(&ok, 128);
        assert_eq!(outcome.recommendation, Ok(3));
        assert_eq!(outcome.value, Some(8.0));
        let failed = CapacityInput::<String> {
            arrival: Ok(5.0),
            backlog: Some(Err("down".into())),
        };
        assert_eq!(
            model.outcome(&failed, 128).recommendation,
            Err(Skip::Unavailable("down".into()))
        );
        let nan = CapacityInput::<String> {
            arrival: Ok(f64::NAN),
            backlog: None,
        };
        assert!(matches!(
            model.outcome(&nan, 128).recommendation,
            Err(Skip::NotMeasurable(_))
        ));
    }
}
