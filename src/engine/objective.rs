//! The SLO recommender of `spec.objective` (docs/objective.md): the fewest replicas `c` for
//! which an M/M/c queue with the demand `λ` and the learned per-replica rate `μ`
//! ([`super::calibration`]) keeps the share of requests that wait longer than the TTFT budget
//! within `1 − attainment`.
//!
//! For M/M/c (first come, first served) the waiting time has the tail
//! `P(W > t) = C(c, a) · e^{−(cμ − λ)·t}`, with `a = λ/μ` and `C` Erlang's delay probability.
//! The budget `t` is the TTFT objective less the TTFT of a request that does not queue (its
//! own prefill, learned; at least a quarter of the objective is left for queueing).
//!
//! The demand `λ` is the larger of the request path (completions/s) and the token path (prompt
//! tokens/s over the mean prompt of the calibration: a burst of long prompts counts for what it
//! costs), plus the growth of the requests in the system (arrivals not completed yet), plus the
//! queue spread over `max(start-up, 60 s)`, times the correction factor, and projected along
//! its rising trend by the lookahead (at most doubling it).
//!
//! Source: Kleinrock, "Queueing Systems", vol. 1, §3.5 (the M/M/c waiting-time distribution).

use llmscaler_api::{LLMScalerSpec, parse_attainment, parse_positive};

use super::calibration::{Estimate, Evidence};
use super::{MetricOutcome, Skip};

/// The outcome's name in status, Events and `simulate` columns.
pub const NAME: &str = "objective";
/// The name of the built-in TTFT guardrail.
pub const TTFT_NAME: &str = "ttft";
/// The shortest time a backlog is spread over, seconds.
pub(crate) const MIN_BACKLOG_SECONDS: f64 = 60.0;
/// The rate window of the queries (the calibration's `WINDOW_MS`).
const WINDOW: &str = "1m";
/// How long a pod must have queued without a break for its completions to count as its
/// saturated throughput: two rate windows, so that the rate window holds no minute of the
/// queue's start (a replica that starts to queue with a light batch completes its shortest
/// requests first, and that minute reads high; docs/objective.md#calibration).
const QUEUED: &str = "2m";

/// Index of each reading in [`queries`]' order.
pub(crate) mod read {
    pub const COMPLETIONS: usize = 0;
    pub const PROMPT_TOKENS: usize = 1;
    pub const GENERATION_TOKENS: usize = 2;
    pub const WAITING: usize = 3;
    pub const RUNNING: usize = 4;
    pub const REPLICAS: usize = 5;
    pub const MAX_RUNNING: usize = 6;
    pub const MAX_WAITING: usize = 7;
    pub const MIN_WAITING: usize = 8;
    pub const INTER_TOKEN: usize = 9;
    pub const TTFT_QUANTILE: usize = 10;
    pub const TTFT_MEAN: usize = 11;
    pub const KV_USAGE: usize = 12;
    pub const POD_SATURATED: usize = 13;
    /// The lower and upper bound of the TTFT histogram bucket that holds the attainment
    /// quantile, seconds (docs/objective.md#each-sync).
    pub const TTFT_BUCKET_LOW: usize = 14;
    pub const TTFT_BUCKET_HIGH: usize = 15;
    /// How many there are.
    #[cfg(test)]
    pub const COUNT: usize = 16;
}

/// The model of a (validated) `spec.objective`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ObjectiveModel {
    /// The TTFT bound, seconds.
    pub ttft_s: f64,
    /// The share of requests within it, 0..1.
    pub attainment: f64,
    /// The lookahead, seconds.
    pub lookahead_s: f64,
}

/// What the recommender needs of one sync besides the estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Demand {
    /// The fleet's readings.
    pub evidence: Evidence,
    /// The growth of the requests in the system (waiting + running) over the rate window,
    /// requests/s: arrivals not yet completed (negative while a queue drains).
    pub growth: f64,
    /// The rising trend of the request rate, requests/s per second (0 when falling).
    pub trend: f64,
    /// The start-up time, seconds (0 without `spec.startup`).
    pub startup_s: f64,
}

impl ObjectiveModel {
    /// The model of `spec.objective`; `None` when unset or when a number does not parse (only
    /// reachable when admission was bypassed; the controller re-checks first).
    pub(crate) fn from_spec(spec: &LLMScalerSpec) -> Option<Self> {
        let objective = spec.objective.as_ref()?;
        Some(Self {
            ttft_s: parse_positive(&objective.ttft_seconds).ok()?,
            attainment: parse_attainment(&objective.attainment).ok()?,
            lookahead_s: f64::from(objective.lookahead_seconds.unwrap_or(0).max(0)),
        })
    }

    /// The demand `λ` of a sync, requests/s (see the module documentation), with the mean
    /// prompt and output tokens of the calibration `mix`.
    pub(crate) fn demand(&self, d: &Demand, estimate: &Estimate, mix: Option<(f64, f64)>) -> f64 {
        let e = &d.evidence;
        let tokens = match mix {
            Some((prompt, _)) if prompt > 0.0 => e.prompt_tokens / prompt,
            _ => 0.0,
        };
        let base = (e.completions.max(tokens) + d.growth).max(0.0);
        let backlog = e.waiting / d.startup_s.max(MIN_BACKLOG_SECONDS);
        let lookahead = self.lookahead_s.max(d.startup_s);
        let ahead = (d.trend.max(0.0) * lookahead).min(base);
        (base + ahead + backlog) * estimate.correction
    }

    /// The queueing budget, seconds: the objective less the unqueued TTFT, at least a quarter
    /// of the objective.
    pub(crate) fn budget(&self, floor: Option<f64>) -> f64 {
        (self.ttft_s - floor.unwrap_or(0.0)).max(0.25 * self.ttft_s)
    }

    /// The outcome of one sync: the replicas for `lambda` at the estimate's rate, `cap`
    /// bounding the search.
    pub(crate) fn outcome<E>(
        &self,
        lambda: f64,
        estimate: &Estimate,
        floor: Option<f64>,
        cap: i32,
    ) -> MetricOutcome<E> {
        let recommendation = if lambda.is_finite() && lambda >= 0.0 {
            Ok(replicas_for_ttft(
                lambda,
                estimate.requests_per_second,
                self.budget(floor),
                self.attainment,
                cap,
            ))
        } else {
            Err(Skip::NotMeasurable(lambda))
        };
        MetricOutcome {
            name: NAME.to_owned(),
            value: Some(lambda),
            ratio: None,
            recommendation,
            guardrail: false,
        }
    }
}

/// The PromQL queries of `spec.objective`, in the order of [`read`], on the series selected by
/// `seriesSelector`; `None` without an objective.
pub fn queries(spec: &LLMScalerSpec) -> Option<Vec<String>> {
    let objective = spec.objective.as_ref()?;
    let s = objective.series_selector.trim();
    let attainment = parse_attainment(&objective.attainment).unwrap_or(0.99);
    // Pods queued at every scrape of the last `QUEUED`, that existed `QUEUED` ago, and that are
    // still there and queued now (a pod deleted or crashed since leaves a staleness marker the
    // range selectors skip, while its completions stay in the rate window).
    let queued = format!(
        "((min by (pod) (min_over_time(vllm:num_requests_waiting{{{s}}}[{QUEUED}])) > 0) \
         and on (pod) (min by (pod) (vllm:num_requests_waiting{{{s}}}) > 0) \
         and on (pod) min by (pod) (vllm:num_requests_waiting{{{s}}} offset {QUEUED}))"
    );
    let rate = |name: &str| format!("sum(rate({name}{{{s}}}[{WINDOW}]))");
    let mean = |name: &str| {
        format!(
            "{} / {}",
            rate(&format!("{name}_sum")),
            rate(&format!("{name}_count"))
        )
    };
    // The buckets as a 0/1 step at the first bucket whose cumulative count reaches the
    // attainment's rank: `histogram_quantile` over it gives the bounds of the bucket holding the
    // quantile (at φ = 1 its upper bound, at a tiny φ its lower bound; the largest finite bound
    // for both when the rank is in `+Inf`).
    let buckets =
        format!("sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{s}}}[{WINDOW}]))");
    let step = format!("{buckets} >= bool scalar({attainment} * max({buckets}))");
    Some(vec![
        rate("vllm:request_success_total"),
        rate("vllm:prompt_tokens_total"),
        rate("vllm:generation_tokens_total"),
        format!("sum(vllm:num_requests_waiting{{{s}}})"),
        format!("sum(vllm:num_requests_running{{{s}}})"),
        format!("count(vllm:num_requests_running{{{s}}})"),
        format!("max(vllm:num_requests_running{{{s}}})"),
        format!("max(vllm:num_requests_waiting{{{s}}})"),
        format!("min(vllm:num_requests_waiting{{{s}}})"),
        mean("vllm:inter_token_latency_seconds"),
        format!(
            "histogram_quantile({attainment}, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{s}}}[{WINDOW}])))"
        ),
        mean("vllm:time_to_first_token_seconds"),
        format!("sum(vllm:kv_cache_usage_perc{{{s}}})"),
        // Completions per replica of the pods that existed `QUEUED` ago and had a queue at
        // every scrape since (whatever the rest of the fleet did); empty when none did. Summed
        // and counted as the fleet's completions and replicas are. Without a `pod` label the
        // fleet is one group: every replica queued, but replicas added or removed within
        // `QUEUED` are not told apart (docs/objective.md).
        format!(
            "sum(sum by (pod) (rate(vllm:request_success_total{{{s}}}[{WINDOW}])) and on (pod) {queued}) \
             / count(vllm:num_requests_running{{{s}}} and on (pod) {queued})"
        ),
        format!("histogram_quantile(1e-9, {step})"),
        format!("histogram_quantile(1, {step})"),
    ])
}

/// The fleet evidence of one sync's readings (in [`queries`]' order). A rate or gauge that
/// failed makes the whole reading unusable (`Err` with the first failure: a failing metric
/// never lowers capacity); the latencies are optional (an idle window has none).
///
/// # Errors
/// The first failed or non-finite count or rate, as a [`Skip`].
pub(crate) fn evidence<E: Clone>(readings: &[Result<f64, E>]) -> Result<Evidence, Skip<E>> {
    let value = |i: usize| -> Result<f64, Skip<E>> {
        match readings.get(i) {
            Some(Ok(v)) if v.is_finite() && *v >= 0.0 => Ok(*v),
            Some(Ok(v)) => Err(Skip::NotMeasurable(*v)),
            Some(Err(why)) => Err(Skip::Unavailable(why.clone())),
            None => Err(Skip::NotMeasurable(f64::NAN)),
        }
    };
    let optional = |i: usize| value(i).ok().filter(|v| *v > 0.0);
    Ok(Evidence {
        completions: value(read::COMPLETIONS)?,
        prompt_tokens: value(read::PROMPT_TOKENS)?,
        generation_tokens: value(read::GENERATION_TOKENS)?,
        waiting: value(read::WAITING)?,
        running: value(read::RUNNING)?,
        replicas: value(read::REPLICAS)?,
        max_running: value(read::MAX_RUNNING)?,
        max_waiting: value(read::MAX_WAITING)?,
        min_waiting: value(read::MIN_WAITING)?,
        inter_token: optional(read::INTER_TOKEN),
        ttft_mean: optional(read::TTFT_MEAN),
        kv_usage: value(read::KV_USAGE)?,
        pod_saturated: optional(read::POD_SATURATED),
    })
}

/// The fewest servers `c ≥ 1` with `C(c, λ/μ)·e^{−(cμ−λ)·t} ≤ 1 − attainment`; 0 when `lambda`
/// is 0. Searches up to `cap` and returns `cap + 1` (saturating) when even `cap` is not
/// enough. `mu` must be greater than zero (else `cap + 1`).
pub(crate) fn replicas_for_ttft(lambda: f64, mu: f64, t: f64, attainment: f64, cap: i32) -> i32 {
    if lambda <= 0.0 || !lambda.is_finite() {
        return 0;
    }
    if !(mu.is_finite() && mu > 0.0) {
        return cap.max(1).saturating_add(1);
    }
    let miss = 1.0 - attainment;
    super::capacity::fewest_servers(lambda, mu, cap, |servers, wait_probability| {
        wait_probability * (-(servers * mu - lambda) * t).exp() <= miss
    })
}

/// The rising trend of `(time ms, rate)` points, rate per second (least squares; 0 with fewer
/// than three points or a falling trend).
pub(crate) fn trend(points: &[(i64, f64)]) -> f64 {
    if points.len() < 3 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = points.len() as f64;
    #[allow(clippy::cast_precision_loss)]
    let xs: Vec<f64> = points.iter().map(|(t, _)| *t as f64 / 1000.0).collect();
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (sxy, sxx) = xs
        .iter()
        .zip(points)
        .fold((0.0, 0.0), |(sxy, sxx), (x, (_, y))| {
            (
                sxy + (x - mean_x) * (y - mean_y),
                sxx + (x - mean_x) * (x - mean_x),
            )
        });
    let slope = sxy / sxx;
    if slope.is_finite() {
        slope.max(0.0)
    } else {
        0.0
    }
}

/// A scaler with `objective: {ttftSeconds: "2", attainment: "0.99"}` on the series
/// `namespace="x"`, 1–20 replicas (the unit tests' spec).
#[cfg(test)]
pub(crate) fn test_spec() -> LLMScalerSpec {
    let mut spec = LLMScalerSpec::new(
        llmscaler_api::TargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "vllm".into(),
        },
        "http://prometheus:9090",
        1,
        20,
    );
    spec.objective = Some(llmscaler_api::Objective {
        ttft_seconds: "2".into(),
        attainment: "0.99".into(),
        runtime: None,
        series_selector: "namespace=\"x\"".into(),
        lookahead_seconds: None,
    });
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::calibration::Basis;
    use crate::engine::capacity::erlang_c;

    #[test]
    fn the_calibration_waits_for_the_queries_rate_window() {
        assert_eq!(
            (WINDOW, crate::engine::calibration::WINDOW_MS),
            ("1m", 60_000)
        );
    }

    fn estimate(mu: f64, correction: f64) -> Estimate {
        Estimate {
            basis: Basis::Calibrated,
            requests_per_second: mu,
            prompt_tokens_per_second: None,
            lower_bound: 0.0,
            correction,
            samples: 10,
            line: None,
            stated_limit: None,
        }
    }

    /// The per-pod saturated reading over a Prometheus-like store at t = 180 s, scrapes every
    /// 15 s: pod a queued from t = 0 completing 2/s, pod b queued from t = 0 completing 4/s,
    /// pod c queued from t = 0 but empty once at t = 90 s, pod d started at t = 120 s and queued
    /// all its life (its first minute reads high: 9/s), pod e queued from t = 0 and deleted at
    /// t = 165 s (a staleness marker; its completions are still in the rate window). Only a and
    /// b count: (2 + 4) / 2 = 3. Without a `pod` label (series told apart by `instance`) it
    /// reads the fleet: a, b and a third replica each queued through 2 min complete
    /// (2 + 4 + 3) / 3 = 3.
    #[test]
    fn the_per_pod_saturated_query_counts_pods_queued_through_two_windows() {
        use crate::promql::{Labels, Store, evaluate_single, parse};
        let spec = test_spec();
        let query = &queries(&spec).unwrap()[read::POD_SATURATED];
        let expr = parse(query).expect("parses");
        let labels = |name: &str, key: &str, pod: &str| -> Labels {
            [("__name__", name), ("namespace", "x"), (key, pod)]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let store = |key: &str, pods: &[(&str, f64, i64, Option<i64>, i64)]| {
            let mut store = Store::new();
            for &(pod, per_s, from_ms, empty_at, until_ms) in pods {
                for t in (from_ms..=until_ms).step_by(15_000) {
                    #[allow(clippy::cast_precision_loss)]
                    let done = per_s * (t - from_ms) as f64 / 1000.0;
                    let waiting = if empty_at == Some(t) { 0.0 } else { 5.0 };
                    for (name, v) in [
                        ("vllm:request_success_total", done),
                        ("vllm:num_requests_waiting", waiting),
                        ("vllm:num_requests_running", 64.0),
                    ] {
                        store.push(&labels(name, key, pod), t, Some(v));
                    }
                }
                if until_ms < 180_000 {
                    let gone = [(key.to_owned(), pod.to_owned())].into_iter().collect();
                    store.mark_stale(&gone, until_ms + 15_000);
                }
            }
            store
        };
        let pods = [
            ("a", 2.0, 0, None, 180_000),
            ("b", 4.0, 0, None, 180_000),
            ("c", 6.0, 0, Some(90_000), 180_000),
            ("d", 9.0, 120_000, None, 180_000),
            ("e", 8.0, 0, None, 150_000),
        ];
        let got = evaluate_single(&expr, &store("pod", &pods), 180_000).expect("a value");
        assert!((got - 3.0).abs() < 1e-9, "{got}");
        let unlabelled = store(
            "instance",
            &[pods[0], pods[1], ("c", 3.0, 0, None, 180_000)],
        );
        let got = evaluate_single(&expr, &unlabelled, 180_000).expect("a value");
        assert!((got - 3.0).abs() < 1e-9, "{got}");
        // No pod queued through 2 min: no reading (the fleet's rule applies).
        let young = store("pod", &[pods[2], pods[3], pods[4]]);
        assert!(evaluate_single(&expr, &young, 180_000).is_err());
    }

    #[test]
    fn the_tail_search_has_worked_values() {
        // λ = 8, μ = 4.5 (a = 1.78), budget 1.8 s, 99 %:
        // c = 2: C = 0.837, e^{−(9 − 8)·1.8} = 0.165 → 0.138 > 0.01;
        // c = 3: C = 0.345, e^{−(13.5 − 8)·1.8} = 5.0e−5 → 1.7e−5 ≤ 0.01.
        assert!((erlang_c(2, 8.0 / 4.5) - 0.837).abs() < 1e-3);
        assert!((erlang_c(3, 8.0 / 4.5) - 0.345).abs() < 1e-3);
        assert_eq!(replicas_for_ttft(8.0, 4.5, 1.8, 0.99, 128), 3);
        // A looser objective (budget 10 s, 80 %): c = 2 gives 0.837 × e^{−10} ≈ 4e−5.
        assert_eq!(replicas_for_ttft(8.0, 4.5, 10.0, 0.8, 128), 2);
        assert_eq!(replicas_for_ttft(0.0, 4.5, 1.8, 0.99, 128), 0);
        assert_eq!(replicas_for_ttft(0.1, 4.5, 1.8, 0.99, 128), 1);
        // 400 requests/s at 4.5: a = 88.9; big fleets run hot, a few above the load.
        let big = replicas_for_ttft(400.0, 4.5, 1.8, 0.99, 1000);
        assert!((90..=95).contains(&big), "{big}");
        assert_eq!(replicas_for_ttft(1000.0, 4.5, 1.8, 0.99, 10), 11);
        assert_eq!(replicas_for_ttft(1.0, 0.0, 1.8, 0.99, 10), 11);
        assert_eq!(replicas_for_ttft(1e300, 4.5, 1.8, 0.99, i32::MAX), i32::MAX);
    }

    #[test]
    fn demand_counts_tokens_backlog_trend_and_correction() {
        let model = ObjectiveModel {
            ttft_s: 2.0,
            attainment: 0.99,
            lookahead_s: 0.0,
        };
        let evidence = Evidence {
            completions: 4.0,
            // 2 requests/s of 2,000-token prompts over a 1,000-token calibration mix: 4 req/s
            // on the token path as well; 6,000 tokens/s → 6 requests/s.
            prompt_tokens: 6000.0,
            waiting: 90.0,
            ..Evidence::default()
        };
        let d = Demand {
            evidence,
            growth: 0.0,
            trend: 0.01,
            startup_s: 90.0,
        };
        // base max(4, 6) = 6; ahead min(0.01 × 90, 6) = 0.9; backlog 90 / 90 = 1;
        // (6 + 0.9 + 1) × 1.5 = 11.85.
        let lambda = model.demand(&d, &estimate(4.5, 1.5), Some((1000.0, 200.0)));
        assert!((lambda - 11.85).abs() < 1e-9, "{lambda}");
        // 2 requests/s more in the system each second (a queue building): arrivals the
        // completions do not show; (6 + 2 + 0.9 + 1) × 1.5 = 14.85. A queue draining faster
        // than anything arrives leaves the backlog alone: (0 + 0 + 1) × 1.5 = 1.5.
        let building = Demand { growth: 2.0, ..d };
        let lambda = model.demand(&building, &estimate(4.5, 1.5), Some((1000.0, 200.0)));
        assert!((lambda - 14.85).abs() < 1e-9, "{lambda}");
        let draining = Demand { growth: -10.0, ..d };
        let lambda = model.demand(&draining, &estimate(4.5, 1.5), Some((1000.0, 200.0)));
        assert!((lambda - 1.5).abs() < 1e-9, "{lambda}");
        // The trend never more than doubles the demand.
        let steep = Demand { trend: 10.0, ..d };
        let lambda = model.demand(&steep, &estimate(4.5, 1.0), Some((1000.0, 200.0)));
        assert!((lambda - 13.0).abs() < 1e-9, "{lambda}");
        // The budget: 2 s less a 0.3 s floor; never below a quarter.
        assert!((model.budget(Some(0.3)) - 1.7).abs() < 1e-12);
        assert!((model.budget(Some(5.0)) - 0.5).abs() < 1e-12);
        let outcome: MetricOutcome<String> =
            model.outcome(8.0, &estimate(4.5, 1.0), Some(0.2), 128);
        assert_eq!(outcome.recommendation, Ok(3));
    }

    #[test]
    fn evidence_refuses_failed_counts_and_keeps_missing_latencies_optional() {
        let mut readings: Vec<Result<f64, String>> = vec![Ok(1.0); read::COUNT];
        readings[read::INTER_TOKEN] = Ok(f64::NAN);
        // No pod queued for 2 min: Prometheus answers an empty vector (no data).
        readings[read::POD_SATURATED] = Err("no data".into());
        let e = evidence(&readings).unwrap();
        assert_eq!((e.inter_token, e.pod_saturated), (None, None));
        assert_eq!(e.completions, 1.0);
        readings[read::WAITING] = Err("down".into());
        assert_eq!(evidence(&readings), Err(Skip::Unavailable("down".into())));
        readings[read::WAITING] = Ok(-1.0);
        assert!(matches!(evidence(&readings), Err(Skip::NotMeasurable(_))));
    }

    #[test]
    fn the_trend_is_rising_or_zero() {
        let rising: Vec<(i64, f64)> = (0..5)
            .map(|i| (i * 15_000, 1.0 + 0.15 * i as f64))
            .collect();
        assert!((trend(&rising) - 0.01).abs() < 1e-9);
        let falling: Vec<(i64, f64)> = (0..5).map(|i| (i * 15_000, 5.0 - i as f64)).collect();
        assert_eq!(trend(&falling), 0.0);
        assert_eq!(trend(&rising[..2]), 0.0);
    }
}
