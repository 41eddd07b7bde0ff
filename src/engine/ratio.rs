//! The per-metric ratio of docs/scaling.md step 3.

use super::Skip;

/// `ceil(max(ready, 1) × value / target)` for one metric: the replicas that would bring the
/// per-replica value to `target`. Values within 1e-9 (relative) of an integer count as that
/// integer, so floating-point noise (`2 × 0.3 / 0.6`) cannot add a replica.
///
/// # Errors
/// [`Skip::NotMeasurable`] for NaN, ±Inf or negative values (docs/scaling.md#steps-of-one-sync:
/// skipped, never read as
/// zero; no load signal the operator reads is negative, so a negative reading is a broken query
/// or exporter, not an idle fleet), and
/// [`Skip::BadTarget`] for a target that is not finite and positive.
pub fn metric_recommendation<E>(
    ready_replicas: i32,
    value: f64,
    target: f64,
) -> Result<i32, Skip<E>> {
    if !value.is_finite() || value < 0.0 {
        return Err(Skip::NotMeasurable(value));
    }
    if !target.is_finite() || target <= 0.0 {
        return Err(Skip::BadTarget(format!(
            "{target} is not a positive number"
        )));
    }
    Ok(ratio_recommendation(ready_replicas, value, target))
}

/// The ratio itself, saturating: results above `i32::MAX` (a value of 1e300) give `i32::MAX`,
/// negative results give 0. `value` and `target` must be finite, `target > 0`.
pub fn ratio_recommendation(ready_replicas: i32, value: f64, target: f64) -> i32 {
    let baseline = f64::from(ready_replicas.max(1));
    let exact = baseline * value / target;
    let nearest = exact.round();
    let replicas = if (exact - nearest).abs() <= 1e-9 * nearest.abs().max(1.0) {
        nearest
    } else {
        exact.ceil()
    };
    if replicas.is_nan() || replicas <= 0.0 {
        0
    } else if replicas >= f64::from(i32::MAX) {
        i32::MAX
    } else {
        // In range and integral: the cast is exact.
        #[allow(clippy::cast_possible_truncation)]
        let r = replicas as i32;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_is_at_least_one() {
        assert_eq!(ratio_recommendation(0, 0.85, 0.5), 2);
        assert_eq!(ratio_recommendation(1, 0.85, 0.5), 2);
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        assert_eq!(ratio_recommendation(i32::MAX, 1e300, 0.5), i32::MAX);
        assert_eq!(ratio_recommendation(3, f64::MAX, 1e-300), i32::MAX);
        assert_eq!(ratio_recommendation(3, -5.0, 0.5), 0);
    }

    #[test]
    fn float_noise_does_not_add_a_replica() {
        assert_eq!(ratio_recommendation(2, 0.3, 0.6), 1);
        assert_eq!(ratio_recommendation(3, 0.1 + 0.2, 0.1), 9);
        assert_eq!(ratio_recommendation(3, 0.9, 0.8), 4);
    }

    #[test]
    fn non_finite_values_are_not_measurable() {
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(matches!(
                metric_recommendation::<String>(4, v, 2.0),
                Err(Skip::NotMeasurable(_))
            ));
        }
    }
}
