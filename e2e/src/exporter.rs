//! A metrics endpoint whose exposition text the test sets: the stand-in for vLLM pods that a
//! real Prometheus scrapes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::header;

/// A running exporter on a loopback port; stops on drop.
pub struct Exporter {
    /// `127.0.0.1:<port>`.
    pub addr: SocketAddr,
    text: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    /// Starts serving `GET /metrics` with an empty body.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start() -> anyhow::Result<Self> {
        let text = Arc::new(Mutex::new(String::new()));
        let router = Router::new()
            .route("/metrics", axum::routing::get(serve))
            .with_state(text.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { addr, text, task })
    }

    /// Replaces the whole exposition text (Prometheus text format).
    pub fn set(&self, text: impl Into<String>) {
        *self
            .text
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = text.into();
    }

    /// Serves one gauge sample per `(labels, value)`, e.g. `set_gauge("llm_queue",
    /// &[("scaler=\"a\"", 0.85)])`; `value` may be NaN or ±Inf.
    pub fn set_gauge(&self, name: &str, samples: &[(&str, f64)]) {
        let mut text = format!("# TYPE {name} gauge\n");
        for (labels, value) in samples {
            let v = if value.is_nan() {
                "NaN".to_string()
            } else if value.is_infinite() {
                if *value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
            } else {
                value.to_string()
            };
            text.push_str(&format!("{name}{{{labels}}} {v}\n"));
        }
        self.set(text);
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    State(text): State<Arc<Mutex<String>>>,
) -> ([(header::HeaderName, &'static str); 1], String) {
    let body = text
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
