//! Test helpers shared by the operator's integration tests (`tests/`) and the end-to-end tests
//! (`e2e/`). The kit depends on nothing of llmscaler, so both can use it without a cycle.
//!
//! - [`wait_for`] / [`wait_for_every`]: the one way a test waits, on a condition with a deadline
//!   and a poll interval, never on a fixed sleep; a timeout names what was awaited and what was
//!   last seen.
//! - [`prometheus`]: a real Prometheus process scraping one target.
//! - [`free_port`], [`wait_child_ready`], [`http_get`]: local servers and processes.

pub mod prometheus;

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How often [`wait_for`] re-checks its condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Outcome of one check in [`wait_for`].
#[derive(Debug)]
pub enum Check<T> {
    /// The condition holds; `wait_for` returns this value.
    Done(T),
    /// Not yet; the string says what was seen, and ends up in the timeout error.
    NotYet(String),
}

/// Polls `check` every [`POLL_INTERVAL`] until it returns [`Check::Done`] or `timeout` passes:
/// [`wait_for_every`] with the default interval.
///
/// # Errors
/// As [`wait_for_every`].
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Check<T>>>,
{
    wait_for_every(what, timeout, POLL_INTERVAL, check).await
}

/// Polls `check` every `interval` until it returns [`Check::Done`] or `timeout` passes. The
/// first check runs at once; the last one runs at or after the deadline, so a condition that
/// holds by then is seen.
///
/// # Errors
/// - An `Err` from `check` stops the wait at once, with the context `waiting for {what}`.
/// - On timeout: `timed out after {timeout} waiting for {what}; last seen: {last}`, where `last`
///   is the latest [`Check::NotYet`] text, so a failing test says what it waited for and what it
///   saw.
pub async fn wait_for_every<T, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Check<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check()
            .await
            .with_context(|| format!("waiting for {what}"))?
        {
            Check::Done(value) => return Ok(value),
            Check::NotYet(seen) => seen,
        };
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(interval).await;
    }
}

/// A free loopback port (bound, then released). Another process can take it before the caller
/// binds it; callers that start a server on it retry on "address in use" (see
/// [`prometheus::Prometheus::start`]).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Installs the rustls crypto provider that the whole graph is built with (aws-lc-rs).
///
/// rustls refuses to pick a provider by itself when more than one could be compiled in, so this
/// must run before the first client is built. Calling it again is harmless.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Status code of a plain GET (used for readiness probes of local servers).
///
/// # Errors
/// Transport errors, with the URL.
pub async fn http_get(url: &str) -> anyhow::Result<u16> {
    install_crypto_provider();
    let response = reqwest::Client::new()
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    Ok(response.status().as_u16())
}

/// Polls `url` (every [`POLL_INTERVAL`]) until it answers 200 while `child` keeps running, for
/// at most `timeout`.
///
/// # Errors
/// When the child exits first (with its status) or `timeout` passes (with the last answer).
pub async fn wait_child_ready(
    child: &mut std::process::Child,
    url: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let child = std::cell::RefCell::new(child);
    wait_for(&format!("{url} to answer 200"), timeout, || async {
        let exited = child.borrow_mut().try_wait()?;
        if let Some(status) = exited {
            bail!("the process exited with {status} before {url} answered");
        }
        Ok(match http_get(url).await {
            Ok(200) => Check::Done(()),
            Ok(code) => Check::NotYet(format!("HTTP {code}")),
            Err(e) => Check::NotYet(format!("{e:#}")),
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_for_returns_the_value_once_the_check_holds() {
        let mut calls = 0;
        let value = wait_for_every(
            "the third call",
            Duration::from_secs(10),
            Duration::from_millis(1),
            || {
                calls += 1;
                let n = calls;
                async move {
                    Ok(if n >= 3 {
                        Check::Done(n)
                    } else {
                        Check::NotYet(format!("call {n}"))
                    })
                }
            },
        )
        .await
        .expect("done");
        assert_eq!(value, 3);
    }

    #[tokio::test]
    async fn a_timeout_names_what_was_awaited_and_the_last_state() {
        let err = wait_for_every(
            "the impossible",
            Duration::ZERO,
            Duration::from_millis(1),
            || async { Ok::<_, anyhow::Error>(Check::<()>::NotYet("still no".into())) },
        )
        .await
        .expect_err("times out");
        assert_eq!(
            err.to_string(),
            "timed out after 0ns waiting for the impossible; last seen: still no"
        );
    }

    #[tokio::test]
    async fn a_failing_check_stops_the_wait_with_context() {
        let err = wait_for("a server", Duration::from_secs(60), || async {
            Err::<Check<()>, _>(anyhow::anyhow!("connection refused"))
        })
        .await
        .expect_err("fails at once");
        assert_eq!(
            format!("{err:#}"),
            "waiting for a server: connection refused"
        );
    }

    #[test]
    fn free_port_is_bindable() {
        let port = free_port().expect("a port");
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the port again");
    }

    #[tokio::test]
    async fn wait_child_ready_fails_when_the_child_exits() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let port = free_port().expect("a port");
        let err = wait_child_ready(
            &mut child,
            &format!("http://127.0.0.1:{port}/"),
            Duration::from_secs(30),
        )
        .await
        .expect_err("the child exits");
        assert!(
            format!("{err:#}").contains("the process exited with exit status: 0"),
            "{err:#}"
        );
    }
}
