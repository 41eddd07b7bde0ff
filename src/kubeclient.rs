//! The Kubernetes client of the command-line tools (`probe --name`, `release`): `--kubeconfig`
//! and `--context` as kubectl takes them, and messages that name the API server and the cause
//! when it cannot be reached (a name that does not resolve, a refused connection) instead of a
//! bare transport class.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// `--kubeconfig` and `--context`, as kubectl takes them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeArgs {
    /// The kubeconfig file to use (default: `$KUBECONFIG`, else `~/.kube/config`, else the
    /// in-cluster credentials).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// Why no usable client was built, or the API server could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig could not be read or has no such context.
    #[error("cannot use the kubeconfig{}: {source}", context_note(.context))]
    Config {
        /// `--context`, when given.
        context: Option<String>,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer (name resolution, connection, TLS).
    #[error("cannot reach the API server {server}{}: {reason}", context_note(.context))]
    Unreachable {
        /// The API server's URL from the kubeconfig.
        server: String,
        /// `--context`, when given.
        context: Option<String>,
        /// What failed, with the host for a name that does not resolve.
        reason: String,
    },
}

fn context_note(context: &Option<String>) -> String {
    context
        .as_ref()
        .map(|c| format!(" (context {c:?})"))
        .unwrap_or_default()
}

impl KubeArgs {
    /// A client for the chosen kubeconfig and context, checked by one request (`/version`) so
    /// that an unreachable API server is reported here, naming it.
    ///
    /// # Errors
    /// [`ClientError::Config`] for an unreadable kubeconfig or an unknown context,
    /// [`ClientError::Unreachable`] when the API server does not answer.
    pub async fn client(&self) -> Result<kube::Client, ClientError> {
        let config_error = |source| ClientError::Config {
            context: self.context.clone(),
            source,
        };
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| config_error(kube::Error::InferKubeconfig(e)))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| config_error(kube::Error::InferKubeconfig(e)))?
            }
            (None, Some(_)) => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| config_error(kube::Error::InferKubeconfig(e)))?,
            (None, None) => kube::Config::infer()
                .await
                .map_err(|e| config_error(kube::Error::InferConfig(e)))?,
        };
        let server = config.cluster_url.to_string();
        let host = config.cluster_url.host().unwrap_or_default().to_owned();
        let client = kube::Client::try_from(config).map_err(config_error)?;
        match client.apiserver_version().await {
            Ok(_) | Err(kube::Error::Api(_)) => Ok(client),
            Err(err) => Err(ClientError::Unreachable {
                server,
                context: self.context.clone(),
                reason: unreachable_reason(&err, &host),
            }),
        }
    }
}

/// The cause of a failed request as a sentence: `cannot resolve host `H`: <resolver's
/// message>` when the name did not resolve, else the error and its sources.
pub fn unreachable_reason(err: &(dyn std::error::Error + 'static), host: &str) -> String {
    let mut chain = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut dns = false;
    while let Some(inner) = source {
        let text = inner.to_string();
        dns |= text.starts_with("dns error");
        if !chain.iter().any(|c: &String| c.contains(&text)) {
            chain.push(text);
        }
        source = inner.source();
    }
    if dns {
        let cause = chain.last().cloned().unwrap_or_default();
        return format!("cannot resolve host `{host}`: {cause}");
    }
    chain.join(": ")
}
