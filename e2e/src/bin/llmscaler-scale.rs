//! The driver of `bench/scale` (issue 14, `docs/benchmarks/scale.md`): N Deployments of kwok
//! pods, each with an LLMScaler reading its own series of one shared exporter through a real
//! Prometheus, and one `llmscaler run` (the chart's RBAC, `$LLMSCALER_BIN`) on the local cluster
//! of `e2e/cluster up`. Once every scaler has synced and a period has passed, it measures over a
//! window: the operator's RSS and CPU, the API server's requests on the resources the operator
//! reads or writes (`apiserver_request_total`), Prometheus's query requests, and the
//! evaluation lag (`llmscaler_evaluation_lag_seconds`); then it changes the series of a sample of
//! scalers and times each until its Deployment's `spec.replicas` is first written and until it is at least 3. Writes one JSON
//! report. A benchmark, not a test: it fails only when the setup does not come up.
//!
//! With `--autoscaler keda` the same Deployments get KEDA ScaledObjects instead (Prometheus
//! trigger on the same query, threshold 0.5, `pollingInterval` = the sync period) served by the
//! KEDA of `e2e/keda up` (pids from `e2e/keda env`): RSS and CPU are those of KEDA's operator and
//! metrics API server together, API requests include the HPAs' (kube-controller-manager's)
//! requests and the external metrics reads, per scaler per period; the lag is KEDA's own
//! `keda_internal_scale_loop_latency_seconds` (a gauge per ScaledObject, sampled every 5 s).
//!
//! usage: llmscaler-scale --scalers N --report FILE [--autoscaler llmscaler|keda]
//!        [--sync-period-seconds 15] [--measure-seconds 120] [--latency-sample 20]
//!        [--max-concurrent-syncs 32]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use llmscaler_e2e::fixture::{
    SETUP_MANAGER, World, deployment_manifest, deployment_ref, queue_scaler_spec, reconcile_count,
    scaler_resource, writes_of,
};
use llmscaler_e2e::operator::run_command;
use llmscaler_e2e::{Check, kubectl_path, wait_for_every};
use serde_json::{Value, json};

/// The resources the operator reads or writes: their API requests are charged to it (nothing
/// else changes them while the window runs; leases are left out: one renewal per process, not
/// per sync).
const OPERATOR_RESOURCES: &[&str] = &[
    "deployments",
    "llmscalers",
    "scaledobjects",
    "pods",
    "horizontalpodautoscalers",
    "events",
];

/// The API group of KEDA's external metrics (every read of one is counted).
const EXTERNAL_METRICS: &str = "external.metrics.k8s.io";

/// Which autoscaler serves the Deployments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Autoscaler {
    /// One `llmscaler run` started by the driver.
    Llmscaler,
    /// The KEDA of `e2e/keda up`, with the cluster's HPA controller.
    Keda,
}

#[derive(Parser, Debug)]
struct Args {
    /// How many Deployments and scalers.
    #[arg(long)]
    scalers: usize,
    /// `syncPeriodSeconds` of every scaler.
    #[arg(long, default_value_t = 15)]
    sync_period_seconds: u32,
    /// Length of the steady measurement window, seconds.
    #[arg(long, default_value_t = 120)]
    measure_seconds: u64,
    /// How many scalers get a metric change for the change → `spec.replicas` timing.
    #[arg(long, default_value_t = 20)]
    latency_sample: usize,
    /// Steady replicas of every Deployment: 1 (one kwok pod each, series at 0.5) or 0 (no pods,
    /// series at 0, `minReplicas` 0; for large N, where creating the pods would take longer than
    /// the run on a busy machine).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(0..=1))]
    idle_replicas: i32,
    /// The autoscaler under test.
    #[arg(long, value_enum, default_value = "llmscaler")]
    autoscaler: Autoscaler,
    /// `--max-concurrent-syncs` of the operator.
    #[arg(long, default_value_t = 32)]
    max_concurrent_syncs: u16,
    /// Objects created at once during setup.
    #[arg(long, default_value_t = 32)]
    create_concurrency: usize,
    /// Where to write the JSON report.
    #[arg(long)]
    report: PathBuf,
}

fn scaler_name(i: usize) -> String {
    format!("s{i:05}")
}

/// The exposition of `llm_queue{scaler="s…"}` for every scaler: 0.5 (one replica at target 0.5,
/// steady) except the `changed` ones at 1.5 (three replicas).
fn exposition(n: usize, changed: usize, idle_replicas: i32) -> String {
    let steady = if idle_replicas == 0 { 0.0 } else { 0.5 };
    let mut text = String::from("# TYPE llm_queue gauge\n");
    for i in 0..n {
        let value = if i < changed { 1.5 } else { steady };
        text.push_str(&format!(
            "llm_queue{{scaler=\"{}\"}} {value}\n",
            scaler_name(i)
        ));
    }
    text
}

/// One reading of every counter the report is made of.
#[derive(Debug, Clone)]
struct Reading {
    at: Instant,
    cpu_seconds: f64,
    rss_kib: u64,
    api: BTreeMap<String, f64>,
    prometheus_queries: f64,
    syncs: u64,
    lag_buckets: Vec<(f64, f64)>,
}

/// utime + stime of `pid`, seconds, and VmRSS, KiB.
fn process_usage(pid: u32, ticks_per_second: f64) -> anyhow::Result<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the ')'.
    let utime: f64 = fields.get(11).context("utime")?.parse()?;
    let stime: f64 = fields.get(12).context("stime")?.parse()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("VmRSS")?;
    Ok(((utime + stime) / ticks_per_second, rss))
}

/// `apiserver_request_total` summed by `verb resource` over [`OPERATOR_RESOURCES`].
fn api_requests() -> anyhow::Result<BTreeMap<String, f64>> {
    let metrics = run_command(&kubectl_path(), &["get", "--raw", "/metrics"], None)?;
    let mut out = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |name: &str| {
            let key = format!("{name}=\"");
            let start = line.find(&key)? + key.len();
            line[start..].split('"').next().map(str::to_owned)
        };
        let (Some(verb), Some(mut resource)) = (label("verb"), label("resource")) else {
            continue;
        };
        if label("group").as_deref() == Some(EXTERNAL_METRICS) {
            resource = EXTERNAL_METRICS.to_owned();
        } else if !OPERATOR_RESOURCES.contains(&resource.as_str()) {
            continue;
        }
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(format!("{verb} {resource}")).or_default() += value;
    }
    Ok(out)
}

/// Prometheus's count of instant-query requests.
async fn prometheus_queries(url: &str) -> anyhow::Result<f64> {
    let text = reqwest::get(format!("{url}/metrics")).await?.text().await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("prometheus_http_requests_total{")
                && l.contains("handler=\"/api/v1/query\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// The cumulative buckets `(le, count)` of `llmscaler_evaluation_lag_seconds`.
fn lag_buckets(metrics: &str) -> Vec<(f64, f64)> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("llmscaler_evaluation_lag_seconds_bucket{le=\""))
        .filter_map(|l| {
            let (le, rest) = l.split_once('"')?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, rest.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The upper bound of the bucket holding quantile `q` of the observations between two readings
/// of cumulative buckets (`None` without observations).
fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let deltas: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, n)| {
            let prior = before
                .iter()
                .find(|(l, _)| l == le)
                .map_or(0.0, |(_, c)| *c);
            (*le, n - prior)
        })
        .collect();
    let total = deltas.last()?.1;
    if total <= 0.0 {
        return None;
    }
    deltas
        .iter()
        .find(|(_, cumulative)| *cumulative >= q * total)
        .map(|(le, _)| *le)
}

/// Summed usage of `pids`: CPU seconds and RSS, KiB.
fn usage(pids: &[u32], ticks: f64) -> anyhow::Result<(f64, u64)> {
    pids.iter().try_fold((0.0, 0), |(cpu, rss), pid| {
        let (c, r) = process_usage(*pid, ticks)?;
        Ok((cpu + c, rss + r))
    })
}

async fn read(world: &World, pids: &[u32], ticks: f64) -> anyhow::Result<Reading> {
    let (cpu_seconds, rss_kib) = usage(pids, ticks)?;
    let metrics = match world.operators.first() {
        Some(operator) => operator.metrics().await?,
        None => String::new(),
    };
    Ok(Reading {
        at: Instant::now(),
        cpu_seconds,
        rss_kib,
        api: api_requests()?,
        prometheus_queries: prometheus_queries(&world.prometheus.url()).await?,
        syncs: reconcile_count(&metrics),
        lag_buckets: lag_buckets(&metrics),
    })
}

/// Applies every Deployment and scaler, `concurrency` at a time.
async fn create_objects(world: &World, args: &Args) -> anyhow::Result<()> {
    let ns = world.namespace().to_owned();
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        world.client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        ),
    );
    let scalers: Api<DynamicObject> = Api::namespaced_with(
        world.client.clone(),
        &ns,
        &match args.autoscaler {
            Autoscaler::Llmscaler => scaler_resource(),
            Autoscaler::Keda => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
                "scaledobjects",
            ),
        },
    );
    let autoscaler = args.autoscaler;
    let idle = args.idle_replicas;
    let prometheus = world.prometheus.url();
    let period = args.sync_period_seconds;
    futures::stream::iter(0..args.scalers)
        .map(|i| {
            let (deployments, scalers, ns, prometheus) = (&deployments, &scalers, &ns, &prometheus);
            async move {
                let name = scaler_name(i);
                let deployment = deployment_manifest(ns, &name, Some(idle));
                deployments
                    .patch(
                        &name,
                        &PatchParams::apply(SETUP_MANAGER).force(),
                        &Patch::Apply(&deployment),
                    )
                    .await
                    .with_context(|| format!("creating Deployment {name}"))?;
                let scaler = match autoscaler {
                    Autoscaler::Llmscaler => json!({
                        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
                        "kind": "LLMScaler",
                        "metadata": {"name": name, "namespace": ns},
                        "spec": queue_scaler_spec(
                            prometheus,
                            deployment_ref(&name),
                            &name,
                            (idle, 10),
                            json!({"syncPeriodSeconds": period, "retryPeriodSeconds": period}),
                        ),
                    }),
                    Autoscaler::Keda => scaled_object(ns, &name, prometheus, (period, idle)),
                };
                scalers
                    .patch(
                        &name,
                        &PatchParams::apply("e2e-user").force(),
                        &Patch::Apply(&scaler),
                    )
                    .await
                    .with_context(|| format!("creating the autoscaler of {name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.create_concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}

/// A KEDA ScaledObject on Deployment `name` with the Prometheus trigger on the same query and
/// target as the LLMScaler of the llmscaler run, HPA defaults otherwise.
fn scaled_object(
    namespace: &str,
    name: &str,
    prometheus: &str,
    (period, min): (u32, i32),
) -> Value {
    json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": name},
            "pollingInterval": period,
            "minReplicaCount": min,
            "maxReplicaCount": 10,
            "triggers": [{
                "type": "prometheus",
                "metadata": {
                    "serverAddress": prometheus,
                    "query": format!("avg(llm_queue{{scaler=\"{name}\"}})"),
                    "threshold": "0.5",
                },
            }],
        },
    })
}

/// How many ScaledObjects of the namespace KEDA reports Ready (their HPA made, their trigger
/// read).
async fn ready_scaled_objects(world: &World) -> anyhow::Result<usize> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        world.client.clone(),
        world.namespace(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
            "scaledobjects",
        ),
    );
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|o| {
            o.data["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .count())
}

/// The values of `keda_internal_scale_loop_latency_seconds` in KEDA's operator metrics.
async fn keda_loop_latencies() -> anyhow::Result<Vec<f64>> {
    let url = std::env::var("KEDA_OPERATOR_METRICS")
        .context("KEDA_OPERATOR_METRICS unset: eval \"$(e2e/keda env)\"")?;
    let text = reqwest::get(url).await?.text().await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("keda_internal_scale_loop_latency_seconds{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect())
}

/// The pids of KEDA's operator and metrics API server, from `e2e/keda env`.
fn keda_pids() -> anyhow::Result<Vec<u32>> {
    ["KEDA_OPERATOR_PID", "KEDA_ADAPTER_PID"]
        .iter()
        .map(|var| {
            std::env::var(var)
                .with_context(|| format!("{var} unset: eval \"$(e2e/keda env)\""))?
                .parse::<u32>()
                .with_context(|| format!("{var} is not a pid"))
        })
        .collect()
}

/// Waits until every Deployment has one Ready replica.
async fn wait_all_ready(world: &World, n: usize) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        world.client.clone(),
        world.namespace(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        ),
    );
    let timeout = Duration::from_secs(120 + 2 * u64::try_from(n).unwrap_or(u64::MAX) / 10);
    wait_for_every(
        &format!("{n} Deployments with a Ready pod"),
        timeout,
        Duration::from_secs(2),
        || async {
            let list = api.list(&ListParams::default()).await?;
            let ready = list
                .items
                .iter()
                .filter(|d| d.data["status"]["readyReplicas"].as_i64() == Some(1))
                .count();
            Ok(if ready >= n {
                Check::Done(())
            } else {
                Check::NotYet(format!("{ready} ready"))
            })
        },
    )
    .await
}

/// Every write the operator counted (`llmscaler_writes_total`, all kinds); 0 without an operator.
async fn operator_writes(world: &World) -> anyhow::Result<u64> {
    let Some(operator) = world.operators.first() else {
        return Ok(0);
    };
    let metrics = operator.metrics().await?;
    Ok(["replicas", "status", "deletion_cost"]
        .iter()
        .map(|kind| writes_of(&metrics, kind))
        .sum())
}

/// The replicas the change asks for: the series at 1.5 against the target 0.5, three times one
/// replica.
const CHANGED_REPLICAS: i64 = 3;

/// What the change step saw of the sampled Deployments, seconds from the change.
#[derive(Debug, Default)]
struct Reactions {
    /// Until each Deployment's `spec.replicas` first rose above its idle value (the
    /// autoscaler's first write), sorted.
    first_write: Vec<f64>,
    /// Until each was at least [`CHANGED_REPLICAS`], sorted.
    reached: Vec<f64>,
    /// Every distinct `spec.replicas` the watch showed each one at, in order.
    steps: BTreeMap<String, Vec<i64>>,
}

/// Changes the series of the first `k` of `n` scalers to 1.5 and times, per scaler, its
/// Deployment's first scale-up write and its reaching [`CHANGED_REPLICAS`]. "At least", not
/// "exactly": the exporter's series stays at 1.5 whatever the replicas (no load follows them),
/// and since the evidence bound (docs/guards.md#evidence-bound) a metric recommendation may at
/// most double the Ready replicas per sync, so llmscaler goes 0 → 2 → 4 → … and never writes 3
/// itself (KEDA goes 0 → 1 → 3 → 9).
///
/// # Errors
/// When the watch fails, or with the steps seen when not every sampled Deployment reached
/// [`CHANGED_REPLICAS`] within three periods and a minute.
async fn change_latency(
    world: &World,
    (n, k): (usize, usize),
    period: u32,
    idle_replicas: i32,
) -> anyhow::Result<Reactions> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        world.client.clone(),
        world.namespace(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        ),
    );
    let sample: Vec<String> = (0..k).map(scaler_name).collect();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    // The watch has started (its first list) before the change is made.
    stream.next().await.context("watch ended")??;
    let start = Instant::now();
    world.exporter.set(exposition(n, k, idle_replicas));
    let mut first_write: HashMap<String, f64> = HashMap::new();
    let mut reached: HashMap<String, f64> = HashMap::new();
    let mut steps: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let deadline = Duration::from_secs(u64::from(period) * 3 + 60);
    while reached.len() < k {
        let remaining = deadline.saturating_sub(start.elapsed());
        let Ok(next) = tokio::time::timeout(remaining, stream.next()).await else {
            bail!(
                "only {} of {k} Deployments reached {CHANGED_REPLICAS} replicas within \
                 {deadline:?} ({} wrote at all); spec.replicas seen: {steps:?}",
                reached.len(),
                first_write.len()
            );
        };
        let object = next.context("watch ended")??;
        let name = object.metadata.name.clone().unwrap_or_default();
        let Some(replicas) = object.data["spec"]["replicas"].as_i64() else {
            continue;
        };
        if !sample.contains(&name) {
            continue;
        }
        let seen = steps.entry(name.clone()).or_default();
        if seen.last() != Some(&replicas) {
            seen.push(replicas);
        }
        let at = start.elapsed().as_secs_f64();
        if replicas > i64::from(idle_replicas) {
            first_write.entry(name.clone()).or_insert(at);
        }
        if replicas >= CHANGED_REPLICAS {
            reached.entry(name).or_insert(at);
        }
    }
    let sorted = |times: HashMap<String, f64>| {
        let mut times: Vec<f64> = times.into_values().collect();
        times.sort_by(f64::total_cmp);
        times
    };
    Ok(Reactions {
        first_write: sorted(first_write),
        reached: sorted(reached),
        steps,
    })
}

fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let index = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted.get(index).copied()
}

#[allow(clippy::cast_precision_loss)] // counts far below 2^52
async fn bench(world: &mut World, args: &Args) -> anyhow::Result<Value> {
    let n = args.scalers;
    let ticks: f64 = run_command("getconf", &["CLK_TCK"], None)?.trim().parse()?;
    world.exporter.set(exposition(n, 0, args.idle_replicas));
    let setup = Instant::now();
    create_objects(world, args).await?;
    eprintln!(
        "created {n} Deployments and scalers in {:.0?}",
        setup.elapsed()
    );
    if args.idle_replicas > 0 {
        wait_all_ready(world, n).await?;
    }
    eprintln!("every Deployment Ready after {:.0?}", setup.elapsed());

    let concurrency = args.max_concurrent_syncs.to_string();
    let started = Instant::now();
    let pids = match args.autoscaler {
        Autoscaler::Llmscaler => {
            world
                .start_operator("scale-0", &["--max-concurrent-syncs", &concurrency])
                .await?;
            vec![world.operators[0].pid().context("operator pid")?]
        }
        Autoscaler::Keda => keda_pids()?,
    };
    let all = u64::try_from(n)?;
    wait_for_every(
        &format!("{n} first syncs"),
        Duration::from_secs(900),
        Duration::from_secs(1),
        || async {
            let synced = match args.autoscaler {
                Autoscaler::Llmscaler => reconcile_count(&world.operators[0].metrics().await?),
                Autoscaler::Keda => u64::try_from(ready_scaled_objects(world).await?)?,
            };
            Ok(if synced >= all {
                Check::Done(())
            } else {
                Check::NotYet(format!("{synced} synced"))
            })
        },
    )
    .await?;
    let first_sync_seconds = started.elapsed().as_secs_f64();
    eprintln!("every scaler synced once after {first_sync_seconds:.1} s; settling one period");
    // Settle: the first syncs claim `spec.replicas` and write status; steady means a whole
    // period without a write (llmscaler), or one period (KEDA, which counts no writes).
    let period = Duration::from_secs(u64::from(args.sync_period_seconds) + 2);
    let settle_deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let writes_before = operator_writes(world).await?;
        tokio::time::sleep(period).await;
        let writes = operator_writes(world).await?;
        if writes == writes_before {
            break;
        }
        eprintln!(
            "{} writes in the last period; settling",
            writes - writes_before
        );
        if Instant::now() > settle_deadline {
            bail!("still writing after 10 minutes: not steady");
        }
    }

    let before = read(world, &pids, ticks).await?;
    let mut peak_rss_kib = before.rss_kib;
    let mut keda_latencies = Vec::new();
    let end = before.at + Duration::from_secs(args.measure_seconds);
    while Instant::now() < end {
        let step = (Instant::now() + Duration::from_secs(5)).min(end);
        tokio::time::sleep_until(step.into()).await;
        peak_rss_kib = peak_rss_kib.max(usage(&pids, ticks)?.1);
        if args.autoscaler == Autoscaler::Keda {
            keda_latencies.extend(keda_loop_latencies().await?);
        }
    }
    keda_latencies.sort_by(f64::total_cmp);
    let after = read(world, &pids, ticks).await?;
    let window = after.at.duration_since(before.at).as_secs_f64();
    // KEDA exports no count of its polls: a period per scaler stands in for a sync.
    let syncs = match args.autoscaler {
        Autoscaler::Llmscaler => after.syncs.saturating_sub(before.syncs),
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Autoscaler::Keda => (window * n as f64 / f64::from(args.sync_period_seconds)) as u64,
    };
    let api_delta: BTreeMap<String, f64> = after
        .api
        .iter()
        .map(|(k, v)| (k.clone(), v - before.api.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    let api_total: f64 = api_delta.values().fold(0.0, |sum, v| sum + v);
    let cpu = after.cpu_seconds - before.cpu_seconds;
    let per_sync = |x: f64| {
        if syncs == 0 {
            None
        } else {
            Some(x / syncs as f64)
        }
    };
    eprintln!(
        "window {window:.0} s: {syncs} syncs, {api_total} API requests, cpu {cpu:.2} s, rss {} KiB",
        after.rss_kib
    );

    let k = args.latency_sample.min(n);
    // A change that is not carried out in time is a result too: the window's figures are kept.
    let (reactions, change_error) =
        match change_latency(world, (n, k), args.sync_period_seconds, args.idle_replicas).await {
            Ok(reactions) => (reactions, None),
            Err(err) => {
                // Why it was not carried out: the first sampled scaler's status and the end of
                // the operator's log, on stderr (the report keeps the error).
                let first = scaler_name(0);
                match world.scaler(&first).await {
                    Ok(scaler) => eprintln!(
                        "{first} after the failed change: {}",
                        serde_json::to_string_pretty(&scaler["status"]).unwrap_or_default()
                    ),
                    Err(read) => eprintln!("{first}: {read:#}"),
                }
                if let Some(operator) = world.operators.first() {
                    eprintln!("operator log:\n{}", operator.log_tail());
                }
                (Reactions::default(), Some(format!("{err:#}")))
            }
        };
    if let Some((name, steps)) = reactions.steps.iter().next() {
        eprintln!("change: {name} went through spec.replicas {steps:?}");
    }
    let (lag_p50, lag_p99) = match args.autoscaler {
        Autoscaler::Llmscaler => (
            quantile(&before.lag_buckets, &after.lag_buckets, 0.5),
            quantile(&before.lag_buckets, &after.lag_buckets, 0.99),
        ),
        Autoscaler::Keda => (
            percentile(&keda_latencies, 0.5),
            percentile(&keda_latencies, 0.99),
        ),
    };
    Ok(json!({
        "autoscaler": format!("{:?}", args.autoscaler).to_lowercase(),
        "scalers": n,
        "idle_replicas": args.idle_replicas,
        "sync_period_seconds": args.sync_period_seconds,
        "max_concurrent_syncs": args.max_concurrent_syncs,
        "setup_seconds": setup.elapsed().as_secs_f64() - started.elapsed().as_secs_f64(),
        "first_sync_of_all_seconds": first_sync_seconds,
        "window_seconds": window,
        "syncs": syncs,
        "syncs_expected": window * n as f64 / f64::from(args.sync_period_seconds),
        "rss_mib": after.rss_kib as f64 / 1024.0,
        "peak_rss_mib": peak_rss_kib as f64 / 1024.0,
        "cpu_cores": cpu / window,
        "cpu_seconds_per_hour": cpu / window * 3600.0,
        "api_requests": api_total,
        "api_requests_by_verb": api_delta,
        "api_requests_per_scaler_per_sync": per_sync(api_total),
        "prometheus_queries_per_sync": per_sync(after.prometheus_queries - before.prometheus_queries),
        "lag_p50_seconds": lag_p50,
        "lag_p99_seconds": lag_p99,
        "change_to_replicas_sample": k,
        "change_to_replicas_target": CHANGED_REPLICAS,
        "change_to_replicas_p50_seconds": percentile(&reactions.reached, 0.5),
        "change_to_replicas_max_seconds": reactions.reached.last(),
        "change_to_first_write_p50_seconds": percentile(&reactions.first_write, 0.5),
        "change_to_first_write_max_seconds": reactions.first_write.last(),
        "change_steps": reactions.steps,
        "change_to_replicas_error": change_error,
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    llmscaler_e2e::install_crypto_provider();
    let args = Args::parse();
    let mut world = World::new("scale").await?;
    let result = bench(&mut world, &args).await;
    if result.is_err() {
        eprintln!("{}", world.operator_logs());
    }
    let report = result?;
    std::fs::write(&args.report, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", args.report.display()))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    world.finish().await
}
