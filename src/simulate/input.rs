//! The `simulate --metrics FILE.csv` format (issue 3): a header, then one row per sync.
//!
//! Columns: `t` (seconds from the start, strictly increasing), one per metric named by
//! `spec.metrics[].name` (or `metric<i>`), or `decision` under the Custom provider; optional
//! `ready` (observed ready replicas) and `rollout` (1 = mid-rollout). Metric cells hold a number,
//! `NaN`, `+Inf`, `-Inf`, or nothing (the query failed / no data). `decision` cells hold the
//! decision server's `replicas.active` or nothing (the server failed); a number the real client
//! refuses (negative, not whole, over int32) is a refused reading and the fleet holds.

use std::io::Read;

/// A malformed CSV: the 1-based line and, when known, the column, and what is wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{location}: {message}")]
pub struct CsvError {
    /// `line 3, column "queue"` or `line 1`.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

impl CsvError {
    fn at(line: u64, column: Option<&str>, message: impl Into<String>) -> Self {
        let location = match column {
            Some(column) => format!("line {line}, column {column:?}"),
            None => format!("line {line}"),
        };
        Self {
            location,
            message: message.into(),
        }
    }
}

/// One parsed row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The `t` cell as written (echoed in the output).
    pub t_text: String,
    /// Evaluation time, milliseconds from the start.
    pub t_ms: i64,
    /// Per metric, in spec order: the value, or `Err` for an empty cell.
    pub values: Vec<Result<f64, String>>,
    /// The metric cells as written (echoed in the output).
    pub value_texts: Vec<String>,
    /// Custom provider: the `decision` cell (`Err` when empty).
    pub decision: Result<i32, String>,
    /// The `ready` cell, when present and non-empty.
    pub ready: Option<i32>,
    /// The `rollout` cell is `1`.
    pub rollout: bool,
}

/// What the columns must be.
#[derive(Clone, Debug)]
pub struct Columns {
    /// The value columns the scaler expects: metric names, or `["decision"]` under Custom.
    pub values: Vec<String>,
}

/// Empty cell of a metric: the query failed or returned no data.
pub const NO_DATA: &str = "no data (empty cell)";
/// Empty `decision` cell: the decision server failed.
pub const NO_DECISION: &str = "decision server failed (empty cell)";

/// Reads every row.
///
/// # Errors
/// [`CsvError`] naming the line and column for an unknown or missing column, an unparsable
/// number, or a `t` that is not strictly increasing.
pub fn read_rows(reader: impl Read, columns: &Columns, custom: bool) -> Result<Vec<Row>, CsvError> {
    let mut csv = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(reader);
    let headers = csv
        .headers()
        .map_err(|e| CsvError::at(1, None, format!("unreadable header: {e}")))?
        .clone();

    let mut t_index = None;
    let mut ready_index = None;
    let mut rollout_index = None;
    let mut value_index: Vec<Option<usize>> = vec![None; columns.values.len()];
    for (i, name) in headers.iter().enumerate() {
        let slot = match name {
            "t" => &mut t_index,
            "ready" => &mut ready_index,
            "rollout" => &mut rollout_index,
            _ => match columns.values.iter().position(|v| v == name) {
                Some(p) => &mut value_index[p],
                None => {
                    return Err(CsvError::at(
                        1,
                        Some(name),
                        format!(
                            "unknown column; expected t, {}, and optionally ready, rollout",
                            columns.values.join(", ")
                        ),
                    ));
                }
            },
        };
        if slot.replace(i).is_some() {
            return Err(CsvError::at(1, Some(name), "column appears twice"));
        }
    }
    let t_index = t_index.ok_or_else(|| CsvError::at(1, None, "missing column \"t\""))?;
    let value_index: Vec<usize> = value_index
        .iter()
        .zip(&columns.values)
        .map(|(index, name)| {
            index.ok_or_else(|| CsvError::at(1, None, format!("missing column {name:?}")))
        })
        .collect::<Result<_, _>>()?;

    let mut rows = Vec::new();
    let mut last_t: Option<f64> = None;
    for record in csv.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, csv::Position::line);
            CsvError::at(line, None, e.to_string())
        })?;
        let line = record.position().map_or(0, csv::Position::line);
        let cell = |i: usize| record.get(i).unwrap_or("");

        let t_text = cell(t_index);
        let t: f64 = t_text
            .parse()
            .ok()
            .filter(|t: &f64| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| {
                CsvError::at(
                    line,
                    Some("t"),
                    format!("{t_text:?} is not a time in seconds"),
                )
            })?;
        if let Some(previous) = last_t
            && t <= previous
        {
            return Err(CsvError::at(
                line,
                Some("t"),
                format!("{t_text} is not after the previous row's {previous}"),
            ));
        }
        last_t = Some(t);

        let mut values = Vec::new();
        let mut value_texts = Vec::new();
        let mut decision = Err(NO_DECISION.to_string());
        for (name, &i) in columns.values.iter().zip(&value_index) {
            let text = cell(i);
            value_texts.push(text.to_string());
            if custom {
                decision = parse_decision(text)
                    .map_err(|message| CsvError::at(line, Some(name), message))?;
            } else {
                values.push(
                    parse_value(text).map_err(|message| CsvError::at(line, Some(name), message))?,
                );
            }
        }
        let ready =
            match ready_index.map(cell) {
                None | Some("") => None,
                Some(text) => Some(text.parse::<i32>().ok().filter(|r| *r >= 0).ok_or_else(
                    || {
                        CsvError::at(
                            line,
                            Some("ready"),
                            format!("{text:?} is not a replica count"),
                        )
                    },
                )?),
            };
        let rollout = match rollout_index.map(cell) {
            None | Some("" | "0") => false,
            Some("1") => true,
            Some(text) => {
                return Err(CsvError::at(
                    line,
                    Some("rollout"),
                    format!("{text:?} must be 0 or 1"),
                ));
            }
        };
        #[allow(clippy::cast_possible_truncation)]
        let t_ms = (t * 1000.0).round() as i64;
        rows.push(Row {
            t_text: t_text.to_string(),
            t_ms,
            values,
            value_texts,
            decision,
            ready,
            rollout,
        });
    }
    Ok(rows)
}

/// A metric cell: a number, `NaN`, `+Inf`, `-Inf` (any case), or empty (`Err`: no data).
/// The outer `Err` is a malformed cell.
fn parse_value(text: &str) -> Result<Result<f64, String>, String> {
    if text.is_empty() {
        return Ok(Err(NO_DATA.to_string()));
    }
    text.parse::<f64>()
        .map(Ok)
        .map_err(|_| format!("{text:?} is not a number, NaN, +Inf, -Inf or empty"))
}

/// A `decision` cell, read as the decision-server client reads `replicas.active`
/// ([`crate::metrics::DecisionSource::decide`]): a whole number from 0 to `i32::MAX` (`3.0`
/// counts as 3). A number the client refuses (negative, not whole such as `1.5`, `NaN`, or over
/// the int32 maximum) is a refused reading: the inner `Err`, and the fleet holds as it would
/// with the real server. An empty cell is the inner `Err` too (the server failed). The outer
/// `Err` is a cell that is not a number at all: an input error.
fn parse_decision(text: &str) -> Result<Result<i32, String>, String> {
    if text.is_empty() {
        return Ok(Err(NO_DECISION.to_string()));
    }
    let number: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number or empty"))?;
    let refused = |why: String| Ok(Err(format!("unusable replicas.active: {why}")));
    if !number.is_finite() || number.fract() != 0.0 {
        refused(format!("{text} is not a whole number"))
    } else if number < 0.0 {
        refused(format!("{text} is negative"))
    } else if number > f64::from(i32::MAX) {
        refused(format!("{text} is over the int32 maximum {}", i32::MAX))
    } else {
        // Whole and within 0..=i32::MAX: the cast is exact.
        #[allow(clippy::cast_possible_truncation)]
        let active = number as i32;
        Ok(Ok(active))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(names: &[&str]) -> Columns {
        Columns {
            values: names.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn reads_special_values() {
        let rows = read_rows(
            "t,q\n0,NaN\n15,+Inf\n30,-Inf\n45,\n60,1e3\n".as_bytes(),
            &cols(&["q"]),
            false,
        )
        .expect("valid");
        assert!(rows[0].values[0].as_ref().is_ok_and(|v| v.is_nan()));
        assert_eq!(rows[1].values[0], Ok(f64::INFINITY));
        assert_eq!(rows[2].values[0], Ok(f64::NEG_INFINITY));
        assert_eq!(rows[3].values[0], Err(NO_DATA.to_string()));
        assert_eq!(rows[4].values[0], Ok(1000.0));
        assert_eq!(rows[4].t_ms, 60_000);
    }

    #[test]
    fn errors_name_line_and_column() {
        let err = |text: &str| read_rows(text.as_bytes(), &cols(&["q"]), false).expect_err("bad");
        assert_eq!(
            err("t,q,x\n").to_string(),
            "line 1, column \"x\": unknown column; expected t, q, and optionally ready, rollout"
        );
        assert_eq!(err("t\n0\n").to_string(), "line 1: missing column \"q\"");
        assert_eq!(
            err("t,q\n0,1\n15,abc\n").to_string(),
            "line 3, column \"q\": \"abc\" is not a number, NaN, +Inf, -Inf or empty"
        );
        assert_eq!(
            err("t,q\n0,1\n0,1\n").to_string(),
            "line 3, column \"t\": 0 is not after the previous row's 0"
        );
        assert_eq!(
            err("t,q,ready\n0,1,-2\n").to_string(),
            "line 2, column \"ready\": \"-2\" is not a replica count"
        );
        assert_eq!(
            err("t,q,rollout\n0,1,yes\n").to_string(),
            "line 2, column \"rollout\": \"yes\" must be 0 or 1"
        );
    }

    #[test]
    fn decision_column() {
        let rows = read_rows(
            "t,decision\n0,15\n15,\n".as_bytes(),
            &cols(&["decision"]),
            true,
        )
        .expect("valid");
        assert_eq!(rows[0].decision, Ok(15));
        assert_eq!(rows[1].decision, Err(NO_DECISION.to_string()));
    }

    #[test]
    fn decision_cells_the_client_refuses_are_refused_readings() {
        let decision = |cell: &str| {
            read_rows(
                format!("t,decision\n0,{cell}\n").as_bytes(),
                &cols(&["decision"]),
                true,
            )
            .map(|rows| rows[0].decision.clone())
        };
        let refused = |why: &str| Ok(Err(format!("unusable replicas.active: {why}")));
        assert_eq!(decision("3.0"), Ok(Ok(3)));
        assert_eq!(decision("2147483647"), Ok(Ok(i32::MAX)));
        assert_eq!(decision("-1"), refused("-1 is negative"));
        assert_eq!(decision("1.5"), refused("1.5 is not a whole number"));
        assert_eq!(decision("NaN"), refused("NaN is not a whole number"));
        assert_eq!(
            decision("2147483648"),
            refused("2147483648 is over the int32 maximum 2147483647")
        );
        assert_eq!(
            decision("abc").expect_err("not a number").to_string(),
            "line 2, column \"decision\": \"abc\" is not a number or empty"
        );
    }
}
