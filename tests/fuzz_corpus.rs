//! Issue 11, item 10 (`docs/security.md#fuzzing`): the CI smoke of the fuzz targets on stable
//! Rust. Every committed corpus file of `fuzz/corpus/<target>/`, and a fixed number of
//! deterministic mutations of each (byte flips, cuts, splices, repeats), goes through the same
//! functions the cargo-fuzz targets call; none may panic, and no decoding error may quote a
//! marker planted in the body. The long runs (1,000,000 executions per target, libFuzzer on
//! nightly) are `bench/fuzz`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::Path;

use llmscaler_webhooks::review::{Endpoint, handle};

/// Mutations per corpus file.
const MUTATIONS: usize = 400;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{}: too few seeds", dir.display());
    files
        .iter()
        .map(|p| std::fs::read(p).expect("read seed"))
        .collect()
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            usize::try_from(self.next() % n as u64).unwrap_or(0)
        }
    }
}

const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"null",
    b"-1",
    b"1e999",
    b"\"NaN\"",
    b"{}",
    b"[{},{}]",
    b"\"pod\"",
    b"\"vector\"",
    b"\"scalar\"",
    b"\\u0000",
    b"\xff",
];

fn mutate(seed: &[u8], rng: &mut Rng, others: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..=rng.below(3) {
        match rng.below(5) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 => {
                let cut = rng.below(data.len() + 1);
                data.truncate(cut);
            }
            2 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                let at = rng.below(data.len() + 1);
                data.splice(at..at, token.iter().copied());
            }
            3 if !others.is_empty() => {
                let other = &others[rng.below(others.len())];
                let from = rng.below(other.len() + 1);
                let at = rng.below(data.len() + 1);
                data.splice(at..at, other[from..].iter().copied());
            }
            _ if !data.is_empty() => {
                let from = rng.below(data.len());
                let to = (from + rng.below(16)).min(data.len());
                let chunk = data[from..to].to_vec();
                data.splice(to..to, chunk);
            }
            _ => {}
        }
    }
    data
}

fn run_target(target: &str, run: impl Fn(&[u8])) -> usize {
    let seeds = corpus(target);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut executions = 0;
    for seed in &seeds {
        run(seed);
        executions += 1;
        for _ in 0..MUTATIONS {
            run(&mutate(seed, &mut rng, &seeds));
            executions += 1;
        }
    }
    executions
}

#[test]
fn admission_review_corpus() {
    let n = run_target("admission_review", |data| {
        let policy = llmscaler_api::OperatorPolicy::default();
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            let reply = handle(endpoint, &policy, Some("application/json"), data);
            assert!((200..600).contains(&reply.status));
            assert!(serde_json::from_slice::<serde_json::Value>(&reply.body).is_ok());
        }
    });
    eprintln!("admission_review: {n} executions");
}

#[test]
fn prometheus_reply_corpus() {
    let n = run_target("prometheus_reply", |data| {
        let mut planted = data.to_vec();
        planted.extend_from_slice(b"ZZSECRETZZ");
        for body in [data, &planted[..]] {
            for text in [
                llmscaler::metrics::decode_instant_body("q", body)
                    .err()
                    .map(|e| e.to_string()),
                llmscaler::metrics::decode_per_pod_body("q", body)
                    .err()
                    .map(|e| e.to_string()),
            ]
            .into_iter()
            .flatten()
            {
                assert!(!text.contains("ZZSECRETZZ"), "{text}");
            }
        }
    });
    eprintln!("prometheus_reply: {n} executions");
}

#[test]
fn decision_reply_corpus() {
    let n = run_target("decision_reply", |data| {
        for namespace in [None, Some("ns")] {
            match llmscaler::metrics::decode_decision_body("svc", namespace, data) {
                Ok(replicas) => assert!(replicas >= 0),
                Err(err) => assert!(err.to_string().len() < 1024, "{err}"),
            }
        }
    });
    eprintln!("decision_reply: {n} executions");
}
