//! The per-namespace query budget (`--namespace-query-budget`, docs/security.md#query-budget):
//! every namespace may send the shared Prometheus at most this many queries per second on
//! average (a token bucket holding [`BURST_SECONDS`] of budget). A sync that would overspend
//! waits until the bucket holds its queries: it reads and writes nothing meanwhile, so the
//! fleet keeps its size, and its `ScalingActive` condition says why. Pure but for the lock: time
//! is passed in.

use std::collections::HashMap;
use std::sync::Mutex;

use llmscaler_api::{LLMScalerSpec, MetricProvider};

/// The default `--namespace-query-budget`, queries per second per namespace: 100 scalers of 3
/// queries at the default 15 s period use 20.
pub const DEFAULT_QUERIES_PER_SECOND: f64 = 20.0;

/// The bucket holds this many seconds of budget: a namespace may burst that much after idling.
pub const BURST_SECONDS: f64 = 5.0;

/// Queries one sync of `spec` sends at most: its metrics (a per-pod metric is one query), the
/// queries of `spec.capacity`, `spec.objective`, `spec.activation`, the drain's in-flight query
/// and `deletionCostQuery`. The Custom provider's one decision request is not a query: 0.
pub fn queries_per_sync(spec: &LLMScalerSpec) -> u32 {
    match spec.effective_provider() {
        MetricProvider::Custom => return 0,
        MetricProvider::Prometheus => {}
    }
    let metrics = spec.metrics().len();
    let capacity = spec
        .capacity
        .as_ref()
        .map_or(0, |c| 1 + usize::from(c.backlog_query.is_some()));
    let objective = crate::engine::objective::queries(spec).map_or(0, |q| q.len());
    let extra = [
        spec.activation.is_some(),
        spec.drain().is_some(),
        spec.scale_down
            .as_ref()
            .is_some_and(|s| s.deletion_cost_query.is_some()),
    ]
    .into_iter()
    .filter(|b| *b)
    .count();
    u32::try_from(metrics + capacity + objective + extra).unwrap_or(u32::MAX)
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Queries the namespace may still send.
    tokens: f64,
    /// When `tokens` was last brought up to date, milliseconds.
    at_ms: i64,
}

/// The buckets of every namespace.
#[derive(Debug)]
pub struct QueryBudget {
    per_second: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl QueryBudget {
    /// A budget of `per_second` queries per second per namespace; `None` for 0 or less (no
    /// budget) or a value that is not finite.
    pub fn new(per_second: f64) -> Option<Self> {
        (per_second.is_finite() && per_second > 0.0).then(|| Self {
            per_second,
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// Queries per second per namespace.
    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// Spends `cost` queries of `namespace` at `now_ms` (milliseconds): `None` when the bucket
    /// held them (spent), else the milliseconds to wait until it will (nothing spent). A sync
    /// costing more than the whole bucket is let through once the bucket is full, so no scaler
    /// waits for ever.
    pub fn take(&self, namespace: &str, cost: u32, now_ms: i64) -> Option<i64> {
        if cost == 0 {
            return None;
        }
        let capacity = (self.per_second * BURST_SECONDS).max(1.0);
        let cost = f64::from(cost);
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets.entry(namespace.to_owned()).or_insert(Bucket {
            tokens: capacity,
            at_ms: now_ms,
        });
        let elapsed_s = (now_ms.saturating_sub(bucket.at_ms)).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed_s * self.per_second).min(capacity);
        bucket.at_ms = bucket.at_ms.max(now_ms);
        let needed = cost.min(capacity);
        if bucket.tokens >= needed {
            bucket.tokens -= cost;
            return None;
        }
        let wait_s = (needed - bucket.tokens) / self.per_second;
        #[allow(clippy::cast_possible_truncation)]
        let wait_ms = (wait_s * 1000.0).ceil().max(1.0) as i64;
        Some(wait_ms)
    }

    /// Forgets a namespace's bucket (its last scaler left).
    pub fn forget(&self, namespace: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(namespace);
    }
}

/// How long the sync of `sync` must wait for its namespace's budget, milliseconds; `None`: it
/// goes now (its queries are spent) or there is no budget.
pub(crate) fn delay(sync: &super::SyncContext<'_>, spec: &LLMScalerSpec) -> Option<i64> {
    let budget = sync.ctx.query_budget.as_ref()?;
    let cost = queries_per_sync(spec);
    let wait_ms = budget.take(sync.namespace, cost, sync.now_ms)?;
    tracing::info!(
        namespace = sync.namespace,
        name = sync.name,
        cost,
        wait_ms,
        "query budget spent: the sync waits"
    );
    Some(wait_ms)
}

/// The `ScalingActive` message of a delayed sync (no wait time in it, so that a scaler delayed
/// sync after sync does not rewrite its status each time).
pub fn delayed_message(namespace: &str, per_second: f64, cost: u32) -> String {
    format!(
        "namespace {namespace} spent its query budget of {per_second} queries per second \
         (--namespace-query-budget): this scaler's {cost} queries per sync wait for it; the \
         replicas are kept as they are"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_over_its_budget_waits_and_others_do_not() {
        // 2 queries per second: a bucket of 10.
        let budget = QueryBudget::new(2.0).unwrap();
        for _ in 0..3 {
            assert_eq!(budget.take("a", 3, 0), None);
        }
        // 1 left, 3 needed: 2 more at 2 per second = 1 s.
        assert_eq!(budget.take("a", 3, 0), Some(1000));
        // Another namespace has its own bucket.
        assert_eq!(budget.take("b", 3, 0), None);
        // After the wait the sync goes through.
        assert_eq!(budget.take("a", 3, 1000), None);
        // The bucket never holds more than its burst after idling.
        assert_eq!(budget.take("a", 10, 3_600_000), None);
        assert_eq!(budget.take("a", 1, 3_600_000), Some(500));
    }

    #[test]
    fn a_sync_costing_more_than_the_bucket_goes_through_when_it_is_full() {
        let budget = QueryBudget::new(1.0).unwrap(); // bucket of 5
        assert_eq!(budget.take("a", 15, 0), None);
        // 10 in debt: 15 s until full again (wait for the 5 the bucket can hold).
        assert_eq!(budget.take("a", 15, 0), Some(15_000));
        assert_eq!(budget.take("a", 15, 15_000), None);
    }

    #[test]
    fn no_budget_for_zero_or_nonsense() {
        assert!(QueryBudget::new(0.0).is_none());
        assert!(QueryBudget::new(f64::NAN).is_none());
        assert!(QueryBudget::new(-1.0).is_none());
    }
}
