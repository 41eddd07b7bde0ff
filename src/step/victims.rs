//! Which pods a Deployment scale-down removes (docs/scale-down.md#which-pods): the marks to
//! write, as a pure plan. Writing them is [`crate::controller::victims`]'s job.

use std::collections::BTreeMap;

use llmscaler_api::names::NEWEST_FIRST_COST;

use super::Pod;

/// The marks of one scale-down: the cost to set per pod, and the pods whose cost to clear.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Marks {
    /// Pods to annotate with a cost (as an int32).
    pub set: BTreeMap<String, i32>,
    /// Pods whose stale cost to remove.
    pub clear: Vec<String>,
    /// The pods expected to go (the `remove` cheapest).
    pub victims: Vec<String>,
}

/// Plans the marks (pure). With `costs` (from `deletionCostQuery`, pod → value): every pod the
/// query returned gets its value rounded to int32 (lowest goes first), pods it did not return
/// lose any old cost, and the victims are the `remove` lowest (ties: newest first). Without:
/// the `remove` newest pods get [`NEWEST_FIRST_COST`], every other pod loses any old cost.
/// Annotations already equal to the plan are not rewritten. `pods` are the live pods (not
/// terminating).
pub fn plan(pods: &[Pod], remove: usize, costs: Option<&BTreeMap<String, f64>>) -> Marks {
    let mut ranked: Vec<(&Pod, Option<i32>)> = pods
        .iter()
        .map(|c| {
            (
                c,
                costs.and_then(|m| m.get(&c.name)).map(|v| round_cost(*v)),
            )
        })
        .collect();
    // Lowest cost first (a pod without a value keeps no annotation: cost 0 for the ReplicaSet),
    // then newest first.
    ranked.sort_by(|(a, ca), (b, cb)| {
        ca.unwrap_or(0)
            .cmp(&cb.unwrap_or(0))
            .then(b.created.cmp(&a.created))
            .then(a.name.cmp(&b.name))
    });
    if costs.is_none() {
        // Newest first: no query value; ranking is by creation time only.
        ranked.sort_by(|(a, _), (b, _)| b.created.cmp(&a.created).then(a.name.cmp(&b.name)));
    }
    let victims: Vec<String> = ranked
        .iter()
        .take(remove)
        .map(|(c, _)| c.name.clone())
        .collect();
    let mut out = Marks {
        victims: victims.clone(),
        ..Marks::default()
    };
    for (pod, cost) in &ranked {
        let wanted = match costs {
            Some(_) => *cost,
            None => victims.contains(&pod.name).then_some(NEWEST_FIRST_COST),
        };
        match wanted {
            Some(cost) if pod.deletion_cost.as_deref() != Some(&cost.to_string()) => {
                out.set.insert(pod.name.clone(), cost);
            }
            Some(_) => {}
            None if pod.deletion_cost.is_some() => out.clear.push(pod.name.clone()),
            None => {}
        }
    }
    out
}

/// Plans the marks of a drained scale-down (pure): exactly `victims` get [`NEWEST_FIRST_COST`],
/// every other pod loses any old cost (so a lower cost left by `deletionCostQuery` cannot send
/// another pod first). Victims that are no longer live pods are left out.
pub fn plan_for(pods: &[Pod], victims: &[String]) -> Marks {
    let mut out = Marks::default();
    for pod in pods {
        if victims.contains(&pod.name) {
            out.victims.push(pod.name.clone());
            if pod.deletion_cost.as_deref() != Some(&NEWEST_FIRST_COST.to_string()) {
                out.set.insert(pod.name.clone(), NEWEST_FIRST_COST);
            }
        } else if pod.deletion_cost.is_some() {
            out.clear.push(pod.name.clone());
        }
    }
    out
}

/// A query value as a deletion cost: rounded, saturated to int32.
#[allow(clippy::cast_possible_truncation)]
fn round_cost(value: f64) -> i32 {
    if value.is_nan() {
        0
    } else {
        // `as` saturates at the int32 bounds.
        value.round() as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, created: i64, cost: Option<&str>) -> Pod {
        Pod {
            name: name.into(),
            ready: true,
            created,
            deletion_cost: cost.map(String::from),
            rotation: None,
        }
    }

    #[test]
    fn a_drained_plan_marks_exactly_the_victims_and_clears_the_rest() {
        let pods = [
            pod("a", 1, Some("-5000")),
            pod("b", 3, None),
            pod("c", 2, Some("-100")),
        ];
        let victims = ["b".to_string(), "c".to_string(), "gone".to_string()];
        let p = plan_for(&pods, &victims);
        assert_eq!(p.victims, vec!["b", "c"]);
        assert_eq!(p.set, BTreeMap::from([("b".to_string(), -100)]));
        assert_eq!(p.clear, vec!["a"]);
    }

    #[test]
    fn newest_first_marks_the_newest_and_clears_stale() {
        let pods = [
            pod("a", 1, None),
            pod("b", 3, None),
            pod("c", 2, Some("-100")),
        ];
        let p = plan(&pods, 1, None);
        assert_eq!(p.victims, vec!["b"]);
        assert_eq!(p.set, BTreeMap::from([("b".to_string(), -100)]));
        assert_eq!(p.clear, vec!["c"]);
    }

    #[test]
    fn query_costs_annotate_every_returned_pod_lowest_goes() {
        let pods = [
            pod("a", 1, None),
            pod("b", 3, None),
            pod("c", 2, Some("7")),
            pod("d", 4, Some("1")),
        ];
        let costs = BTreeMap::from([
            ("a".to_string(), 0.4),
            ("b".to_string(), 12.6),
            ("c".to_string(), 7.2),
        ]);
        let p = plan(&pods, 2, Some(&costs));
        // d has no value: its stale cost is cleared, so the ReplicaSet sees cost 0, like a
        // (0.4 -> 0); on the tie the newer pod goes first, as the ReplicaSet ranks them.
        assert_eq!(p.victims, vec!["d", "a"]);
        assert_eq!(
            p.set,
            BTreeMap::from([("a".to_string(), 0), ("b".to_string(), 13)])
        );
        assert_eq!(p.clear, vec!["d"]);
    }

    #[test]
    fn huge_costs_saturate() {
        assert_eq!(round_cost(1e300), i32::MAX);
        assert_eq!(round_cost(-1e300), i32::MIN);
    }
}
