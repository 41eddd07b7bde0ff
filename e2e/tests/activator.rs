//! Scale from zero without losing a request (`spec.scaleToZero.holdRequests`,
//! docs/scaling.md#holding-requests-while-waking-from-zero) on the local cluster: the real
//! `llmscaler activator` and `llmscaler run`, the vLLM emulator streaming server-sent events as
//! the replica, and a client that routes over the Service's EndpointSlices as kube-proxy does.
//! kwok pods have no network, so the test plays the network's part: the EndpointSlice of the
//! Deployment's Ready pods points at the emulator on this machine's own address (the API server
//! refuses loopback endpoints), and the activator's own Service at the activator process.
//!
//! Three bursts, each from zero after an idle period: every request is answered and streamed
//! (first event long before the last), `spec.replicas: 1` is written within 1 s of the first
//! held request, the bound holds (the first burst sends more than `maxHeldRequests`: the excess
//! gets `503` with `Retry-After`, nothing else fails), the fleet goes back to zero with the
//! route in place, and the route is gone while a replica is Ready.
//!
//! Ports: `LLMSCALER_E2E_LOOPBACK_BASE` (default 35700) + 1 (emulator), + 2 (activator
//! control), + 10..+29 (the activator's Service ports).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use llmscaler_e2e::fixture::{SETUP_MANAGER, World};
use llmscaler_e2e::operator::binary;
use llmscaler_e2e::stream::Outcome;
use llmscaler_e2e::watch::when_spec_replicas;
use llmscaler_e2e::{Check, wait_for};
use serde_json::{Value, json};
use tokio::sync::Mutex;

const APP: &str = "vllm";
const DEADLINE: Duration = Duration::from_secs(120);
/// Emulated model load (kwok's pod-ready stage delay, with `LLMSCALER_E2E_POD_READY_DELAY=1`).
const STARTUP: &str = "3s";
const MAX_HELD: usize = 20;
const TOKENS: u64 = 10;
const TOKENS_PER_SECOND: f64 = 20.0;

/// The machine's own non-loopback address (the API server refuses loopback endpoints): the
/// source address of its default route, found without sending anything.
fn host_ip() -> String {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("203.0.113.1:9")
        .expect("a default route (the endpoints need a non-loopback address)");
    socket.local_addr().unwrap().ip().to_string()
}

fn base() -> u16 {
    std::env::var("LLMSCALER_E2E_LOOPBACK_BASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(35700)
}

fn deployment(ns: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP, "namespace": ns},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP},
                             "annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": STARTUP}},
                "spec": {
                    "containers": [{"name": "vllm", "image": "registry.invalid/vllm:fake"}],
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
                }
            }
        }
    })
}

/// A Service without selector (its slices are the test's), port `""` 80.
fn service(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}})
}

/// The network's EndpointSlice of `service`: `addresses` on `port`, Ready.
fn network_slice(ns: &str, service: &str, addresses: &[&str], port: u16) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": format!("{service}-network"), "namespace": ns,
                        "labels": {"kubernetes.io/service-name": service,
                                   "endpointslice.kubernetes.io/managed-by": "e2e-network"}},
           "addressType": "IPv4",
           "endpoints": addresses.iter().map(|a| json!({"addresses": [a], "conditions": {"ready": true}})).collect::<Vec<_>>(),
           "ports": [{"name": "", "port": port, "protocol": "TCP"}]})
}

/// Plays the endpoint controller for the Deployment's pods: while at least one pod is Ready
/// (and not deleted), `vllm`'s network slice points at the emulator; else it is empty.
fn mirror_pods(world: &World, host: String, emulator_port: u16) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), world.namespace());
    let slices: Api<EndpointSlice> = Api::namespaced(world.client.clone(), world.namespace());
    let ns = world.namespace().to_owned();
    tokio::spawn(async move {
        let (reader, writer) = reflector::store();
        let stream = watcher(
            pods,
            watcher::Config::default().labels(&format!("app={APP}")),
        )
        .default_backoff()
        .reflect(writer);
        futures::pin_mut!(stream);
        let mut last = None;
        while let Some(event) = stream.next().await {
            if event.is_err() {
                continue;
            }
            let ready = reader.state().iter().any(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            });
            if last == Some(ready) {
                continue;
            }
            let addresses: &[&str] = if ready { &[host.as_str()] } else { &[] };
            let slice = network_slice(&ns, APP, addresses, emulator_port);
            let applied = slices
                .patch(
                    &format!("{APP}-network"),
                    &PatchParams::apply("e2e-network").force(),
                    &Patch::Apply(&slice),
                )
                .await;
            if applied.is_ok() {
                last = Some(ready);
            }
        }
    })
}

/// What kube-proxy would pick for `vllm`: the Ready endpoints of every slice of the Service.
async fn endpoints(slices: &Api<EndpointSlice>) -> Vec<(SocketAddr, bool)> {
    let listed = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={APP}")))
        .await
        .unwrap();
    let mut out = Vec::new();
    for slice in &listed.items {
        let ours = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("endpointslice.kubernetes.io/managed-by"))
            .is_some_and(|m| m == "llmscaler");
        let port = slice
            .ports
            .iter()
            .flatten()
            .find_map(|p| p.port)
            .unwrap_or(0);
        for endpoint in &slice.endpoints {
            if endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true)
            {
                for address in &endpoint.addresses {
                    out.push((
                        SocketAddr::new(address.parse().unwrap(), u16::try_from(port).unwrap()),
                        ours,
                    ));
                }
            }
        }
    }
    out
}

/// One streaming request to an endpoint of `vllm` picked as kube-proxy would (at random among
/// the Ready ones, `i` stands in for the randomness).
async fn one_request(
    http: &reqwest::Client,
    slices: &Api<EndpointSlice>,
    i: usize,
    outcome: &Mutex<Outcome>,
) {
    let ready = endpoints(slices).await;
    if ready.is_empty() {
        outcome.lock().await.failed.push("no endpoint".into());
        return;
    }
    let (addr, _) = ready[i % ready.len()];
    let sent = Instant::now();
    let response = http
        .post(format!("http://{addr}/v1/completions"))
        .json(&json!({"max_tokens": TOKENS, "stream": true}))
        .send()
        .await;
    let mut one = Outcome::default();
    one.take(&addr.to_string(), response, sent, TOKENS).await;
    outcome.lock().await.merge(one);
}

/// Sends `n` concurrent streaming requests; returns the outcome.
async fn burst(world: &World, n: usize) -> Outcome {
    let http = reqwest::Client::builder().build().unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(world.client.clone(), world.namespace());
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (http, slices, outcome) = (http.clone(), slices.clone(), outcome.clone());
            tokio::spawn(async move { one_request(&http, &slices, i, &outcome).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    Arc::try_unwrap(outcome).unwrap().into_inner()
}
async fn route_exists(world: &World) -> bool {
    let slices: Api<EndpointSlice> = Api::namespaced(world.client.clone(), world.namespace());
    slices
        .get_opt(&format!("{APP}-llmscaler-activator"))
        .await
        .unwrap()
        .is_some()
}

async fn wait_route(world: &World, want: bool) {
    wait_for(
        &format!("the activator route present = {want}"),
        DEADLINE,
        || async {
            Ok(if route_exists(world).await == want {
                Check::Done(())
            } else {
                Check::NotYet(format!("present = {}", !want))
            })
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
#[ignore = "needs e2e/cluster up (with LLMSCALER_E2E_POD_READY_DELAY=1 for a 3 s model load)"]
async fn three_bursts_from_zero_lose_no_request_and_wake_within_a_second() {
    let mut world = World::with_values("activator", &["activator.enabled=true"])
        .await
        .unwrap();
    let ns = world.namespace().to_owned();
    let base = base();
    let host = host_ip();
    let (emulator_port, control_port) = (base + 1, base + 2);
    let ports = format!("{}-{}", base + 10, base + 29);

    // The replica: the vLLM emulator, streaming.
    let (_stop_emulator, emulator_shutdown) = llmscaler::process::Shutdown::manual();
    let serve = llmscaler_e2e::pod::ServeArgs {
        listen: format!("{host}:{emulator_port}").parse().unwrap(),
        tokens_per_second: TOKENS_PER_SECOND,
        max_running: 64,
        shutdown_timeout_seconds: 1.0,
        model: "emulated".into(),
        load_seconds: 0.0,
    };
    tokio::spawn(llmscaler_e2e::pod::serve(serve, emulator_shutdown));

    // The workload, its Service, the activator's Service (on loopback) and the network.
    world.apply(SETUP_MANAGER, &deployment(&ns)).await.unwrap();
    world
        .apply(SETUP_MANAGER, &service(&ns, APP))
        .await
        .unwrap();
    world
        .apply(SETUP_MANAGER, &service(&ns, "activator"))
        .await
        .unwrap();
    world
        .apply(
            "e2e-network",
            &network_slice(&ns, "activator", &[host.as_str()], control_port),
        )
        .await
        .unwrap();
    let _mirror = mirror_pods(&world, host.clone(), emulator_port);

    // The activator (admin credentials: it only reads EndpointSlices) and the operator.
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut activator = tokio::process::Command::new(binary())
        .args([
            "activator",
            "--control-addr",
            &format!("127.0.0.1:{control_port}"),
            "--listen-ip",
            &host,
            "--ports",
            &ports,
        ])
        .env("RUST_LOG", "info,kube=warn")
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let control = format!("http://127.0.0.1:{control_port}/");
    wait_for("the activator's /healthz", DEADLINE, || async {
        Ok(match reqwest::get(format!("{control}healthz")).await {
            Ok(r) if r.status().is_success() => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        })
    })
    .await
    .unwrap();
    let activator_ref = format!("{ns}/activator");
    world
        .start_operator(
            "op-activator",
            &[
                "--activator",
                &activator_ref,
                "--activator-control-url",
                &control,
            ],
        )
        .await
        .unwrap();
    world
        .queue_scaler(
            "activator",
            0.0,
            (0, 2),
            json!({
                "scaleToZero": {"holdRequests": true, "service": APP,
                                "maxHeldRequests": MAX_HELD, "holdTimeoutSeconds": 60},
                "scaleDown": {"behavior": "None", "stabilizationWindowSeconds": 3},
            }),
        )
        .await
        .unwrap();
    // At zero the Service routes to the activator.
    wait_route(&world, true).await;

    let mut wakes = Vec::new();
    for (round, n) in [(1, MAX_HELD + 5), (2, MAX_HELD), (3, MAX_HELD)] {
        let at_zero = endpoints(&Api::namespaced(world.client.clone(), &ns)).await;
        assert!(
            !at_zero.is_empty() && at_zero.iter().all(|(_, ours)| *ours),
            "burst {round}: at zero only the activator serves: {at_zero:?}"
        );
        let woken = when_spec_replicas(&world.client, world.namespace(), APP, 1);
        let sent = Instant::now();
        let outcome = burst(&world, n);
        tokio::pin!(outcome);
        // Only the held requests wake the fleet: the queue metric reads 0 until then.
        let wake = tokio::select! {
            at = woken => (at.unwrap().unwrap() - sent).as_secs_f64(),
            done = &mut outcome => panic!("burst {round} ended before the wake-up: {done:?}"),
        };
        wakes.push(wake);
        // The load that keeps one replica while the burst is served (scraped long before the
        // replica's 3 s load ends).
        world
            .exporter
            .set_gauge("llm_queue", &[("scaler=\"activator\"", 0.5)]);
        let outcome = outcome.await;
        let held = n.min(MAX_HELD);
        eprintln!(
            "burst {round}: {n} sent, {} answered, {} refused (503 + Retry-After), failed {:?}; \
             spec.replicas 1 written {wake:.3} s after the first request; TTFT {:.2}..{:.2} s; \
             first->last event {:.2}..{:.2} s",
            outcome.answered,
            outcome.refused,
            outcome.failed,
            outcome.ttft.iter().copied().fold(f64::INFINITY, f64::min),
            outcome.ttft.iter().copied().fold(0.0, f64::max),
            outcome.spread.iter().copied().fold(f64::INFINITY, f64::min),
            outcome.spread.iter().copied().fold(0.0, f64::max),
        );
        assert!(
            outcome.failed.is_empty(),
            "burst {round}: {:?}",
            outcome.failed
        );
        assert_eq!(
            outcome.answered, held,
            "burst {round}: every held request answered"
        );
        assert_eq!(
            outcome.refused,
            n - held,
            "burst {round}: only the excess refused"
        );
        assert!(
            wake <= 1.0,
            "burst {round}: woken {wake:.3} s after the first request"
        );
        // Streamed, not buffered: the events spread over the decode time.
        let decode = TOKENS as f64 / TOKENS_PER_SECOND;
        assert!(
            outcome.spread.iter().all(|s| *s >= decode * 0.5),
            "burst {round}: answers were buffered: {:?}",
            outcome.spread
        );
        // A replica is Ready: the route goes, the activator leaves the path.
        wait_route(&world, false).await;
        // Idle: back to zero, with the route in place again.
        world
            .exporter
            .set_gauge("llm_queue", &[("scaler=\"activator\"", 0.0)]);
        world.wait_replicas(APP, 0, DEADLINE).await.unwrap();
        assert!(
            route_exists(&world).await,
            "burst {round}: at zero the route is in place"
        );
    }
    wakes.sort_by(f64::total_cmp);
    eprintln!("wake-ups (first request -> spec.replicas: 1): {wakes:?} s");
    activator.kill().await.ok();
    let logs = std::fs::read_to_string(log.path()).unwrap_or_default();
    assert!(
        logs.contains("releasing the held requests"),
        "activator log:\n{logs}"
    );
    world.finish().await.unwrap();
}
