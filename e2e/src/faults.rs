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

/// How long [`ControlPlane::restart`] waits for the old process to exit after `SIGTERM`.
pub(crate) const EXIT_DEADLINE: Duration = Duration::from_secs(30);

/// The local cluster's component processes.
pub struct ControlPlane {
    dir: PathBuf,
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
        Ok(Self { dir })
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
    /// than fail, as with a stalled disk or a frozen VM).
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn pause(&self, component: &str) -> anyhow::Result<()> {
        self.signal(component, "-STOP")
    }

    /// `SIGCONT` after [`ControlPlane::pause`].
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn resume(&self, component: &str) -> anyhow::Result<()> {
        self.signal(component, "-CONT")
    }

    /// Stops `component` with `SIGTERM`, waits until it has exited, and starts it again with
    /// the same command line, working directory and environment (its log appended to, its pid
    /// file updated). Returns when the new process runs (not when it is ready: the test waits
    /// for what it needs).
    ///
    /// # Errors
    /// When `/proc` cannot be read, the old process outlives [`EXIT_DEADLINE`], or the new one
    /// cannot be started.
    pub fn restart(&self, component: &str) -> anyhow::Result<u32> {
        let pid = self.pid(component)?;
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let argv: Vec<String> = split_nul(&std::fs::read(proc_dir.join("cmdline"))?);
        let env: Vec<(String, String)> = split_nul(&std::fs::read(proc_dir.join("environ"))?)
            .into_iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect();
        let cwd = std::fs::read_link(proc_dir.join("cwd"))?;
        let (program, args) = argv
            .split_first()
            .with_context(|| format!("{component} (pid {pid}) has an empty command line"))?;
        run_command("kill", &["-TERM", &pid.to_string()], None)?;
        let deadline = Instant::now() + EXIT_DEADLINE;
        while alive(pid) {
            if Instant::now() >= deadline {
                bail!("{component} (pid {pid}) did not exit within {EXIT_DEADLINE:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("logs").join(format!("{component}.log")))?;
        let child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C of the test run does not reach it.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {program} again"))?;
        let new_pid = child.id();
        std::fs::write(self.pid_file(component), format!("{new_pid}\n"))?;
        // Not waited on here: it outlives the test like the original, and `e2e/cluster down`
        // stops it by the pid file.
        std::mem::forget(child);
        Ok(new_pid)
    }
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
