//! The functions of the subset: `*_over_time`, `rate`, `increase`, `delta`, `deriv`,
//! `histogram_quantile`, `vector`.

use std::collections::BTreeMap;

use promql_parser::parser::{Call, Expr};

use super::PromqlError;
use super::eval::{Matrix, Value, drop_name, eval, shifted};
use super::store::{Labels, Store};

/// The range vector argument `index` of `call`, its range and the end of its range (`t_ms`
/// moved by the selector's `offset`), ms.
/// The value of a function's first argument (`vector`, `scalar`).
fn first_value(call: &Call, store: &Store, t_ms: i64) -> Result<Value, PromqlError> {
    let arg = call
        .args
        .args
        .first()
        .ok_or_else(|| PromqlError::Eval(format!("{} needs an argument", call.func.name)))?;
    eval(arg, store, t_ms)
}

fn matrix_arg(
    call: &Call,
    index: usize,
    store: &Store,
    t_ms: i64,
) -> Result<(Matrix, i64, i64), PromqlError> {
    let arg = call
        .args
        .args
        .get(index)
        .ok_or_else(|| PromqlError::Eval(format!("{} needs an argument", call.func.name)))?;
    let Expr::MatrixSelector(ms) = arg.as_ref() else {
        return Err(PromqlError::Unsupported {
            construct: format!("{} over anything but a range selector", call.func.name),
        });
    };
    let range_ms = i64::try_from(ms.range.as_millis()).unwrap_or(i64::MAX);
    let end_ms = shifted(&ms.vs, t_ms)?;
    match eval(arg, store, t_ms)? {
        Value::Matrix(m) => Ok((m, range_ms, end_ms)),
        _ => Err(PromqlError::Eval(format!(
            "{} expects a range vector",
            call.func.name
        ))),
    }
}

/// Calls a supported function.
///
/// # Errors
/// [`PromqlError::Unsupported`] for a function outside the subset.
pub(super) fn call(call: &Call, store: &Store, t_ms: i64) -> Result<Value, PromqlError> {
    let name = call.func.name;
    let over_time = |f: fn(&[(i64, f64)]) -> f64| -> Result<Value, PromqlError> {
        let (m, _, _) = matrix_arg(call, 0, store, t_ms)?;
        Ok(Value::Vector(
            m.into_iter()
                .map(|(labels, pts)| (drop_name(labels), f(&pts)))
                .collect(),
        ))
    };
    match name {
        "avg_over_time" => over_time(|p| p.iter().map(|x| x.1).sum::<f64>() / p.len() as f64),
        "sum_over_time" => over_time(|p| p.iter().map(|x| x.1).sum()),
        "min_over_time" => over_time(|p| p.iter().map(|x| x.1).fold(f64::INFINITY, f64::min)),
        "max_over_time" => over_time(|p| p.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max)),
        "count_over_time" => over_time(|p| p.len() as f64),
        "last_over_time" => over_time(|p| p.last().map_or(f64::NAN, |x| x.1)),
        "rate" | "increase" | "delta" => {
            let (m, range_ms, end_ms) = matrix_arg(call, 0, store, t_ms)?;
            let kind = match name {
                "rate" => Extrapolated::Rate,
                "increase" => Extrapolated::Increase,
                _ => Extrapolated::Delta,
            };
            Ok(Value::Vector(
                m.into_iter()
                    .filter_map(|(labels, pts)| {
                        extrapolated_rate(&pts, end_ms, range_ms, kind)
                            .map(|v| (drop_name(labels), v))
                    })
                    .collect(),
            ))
        }
        "deriv" => {
            let (m, _, _) = matrix_arg(call, 0, store, t_ms)?;
            Ok(Value::Vector(
                m.into_iter()
                    .filter_map(|(labels, pts)| slope(&pts).map(|v| (drop_name(labels), v)))
                    .collect(),
            ))
        }
        "histogram_quantile" => histogram_quantile(call, store, t_ms),
        "vector" => match first_value(call, store, t_ms)? {
            Value::Scalar(v) => Ok(Value::Vector(vec![(Labels::new(), v)])),
            _ => Err(PromqlError::Eval("vector expects a scalar".into())),
        },
        "scalar" => {
            match first_value(call, store, t_ms)? {
                // Prometheus: the value of a one-sample vector, NaN otherwise.
                Value::Vector(v) => Ok(Value::Scalar(match v.as_slice() {
                    [(_, value)] => *value,
                    _ => f64::NAN,
                })),
                Value::Scalar(_) | Value::Matrix(_) => {
                    Err(PromqlError::Eval("scalar expects an instant vector".into()))
                }
            }
        }
        other => Err(PromqlError::Unsupported {
            construct: format!("function {other:?}"),
        }),
    }
}

/// Which of Prometheus' `extrapolatedRate` callers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extrapolated {
    /// `rate`: a counter, per second.
    Rate,
    /// `increase`: a counter, over the range.
    Increase,
    /// `delta`: a gauge (no resets, may fall), over the range.
    Delta,
}

/// Prometheus' `extrapolatedRate`: the change over the samples (for a counter, resets added
/// back), extrapolated to the range edges (by at most half an average sample interval when the
/// data stops short; a counter never below zero at the start); `None` with fewer than two
/// samples.
fn extrapolated_rate(
    pts: &[(i64, f64)],
    t_ms: i64,
    range_ms: i64,
    kind: Extrapolated,
) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let is_counter = kind != Extrapolated::Delta;
    let is_rate = kind == Extrapolated::Rate;
    let (first_t, first_v) = pts[0];
    let (last_t, last_v) = pts[pts.len() - 1];
    let mut result = last_v - first_v;
    if is_counter {
        for w in pts.windows(2) {
            if w[1].1 < w[0].1 {
                result += w[0].1;
            }
        }
    }
    let range_start = (t_ms - range_ms) as f64 / 1000.0;
    let range_end = t_ms as f64 / 1000.0;
    let mut to_start = first_t as f64 / 1000.0 - range_start;
    let mut to_end = range_end - last_t as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let average = sampled / (pts.len() - 1) as f64;
    if is_counter && result > 0.0 && first_v >= 0.0 {
        let to_zero = sampled * (first_v / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = average * 1.1;
    let mut interval = sampled;
    if to_start >= threshold {
        to_start = average / 2.0;
    }
    interval += to_start;
    if to_end >= threshold {
        to_end = average / 2.0;
    }
    interval += to_end;
    let mut factor = interval / sampled;
    if is_rate {
        factor /= range_ms as f64 / 1000.0;
    }
    Some(result * factor)
}

/// Prometheus' `deriv`: the least-squares slope of the samples against their time, per
/// second; `None` with fewer than two samples.
fn slope(pts: &[(i64, f64)]) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    let t0 = pts[0].0;
    let n = pts.len() as f64;
    let (mut st, mut sv, mut stt, mut stv) = (0.0, 0.0, 0.0, 0.0);
    for &(t, v) in pts {
        let x = (t - t0) as f64 / 1000.0;
        st += x;
        sv += v;
        stt += x * x;
        stv += x * v;
    }
    let cov = stv - st * sv / n;
    let var = stt - st * st / n;
    (var > 0.0).then(|| cov / var)
}

fn histogram_quantile(call: &Call, store: &Store, t_ms: i64) -> Result<Value, PromqlError> {
    let (Some(q), Some(v)) = (call.args.args.first(), call.args.args.get(1)) else {
        return Err(PromqlError::Eval(
            "histogram_quantile needs two arguments".into(),
        ));
    };
    let Value::Scalar(q) = eval(q, store, t_ms)? else {
        return Err(PromqlError::Eval(
            "histogram_quantile expects a scalar quantile".into(),
        ));
    };
    let Value::Vector(samples) = eval(v, store, t_ms)? else {
        return Err(PromqlError::Eval(
            "histogram_quantile expects an instant vector".into(),
        ));
    };
    let mut groups: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
    for (mut labels, count) in samples {
        let Some(le) = labels.remove("le") else {
            continue;
        };
        let bound = match le.as_str() {
            "+Inf" | "Inf" | "inf" => f64::INFINITY,
            text => match text.parse::<f64>() {
                Ok(b) => b,
                Err(_) => continue,
            },
        };
        groups
            .entry(drop_name(labels))
            .or_default()
            .push((bound, count));
    }
    Ok(Value::Vector(
        groups
            .into_iter()
            .map(|(labels, buckets)| (labels, bucket_quantile(q, buckets)))
            .collect(),
    ))
}

/// Prometheus' `bucketQuantile`: linear interpolation inside the bucket holding the rank; NaN
/// without a `+Inf` bucket or observations; the largest finite bound when the rank falls in
/// `+Inf`.
pub(super) fn bucket_quantile(q: f64, mut buckets: Vec<(f64, f64)>) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    // Coalesce equal bounds and force monotonic counts (as Prometheus does).
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for (bound, count) in buckets {
        match merged.last_mut() {
            Some(last) if last.0 == bound => last.1 += count,
            _ => merged.push((bound, count)),
        }
    }
    let mut max = f64::NEG_INFINITY;
    for b in &mut merged {
        if b.1 < max {
            b.1 = max;
        }
        max = b.1;
    }
    if merged.len() < 2 {
        return f64::NAN;
    }
    let observations = merged[merged.len() - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let b = merged.partition_point(|x| x.1 < rank);
    if b >= merged.len() - 1 {
        return merged[merged.len() - 2].0;
    }
    if b == 0 && merged[0].0 <= 0.0 {
        return merged[0].0;
    }
    let mut start = 0.0;
    let end = merged[b].0;
    let mut count = merged[b].1;
    if b > 0 {
        start = merged[b - 1].0;
        count -= merged[b - 1].1;
        rank -= merged[b - 1].1;
    }
    start + (end - start) * (rank / count)
}
