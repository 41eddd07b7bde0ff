//! Request traces in the format of the Azure LLM inference trace 2023 (`TIMESTAMP,
//! ContextTokens, GeneratedTokens`), and the `--scale` transformation.
//!
//! Trace data: Microsoft Azure, "Azure LLM inference trace 2023" (CC BY 4.0), described in Patel
//! et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024.
//! Anything derived from it must keep this attribution ([`ATTRIBUTION`]).

use std::io::Read;

/// The attribution that every file or picture derived from the Azure trace must carry.
pub const ATTRIBUTION: &str = "Trace: Microsoft Azure, \"Azure LLM inference trace 2023\" \
     (CC BY 4.0); Patel et al., \"Splitwise\", ISCA 2024";

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    /// Arrival time, trace seconds from the first request of the trace.
    pub arrival_s: f64,
    /// Prompt length, tokens.
    pub prompt_tokens: u32,
    /// Output length, tokens (at least 1 is generated).
    pub output_tokens: u32,
}

/// A malformed trace file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TraceError {
    /// The header is not `TIMESTAMP,ContextTokens,GeneratedTokens`.
    #[error("line 1: expected the header TIMESTAMP,ContextTokens,GeneratedTokens, found {0:?}")]
    Header(String),
    /// A row could not be parsed.
    #[error("line {line}: {message}")]
    Row {
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// The file could not be read.
    #[error("reading the trace: {0}")]
    Io(String),
}

/// Reads an Azure-format trace: arrivals become seconds from the first row, rows are sorted by
/// arrival (stable).
///
/// # Errors
/// [`TraceError`] for a wrong header, a malformed row or an I/O error.
pub fn read_azure(reader: impl Read) -> Result<Vec<Request>, TraceError> {
    let mut csv = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(reader);
    let header = csv
        .headers()
        .map_err(|e| TraceError::Io(e.to_string()))?
        .clone();
    let names: Vec<&str> = header.iter().collect();
    if names != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"] {
        return Err(TraceError::Header(names.join(",")));
    }
    let mut first: Option<f64> = None;
    let mut out = Vec::new();
    for (i, record) in csv.records().enumerate() {
        let line = i as u64 + 2;
        let record = record.map_err(|e| TraceError::Row {
            line,
            message: e.to_string(),
        })?;
        let row_err = |message: String| TraceError::Row { line, message };
        let field = |k: usize| record.get(k).unwrap_or("");
        let t = parse_timestamp(field(0)).map_err(row_err)?;
        let prompt: u32 = field(1)
            .parse()
            .map_err(|_| row_err(format!("ContextTokens {:?} is not a count", field(1))))?;
        let output: u32 = field(2)
            .parse()
            .map_err(|_| row_err(format!("GeneratedTokens {:?} is not a count", field(2))))?;
        let base = *first.get_or_insert(t);
        out.push(Request {
            arrival_s: t - base,
            prompt_tokens: prompt,
            output_tokens: output,
        });
    }
    out.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    Ok(out)
}

/// `YYYY-MM-DD HH:MM:SS[.fraction]` (UTC) as seconds since 1970-01-01.
fn parse_timestamp(text: &str) -> Result<f64, String> {
    let bad = || format!("TIMESTAMP {text:?} is not YYYY-MM-DD HH:MM:SS[.fraction]");
    let (date, time) = text.split_once([' ', 'T']).ok_or_else(bad)?;
    let mut d = date.split('-').map(str::parse::<i64>);
    let (Some(Ok(y)), Some(Ok(m)), Some(Ok(day)), None) = (d.next(), d.next(), d.next(), d.next())
    else {
        return Err(bad());
    };
    let mut t = time.split(':');
    let (Some(h), Some(min), Some(s), None) = (t.next(), t.next(), t.next(), t.next()) else {
        return Err(bad());
    };
    let h: i64 = h.parse().map_err(|_| bad())?;
    let min: i64 = min.parse().map_err(|_| bad())?;
    let s: f64 = s.parse().map_err(|_| bad())?;
    if !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || h > 23
        || min > 59
        || !(0.0..61.0).contains(&s)
    {
        return Err(bad());
    }
    let days = days_from_civil(y, m, day);
    Ok((days * 86_400 + h * 3600 + min * 60) as f64 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// SplitMix64: a tiny, fast, seedable generator (deterministic across platforms).
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Largest delay of a duplicated request after its original under [`scale`], trace seconds.
pub(crate) const COPY_SPREAD_S: f64 = 1.0;

/// Multiplies the arrival rate by `factor` (≥ 0): every request is kept `floor(factor)` times,
/// plus once more with probability `fract(factor)`, drawn from a generator seeded with `seed`.
/// The first copy keeps the original's arrival; further copies keep its sizes and arrive up to
/// [`COPY_SPREAD_S`] later (uniform, seeded), so duplicates do not land as one burst. The result
/// is sorted by arrival and is the same for the same input, factor and seed.
pub fn scale(requests: &[Request], factor: f64, seed: u64) -> Vec<Request> {
    let factor = if factor.is_finite() {
        factor.max(0.0)
    } else {
        1.0
    };
    let whole = factor.floor() as usize;
    let frac = factor - factor.floor();
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::with_capacity((requests.len() as f64 * factor).ceil() as usize);
    for r in requests {
        let extra = usize::from(frac > 0.0 && rng.next_f64() < frac);
        for copy in 0..whole + extra {
            let offset = if copy == 0 {
                0.0
            } else {
                rng.next_f64() * COPY_SPREAD_S
            };
            out.push(Request {
                arrival_s: r.arrival_s + offset,
                ..*r
            });
        }
    }
    out.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    out
}

/// Maps trace seconds to wall seconds under `--speed X` (X times faster than real time).
pub fn wall_seconds(trace_s: f64, speed: f64) -> f64 {
    trace_s / speed
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
        2023-11-16 18:15:46.6805900,374,44\n\
        2023-11-16 18:15:50.9951690,396,109\n\
        2023-11-16 23:59:59.5,10,1\n\
        2023-11-17 00:00:00.5,20,2\n";

    #[test]
    fn reads_azure_rows_as_seconds_from_the_first() {
        let reqs = read_azure(SAMPLE.as_bytes()).expect("valid trace");
        assert_eq!(reqs.len(), 4);
        assert_eq!(reqs[0].arrival_s, 0.0);
        assert!((reqs[1].arrival_s - 4.314_579).abs() < 1e-6);
        assert_eq!((reqs[1].prompt_tokens, reqs[1].output_tokens), (396, 109));
        // Across midnight: one second apart.
        assert!((reqs[3].arrival_s - reqs[2].arrival_s - 1.0).abs() < 1e-6);
    }

    #[test]
    fn rejects_a_wrong_header_and_bad_rows() {
        assert!(matches!(
            read_azure("t,a,b\n".as_bytes()),
            Err(TraceError::Header(_))
        ));
        let bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,3\n";
        assert_eq!(
            read_azure(bad.as_bytes()),
            Err(TraceError::Row {
                line: 2,
                message: "ContextTokens \"x\" is not a count".into()
            })
        );
        let bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:15:46,1,3\n";
        assert!(matches!(
            read_azure(bad.as_bytes()),
            Err(TraceError::Row { line: 2, .. })
        ));
    }

    fn uniform(n: usize) -> Vec<Request> {
        (0..n)
            .map(|i| Request {
                arrival_s: i as f64,
                prompt_tokens: 100,
                output_tokens: 10,
            })
            .collect()
    }

    #[test]
    fn scale_is_deterministic_for_a_seed_and_near_the_factor() {
        let base = uniform(10_000);
        let a = scale(&base, 2.5, 7);
        let b = scale(&base, 2.5, 7);
        assert_eq!(a, b, "same seed, same requests");
        let c = scale(&base, 2.5, 8);
        assert_ne!(a, c, "another seed draws other copies");
        let ratio = a.len() as f64 / base.len() as f64;
        assert!((ratio - 2.5).abs() < 0.03, "ratio {ratio}");
        assert!(a.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        // Copies follow their original within the spread, never before it.
        let at_10: Vec<f64> = a
            .iter()
            .map(|r| r.arrival_s)
            .filter(|t| (10.0..11.0).contains(t))
            .collect();
        assert!(at_10.len() >= 2 && at_10[0] == 10.0, "{at_10:?}");
        assert!(at_10.iter().all(|t| *t < 10.0 + COPY_SPREAD_S));

        let thin = scale(&base, 0.25, 1);
        let ratio = thin.len() as f64 / base.len() as f64;
        assert!((ratio - 0.25).abs() < 0.02, "ratio {ratio}");
        assert_eq!(scale(&base, 1.0, 3), base, "factor 1 is the identity");
        assert!(scale(&base, 0.0, 3).is_empty());
    }

    #[test]
    fn speed_compresses_time() {
        assert_eq!(wall_seconds(120.0, 12.0), 10.0);
    }
}
