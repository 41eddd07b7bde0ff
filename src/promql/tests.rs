//! One test per construct of the subset (`docs/promql.md`), and the refusal of one outside it.

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Two pods scraped every 15 s from t = 0 to t = 60 s: `waiting` gauges 2 and 4 (pod a, b),
/// a counter growing 1/s and 3/s, and a TTFT histogram.
fn store() -> Store {
    let mut s = Store::new();
    for (pod, waiting, per_s) in [("a", 2.0, 1.0), ("b", 4.0, 3.0)] {
        for k in 0..=4i64 {
            let t = k * 15_000;
            let l = labels(&[
                ("__name__", "vllm:num_requests_waiting"),
                ("pod", pod),
                ("app", "chat"),
            ]);
            s.push(&l, t, Some(waiting));
            let c = labels(&[
                ("__name__", "vllm:request_success_total"),
                ("pod", pod),
                ("app", "chat"),
            ]);
            s.push(&c, t, Some(per_s * (t / 1000) as f64));
            for (le, n) in [("0.5", 10.0), ("1", 30.0), ("+Inf", 40.0)] {
                let h = labels(&[("__name__", "ttft_bucket"), ("pod", pod), ("le", le)]);
                s.push(&h, t, Some(n * k as f64));
            }
        }
    }
    s
}

fn value(q: &str) -> f64 {
    let expr = parse(q).expect("parses");
    evaluate_single(&expr, &store(), 60_000).expect("one value")
}

#[test]
fn selector_with_label_matchers() {
    let s = store();
    let Value::Vector(v) =
        evaluate("vllm:num_requests_waiting{app=\"chat\"}", &s, 60_000).expect("evaluates")
    else {
        panic!("vector expected")
    };
    assert_eq!(v.len(), 2);
    assert_eq!(value("vllm:num_requests_waiting{pod=\"b\"}"), 4.0);
    assert_eq!(value("vllm:num_requests_waiting{pod!=\"b\"}"), 2.0);
    assert_eq!(value("vllm:num_requests_waiting{pod=~\"b|c\"}"), 4.0);
    assert_eq!(value("vllm:num_requests_waiting{pod!~\"a.*\"}"), 4.0);
    assert_eq!(
        value("{__name__=\"vllm:num_requests_waiting\",pod=\"a\"}"),
        2.0
    );
}

#[test]
fn aggregations_with_by_and_without() {
    assert_eq!(value("sum(vllm:num_requests_waiting)"), 6.0);
    assert_eq!(value("avg(vllm:num_requests_waiting)"), 3.0);
    assert_eq!(value("min(vllm:num_requests_waiting)"), 2.0);
    assert_eq!(value("max(vllm:num_requests_waiting)"), 4.0);
    assert_eq!(value("count(vllm:num_requests_waiting)"), 2.0);
    let s = store();
    let Value::Vector(by) =
        evaluate("sum by (pod) (vllm:num_requests_waiting)", &s, 60_000).expect("evaluates")
    else {
        panic!("vector expected")
    };
    assert_eq!(
        by,
        vec![
            (labels(&[("pod", "a")]), 2.0),
            (labels(&[("pod", "b")]), 4.0)
        ]
    );
    let Value::Vector(without) =
        evaluate("max without (pod) (vllm:num_requests_waiting)", &s, 60_000).expect("evaluates")
    else {
        panic!("vector expected")
    };
    assert_eq!(without, vec![(labels(&[("app", "chat")]), 4.0)]);
}

#[test]
fn over_time_functions() {
    // Points of pod a's counter in (0, 60]: 15, 30, 45, 60.
    let q = |f: &str| value(&format!("{f}(vllm:request_success_total{{pod=\"a\"}}[1m])"));
    assert_eq!(q("avg_over_time"), 37.5);
    assert_eq!(q("sum_over_time"), 150.0);
    assert_eq!(q("min_over_time"), 15.0);
    assert_eq!(q("max_over_time"), 60.0);
    assert_eq!(q("count_over_time"), 4.0);
    assert_eq!(q("last_over_time"), 60.0);
}

#[test]
fn rate_and_increase_extrapolate_like_prometheus() {
    // 1/s counter sampled every 15 s: samples 15..60 at t = 15..60 in (0, 60]. The gap to the
    // range start (15 s) is under 1.1 × the mean interval, so Prometheus extrapolates all the
    // way: 45 × 60 / 45 = 60, rate 1/s.
    let r = value("rate(vllm:request_success_total{pod=\"a\"}[1m])");
    let i = value("increase(vllm:request_success_total{pod=\"a\"}[1m])");
    assert!((i - 60.0).abs() < 1e-9, "{i}");
    assert!((r - 1.0).abs() < 1e-12, "{r}");
    // Samples stopping short of the range start by more than 1.1 intervals: half an interval.
    let mut sparse = Store::new();
    let l = labels(&[("__name__", "c")]);
    for (t, v) in [(30_000, 100.0), (45_000, 115.0), (60_000, 130.0)] {
        sparse.push(&l, t, Some(v));
    }
    let expr = parse("increase(c[1m])").expect("parses");
    let got = evaluate_single(&expr, &sparse, 60_000).expect("one value");
    assert!((got - 30.0 * 37.5 / 30.0).abs() < 1e-9, "{got}");
    // A counter reset is added back.
    let mut s = Store::new();
    let l = labels(&[("__name__", "c")]);
    for (t, v) in [
        (15_000, 10.0),
        (30_000, 20.0),
        (45_000, 5.0),
        (60_000, 15.0),
    ] {
        s.push(&l, t, Some(v));
    }
    let expr = parse("increase(c[1m])").expect("parses");
    let got = evaluate_single(&expr, &s, 60_000).expect("one value");
    // Raw increase 15 - 10 + 20 = 25 over 45 s sampled, extrapolated over the whole 60 s.
    assert!((got - 25.0 * 60.0 / 45.0).abs() < 1e-9, "{got}");
}

#[test]
fn delta_and_deriv_follow_a_gauge_up_and_down() {
    // A gauge sampled every 15 s in (0, 60]: 10, 40, 25, 55 at t = 15..60.
    let mut s = Store::new();
    let l = labels(&[("__name__", "g")]);
    for (t, v) in [
        (15_000, 10.0),
        (30_000, 40.0),
        (45_000, 25.0),
        (60_000, 55.0),
    ] {
        s.push(&l, t, Some(v));
    }
    let at = |q: &str| evaluate_single(&parse(q).expect("parses"), &s, 60_000).expect("one value");
    // delta: no reset handling (the fall 40 -> 25 is a fall), 45 over 45 s sampled,
    // extrapolated over the whole minute as increase would: 45 × 60 / 45 = 60.
    assert!((at("delta(g[1m])") - 60.0).abs() < 1e-9);
    // increase reads the same fall as a counter reset: 45 + 40 = 85, extrapolated to the start
    // only as far as the counter's zero (45 s × 10 / 85), so 85 × (45 + 45 × 10 / 85) / 45 = 95.
    assert!((at("increase(g[1m])") - 95.0).abs() < 1e-9);
    // deriv: the least-squares slope; x = 0, 15, 30, 45 s, mean 22.5; v mean 32.5;
    // cov = Σ(x - 22.5)(v - 32.5) = (-22.5)(-22.5) + (-7.5)(7.5) + (7.5)(-7.5) + (22.5)(22.5)
    // = 900; var = Σ(x - 22.5)² = 1125; slope 0.8 per second.
    assert!((at("deriv(g[1m])") - 0.8).abs() < 1e-9);
    // A falling gauge gives a negative delta.
    let mut f = Store::new();
    for (t, v) in [(15_000, 30.0), (60_000, 0.0)] {
        f.push(&l, t, Some(v));
    }
    let got = evaluate_single(&parse("delta(g[1m])").expect("parses"), &f, 60_000).expect("one");
    assert!(got < 0.0, "{got}");
    // One sample: no value (the metric is skipped, never read as 0).
    let mut one = Store::new();
    one.push(&l, 60_000, Some(3.0));
    assert!(evaluate_single(&parse("deriv(g[1m])").expect("parses"), &one, 60_000).is_err());
}

#[test]
fn histogram_quantile_interpolates_in_the_bucket() {
    // Per pod at t = 60: buckets 40 (≤0.5), 120 (≤1), 160 (+Inf); summed over both pods: 80,
    // 240, 320. p50 = rank 160: in (0.5, 1], 80 of 160 → 0.75.
    let q = value("histogram_quantile(0.5, sum by (le) (ttft_bucket))");
    assert!((q - 0.75).abs() < 1e-12, "{q}");
    // p90 = rank 288, in +Inf: the largest finite bound.
    assert_eq!(
        value("histogram_quantile(0.9, sum by (le) (ttft_bucket))"),
        1.0
    );
}

#[test]
fn the_bounds_of_the_bucket_holding_a_quantile() {
    // The buckets as a 0/1 step at the rank's bucket (the objective's bucket reading,
    // docs/objective.md): summed 80 (≤0.5), 240 (≤1), 320 (+Inf); p50 = rank 160, in (0.5, 1].
    let step = |q: f64| {
        format!("sum by (le) (ttft_bucket) >= bool scalar({q} * max(sum by (le) (ttft_bucket)))")
    };
    let lower = value(&format!("histogram_quantile(1e-9, {})", step(0.5)));
    assert!((lower - 0.5).abs() < 1e-6, "{lower}");
    assert_eq!(value(&format!("histogram_quantile(1, {})", step(0.5))), 1.0);
    // p20 = rank 64, in the first bucket: from 0.
    assert!(value(&format!("histogram_quantile(1e-9, {})", step(0.2))) < 1e-6);
    // p90 = rank 288, in +Inf: both bounds are the largest finite one.
    assert_eq!(
        value(&format!("histogram_quantile(1e-9, {})", step(0.9))),
        1.0
    );
    assert_eq!(value(&format!("histogram_quantile(1, {})", step(0.9))), 1.0);
    // scalar() of anything but one sample is NaN.
    let scalar = |q: &str| match evaluate(q, &store(), 60_000).expect("evaluates") {
        Value::Scalar(v) => v,
        other => panic!("scalar expected, got {other:?}"),
    };
    assert!(scalar("scalar(ttft_bucket)").is_nan());
    assert_eq!(scalar("scalar(max(ttft_bucket))"), 160.0);
}

#[test]
fn arithmetic_between_vectors_and_scalars() {
    assert_eq!(value("sum(vllm:num_requests_waiting) / 2"), 3.0);
    assert_eq!(value("2 * avg(vllm:num_requests_waiting) - 1"), 5.0);
    assert_eq!(value("7 % 4 + 2 ^ 3"), 11.0);
    assert_eq!(value("-max(vllm:num_requests_waiting)"), -4.0);
    // One-to-one matching between vectors (labels but the name).
    assert_eq!(
        value("avg(vllm:num_requests_waiting + vllm:num_requests_waiting)"),
        6.0
    );
    assert_eq!(
        value("sum(vllm:num_requests_waiting / on (pod) sum by (pod) (vllm:num_requests_waiting))"),
        2.0
    );
}

#[test]
fn comparison_with_scalars_filters_or_returns_bool() {
    assert_eq!(value("max(vllm:num_requests_waiting) > 3"), 4.0);
    assert_eq!(value("max(vllm:num_requests_waiting) > bool 5"), 0.0);
    assert_eq!(value("count(vllm:num_requests_waiting >= 2)"), 2.0);
    let s = store();
    let Value::Vector(v) =
        evaluate("vllm:num_requests_waiting < 3", &s, 60_000).expect("evaluates")
    else {
        panic!("vector expected")
    };
    assert_eq!(v.len(), 1);
    assert_eq!(
        v[0].0.get("__name__").map(String::as_str),
        Some("vllm:num_requests_waiting"),
        "a filtering comparison keeps the name"
    );
}

#[test]
fn or_vector_zero_fills_an_empty_result() {
    assert_eq!(value("sum(vllm:num_requests_waiting) or vector(0)"), 6.0);
    assert_eq!(value("sum(absent_metric) or vector(0)"), 0.0);
    assert_eq!(value("sum(vllm:num_requests_waiting) and vector(1)"), 6.0);
}

#[test]
fn staleness_and_lookback() {
    let mut s = Store::new();
    let l = labels(&[("__name__", "g"), ("pod", "a")]);
    s.push(&l, 0, Some(1.0));
    let expr = parse("g").expect("parses");
    assert_eq!(evaluate_single(&expr, &s, 299_999), Ok(1.0));
    assert!(
        evaluate_single(&expr, &s, 300_000).is_err(),
        "older than the lookback"
    );
    s.mark_stale(&labels(&[("pod", "a")]), 15_000);
    assert!(
        matches!(
            evaluate_single(&expr, &s, 20_000),
            Err(PromqlError::NotSingle(_))
        ),
        "a staleness marker hides the series at once"
    );
    assert_eq!(evaluate_single(&expr, &s, 10_000), Ok(1.0));
}

#[test]
fn offset_reads_the_selector_earlier() {
    // Pod a scraped from t = 0 with the value t/15 s; pod b only from t = 45 s.
    let mut s = Store::new();
    for k in 0..=4i64 {
        let t = k * 15_000;
        s.push(
            &labels(&[("__name__", "g"), ("pod", "a")]),
            t,
            Some(k as f64),
        );
        if t >= 45_000 {
            s.push(&labels(&[("__name__", "g"), ("pod", "b")]), t, Some(9.0));
        }
    }
    let at = |q: &str, t: i64| evaluate_single(&parse(q).expect("parses"), &s, t);
    assert_eq!(at("count(g)", 60_000), Ok(2.0));
    // 30 s earlier pod b did not exist yet: only pod a, at its t = 30 s value.
    assert_eq!(at("count(g offset 30s)", 60_000), Ok(1.0));
    assert_eq!(at("sum(g offset 30s)", 60_000), Ok(2.0));
    // A range read 15 s earlier: the points in (15 s, 45 s] (values 2 and 3).
    assert_eq!(
        at("sum_over_time(g{pod=\"a\"}[30s] offset 15s)", 60_000),
        Ok(5.0)
    );
    // A rate read 15 s earlier is the rate of that window: pod a rises 1 per 15 s.
    assert_eq!(
        at("rate(g{pod=\"a\"}[30s] offset 15s)", 60_000),
        at("rate(g{pod=\"a\"}[30s])", 45_000)
    );
    let rate = at("rate(g{pod=\"a\"}[30s] offset 15s)", 60_000).expect("a rate");
    assert!((rate - 1.0 / 15.0).abs() < 1e-12, "{rate}");
    // A negative offset reads later.
    assert_eq!(at("g{pod=\"a\"} offset -15s", 30_000), Ok(3.0));
    // Pods that existed 30 s ago, by pod: b is left out.
    assert_eq!(at("count(g and on (pod) (g offset 30s))", 60_000), Ok(1.0));
}

#[test]
fn unsupported_constructs_are_errors_naming_them() {
    let s = store();
    let err = |q: &str| evaluate(q, &s, 60_000).expect_err("refused");
    assert_eq!(
        err("quantile_over_time(0.9, vllm:num_requests_waiting[1m])"),
        PromqlError::Unsupported {
            construct: "function \"quantile_over_time\"".into()
        }
    );
    assert_eq!(
        err("topk(1, vllm:num_requests_waiting)"),
        PromqlError::Unsupported {
            construct: "aggregation \"topk\"".into()
        }
    );
    assert_eq!(
        err("vllm:num_requests_waiting @ 60"),
        PromqlError::Unsupported {
            construct: "@ modifier".into()
        }
    );
    assert!(matches!(
        err("max_over_time(vllm:num_requests_waiting[5m:1m])"),
        PromqlError::Unsupported { .. }
    ));
    assert!(matches!(err("sum("), PromqlError::Parse { .. }));
    assert!(matches!(
        evaluate_single(
            &parse("vllm:num_requests_waiting").expect("parses"),
            &s,
            60_000
        ),
        Err(PromqlError::NotSingle(_))
    ));
}
