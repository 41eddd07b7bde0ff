//! Leader election on a `coordination.k8s.io/v1` Lease (docs/writing-replicas.md#leader-election),
//! the rules of client-go's `leaderelection` package with two differences that make a failover
//! fast: followers **watch** the Lease, so a Lease released on SIGTERM (or deleted) is taken at
//! once instead of at the next poll, and a follower wakes exactly when the holder's term runs
//! out instead of at a fixed poll.
//!
//! - Writes are optimistic (`PUT` with the `resourceVersion` read, or `POST` to create): two
//!   candidates never both win a race; the loser re-reads. Server-side apply is not used: a
//!   forced apply would let both win.
//! - Expiry is judged on **this process's clock**, from when it last saw the Lease record change
//!   (any write changes its `resourceVersion`), never from the holder's `renewTime`: a skewed
//!   clock between replicas can neither steal a live Lease nor keep a dead one.
//! - A holder that cannot renew within two thirds of the duration steps down before any follower
//!   may take over (at the full duration).
//! - A deleted Lease is created again; a Lease without a holder is taken at once; a Lease with a
//!   missing or non-positive `leaseDurationSeconds` counts with this process's duration.
//! - On [`Election::release`] (SIGTERM) the holder clears `holderIdentity` at once, before the
//!   process finishes its in-flight work, so a follower leads within about a second.
//! - A follower estimates how far its clock runs ahead of the holder's from each renewal it
//!   sees (its own time when it sees the change, minus the `renewTime` the holder wrote:
//!   [`clock_ahead_ms`]). A new leader moves the times a previous leader wrote in status
//!   (stabilization history, drain start) later by that much, so a window measured on a slower
//!   clock never ends early on this one (docs/guards.md#restart-safe-history).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::clock::Clock;

/// What one candidate knows of the Lease, and what it does next (pure, see [`next`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// No Lease: create it, holding it.
    Create,
    /// This process holds it: renew `renewTime`.
    Renew,
    /// Nobody holds it, or the holder's term ran out: take it.
    Acquire,
    /// Another process holds it: wait until `until` (the earliest it may run out) or a change.
    Follow {
        /// When the holder's term runs out if the record does not change, on this clock.
        until: Instant,
    },
}

/// The next step of `me` given the Lease `spec` (`None`: no Lease), the instant this process
/// last saw the record change, `now`, and this process's lease `duration` (used when the record
/// has no usable `leaseDurationSeconds`).
pub(crate) fn next(
    spec: Option<&LeaseSpec>,
    me: &str,
    seen_change: Instant,
    now: Instant,
    duration: Duration,
) -> Step {
    let Some(spec) = spec else {
        return Step::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() {
        return Step::Acquire;
    }
    if holder == me {
        return Step::Renew;
    }
    let term = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(duration, Duration::from_secs);
    let until = seen_change + term;
    if now >= until {
        Step::Acquire
    } else {
        Step::Follow { until }
    }
}

/// The largest clock difference [`Election::clock_ahead_ms`] reports, milliseconds: 10
/// minutes. A `renewTime` further off is a forged or broken record, not a skew to correct for
/// (a restored window would otherwise be held for hours).
pub(crate) const MAX_CLOCK_AHEAD_MS: i64 = 600_000;

/// How many milliseconds this process's clock reads ahead of the clock of the Lease's holder,
/// from a record written by another holder and seen (as a change) at `now` on this clock:
/// `now - renewTime`. The delay between the write and the sighting only adds to it, so the
/// estimate errs toward "ahead", the side on which restored windows last longer. `None` for a
/// record of this process, without a holder or without `renewTime`.
pub(crate) fn clock_ahead_ms(spec: &LeaseSpec, me: &str, now: Timestamp) -> Option<i64> {
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    if holder == me {
        return None;
    }
    let renewed = spec.renew_time.as_ref()?.0;
    Some(
        now.as_millisecond()
            .saturating_sub(renewed.as_millisecond()),
    )
}

/// The spec this process writes at `now` (its clock) when it takes or renews the Lease.
fn held_spec(
    previous: Option<&LeaseSpec>,
    me: &str,
    duration: Duration,
    renew: bool,
    now: Timestamp,
) -> LeaseSpec {
    let now = MicroTime(now);
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)),
        acquire_time: if renew {
            previous.and_then(|p| p.acquire_time.clone())
        } else {
            Some(now.clone())
        },
        renew_time: Some(now),
        lease_transitions: Some(if renew {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..previous.cloned().unwrap_or_default()
    }
}

/// A running election: [`Election::leading`] says whether this process holds the Lease.
pub(crate) struct Election {
    /// `true` while this process holds the Lease (and has renewed it in time).
    pub(crate) leading: watch::Receiver<bool>,
    /// The latest [`clock_ahead_ms`] seen from another holder's record, milliseconds (0 until
    /// one is seen).
    pub(crate) clock_ahead_ms: Arc<AtomicI64>,
    release: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Election {
    /// Starts campaigning for Lease `name` in `namespace` as `identity`, with terms of
    /// `duration` (renewed every third of it), writing times read from `clock`.
    pub(crate) fn start(
        client: kube::Client,
        (namespace, name): (&str, &str),
        identity: &str,
        duration: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let clock_ahead = Arc::new(AtomicI64::new(0));
        let (leading_tx, leading) = watch::channel(false);
        let (release, release_rx) = watch::channel(false);
        let candidate = Candidate {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            me: identity.to_owned(),
            duration,
            clock,
            clock_ahead: clock_ahead.clone(),
        };
        let task = tokio::spawn(candidate.campaign(leading_tx, release_rx));
        Self {
            leading,
            clock_ahead_ms: clock_ahead,
            release,
            task,
        }
    }

    /// Stops campaigning and, if this process holds the Lease, clears its holder so that a
    /// follower takes it at once. Waits at most `timeout` for the write.
    pub(crate) async fn release(self, timeout: Duration) {
        let _ = self.release.send(true);
        match tokio::time::timeout(timeout, self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "the lease task failed"),
            Err(_) => tracing::warn!("releasing the lease timed out"),
        }
    }
}

struct Candidate {
    api: Api<Lease>,
    name: String,
    me: String,
    duration: Duration,
    clock: Arc<dyn Clock>,
    clock_ahead: Arc<AtomicI64>,
}

impl Candidate {
    async fn campaign(self, leading: watch::Sender<bool>, mut release: watch::Receiver<bool>) {
        let retry = (self.duration / 3).max(Duration::from_millis(500));
        let renew_deadline = self.duration * 2 / 3;
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let changes = watcher(self.api.clone(), config).default_backoff();
        futures::pin_mut!(changes);
        let mut seen: Option<(Option<String>, Instant)> = None;
        let mut last_renew: Option<Instant> = None;
        let mut wake = Instant::now();
        loop {
            tokio::select! {
                _ = release.changed() => break,
                () = tokio::time::sleep_until(wake) => {}
                event = changes.next() => {
                    if let Some(Err(err)) = event {
                        tracing::debug!(error = %err, "watching the Lease failed; polling goes on");
                    }
                    // A follower reacts to a change at once (a release, a deletion); the holder
                    // renews on its timer only (its own renewal is a change too).
                    if *leading.borrow() {
                        continue;
                    }
                }
            }
            let now = Instant::now();
            let step = self.round(&mut seen, now).await;
            let holds = match step {
                Ok(true) => {
                    last_renew = Some(now);
                    true
                }
                Ok(false) => false,
                Err(err) => {
                    tracing::warn!(error = %err, lease = %self.name, "lease request failed");
                    // A holder keeps leading until its renew deadline; then it steps down, before
                    // any follower may take over (at the full duration).
                    *leading.borrow() && last_renew.is_some_and(|t| now - t < renew_deadline)
                }
            };
            if !holds {
                last_renew = None;
            }
            leading.send_if_modified(|l| std::mem::replace(l, holds) != holds);
            wake = match &seen {
                Some((_, at)) if !holds => (*at + self.duration)
                    .min(now + retry)
                    .max(now + Duration::from_millis(100)),
                _ => now + retry,
            };
        }
        leading.send_if_modified(|l| std::mem::replace(l, false));
        if let Err(err) = self.give_up().await {
            tracing::warn!(error = %err, lease = %self.name, "releasing the lease failed");
        } else {
            tracing::info!(lease = %self.name, "lease released");
        }
    }

    /// One read and, when the step says so, one write. Returns whether this process holds the
    /// Lease after it.
    async fn round(
        &self,
        seen: &mut Option<(Option<String>, Instant)>,
        now: Instant,
    ) -> Result<bool, kube::Error> {
        let lease = self.api.get_opt(&self.name).await?;
        let version = lease
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        let spec = lease.as_ref().and_then(|l| l.spec.as_ref());
        // Only a write seen while watching says something about the holder's clock; the first
        // read may find a record written long ago (a dead holder).
        let live = seen.is_some();
        let seen_change = match seen {
            Some((v, at)) if *v == version => *at,
            _ => {
                *seen = Some((version.clone(), now));
                if let Some(ahead) = spec
                    .filter(|_| live)
                    .and_then(|s| clock_ahead_ms(s, &self.me, self.clock.now()))
                {
                    self.clock_ahead
                        .store(ahead.min(MAX_CLOCK_AHEAD_MS), Ordering::Relaxed);
                }
                now
            }
        };
        let step = next(spec, &self.me, seen_change, now, self.duration);
        let written = match step {
            Step::Follow { .. } => return Ok(false),
            Step::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(held_spec(
                        None,
                        &self.me,
                        self.duration,
                        false,
                        self.clock.now(),
                    )),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Step::Renew | Step::Acquire => {
                let mut lease = lease.unwrap_or_default();
                lease.spec = Some(held_spec(
                    lease.spec.as_ref(),
                    &self.me,
                    self.duration,
                    step == Step::Renew,
                    self.clock.now(),
                ));
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                if step != Step::Renew {
                    tracing::info!(lease = %self.name, identity = %self.me, ?step, "took the lease");
                }
                *seen = Some((lease.metadata.resource_version, now));
                Ok(true)
            }
            // Another candidate wrote first (409 on replace, 409 on create): follow it.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            // Deleted between the read and the write: created at the next round.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Clears the holder if this process still holds the Lease (client-go's release: holder
    /// empty, duration 1 s).
    async fn give_up(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.me.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(self.clock.now()));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => Ok(()),
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: Option<&str>, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: seconds,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn create_renew_acquire_or_follow() {
        let t0 = Instant::now();
        let d = Duration::from_secs(15);
        assert_eq!(next(None, "a", t0, t0, d), Step::Create);
        assert_eq!(
            next(Some(&held_by(Some("a"), Some(15))), "a", t0, t0, d),
            Step::Renew
        );
        // Released (client-go clears the holder) or never held: taken at once.
        assert_eq!(
            next(Some(&held_by(None, Some(1))), "a", t0, t0, d),
            Step::Acquire
        );
        assert_eq!(
            next(Some(&held_by(Some(""), Some(15))), "a", t0, t0, d),
            Step::Acquire
        );
        // Held by b, renewed 10 s ago as this process saw it: follow until 15 s after.
        let b = held_by(Some("b"), Some(15));
        let now = t0 + Duration::from_secs(10);
        assert_eq!(
            next(Some(&b), "a", t0, now, d),
            Step::Follow {
                until: t0 + Duration::from_secs(15)
            }
        );
        assert_eq!(
            next(Some(&b), "a", t0, t0 + Duration::from_secs(15), d),
            Step::Acquire
        );
    }

    #[test]
    fn a_corrupted_duration_counts_as_this_processs_own() {
        let t0 = Instant::now();
        let d = Duration::from_secs(6);
        for broken in [None, Some(0), Some(-5)] {
            let spec = held_by(Some("ghost"), broken);
            assert_eq!(
                next(Some(&spec), "a", t0, t0 + Duration::from_secs(5), d),
                Step::Follow {
                    until: t0 + Duration::from_secs(6)
                },
                "{broken:?}"
            );
            assert_eq!(
                next(Some(&spec), "a", t0, t0 + Duration::from_secs(6), d),
                Step::Acquire
            );
        }
    }

    #[test]
    fn a_take_over_counts_a_transition_and_a_renewal_does_not() {
        let previous = LeaseSpec {
            holder_identity: Some("b".into()),
            lease_transitions: Some(3),
            acquire_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            ..LeaseSpec::default()
        };
        let taken = held_spec(
            Some(&previous),
            "a",
            Duration::from_secs(15),
            false,
            Timestamp::now(),
        );
        assert_eq!(taken.holder_identity.as_deref(), Some("a"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.lease_duration_seconds, Some(15));
        assert_ne!(taken.acquire_time, previous.acquire_time);
        let renewed = held_spec(
            Some(&taken),
            "a",
            Duration::from_secs(15),
            true,
            Timestamp::now(),
        );
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, taken.acquire_time);
    }

    #[test]
    fn the_clock_ahead_of_the_holder_is_read_from_its_renew_time() {
        let renewed = Timestamp::from_second(1_000_000).expect("time");
        let spec = LeaseSpec {
            holder_identity: Some("old".into()),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        };
        // The holder's clock runs 30 s behind this one: its renewal, seen 20 ms after it was
        // written, looks 30.02 s old here.
        let seen = Timestamp::from_millisecond(1_000_030_020).expect("time");
        assert_eq!(clock_ahead_ms(&spec, "new", seen), Some(30_020));
        // Ahead of this one: negative.
        let seen = Timestamp::from_millisecond(999_970_000).expect("time");
        assert_eq!(clock_ahead_ms(&spec, "new", seen), Some(-30_000));
        // Its own record, no holder, no renewTime: nothing to learn.
        assert_eq!(clock_ahead_ms(&spec, "old", seen), None);
        let released = LeaseSpec {
            holder_identity: None,
            ..spec.clone()
        };
        assert_eq!(clock_ahead_ms(&released, "new", seen), None);
        let no_time = LeaseSpec {
            renew_time: None,
            ..spec
        };
        assert_eq!(clock_ahead_ms(&no_time, "new", seen), None);
    }
}
