//! One process set-up for every subcommand and binary: the rustls crypto provider (aws-lc-rs, the
//! one the whole dependency graph uses), tracing to stderr, the Tokio runtime, and SIGINT/SIGTERM
//! handlers installed before the program starts its work, so a signal that arrives while it is
//! still starting (before it announces an address) shuts it down cleanly instead of killing it.

use std::fmt::Display;
use std::future::Future;
use std::process::ExitCode;

use tokio::sync::watch;

/// Installs rustls' aws-lc-rs crypto provider as the process default unless one is installed.
/// Calling it several times, from several threads, is fine.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race against another thread that installed one at the same time is fine.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields at the top level (a sync line carries `namespace` and `name` of its scaler).
    Json,
}

/// Sends `tracing` output to stderr in `format`, filtered by `RUST_LOG` (default `info`). A
/// second call is a no-op.
pub(crate) fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: pod logs and CI logs get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// A shutdown request (SIGINT or SIGTERM). Clones see the same request.
#[derive(Clone, Debug)]
pub struct Shutdown {
    requested: watch::Receiver<bool>,
}

impl Shutdown {
    /// Installs the SIGINT and SIGTERM handlers now (call inside a Tokio runtime); the returned
    /// handle resolves once either arrives.
    ///
    /// # Errors
    /// The I/O error when a handler cannot be installed.
    pub fn install() -> std::io::Result<Self> {
        let (tx, requested) = watch::channel(false);
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut interrupt = signal(SignalKind::interrupt())?;
            let mut terminate = signal(SignalKind::terminate())?;
            tokio::spawn(async move {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                tracing::info!("shutdown signal received");
                let _ = tx.send(true);
            });
        }
        #[cfg(not(unix))]
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            let _ = tx.send(true);
        });
        Ok(Self { requested })
    }

    /// A handle that [`Shutdown::request`] resolves by hand (tests, embedding).
    pub fn manual() -> (watch::Sender<bool>, Self) {
        let (tx, requested) = watch::channel(false);
        (tx, Self { requested })
    }

    /// Resolves once shutdown is requested (at once if it already was).
    pub async fn requested(&self) {
        let mut requested = self.requested.clone();
        // A closed channel means the signal task is gone: treat it as a request.
        let _ = requested.wait_for(|r| *r).await;
    }

    /// Resolves with [`Shutdown::requested`], consuming the handle: an owned, `'static` future
    /// for APIs that take one.
    pub async fn wait(self) {
        self.requested().await;
    }

    /// Whether shutdown was requested.
    pub(crate) fn is_requested(&self) -> bool {
        *self.requested.borrow()
    }
}

/// Runs `main` as a program: crypto provider, tracing in `log_format`, a multi-threaded runtime,
/// signal handlers installed before `main` starts; prints `error: ...` and exits 1 when `main`
/// fails, 0 when it returns `Ok`.
pub fn run<F, Fut, E>(log_format: LogFormat, main: F) -> ExitCode
where
    F: FnOnce(Shutdown) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    install_crypto_provider();
    init_tracing(log_format);
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(err) => return fail(1, &format!("cannot start the async runtime: {err}")),
    };
    runtime.block_on(async move {
        let shutdown = match Shutdown::install() {
            Ok(shutdown) => shutdown,
            Err(err) => return fail(1, &format!("cannot install signal handlers: {err}")),
        };
        match main(shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => fail(1, &format!("{err:#}")),
        }
    })
}

/// The multi-threaded Tokio runtime every subcommand runs on (I/O and timers enabled).
///
/// # Errors
/// The I/O error when the runtime cannot be built.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Prints `error: message` on stderr and returns exit status `code`.
pub fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}
