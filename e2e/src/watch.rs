//! Exact observation of one object: a [`Recorder`] watches it (a `kube::runtime::watcher`) from
//! before a test's action and keeps every version the API server sends, in order, so a test
//! counts changes (a replica walk, a re-assert, a write) exactly instead of sampling on a timer,
//! and waits on a condition with a deadline without polling.
//!
//! A watch delivers every change of the object from the resourceVersion of its initial list, so
//! the record is complete unless the watch had to re-list (the server forgot the resourceVersion,
//! HTTP 410): then versions in between may be missing, and [`Recorder::replica_walk`] refuses to
//! count across that gap.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::watch;

/// How long [`Recorder::start`] waits for the watch's initial list.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One version of the watched object, as the API server sent it.
#[derive(Clone, Debug)]
pub struct Version {
    /// The object (its `data` holds `spec` and `status` as JSON).
    pub object: DynamicObject,
    /// Wall-clock time when the watch delivered it: a few milliseconds after the write at most,
    /// never before.
    pub seen_at: SystemTime,
}

impl Version {
    /// `metadata.resourceVersion` (empty when absent).
    pub fn resource_version(&self) -> String {
        self.object.resource_version().unwrap_or_default()
    }

    /// The JSON at `pointer` (RFC 6901, e.g. `/status/readyReplicas`) of the object's data, or
    /// `Null`.
    pub fn get(&self, pointer: &str) -> &Value {
        self.object.data.pointer(pointer).unwrap_or(&Value::Null)
    }

    /// `spec.replicas`, when set and an int32.
    pub fn replicas(&self) -> Option<i32> {
        self.get("/spec/replicas")
            .as_i64()
            .and_then(|r| i32::try_from(r).ok())
    }

    /// `status.readyReplicas` (0 when unset, as the workload APIs omit a zero).
    pub fn ready_replicas(&self) -> i32 {
        self.get("/status/readyReplicas")
            .as_i64()
            .and_then(|r| i32::try_from(r).ok())
            .unwrap_or(0)
    }

    /// The field managers whose managed fields include `spec.replicas`, in the object's order.
    pub fn replicas_managers(&self) -> Vec<String> {
        self.object
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| {
                e.fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
            })
            .filter_map(|e| e.manager.clone())
            .collect()
    }

    /// A one-line description for failure messages: resourceVersion, `spec.replicas`, status.
    pub fn summary(&self) -> String {
        format!(
            "rv {} spec.replicas {} status {}",
            self.resource_version(),
            self.get("/spec/replicas"),
            self.get("/status")
        )
    }
}

/// What the watch has delivered so far.
#[derive(Debug, Default)]
struct Record {
    /// Every distinct version, oldest first.
    versions: Vec<Version>,
    /// The initial list has completed.
    listed: bool,
    /// The watch re-listed after the initial list: versions may be missing in between.
    relisted: bool,
    /// The object was deleted (or disappeared in a re-list).
    deleted: bool,
    /// The object came in the current (re-)list.
    in_list: bool,
    /// The latest watch error (the watcher retries with a backoff).
    last_error: Option<String>,
}

impl Record {
    fn push(&mut self, object: DynamicObject) {
        let version = Version {
            object,
            seen_at: SystemTime::now(),
        };
        if self.versions.last().map(Version::resource_version) != Some(version.resource_version()) {
            self.versions.push(version);
        }
    }

    fn describe(&self) -> String {
        let last = self
            .versions
            .last()
            .map_or_else(|| "no object".to_owned(), Version::summary);
        let mut text = format!(
            "{} versions, replica walk {:?}; latest: {last}",
            self.versions.len(),
            distinct_replicas(&self.versions)
        );
        if self.deleted {
            text.push_str("; deleted");
        }
        if self.relisted {
            text.push_str("; the watch re-listed (versions may be missing)");
        }
        if let Some(err) = &self.last_error {
            text.push_str(&format!("; last watch error: {err}"));
        }
        text
    }
}

/// The distinct consecutive `spec.replicas` values of `versions` (versions without it skipped).
fn distinct_replicas(versions: &[Version]) -> Vec<i32> {
    let mut walk: Vec<i32> = Vec::new();
    for replicas in versions.iter().filter_map(Version::replicas) {
        if walk.last() != Some(&replicas) {
            walk.push(replicas);
        }
    }
    walk
}

/// Records every version of one namespaced object from [`Recorder::start`] on; the watch stops
/// when the recorder is dropped.
pub struct Recorder {
    what: String,
    record: watch::Receiver<Record>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    /// Starts watching the object `name` of kind `resource` in `namespace`, and returns once the
    /// initial list is in (the object's current version, if it exists): every change made after
    /// this returns is recorded.
    ///
    /// # Errors
    /// When the initial list does not complete within [`START_TIMEOUT`] (RBAC, unknown kind),
    /// with the last watch error.
    pub async fn start(
        client: &Client,
        namespace: &str,
        resource: &ApiResource,
        name: &str,
    ) -> anyhow::Result<Self> {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        let what = format!("{} {namespace}/{name}", resource.kind);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (sender, record) = watch::channel(Record::default());
        let task = tokio::spawn(async move {
            let mut events = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                sender.send_modify(|record| match event {
                    Ok(Event::Init) => {
                        record.relisted |= record.listed;
                        record.in_list = false;
                    }
                    Ok(Event::InitApply(object)) => {
                        record.in_list = true;
                        record.deleted = false;
                        record.push(object);
                    }
                    Ok(Event::Apply(object)) => {
                        record.deleted = false;
                        record.push(object);
                    }
                    Ok(Event::InitDone) => {
                        // A re-list without the object: it was deleted meanwhile.
                        record.deleted |= !record.in_list && !record.versions.is_empty();
                        record.listed = true;
                    }
                    Ok(Event::Delete(_)) => record.deleted = true,
                    Err(err) => record.last_error = Some(err.to_string()),
                });
            }
        });
        let recorder = Self { what, record, task };
        let mut listing = recorder.record.clone();
        let listed = tokio::time::timeout(START_TIMEOUT, listing.wait_for(|r| r.listed))
            .await
            .is_ok_and(|r| r.is_ok());
        if listed {
            Ok(recorder)
        } else {
            bail!(
                "watching {}: no initial list within {START_TIMEOUT:?}; {}",
                recorder.what,
                recorder.record.borrow().describe()
            )
        }
    }

    /// [`Recorder::start`] for an `apps/v1` Deployment.
    ///
    /// # Errors
    /// As [`Recorder::start`].
    pub async fn deployment(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Self> {
        Self::start(
            client,
            namespace,
            &ApiResource::erase::<Deployment>(&()),
            name,
        )
        .await
    }

    /// Every version recorded so far, oldest first (the first one is the version current at
    /// [`Recorder::start`], if the object existed).
    pub fn versions(&self) -> Vec<Version> {
        self.record.borrow().versions.clone()
    }

    /// The latest version, if any.
    pub fn latest(&self) -> Option<Version> {
        self.record.borrow().versions.last().cloned()
    }

    /// Every distinct `spec.replicas` value in the order written, starting with the value at
    /// [`Recorder::start`]; consecutive versions with the same value count once.
    ///
    /// # Errors
    /// When the watch re-listed, so that a value may be missing.
    pub fn replica_walk(&self) -> anyhow::Result<Vec<i32>> {
        let record = self.record.borrow();
        if record.relisted {
            bail!(
                "the watch on {} re-listed; the count would not be exact: {}",
                self.what,
                record.describe()
            );
        }
        Ok(distinct_replicas(&record.versions))
    }

    /// Waits until `check` returns `Some` for the whole record so far (every version, oldest
    /// first), re-checking on every new version, for at most `timeout`.
    ///
    /// A version that arrives and is superseded before the check runs is still in the slice, so
    /// `check` sees the complete record; it is not re-run for every intermediate state, though.
    ///
    /// # Errors
    /// On timeout, naming `what` and describing the record (the walk and the latest version).
    pub async fn wait_record<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&[Version]) -> Option<T>,
    ) -> anyhow::Result<T> {
        let mut record = self.record.clone();
        let mut found = None;
        let waited = tokio::time::timeout(
            timeout,
            record.wait_for(|r| {
                found = check(&r.versions);
                found.is_some()
            }),
        )
        .await
        .map(|r| r.is_ok());
        match (waited, found) {
            (Ok(true), Some(value)) => Ok(value),
            (Ok(false), _) => Err(anyhow!("the watch on {} ended", self.what)),
            _ => Err(anyhow!(
                "timed out after {timeout:?} waiting for {what} on {}; {}",
                self.what,
                self.record.borrow().describe()
            )),
        }
    }

    /// Waits until the latest version passes `check` (returning what it returns), for at most
    /// `timeout`.
    ///
    /// # Errors
    /// As [`Recorder::wait_record`].
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Version) -> Option<T>,
    ) -> anyhow::Result<T> {
        self.wait_record(what, timeout, |versions| {
            versions.last().and_then(&mut check)
        })
        .await
    }

    /// Waits until the latest version has `spec.replicas == replicas`; returns that version
    /// (its [`Version::seen_at`] is when the write arrived).
    ///
    /// # Errors
    /// As [`Recorder::wait_record`].
    pub async fn wait_spec_replicas(
        &self,
        replicas: i32,
        timeout: Duration,
    ) -> anyhow::Result<Version> {
        self.wait_until(&format!("spec.replicas {replicas}"), timeout, |v| {
            (v.replicas() == Some(replicas)).then(|| v.clone())
        })
        .await
    }

    /// Waits until the latest version has `replicas` in spec and as many ready.
    ///
    /// # Errors
    /// As [`Recorder::wait_record`].
    pub async fn wait_ready_replicas(
        &self,
        replicas: i32,
        timeout: Duration,
    ) -> anyhow::Result<Version> {
        self.wait_until(&format!("{replicas} ready replicas"), timeout, |v| {
            (v.replicas() == Some(replicas) && v.ready_replicas() == replicas).then(|| v.clone())
        })
        .await
    }
}

/// A Kubernetes timestamp (RFC 3339, e.g. `status.recommendations[].time`) as a [`SystemTime`].
///
/// # Errors
/// When `value` is not an RFC 3339 string or lies before 1970.
pub fn timestamp(value: &Value) -> anyhow::Result<SystemTime> {
    let time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
        serde_json::from_value(value.clone()).with_context(|| format!("timestamp {value}"))?;
    let millis = u64::try_from(time.0.as_millisecond())
        .with_context(|| format!("timestamp {value} before 1970"))?;
    Ok(UNIX_EPOCH + Duration::from_millis(millis))
}

/// Watches Deployment `namespace/name` from now and resolves with the instant its
/// `spec.replicas` first reads `want` (a wake-up's write, timed without polling).
///
/// # Errors
/// From the task: the watch ended before that.
pub fn when_spec_replicas(
    client: &Client,
    namespace: &str,
    name: &str,
    want: i32,
) -> tokio::task::JoinHandle<anyhow::Result<std::time::Instant>> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let (field, name) = (format!("metadata.name={name}"), name.to_owned());
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default().fields(&field))
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(d)) = stream.next().await {
            if d.spec.as_ref().and_then(|s| s.replicas) == Some(want) {
                return Ok(std::time::Instant::now());
            }
        }
        Err(anyhow!("the Deployment watch of {name} ended"))
    })
}
