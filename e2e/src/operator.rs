//! The operator under test: the real `llmscaler run` binary, authenticated with a token of the
//! chart's ServiceAccount (so missing RBAC fails the tests), watching one namespace.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use kube::config::{AuthInfo, Kubeconfig};

use crate::{free_port, helm_path, kubectl_path, wait_child_ready};

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/llmscaler")
}

/// The operator binary: `$LLMSCALER_BIN`, else `target/debug/llmscaler` of this workspace
/// (built by `cargo test --workspace` before the end-to-end tests run).
pub fn binary() -> PathBuf {
    std::env::var_os("LLMSCALER_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/llmscaler"),
        PathBuf::from,
    )
}

/// Runs a command, failing with its stderr.
///
/// # Errors
/// When it cannot start or exits non-zero.
pub fn run_command(program: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        pipe.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// How [`Rbac::delete`] removes what was installed.
enum Installed {
    /// Manifests rendered by `helm template` and applied with kubectl.
    Manifests(String),
    /// A Helm release: `(release, namespace)`.
    Release(String, String),
}

/// The chart's RBAC and ServiceAccount (alone, or with the whole chart as a Helm release)
/// installed under release `release` in `namespace`, and a kubeconfig holding a token of that
/// ServiceAccount.
pub struct Rbac {
    installed: Installed,
    deleted: std::sync::atomic::AtomicBool,
    /// Kubeconfig authenticating as the ServiceAccount.
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Rbac {
    /// Renders `templates/serviceaccount.yaml`, `templates/rbac.yaml` and
    /// `templates/targets-policy.yaml` of the chart with
    /// `helm template`, applies them, requests a one-hour token for the ServiceAccount and writes
    /// a kubeconfig with it (server and CA from `$KUBECONFIG`).
    ///
    /// # Errors
    /// When helm, kubectl or the kubeconfig fail.
    pub fn install(release: &str, namespace: &str, extra_values: &[&str]) -> anyhow::Result<Self> {
        let chart = chart_dir();
        let chart = chart.to_str().context("chart path is not UTF-8")?;
        let mut args = vec![
            "template",
            release,
            chart,
            "--namespace",
            namespace,
            "--show-only",
            "templates/serviceaccount.yaml",
            "--show-only",
            "templates/rbac.yaml",
            "--show-only",
            "templates/targets-policy.yaml",
            // The operator runs out of cluster with its default Lease name.
            "--set",
            "leaseName=llmscaler-leader",
        ];
        for value in extra_values {
            args.extend(["--set", value]);
        }
        let manifests = run_command(&helm_path(), &args, None)?;
        run_command(&kubectl_path(), &["apply", "-f", "-"], Some(&manifests))?;
        Self::with_token(Installed::Manifests(manifests), release, namespace)
    }

    /// `helm upgrade --install` of the whole chart in out-of-cluster mode: the webhook
    /// configurations call `https://127.0.0.1:<webhook_port>` and only admit LLMScalers of
    /// `namespace`; no operator Deployment. Then a ServiceAccount token as in [`Rbac::install`].
    ///
    /// # Errors
    /// When helm, kubectl or the kubeconfig fail.
    pub fn helm_install(release: &str, namespace: &str, webhook_port: u16) -> anyhow::Result<Self> {
        Self::helm_install_chart(&chart_dir(), release, namespace, webhook_port)
    }

    /// [`Rbac::helm_install`] of the chart in `chart` (another release's chart: the upgrade
    /// test installs the previous one).
    ///
    /// # Errors
    /// When helm, kubectl or the kubeconfig fail.
    pub fn helm_install_chart(
        chart: &Path,
        release: &str,
        namespace: &str,
        webhook_port: u16,
    ) -> anyhow::Result<Self> {
        let chart = chart.to_str().context("chart path is not UTF-8")?;
        let url = format!("outOfCluster.url=https://127.0.0.1:{webhook_port}");
        let selector = format!(
            "webhook.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name={namespace}"
        );
        run_command(
            &helm_path(),
            &[
                "upgrade",
                "--install",
                release,
                chart,
                "--namespace",
                namespace,
                "--set",
                "outOfCluster.enabled=true",
                "--set",
                "leaseName=llmscaler-leader",
                "--set",
                &url,
                "--set",
                &selector,
            ],
            None,
        )?;
        Self::with_token(
            Installed::Release(release.to_string(), namespace.to_string()),
            release,
            namespace,
        )
    }

    /// The chart's ServiceAccount name for `release` (its full name).
    pub fn service_account(release: &str) -> String {
        if release.contains("llmscaler") {
            release.to_string()
        } else {
            format!("{release}-llmscaler")
        }
    }

    fn with_token(installed: Installed, release: &str, namespace: &str) -> anyhow::Result<Self> {
        let service_account = Self::service_account(release);
        let token = run_command(
            &kubectl_path(),
            &[
                "create",
                "token",
                &service_account,
                "-n",
                namespace,
                "--duration",
                "1h",
            ],
            None,
        )?;
        let admin = std::env::var("KUBECONFIG").context("KUBECONFIG is not set")?;
        let mut config = Kubeconfig::read_from(&admin).context("reading $KUBECONFIG")?;
        for named in &mut config.auth_infos {
            named.auth_info = Some(AuthInfo {
                token: Some(token.trim().to_string().into()),
                ..AuthInfo::default()
            });
        }
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig.json");
        std::fs::write(&kubeconfig, serde_json::to_vec(&config)?)?;
        Ok(Self {
            installed,
            deleted: std::sync::atomic::AtomicBool::new(false),
            kubeconfig,
            _dir: dir,
        })
    }

    /// Deletes what was installed (cluster-scoped roles and webhook configurations outlive the
    /// namespace): `kubectl delete` of the manifests, or `helm uninstall` of the release.
    ///
    /// # Errors
    /// When kubectl or helm fail.
    pub fn delete(&self) -> anyhow::Result<()> {
        self.deleted
            .store(true, std::sync::atomic::Ordering::Relaxed);
        match &self.installed {
            Installed::Manifests(manifests) => run_command(
                &kubectl_path(),
                &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
                Some(manifests),
            ),
            Installed::Release(release, namespace) => run_command(
                &helm_path(),
                &[
                    "uninstall",
                    release,
                    "--namespace",
                    namespace,
                    "--ignore-not-found",
                ],
                None,
            ),
        }
        .map(drop)
    }
}

impl Drop for Rbac {
    /// A test that failed before its cleanup must not leave cluster-scoped roles behind.
    fn drop(&mut self) {
        if !self.deleted.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = self.delete();
        }
    }
}

/// A running `llmscaler run`; killed on drop.
pub struct Operator {
    child: Option<Child>,
    /// `/metrics`, `/healthz`, `/readyz` address.
    pub metrics_addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Operator {
    /// Starts `llmscaler run` with `kubeconfig`, its Lease in `namespace`, watching LLMScalers
    /// of `namespace` only, plus `extra` flags (`--no-webhook` unless one of them is a
    /// `--webhook-*` flag); waits for `/readyz`.
    ///
    /// # Errors
    /// When the binary is missing, exits, or is not ready within 30 s (with its log).
    pub async fn start(
        kubeconfig: &Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_binary(&binary(), kubeconfig, namespace, identity, extra).await
    }

    /// [`Operator::start`] of the binary `bin` (another release's: the upgrade test).
    ///
    /// # Errors
    /// As [`Operator::start`].
    pub async fn start_binary(
        bin: &Path,
        kubeconfig: &Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        if !bin.is_file() {
            bail!(
                "{} not found: build it with `cargo build --bin llmscaler`",
                bin.display()
            );
        }
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("operator.log");
        let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let child = Command::new(bin)
            .args([
                "run",
                "--namespace",
                namespace,
                "--watch-namespace",
                namespace,
            ])
            // The webhook runs only when the test asks for it with `--webhook-*` flags.
            .args((!extra.iter().any(|a| a.starts_with("--webhook"))).then_some("--no-webhook"))
            .args([
                "--metrics-addr",
                &metrics_addr.to_string(),
                "--identity",
                identity,
            ])
            .args(extra)
            // The e2e scalers sync every 1-3 s to keep the tests short: below the operator's
            // default minimum of 5 s (docs/security.md#shared-cluster-defaults).
            .env("LLMSCALER_MIN_SYNC_PERIOD_SECONDS", "1")
            // Benchmarks (bench/scale) put thousands of scalers in one namespace to measure the
            // operator, not a tenant: no per-namespace query budget unless a test passes
            // `--namespace-query-budget` (docs/security.md#query-budget).
            .env("LLMSCALER_NAMESPACE_QUERY_BUDGET", "0")
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(dir.path().join("operator.stderr"))?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut operator = Self {
            child: Some(child),
            metrics_addr,
            log,
            _dir: dir,
        };
        let ready = format!("http://{metrics_addr}/readyz");
        let result = match operator.child.as_mut() {
            Some(child) => wait_child_ready(child, &ready, Duration::from_secs(30)).await,
            None => Ok(()),
        };
        if let Err(err) = result {
            bail!("{err}; operator log:\n{}", operator.log_tail());
        }
        Ok(operator)
    }

    /// The operator's log so far (stdout and stderr).
    pub fn log(&self) -> String {
        let mut text = std::fs::read_to_string(&self.log).unwrap_or_default();
        if let Some(dir) = self.log.parent() {
            text.push_str(
                &std::fs::read_to_string(dir.join("operator.stderr")).unwrap_or_default(),
            );
        }
        text
    }

    /// Where the operator's stderr (its tracing output) is written.
    pub fn stderr_path(&self) -> PathBuf {
        self.log.with_file_name("operator.stderr")
    }

    /// The last 40 lines of the log.
    pub fn log_tail(&self) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process has exited (or was killed by the test).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|child| child.try_wait().ok().flatten().is_some())
    }

    /// SIGKILL: the process dies without releasing its Lease.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit; returns whether it exited 0.
    ///
    /// # Errors
    /// When `kill -TERM` fails or the process outlives `timeout`.
    pub async fn terminate(&mut self, timeout: Duration) -> anyhow::Result<bool> {
        let Some(child) = self.child.as_mut() else {
            return Ok(false);
        };
        run_command("kill", &["-TERM", &child.id().to_string()], None)?;
        let deadline = std::time::Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if std::time::Instant::now() >= deadline {
                bail!("the operator did not exit within {timeout:?} of SIGTERM");
            }
            tokio::time::sleep(crate::POLL_INTERVAL).await;
        };
        self.child = None;
        Ok(status.success())
    }

    /// The operator's `/metrics` text.
    ///
    /// # Errors
    /// Transport errors.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        Ok(
            reqwest::get(format!("http://{}/metrics", self.metrics_addr))
                .await?
                .text()
                .await?,
        )
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}
