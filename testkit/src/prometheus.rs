//! A real Prometheus (Debian's `prometheus`) on a loopback port, scraping one target every
//! second, started and killed by the test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::{free_port, wait_child_ready};

/// How long Prometheus may take to answer `/-/ready`.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(30);

/// Locates the Prometheus binary: `$PROMETHEUS_BIN`, `/usr/bin/prometheus`, or `prometheus` on
/// `PATH`.
///
/// # Errors
/// When none is found, with the install command (these tests never skip).
pub fn binary() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("PROMETHEUS_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    std::iter::once(PathBuf::from("/usr/bin/prometheus"))
        .chain(path.into_iter().map(|dir| dir.join("prometheus")))
        .find(|c| c.is_file())
        .context(
            "the `prometheus` binary was not found ($PROMETHEUS_BIN, /usr/bin/prometheus, PATH); \
             install it with `apt-get install -y --no-install-recommends prometheus` \
             (e2e/install-deps does this)",
        )
}

/// Runs `promtool test rules FILE` in `dir` with the `promtool` next to [`binary`] (the Debian
/// package ships both): `Ok` with its output when every case passed.
///
/// # Errors
/// No Prometheus binary, promtool not started, or a failed case (with promtool's output).
pub fn promtool_test_rules(dir: &std::path::Path, file: &str) -> anyhow::Result<String> {
    let promtool = binary()?.with_file_name("promtool");
    let out = Command::new(&promtool)
        .args(["test", "rules", file])
        .current_dir(dir)
        .output()
        .with_context(|| format!("run {}", promtool.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("promtool test rules {file} failed:\n{text}");
    }
    Ok(text)
}

/// A Prometheus process; killed on drop.
pub struct Prometheus {
    /// `127.0.0.1:<port>` (or the address given to [`Prometheus::start_on`]).
    pub addr: SocketAddr,
    child: Option<Child>,
    log: PathBuf,
    /// Starts so far (each with its own data directory and log).
    starts: u32,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `http://{target}/metrics` every second and waits (deadline
    /// [`STARTUP_DEADLINE`]) until it is ready.
    ///
    /// # Errors
    /// When the binary is missing, exits early, or is not ready in time (with its log tail).
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into(), target).await
    }

    /// Like [`Prometheus::start`], listening on `ip` instead of loopback (e.g. the real node's
    /// pod bridge address, so that an operator running in a pod can query it).
    ///
    /// # Errors
    /// As [`Prometheus::start`].
    pub async fn start_on(ip: std::net::IpAddr, target: SocketAddr) -> anyhow::Result<Self> {
        Self::start_with(ip, target, Duration::from_secs(1)).await
    }

    /// Like [`Prometheus::start`], scraping every `interval` (at least 10 ms; rounded to
    /// milliseconds) instead of every second: a time-compressed replay (`bench/peers`) divides
    /// the scrape interval by its speed factor, as every other window.
    ///
    /// # Errors
    /// As [`Prometheus::start`].
    pub async fn start_every(target: SocketAddr, interval: Duration) -> anyhow::Result<Self> {
        Self::start_with(std::net::Ipv4Addr::LOCALHOST.into(), target, interval).await
    }

    async fn start_with(
        ip: std::net::IpAddr,
        target: SocketAddr,
        interval: Duration,
    ) -> anyhow::Result<Self> {
        let every = format!("{}ms", interval.as_millis().max(10));
        let bin = binary()?;
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {every}\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: vllm\n    scrape_interval: {every}\n    \
                 scrape_timeout: {every}\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )?;
        // A port picked by `free_port` can be taken before Prometheus binds it: try again with
        // another port when that happens.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let addr = SocketAddr::new(ip, free_port()?);
            let log = dir.path().join(format!("prometheus-{attempt}.log"));
            let log_file = std::fs::File::create(&log)?;
            let mut child = Command::new(&bin)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join(format!("data-{attempt}")).display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(log_file.try_clone()?)
                .stderr(log_file)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            let ready = format!("http://{addr}/-/ready");
            match wait_child_ready(&mut child, &ready, STARTUP_DEADLINE).await {
                Ok(()) => {
                    return Ok(Self {
                        addr,
                        child: Some(child),
                        log,
                        starts: attempt,
                        dir,
                    });
                }
                Err(err) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let tail = tail_of(&log);
                    if tail.contains("address already in use") && attempt < 3 {
                        continue;
                    }
                    bail!("{err}; prometheus log:\n{tail}");
                }
            }
        }
    }

    /// Kills Prometheus and starts it again on the same address and configuration with an
    /// **empty** data directory (a restart that lost its data: every series starts over), then
    /// waits until it is ready; returns how long it was down.
    ///
    /// # Errors
    /// When the new process does not start or is not ready in time (with its log tail).
    pub async fn restart_with_data_lost(&mut self) -> anyhow::Result<Duration> {
        let stopped = std::time::Instant::now();
        self.stop();
        self.starts += 1;
        let config = self.dir.path().join("prometheus.yml");
        let data = self.dir.path().join(format!("data-{}", self.starts));
        let log = self
            .dir
            .path()
            .join(format!("prometheus-{}.log", self.starts));
        let log_file = std::fs::File::create(&log)?;
        let bin = binary()?;
        // The old process has just released the port; a TIME_WAIT socket does not stop a new
        // listener (Prometheus sets SO_REUSEADDR).
        let mut child = Command::new(&bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={}", self.addr))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        self.log = log;
        let ready = format!("http://{}/-/ready", self.addr);
        if let Err(err) = wait_child_ready(&mut child, &ready, STARTUP_DEADLINE).await {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{err}; prometheus log:\n{}", tail_of(&self.log));
        }
        self.child = Some(child);
        Ok(stopped.elapsed())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The last 30 lines of Prometheus' log, for failure messages.
    pub fn log_tail(&self) -> String {
        tail_of(&self.log)
    }

    /// Stops Prometheus now (a metric source that goes away mid-test).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last 30 lines of a log file.
fn tail_of(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
