//! Time compression of both autoscalers' settings by the replay's speed factor: the emulator
//! runs the trace `speed` times faster than real time, so every period and window of the
//! control loops is divided by `speed`, and every per-second rate a query computes (which
//! Prometheus takes per wall second) is divided by `speed` to read in trace seconds again.
//! Quantities of the model's own time (TTFT targets, `maxQueueWaitSeconds`, `backlogSeconds`,
//! which divide trace-time counts) stay as they are. One mix of units is left: the operator
//! spreads the capacity backlog over `max(backlogSeconds, start-up)`, and the start-up it
//! measures is in wall seconds (90 s → 6 s at speed 15), so in a compressed run the backlog
//! is spread over `backlogSeconds` alone where the offline replay uses the start-up time
//! (docs/scaling.md#capacity-recommender).
//!
//! - LLMScaler: `syncPeriodSeconds`, `retryPeriodSeconds`,
//!   `scaleDown.stabilizationWindowSeconds`, `scaleDown.drain.drainSeconds`,
//!   `startup.initialSeconds`; range selectors of every
//!   query (`[30s]` → `[2s]` at speed 15); every call of a per-second function (`rate`,
//!   `irate`, `deriv`) is divided by `speed`, call by call (a `delta` or `increase` over the
//!   compressed window is already a trace-time count; a quantile or ratio of rates is unchanged).
//! - KEDA ScaledObject: one Prometheus trigger per metric of the metrics-only LLMScaler, as the
//!   offline replay's KEDA model reads them (`avg(X)` → `sum(X)`, `AverageValue`; any other
//!   query → `Value`), `pollingInterval` 30 s ÷ speed, and the HPA's default behavior with
//!   every window and policy period ÷ speed (tolerance 0.1 stays; the HPA sync period is the
//!   controller-manager's flag, set by `bench/peers`).

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use promql_parser::parser::token::{self, TokenType};
use promql_parser::parser::{self, BinaryExpr, Expr, ParenExpr};
use serde_json::{Value, json};

/// LLMScaler fields holding seconds that this module knows how to treat.
const KNOWN_SECONDS: &[&str] = &[
    "syncPeriodSeconds",
    "retryPeriodSeconds",
    "stabilizationWindowSeconds",
    "initialSeconds",
    "drainSeconds",
    "maxQueueWaitSeconds",
    "backlogSeconds",
];

/// The speed factor (trace seconds per wall second).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compression {
    /// Trace seconds per wall second (> 0).
    pub speed: f64,
}

impl Compression {
    /// A period of `trace_s` trace seconds in whole wall seconds (at least 1).
    pub(crate) fn wall_seconds(self, trace_s: i64) -> i64 {
        #[allow(clippy::cast_possible_truncation)]
        let s = (trace_s as f64 / self.speed).round() as i64;
        s.max(1)
    }

    /// A window of `trace_s` trace seconds in whole wall seconds (0 stays 0).
    fn window(self, trace_s: i64) -> i64 {
        if trace_s == 0 {
            0
        } else {
            self.wall_seconds(trace_s)
        }
    }

    /// `query` with its range selectors divided by the speed (`[30s]` → `[2s]` at speed 15)
    /// and every call of a per-second function (`rate`, `irate`, `deriv`) divided by the
    /// speed, call by call: Prometheus takes them per wall second. A count over a window
    /// (`delta`, `increase`, `*_over_time`) is the same count in trace time and stays as it is,
    /// so `sum(rate(c[30s])) + sum(delta(g[30s])) / 30` divides only its first term. A quantile
    /// or a ratio of rates is unchanged by the division. A subquery's range and step stay as
    /// they are. Printed by the parser, so spacing may differ from the input.
    ///
    /// # Errors
    /// A query the PromQL parser refuses.
    pub(crate) fn query(self, query: &str) -> anyhow::Result<String> {
        let mut expr = parser::parse(query).map_err(|e| anyhow!("query {query:?}: {e}"))?;
        self.compress(&mut expr);
        Ok(expr.to_string())
    }

    /// [`Self::query`] on the parsed expression, in place.
    fn compress(self, expr: &mut Expr) {
        const PER_SECOND: &[&str] = &["rate", "irate", "deriv"];
        let per_second = match expr {
            Expr::Aggregate(a) => {
                self.compress(&mut a.expr);
                if let Some(param) = a.param.as_mut() {
                    self.compress(param);
                }
                false
            }
            Expr::Unary(u) => {
                self.compress(&mut u.expr);
                false
            }
            Expr::Binary(b) => {
                self.compress(&mut b.lhs);
                self.compress(&mut b.rhs);
                false
            }
            Expr::Paren(p) => {
                self.compress(&mut p.expr);
                false
            }
            Expr::Subquery(q) => {
                self.compress(&mut q.expr);
                false
            }
            Expr::MatrixSelector(m) => {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let ms = (m.range.as_millis() as f64 / self.speed).round() as u64;
                m.range = Duration::from_millis(ms);
                false
            }
            Expr::Call(call) => {
                for arg in &mut call.args.args {
                    self.compress(arg);
                }
                PER_SECOND.contains(&call.func.name)
            }
            Expr::NumberLiteral(_)
            | Expr::StringLiteral(_)
            | Expr::VectorSelector(_)
            | Expr::Extension(_) => false,
        };
        if per_second {
            let call = std::mem::replace(expr, Expr::from(0.0));
            *expr = Expr::Paren(ParenExpr {
                expr: Box::new(Expr::Binary(BinaryExpr {
                    op: TokenType::new(token::T_DIV),
                    lhs: Box::new(call),
                    rhs: Box::new(Expr::from(self.speed)),
                    modifier: None,
                })),
            });
        }
    }

    /// The LLMScaler of `manifest` (trace-time settings) for the compressed run: namespace
    /// `ns`, `serverAddress` `prometheus`.
    ///
    /// # Errors
    /// A field holding seconds that is not one of [`KNOWN_SECONDS`] (it would go uncompressed).
    pub(crate) fn llmscaler(
        self,
        manifest: &Value,
        ns: &str,
        prometheus: &str,
    ) -> anyhow::Result<Value> {
        check_known_seconds(manifest, "")?;
        let mut m = manifest.clone();
        m["metadata"]["namespace"] = json!(ns);
        let spec = m
            .get_mut("spec")
            .and_then(Value::as_object_mut)
            .context("the LLMScaler has no spec")?;
        spec.insert("serverAddress".into(), json!(prometheus));
        let int = |v: Option<&Value>, default: i64| v.and_then(Value::as_i64).unwrap_or(default);
        let sync = int(spec.get("syncPeriodSeconds"), 15);
        spec.insert("syncPeriodSeconds".into(), json!(self.wall_seconds(sync)));
        let retry = int(spec.get("retryPeriodSeconds"), 10);
        spec.insert("retryPeriodSeconds".into(), json!(self.wall_seconds(retry)));
        if let Some(sd) = spec.get_mut("scaleDown").and_then(Value::as_object_mut) {
            let w = int(sd.get("stabilizationWindowSeconds"), 0);
            sd.insert("stabilizationWindowSeconds".into(), json!(self.window(w)));
            // The drain budget is wall time in which requests (served `speed` times faster)
            // finish: compressed like a window.
            if let Some(drain) = sd.get_mut("drain").and_then(Value::as_object_mut)
                && let Some(d) = drain.get("drainSeconds").and_then(Value::as_i64)
            {
                drain.insert("drainSeconds".into(), json!(self.window(d)));
            }
        }
        if let Some(st) = spec.get_mut("startup").and_then(Value::as_object_mut) {
            let w = int(st.get("initialSeconds"), 0);
            st.insert("initialSeconds".into(), json!(self.window(w)));
        }
        if let Some(cap) = spec.get_mut("capacity").and_then(Value::as_object_mut) {
            for key in ["arrivalRateQuery", "backlogQuery"] {
                if let Some(q) = cap.get(key).and_then(Value::as_str) {
                    let q = self.query(q)?;
                    cap.insert(key.into(), json!(q));
                }
            }
        }
        for metric in spec
            .get_mut("metrics")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(q) = metric.get("query").and_then(Value::as_str) {
                let q = self.query(q)?;
                metric["query"] = json!(q);
            }
        }
        Ok(m)
    }

    /// The KEDA ScaledObject on Deployment `workload` in `ns` with one Prometheus trigger per
    /// metric of the LLMScaler `manifest` (as the offline replay's KEDA model reads them), its
    /// bounds, KEDA's default polling and the HPA's default behavior, compressed.
    ///
    /// # Errors
    /// A manifest without metrics, or a metric without a query or target.
    pub(crate) fn scaled_object(
        self,
        manifest: &Value,
        ns: &str,
        workload: &str,
        prometheus: &str,
    ) -> anyhow::Result<Value> {
        let spec = &manifest["spec"];
        let metrics = spec["metrics"]
            .as_array()
            .filter(|m| !m.is_empty())
            .context("the metrics LLMScaler has no spec.metrics")?;
        let mut triggers = Vec::new();
        for m in metrics {
            let (Some(query), Some(target)) = (m["query"].as_str(), m["target"].as_str()) else {
                bail!("metric {m} has no query or target");
            };
            let (query, metric_type) = match per_pod(query) {
                Some(inner) => (format!("sum({inner})"), "AverageValue"),
                None => (query.to_string(), "Value"),
            };
            triggers.push(json!({
                "type": "prometheus",
                "name": m["name"],
                "metricType": metric_type,
                "metadata": {
                    "serverAddress": prometheus,
                    "query": self.query(&query)?,
                    "threshold": target,
                },
            }));
        }
        let period = self.wall_seconds(15);
        Ok(json!({
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": workload, "namespace": ns},
            "spec": {
                "scaleTargetRef": {"name": workload},
                "pollingInterval": self.wall_seconds(30),
                "cooldownPeriod": self.wall_seconds(300),
                "minReplicaCount": spec["minReplicas"].as_i64().unwrap_or(1),
                "maxReplicaCount": spec["maxReplicas"].as_i64().context("no maxReplicas")?,
                "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                    "scaleUp": {
                        "stabilizationWindowSeconds": 0,
                        "selectPolicy": "Max",
                        "policies": [
                            {"type": "Pods", "value": 4, "periodSeconds": period},
                            {"type": "Percent", "value": 100, "periodSeconds": period},
                        ],
                    },
                    "scaleDown": {
                        "stabilizationWindowSeconds": self.window(300),
                        "selectPolicy": "Max",
                        "policies": [{"type": "Percent", "value": 100, "periodSeconds": period}],
                    },
                }}},
                "triggers": triggers,
            },
        }))
    }
}

/// `X` of a query `avg(X)` (no `by`/`without`), the per-pod series the HPA reads with an
/// `AverageValue` target (src/simulate/policies/hpa.rs reads the same shape).
fn per_pod(query: &str) -> Option<&str> {
    let q = query.trim();
    let inner = q.strip_prefix("avg(")?.strip_suffix(')')?;
    // The `(` after `avg` must close at the very end.
    let mut depth = 0i32;
    for ch in inner.chars() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            _ => {}
        }
    }
    (depth == 0).then_some(inner)
}

/// Refuses a field named `*Seconds` that is not in [`KNOWN_SECONDS`].
fn check_known_seconds(value: &Value, path: &str) -> anyhow::Result<()> {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let here = format!("{path}.{k}");
                if k.ends_with("Seconds") && !KNOWN_SECONDS.contains(&k.as_str()) {
                    bail!("{here}: a time this program does not know how to compress");
                }
                check_known_seconds(v, &here)?;
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                check_known_seconds(v, &format!("{path}[{i}]"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Compression = Compression { speed: 15.0 };

    fn q(query: &str) -> String {
        C.query(query).expect("a valid query")
    }

    #[test]
    fn queries_are_compressed() {
        assert_eq!(
            q(r#"sum(rate(vllm:request_success_total{app="vllm"}[30s]))"#),
            r#"sum((rate(vllm:request_success_total{app="vllm"}[2s]) / 15))"#
        );
        // Only the per-second terms are divided: a delta is a count over its (compressed) window.
        assert_eq!(
            q("sum(rate(c[30s])) + (sum(delta(g[30s])) + sum(irate(h[1m]))) / 30"),
            "sum((rate(c[2s]) / 15)) + (sum(delta(g[2s])) + sum((irate(h[4s]) / 15))) / 30"
        );
        // A call's name in a label value is not a call; a ratio of rates is divided on both sides.
        assert_eq!(
            q(r#"sum(rate(a{l="x)rate("}[30s])) / sum(rate (b[30s]))"#),
            r#"sum((rate(a{l="x)rate("}[2s]) / 15)) / sum((rate(b[2s]) / 15))"#
        );
        assert_eq!(
            q("(histogram_quantile(0.9, sum by (le) (rate(x_bucket[1m]))) >= 0) or vector(0)"),
            "(histogram_quantile(0.9, sum by (le) ((rate(x_bucket[4s]) / 15))) >= 0) or vector(0)"
        );
        assert_eq!(q("avg_over_time(y[10s])"), "avg_over_time(y[667ms])");
        assert_eq!(q("avg(z)"), "avg(z)");
        assert_eq!(q("max_over_time(z[5m:1m])"), "max_over_time(z[5m:1m])");
        let err = C.query("sum(generate(x))").expect_err("unknown function");
        assert!(err.to_string().contains("sum(generate(x))"), "{err}");
    }

    #[test]
    fn per_pod_reads_only_a_whole_avg() {
        assert_eq!(per_pod(r#"avg(a{b="c"})"#), Some(r#"a{b="c"}"#));
        assert_eq!(per_pod("avg(a) / avg(b)"), None);
        assert_eq!(per_pod("sum(a)"), None);
        assert_eq!(per_pod("avg(a) or vector(0)"), None);
    }

    #[test]
    fn the_recommended_scaler_is_compressed() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/vllm.yaml"),
        )
        .expect("docs/examples/vllm.yaml");
        let manifest: Value = serde_yaml::from_str(&text).expect("yaml");
        let m = C
            .llmscaler(&manifest, "ns", "http://p")
            .expect("compressed");
        assert_eq!(m["spec"]["syncPeriodSeconds"], 1);
        assert_eq!(m["spec"]["retryPeriodSeconds"], 1);
        assert_eq!(m["spec"]["scaleDown"]["stabilizationWindowSeconds"], 20);
        assert_eq!(m["spec"]["startup"]["initialSeconds"], 6);
        assert_eq!(m["spec"]["scaleDown"]["drain"]["drainSeconds"], 8);
        assert_eq!(m["spec"]["capacity"]["backlogSeconds"], 60);
        assert_eq!(m["metadata"]["namespace"], "ns");
        let mut bad = manifest.clone();
        bad["spec"]["scaleUp"] = json!({"windowSeconds": 5});
        let err = C
            .llmscaler(&bad, "ns", "http://p")
            .expect_err("unknown seconds");
        assert!(
            err.to_string().contains(".spec.scaleUp.windowSeconds"),
            "{err}"
        );
    }

    #[test]
    fn the_scaled_object_has_hpa_defaults_compressed() {
        let manifest = json!({"spec": {"minReplicas": 1, "maxReplicas": 9, "metrics": [
            {"name": "running", "query": "avg(r)", "target": "24"},
            {"name": "tokens", "query": "sum(rate(t[1m])) / count(r)", "target": "2500"},
        ]}});
        let so = C
            .scaled_object(&manifest, "ns", "vllm", "http://p")
            .expect("built");
        let spec = &so["spec"];
        assert_eq!(spec["pollingInterval"], 2);
        assert_eq!(spec["triggers"][0]["metadata"]["query"], "sum(r)");
        assert_eq!(spec["triggers"][0]["metricType"], "AverageValue");
        assert_eq!(
            spec["triggers"][1]["metadata"]["query"],
            "sum((rate(t[4s]) / 15)) / count(r)"
        );
        assert_eq!(spec["triggers"][1]["metricType"], "Value");
        let behavior = &spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"];
        assert_eq!(behavior["scaleDown"]["stabilizationWindowSeconds"], 20);
        assert_eq!(behavior["scaleUp"]["policies"][0]["periodSeconds"], 1);
    }
}
