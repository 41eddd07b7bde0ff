//! The target's pods: created by a scale-up, Ready after the start-up delay, removed by a
//! scale-down the way a ReplicaSet picks (not-yet-Ready pods first, then those a drain took out
//! of rotation (marked with pod-deletion-cost), then the most recently Ready), and the load
//! model's fleet serving on the Ready ones in rotation. A removed pod's requests get the
//! model's termination grace (`drain_s`), then are dropped.

use std::collections::{BTreeMap, BTreeSet};

use llmscaler_loadmodel::Fleet;

use super::{Settings, ms_to_s};
use crate::simulate::hpa::{Phase, Pod};

/// One pod.
#[derive(Clone, Debug)]
struct PodState {
    name: String,
    created_ms: i64,
    ready_ms: i64,
}

/// Pods and the fleet.
#[derive(Clone, Debug)]
pub struct Cluster {
    pods: Vec<PodState>,
    next_id: u64,
    startup_ms: i64,
    now_ms: i64,
    fleet: Fleet,
    /// `spec.replicas` integrated up to `counted_ms`, replica-milliseconds.
    replica_ms: f64,
    counted_ms: i64,
    /// Names Ready as last told to the fleet.
    ready_set: BTreeSet<String>,
    /// Pods out of the Service's rotation (a drain): Ready, serving what they hold, taking
    /// nothing new.
    out: BTreeSet<String>,
    /// Names in rotation as last told to the fleet.
    routable_set: BTreeSet<String>,
    /// The pod-deletion-cost marks (pod → cost; absent = 0).
    costs: BTreeMap<String, i32>,
}

impl Cluster {
    /// `initial` pods, Ready at time 0.
    pub fn new(settings: &Settings, initial: i32) -> Self {
        let mut c = Self {
            pods: Vec::new(),
            next_id: 0,
            startup_ms: settings.startup_ms.max(0),
            now_ms: 0,
            fleet: Fleet::new(settings.params),
            replica_ms: 0.0,
            counted_ms: 0,
            ready_set: BTreeSet::new(),
            out: BTreeSet::new(),
            routable_set: BTreeSet::new(),
            costs: BTreeMap::new(),
        };
        for _ in 0..initial {
            c.add_pod(0, 0);
        }
        c.sync_ready();
        c
    }

    fn add_pod(&mut self, created_ms: i64, ready_ms: i64) {
        let name = format!("pod-{:05}", self.next_id);
        self.next_id += 1;
        self.pods.push(PodState {
            name,
            created_ms,
            ready_ms,
        });
    }

    /// The fleet.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// The fleet, for arrivals.
    pub fn fleet_mut(&mut self) -> &mut Fleet {
        &mut self.fleet
    }

    /// `spec.replicas`.
    pub fn spec_replicas(&self) -> i32 {
        i32::try_from(self.pods.len()).unwrap_or(i32::MAX)
    }

    /// Ready pods now.
    pub fn ready_replicas(&self) -> i32 {
        i32::try_from(self.ready_set.len()).unwrap_or(i32::MAX)
    }

    /// Names of the Ready pods.
    pub fn ready_names(&self) -> &BTreeSet<String> {
        &self.ready_set
    }

    /// The Ready names after [`Cluster::scale`] to `n` with zero start-up time (all pods Ready):
    /// the oldest `n` pods kept, new ones named as they would be.
    pub fn names_after_scale(&self, n: i32) -> BTreeSet<String> {
        let n = usize::try_from(n.max(0)).unwrap_or(0);
        let mut names: Vec<String> = self.pods.iter().map(|p| p.name.clone()).collect();
        names.sort();
        names.truncate(n);
        let mut id = self.next_id;
        while names.len() < n {
            names.push(format!("pod-{id:05}"));
            id += 1;
        }
        names.into_iter().collect()
    }

    /// The pods as the HPA lists them.
    pub fn pods(&self) -> Vec<Pod> {
        self.pods
            .iter()
            .map(|p| Pod {
                name: p.name.clone(),
                phase: Phase::Running,
                deleting: false,
            })
            .collect()
    }

    /// The pods as the operator's step sees them (no marks or labels: the policy adds its own).
    pub fn step_pods(&self) -> Vec<crate::step::Pod> {
        self.pods
            .iter()
            .map(|p| crate::step::Pod {
                name: p.name.clone(),
                ready: self.ready_set.contains(&p.name),
                created: p.created_ms.div_euclid(1000),
                deletion_cost: None,
                rotation: None,
            })
            .collect()
    }

    /// Sets the pod-deletion-cost marks: a scale-down removes the lowest cost first.
    pub fn set_deletion_costs(&mut self, costs: &BTreeMap<String, i32>) {
        costs.clone_into(&mut self.costs);
    }

    /// The earliest time a starting pod becomes Ready, milliseconds.
    pub fn next_ready_ms(&self) -> Option<i64> {
        self.pods
            .iter()
            .filter(|p| p.ready_ms > self.now_ms)
            .map(|p| p.ready_ms)
            .min()
    }

    /// Moves to `t_ms`: the fleet serves up to it and pods due become Ready.
    pub fn advance_to(&mut self, t_ms: i64) {
        self.account(t_ms);
        self.now_ms = self.now_ms.max(t_ms);
        self.fleet.advance_to(ms_to_s(t_ms));
        self.sync_ready();
    }

    fn account(&mut self, t_ms: i64) {
        if t_ms > self.counted_ms {
            self.replica_ms += self.pods.len() as f64 * (t_ms - self.counted_ms) as f64;
            self.counted_ms = t_ms;
        }
    }

    fn sync_ready(&mut self) {
        let ready: BTreeSet<String> = self
            .pods
            .iter()
            .filter(|p| p.ready_ms <= self.now_ms)
            .map(|p| p.name.clone())
            .collect();
        self.out
            .retain(|name| self.pods.iter().any(|p| &p.name == name));
        let routable: BTreeSet<String> = ready.difference(&self.out).cloned().collect();
        if ready != self.ready_set || routable != self.routable_set {
            self.fleet.set_pods(ms_to_s(self.now_ms), &routable, &ready);
            self.ready_set = ready;
            self.routable_set = routable;
        }
    }

    /// Takes `names` out of rotation at `now_ms` (the rest back in): they finish what they hold
    /// and take nothing new (docs/scale-down.md#drain).
    pub fn set_out_of_rotation(&mut self, now_ms: i64, names: &BTreeSet<String>) {
        if *names == self.out {
            return;
        }
        self.account(now_ms);
        self.out = names.clone();
        self.sync_ready();
    }

    /// Requests (waiting + running) held by pod `name`, `None` when it serves none (not Ready).
    pub fn in_flight(&self, name: &str) -> Option<usize> {
        self.fleet.in_flight(name)
    }

    /// Sets `spec.replicas` to `wanted` at `now_ms`.
    pub fn scale(&mut self, now_ms: i64, wanted: i32) {
        self.account(now_ms);
        let wanted = usize::try_from(wanted.max(0)).unwrap_or(0);
        while self.pods.len() < wanted {
            self.add_pod(now_ms, now_ms + self.startup_ms);
        }
        if self.pods.len() > wanted {
            // ReplicaSet order: not Ready first, then the lowest pod-deletion-cost (the pods a
            // drain took out of rotation are marked), then the most recently Ready; newest first.
            let now = self.now_ms;
            let costs = &self.costs;
            let cost = |p: &PodState| costs.get(&p.name).copied().unwrap_or(0);
            self.pods.sort_by(|a, b| {
                let a_ready = a.ready_ms <= now;
                let b_ready = b.ready_ms <= now;
                a_ready
                    .cmp(&b_ready)
                    .then(cost(a).cmp(&cost(b)))
                    .then(b.ready_ms.cmp(&a.ready_ms))
                    .then(b.name.cmp(&a.name))
            });
            self.pods.drain(..self.pods.len() - wanted);
            self.pods.sort_by(|a, b| a.name.cmp(&b.name));
        }
        self.sync_ready();
    }

    /// `spec.replicas` integrated from 0 to `end_ms`, replica-seconds.
    pub fn replica_seconds(&mut self, end_ms: i64) -> f64 {
        self.account(end_ms);
        self.replica_ms / 1000.0
    }
}
