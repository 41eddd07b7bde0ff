//! Streamed completions as a client sees them (the activator tests, docs/scaling.md#holding-
//! requests-while-waking-from-zero): answered to the end, refused with `503` + `Retry-After`,
//! or failed, with the time to the first event and from the first event to the last.

use std::time::Instant;

/// What the requests of one burst got.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Streams answered to the end (`[DONE]` after every token).
    pub answered: usize,
    /// `503` with a `Retry-After`.
    pub refused: usize,
    /// Anything else (connection error, other status, cut stream, missing events).
    pub failed: Vec<String>,
    /// Seconds from send to the first event, one per answered stream.
    pub ttft: Vec<f64>,
    /// Seconds from the first event to the last, one per answered stream.
    pub spread: Vec<f64>,
}

impl Outcome {
    /// Adds what `other` counted.
    pub fn merge(&mut self, mut other: Outcome) {
        self.answered += other.answered;
        self.refused += other.refused;
        self.failed.append(&mut other.failed);
        self.ttft.append(&mut other.ttft);
        self.spread.append(&mut other.spread);
    }

    /// Reads `response` (sent at `sent`, asking for `tokens` tokens) to its end and counts it;
    /// a failure is recorded as `{what}: {reason}`.
    pub async fn take(
        &mut self,
        what: &str,
        response: Result<reqwest::Response, reqwest::Error>,
        sent: Instant,
        tokens: u64,
    ) {
        let mut response = match response {
            Ok(r) => r,
            Err(err) => return self.failed.push(format!("{what}: {err}")),
        };
        if response.status() == 503 && response.headers().contains_key("retry-after") {
            self.refused += 1;
            return;
        }
        if response.status() != 200 {
            let status = response.status();
            return self.failed.push(format!("{what}: HTTP {status}"));
        }
        let mut body = String::new();
        let mut first = None;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    first.get_or_insert_with(Instant::now);
                    body.push_str(&String::from_utf8_lossy(&chunk));
                }
                Ok(None) => break,
                Err(err) => return self.failed.push(format!("{what}: stream cut: {err}")),
            }
        }
        let end = Instant::now();
        let events = body.matches("data: ").count();
        let expected = usize::try_from(tokens).map_or(usize::MAX, |t| t.saturating_add(1));
        match first {
            Some(first) if body.contains("data: [DONE]") && events == expected => {
                self.answered += 1;
                self.ttft.push((first - sent).as_secs_f64());
                self.spread.push((end - first).as_secs_f64());
            }
            _ => self.failed.push(format!("{what}: {events} events")),
        }
    }
}
