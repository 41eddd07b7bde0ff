//! Faults injected into the local cluster for `e2e/tests/faults.rs` and `fault_smoke.rs`
//! (issue 26 item 3): a control-plane component paused (`SIGSTOP`/`SIGCONT`) or restarted from
//! its recorded command line, and the check every fault test makes on the scaled Deployment (no
//! replica removed by mistake: `spec.replicas` never below a floor in any recorded version).
//!
//! The components are the processes `e2e/cluster up` started through `kwokctl --runtime
//! binary`: their pids are in `$LLMSCALER_E2E_STATE/kwok/clusters/llmscaler/pids/<name>.pid`,
//! their logs beside them in `logs/`. A restarted component gets the same command line, working
//! directory and environment, appends to the same log, and its new pid is written to the pid
//! file, so `e2e/cluster down` stops it as it would the original.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::operator::run_command;
use crate::watch::Recorder;

/// The etcd component of the local cluster.
pub const ETCD: &str = "etcd";
/// The kube-apiserver component of the local cluster.
pub const KUBE_APISERVER: &str = "kube-apiserver";

/// How long [`ControlPlane::restart`] lets the old process shut down after `SIGTERM` before it
/// sends `SIGKILL` (kube-apiserver closes its listener at once but may wait for long requests).
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(5);
/// How long [`ControlPlane::restart`] waits for the old process to be gone after `SIGKILL`.
pub(crate) const EXIT_DEADLINE: Duration = Duration::from_secs(10);

/// How to start one component again: what `/proc` showed of it.
#[derive(Clone, Debug)]
struct Launch {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
}

impl Launch {
    /// What `/proc/<pid>` shows of a running process.
    fn of(pid: u32) -> anyhow::Result<Self> {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        Ok(Self {
            argv: split_nul(&std::fs::read(proc_dir.join("cmdline"))?),
            env: split_nul(&std::fs::read(proc_dir.join("environ"))?)
                .into_iter()
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                })
                .collect(),
            cwd: std::fs::read_link(proc_dir.join("cwd"))?,
        })
    }
}

/// The local cluster's component processes, with how each was started (read when
/// [`ControlPlane::from_env`] ran, so a component that exits later can be started again).
pub struct ControlPlane {
    dir: PathBuf,
    launches: Vec<(String, Launch)>,
}

impl ControlPlane {
    /// The cluster of `$LLMSCALER_E2E_STATE` (default `e2e/.state`), as `e2e/cluster up` made it.
    ///
    /// # Errors
    /// When its pid directory is missing (no cluster up).
    pub fn from_env() -> anyhow::Result<Self> {
        let state = std::env::var_os("LLMSCALER_E2E_STATE").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join(".state"),
            PathBuf::from,
        );
        let dir = state.join("kwok/clusters/llmscaler");
        ensure!(
            dir.join("pids").is_dir(),
            "{} has no pids/: run `e2e/cluster up` with the same LLMSCALER_E2E_STATE",
            dir.display()
        );
        let mut launches = Vec::new();
        for entry in std::fs::read_dir(dir.join("pids"))? {
            let path = entry?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".pid"))
            else {
                continue;
            };
            let name = name.to_owned();
            let plane = Self {
                dir: dir.clone(),
                launches: Vec::new(),
            };
            let pid = plane.pid(&name)?;
            ensure!(
                alive(pid),
                "{name} (pid {pid}) is not running: `e2e/cluster down`, then `up` again"
            );
            launches.push((name, Launch::of(pid)?));
        }
        Ok(Self { dir, launches })
    }

    /// Starts again every component that has exited since [`ControlPlane::from_env`], as the
    /// kubelet or systemd restarts a static control plane (kube-controller-manager and
    /// kube-scheduler exit when they cannot renew their own leader Lease, e.g. while etcd or the
    /// API server is down); returns their names.
    ///
    /// # Errors
    /// When one cannot be started.
    pub fn revive(&self) -> anyhow::Result<Vec<String>> {
        let mut revived = Vec::new();
        for (name, launch) in &self.launches {
            if !alive(self.pid(name)?) {
                self.spawn(name, launch)?;
                revived.push(name.clone());
            }
        }
        Ok(revived)
    }

    /// Starts `launch` as component `name`: its log appended to, its pid file updated.
    fn spawn(&self, name: &str, launch: &Launch) -> anyhow::Result<u32> {
        let (program, args) = launch
            .argv
            .split_first()
            .with_context(|| format!("{name} has an empty command line"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("logs").join(format!("{name}.log")))?;
        let child = Command::new(program)
            .args(args)
            .current_dir(&launch.cwd)
            .env_clear()
            .envs(launch.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C of the test run does not reach it.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {program} again"))?;
        let new_pid = child.id();
        std::fs::write(self.pid_file(name), format!("{new_pid}\n"))?;
        // Not waited on here: it outlives the test like the original, and `e2e/cluster down`
        // stops it by the pid file.
        std::mem::forget(child);
        Ok(new_pid)
    }

    fn pid_file(&self, component: &str) -> PathBuf {
        self.dir.join("pids").join(format!("{component}.pid"))
    }

    /// The pid of `component` (e.g. [`ETCD`]).
    ///
    /// # Errors
    /// When its pid file is missing or does not hold a number.
    pub fn pid(&self, component: &str) -> anyhow::Result<u32> {
        let file = self.pid_file(component);
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} holds {text:?}, not a pid", file.display()))
    }

    fn signal(&self, component: &str, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid(component)?.to_string();
        run_command("kill", &[signal, &pid], None).map(drop)
    }

    /// `SIGSTOP`: the process stops answering but keeps its sockets (connections hang rather
    /// than fail, as with a stalled disk or a frozen VM). The returned guard sends `SIGCONT`
    /// when dropped, so a failing test never leaves the cluster frozen.
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn pause(&self, component: &str) -> anyhow::Result<Paused> {
        self.signal(component, "-STOP")?;
        Ok(Paused {
            pid: self.pid(component)?,
        })
    }

    /// `SIGCONT` after [`ControlPlane::pause`].
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn resume(&self, component: &str) -> anyhow::Result<()> {
        self.signal(component, "-CONT")
    }

    /// Stops `component` with `SIGTERM` (`SIGKILL` after [`TERM_GRACE`]), waits until it has
    /// exited, and starts it again with
    /// the same command line, working directory and environment (its log appended to, its pid
    /// file updated). Returns when the new process runs (not when it is ready: the test waits
    /// for what it needs).
    ///
    /// # Errors
    /// When `/proc` cannot be read, the old process outlives `SIGKILL` by [`EXIT_DEADLINE`], or
    /// the new one cannot be started.
    pub fn restart(&self, component: &str) -> anyhow::Result<u32> {
        let pid = self.pid(component)?;
        let launch = Launch::of(pid)?;
        run_command("kill", &["-TERM", &pid.to_string()], None)?;
        if !exits_within(pid, TERM_GRACE) {
            let _ = run_command("kill", &["-KILL", &pid.to_string()], None);
            if !exits_within(pid, EXIT_DEADLINE) {
                bail!("{component} (pid {pid}) outlived SIGKILL by {EXIT_DEADLINE:?}");
            }
        }
        self.spawn(component, &launch)
    }
}

/// A process stopped by [`ControlPlane::pause`]; `SIGCONT` on drop.
pub struct Paused {
    pid: u32,
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = run_command("kill", &["-CONT", &self.pid.to_string()], None);
    }
}

/// Polls until process `pid` is gone (or a zombie), for at most `deadline`; whether it went.
fn exits_within(pid: u32, deadline: Duration) -> bool {
    let end = Instant::now() + deadline;
    while alive(pid) {
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the command name, which is in parentheses.
            let after = stat.rsplit_once(')')?.1;
            after.split_whitespace().next().map(|s| s != "Z")
        })
        .unwrap_or(false)
}

/// The NUL-separated strings of a `/proc` file.
fn split_nul(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|part| !part.is_empty())
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect()
}

/// Checks the record of a Deployment for capacity removed by mistake: every recorded
/// `spec.replicas` must be at least `floor`. Returns the lowest value seen.
///
/// # Errors
/// When a version went below `floor` (with the whole walk), or nothing was recorded.
pub fn never_below(deployment: &Recorder, floor: i32) -> anyhow::Result<i32> {
    let versions = deployment.versions();
    let lowest = versions
        .iter()
        .filter_map(crate::watch::Version::replicas)
        .min()
        .context("no version of the Deployment was recorded")?;
    let walk: Vec<Option<i32>> = versions
        .iter()
        .map(crate::watch::Version::replicas)
        .collect();
    ensure!(
        lowest >= floor,
        "a replica was removed by mistake: spec.replicas went down to {lowest} (floor {floor}); \
         every version: {walk:?}"
    );
    Ok(lowest)
}

/// One measured figure of a fault test, printed as a `measured:` line (the figures of
/// `docs/benchmarks/faults.md`).
pub fn measured(fault: &str, what: &str, took: Duration) {
    println!("measured: {fault}: {what} {:.2} s", took.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_strings_split_on_nul() {
        assert_eq!(
            split_nul(b"/bin/etcd\0--name=a\0\0"),
            vec!["/bin/etcd".to_owned(), "--name=a".to_owned()]
        );
    }

    #[test]
    fn this_process_is_alive_and_a_missing_one_is_not() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
    }
}
