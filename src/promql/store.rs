//! Sampled series as a Prometheus TSDB holds them: points at scrape times and staleness markers.

use std::collections::{BTreeMap, HashMap};

/// Prometheus' default lookback delta (`--query.lookback-delta`), milliseconds.
pub const DEFAULT_LOOKBACK_MS: i64 = 300_000;

/// A series' labels, `__name__` included.
pub type Labels = BTreeMap<String, String>;

/// One stored point: a value, or a staleness marker (`None`) written when a target disappears.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Time, milliseconds.
    pub t_ms: i64,
    /// The value; `None` is a staleness marker.
    pub v: Option<f64>,
}

/// One series: labels and points in time order.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Labels, `__name__` included.
    pub labels: Labels,
    /// Points, oldest first.
    pub points: Vec<Point>,
}

/// Every series, indexed by metric name.
#[derive(Clone, Debug, Default)]
pub struct Store {
    series: Vec<Series>,
    by_key: HashMap<Labels, usize>,
    by_name: HashMap<String, Vec<usize>>,
    /// Instant-vector lookback, milliseconds ([`DEFAULT_LOOKBACK_MS`] unless set).
    pub lookback_ms: i64,
}

impl Store {
    /// An empty store with Prometheus' default 5-minute lookback.
    pub fn new() -> Self {
        Self {
            lookback_ms: DEFAULT_LOOKBACK_MS,
            ..Self::default()
        }
    }

    /// Appends a point to the series with `labels` (created on first use). Points must come in
    /// time order per series; an older point is ignored.
    pub fn push(&mut self, labels: &Labels, t_ms: i64, v: Option<f64>) {
        let index = match self.by_key.get(labels) {
            Some(&i) => i,
            None => {
                let i = self.series.len();
                self.series.push(Series {
                    labels: labels.clone(),
                    points: Vec::new(),
                });
                self.by_key.insert(labels.clone(), i);
                let name = labels.get("__name__").cloned().unwrap_or_default();
                self.by_name.entry(name).or_default().push(i);
                i
            }
        };
        let points = &mut self.series[index].points;
        if points.last().is_none_or(|p| p.t_ms < t_ms) {
            points.push(Point { t_ms, v });
        }
    }

    /// Writes a staleness marker at `t_ms` on every series whose labels include all of
    /// `labels` and whose last point is a value (a target that stopped answering).
    pub(crate) fn mark_stale(&mut self, labels: &Labels, t_ms: i64) {
        for s in &mut self.series {
            let matches = labels.iter().all(|(k, v)| s.labels.get(k) == Some(v));
            if matches
                && let Some(last) = s.points.last()
                && last.v.is_some()
                && last.t_ms < t_ms
            {
                s.points.push(Point { t_ms, v: None });
            }
        }
    }

    /// Values of label `label` over the series named `name` whose last point is a value (not
    /// a staleness marker), sorted and deduplicated.
    pub(crate) fn live_values_of(&self, name: &str, label: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .candidates(Some(name))
            .filter(|s| s.points.last().is_some_and(|p| p.v.is_some()))
            .filter_map(|s| s.labels.get(label).cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The labels of every series ever stored (`__name__` included), in the order they were
    /// first written.
    pub fn label_sets(&self) -> Vec<Labels> {
        self.series.iter().map(|s| s.labels.clone()).collect()
    }

    /// Series named `name` (all series when `None`).
    pub(crate) fn candidates(&self, name: Option<&str>) -> Box<dyn Iterator<Item = &Series> + '_> {
        match name {
            Some(n) => Box::new(
                self.by_name
                    .get(n)
                    .into_iter()
                    .flatten()
                    .map(|&i| &self.series[i]),
            ),
            None => Box::new(self.series.iter()),
        }
    }
}

impl Series {
    /// The value an instant selector sees at `t_ms`: the newest point at or before `t_ms` and
    /// newer than `t_ms - lookback_ms`, unless it is a staleness marker.
    pub fn instant(&self, t_ms: i64, lookback_ms: i64) -> Option<f64> {
        let end = self.points.partition_point(|p| p.t_ms <= t_ms);
        let p = self.points.get(end.checked_sub(1)?)?;
        if p.t_ms <= t_ms - lookback_ms {
            return None;
        }
        p.v
    }

    /// The values a range selector `[range]` sees at `t_ms`: points in `(t_ms - range, t_ms]`,
    /// staleness markers left out.
    pub fn range(&self, t_ms: i64, range_ms: i64) -> Vec<(i64, f64)> {
        let start = self.points.partition_point(|p| p.t_ms <= t_ms - range_ms);
        let end = self.points.partition_point(|p| p.t_ms <= t_ms);
        self.points[start..end]
            .iter()
            .filter_map(|p| p.v.map(|v| (p.t_ms, v)))
            .collect()
    }
}
