//! Evaluation of a parsed query at one instant over a [`Store`].

use std::collections::{BTreeMap, HashSet};

use promql_parser::label::Labels as NameList;
use promql_parser::parser::token::{self, TokenType};
use promql_parser::parser::{
    AggregateExpr, BinaryExpr, Expr, LabelModifier, Offset, VectorMatchCardinality, VectorSelector,
};

use super::functions;
use super::store::{Labels, Store};
use super::{PromqlError, parse};

/// Points per series over a range: `(labels, [(t_ms, value)])`.
pub(crate) type Matrix = Vec<(Labels, Vec<(i64, f64)>)>;

/// A query's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A number.
    Scalar(f64),
    /// Samples at the evaluation time, one per label set.
    Vector(Vec<(Labels, f64)>),
    /// Points per series over a range (only as a function argument).
    Matrix(Matrix),
}

fn unsupported(construct: impl Into<String>) -> PromqlError {
    PromqlError::Unsupported {
        construct: construct.into(),
    }
}

/// Evaluates `query` at `t_ms` as an instant query.
///
/// # Errors
/// [`PromqlError::Parse`] for a query that does not parse, [`PromqlError::Unsupported`] naming
/// a construct outside the subset, [`PromqlError::Eval`] for what Prometheus would refuse too.
pub fn evaluate(query: &str, store: &Store, t_ms: i64) -> Result<Value, PromqlError> {
    let expr = parse(query)?;
    eval(&expr, store, t_ms)
}

/// Evaluates `query` at `t_ms` and returns its single value, as the operator reads a query
/// (docs/providers.md#prometheus-provider): a scalar or a one-sample vector.
///
/// # Errors
/// Those of [`evaluate`], and [`PromqlError::NotSingle`] for an empty vector, several series or
/// a matrix.
pub fn evaluate_single(expr: &Expr, store: &Store, t_ms: i64) -> Result<f64, PromqlError> {
    match eval(expr, store, t_ms)? {
        Value::Scalar(v) => Ok(v),
        Value::Vector(v) if v.len() == 1 => Ok(v[0].1),
        Value::Vector(v) if v.is_empty() => Err(PromqlError::NotSingle("no data".into())),
        Value::Vector(v) => Err(PromqlError::NotSingle(format!(
            "{} series where one was expected",
            v.len()
        ))),
        Value::Matrix(_) => Err(PromqlError::NotSingle(
            "a range vector where one value was expected".into(),
        )),
    }
}

/// Evaluates a parsed expression at `t_ms`.
///
/// # Errors
/// See [`evaluate`].
pub fn eval(expr: &Expr, store: &Store, t_ms: i64) -> Result<Value, PromqlError> {
    match expr {
        Expr::NumberLiteral(n) => Ok(Value::Scalar(n.val)),
        Expr::Paren(p) => eval(&p.expr, store, t_ms),
        Expr::Unary(u) => match eval(&u.expr, store, t_ms)? {
            Value::Scalar(v) => Ok(Value::Scalar(-v)),
            Value::Vector(v) => Ok(Value::Vector(
                v.into_iter().map(|(l, x)| (drop_name(l), -x)).collect(),
            )),
            Value::Matrix(_) => Err(unsupported("unary minus on a range vector")),
        },
        Expr::VectorSelector(vs) => {
            let at = shifted(vs, t_ms)?;
            Ok(Value::Vector(
                select(vs, store)
                    .filter_map(|s| {
                        s.instant(at, store.lookback_ms)
                            .map(|v| (s.labels.clone(), v))
                    })
                    .collect(),
            ))
        }
        Expr::MatrixSelector(ms) => {
            let at = shifted(&ms.vs, t_ms)?;
            let range_ms = i64::try_from(ms.range.as_millis()).unwrap_or(i64::MAX);
            Ok(Value::Matrix(
                select(&ms.vs, store)
                    .map(|s| (s.labels.clone(), s.range(at, range_ms)))
                    .filter(|(_, pts)| !pts.is_empty())
                    .collect(),
            ))
        }
        Expr::Aggregate(a) => aggregate(a, store, t_ms),
        Expr::Binary(b) => binary(b, store, t_ms),
        Expr::Call(call) => functions::call(call, store, t_ms),
        Expr::StringLiteral(_) => Err(unsupported("string literal")),
        Expr::Subquery(_) => Err(unsupported("subquery")),
        Expr::Extension(_) => Err(unsupported("extension expression")),
    }
}

/// The time a selector reads at, ms: `t_ms` moved back by its `offset` (forward for a negative
/// one), as Prometheus does (docs/promql.md).
///
/// # Errors
/// [`PromqlError::Unsupported`] for the `@` modifier and `or` in label matchers.
pub(super) fn shifted(vs: &VectorSelector, t_ms: i64) -> Result<i64, PromqlError> {
    if vs.at.is_some() {
        return Err(unsupported("@ modifier"));
    }
    if !vs.matchers.or_matchers.is_empty() {
        return Err(unsupported("or in label matchers"));
    }
    let ms = |d: &std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok(match &vs.offset {
        None => t_ms,
        Some(Offset::Pos(d)) => t_ms.saturating_sub(ms(d)),
        Some(Offset::Neg(d)) => t_ms.saturating_add(ms(d)),
    })
}

fn select<'a>(
    vs: &'a VectorSelector,
    store: &'a Store,
) -> impl Iterator<Item = &'a super::store::Series> + 'a {
    store.candidates(vs.name.as_deref()).filter(move |s| {
        // A missing label matches as the empty string; the crate anchors regular expressions
        // as Prometheus does.
        vs.matchers
            .matchers
            .iter()
            .all(|m| m.is_match(s.labels.get(&m.name).map_or("", String::as_str)))
    })
}

pub(super) fn drop_name(mut labels: Labels) -> Labels {
    labels.remove("__name__");
    labels
}

fn names(list: &NameList) -> Vec<String> {
    list.labels.clone()
}

fn aggregate(a: &AggregateExpr, store: &Store, t_ms: i64) -> Result<Value, PromqlError> {
    let op = a.op.id();
    if !matches!(
        op,
        token::T_SUM | token::T_AVG | token::T_MIN | token::T_MAX | token::T_COUNT
    ) {
        return Err(unsupported(format!("aggregation {:?}", a.op.to_string())));
    }
    let Value::Vector(input) = eval(&a.expr, store, t_ms)? else {
        return Err(PromqlError::Eval(format!(
            "{} expects an instant vector",
            a.op
        )));
    };
    let key = |labels: &Labels| -> Labels {
        match &a.modifier {
            Some(LabelModifier::Include(by)) => {
                let by = names(by);
                labels
                    .iter()
                    .filter(|(k, _)| by.contains(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }
            Some(LabelModifier::Exclude(without)) => {
                let without = names(without);
                labels
                    .iter()
                    .filter(|(k, _)| k.as_str() != "__name__" && !without.contains(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }
            None => Labels::new(),
        }
    };
    let mut groups: BTreeMap<Labels, Vec<f64>> = BTreeMap::new();
    for (labels, v) in input {
        groups.entry(key(&labels)).or_default().push(v);
    }
    Ok(Value::Vector(
        groups
            .into_iter()
            .map(|(labels, vs)| {
                let n = vs.len() as f64;
                let v = match op {
                    token::T_SUM => vs.iter().sum(),
                    token::T_AVG => vs.iter().sum::<f64>() / n,
                    token::T_MIN => vs.iter().copied().fold(f64::NAN, nan_min),
                    token::T_MAX => vs.iter().copied().fold(f64::NAN, nan_max),
                    _ => n,
                };
                (labels, v)
            })
            .collect(),
    ))
}

/// Prometheus' min: NaN only when every input is NaN.
fn nan_min(acc: f64, v: f64) -> f64 {
    if acc.is_nan() || v < acc { v } else { acc }
}

fn nan_max(acc: f64, v: f64) -> f64 {
    if acc.is_nan() || v > acc { v } else { acc }
}

/// Arithmetic or comparison of two numbers; `None` = a comparison that is false.
fn apply(op: TokenType, l: f64, r: f64) -> Result<Option<f64>, PromqlError> {
    let truth = |b: bool| if b { Some(1.0) } else { None };
    Ok(match op.id() {
        token::T_ADD => Some(l + r),
        token::T_SUB => Some(l - r),
        token::T_MUL => Some(l * r),
        token::T_DIV => Some(l / r),
        token::T_MOD => Some(l % r),
        token::T_POW => Some(l.powf(r)),
        token::T_EQLC => truth(l == r),
        token::T_NEQ => truth(l != r),
        token::T_GTR => truth(l > r),
        token::T_LSS => truth(l < r),
        token::T_GTE => truth(l >= r),
        token::T_LTE => truth(l <= r),
        _ => return Err(unsupported(format!("binary operator {:?}", op.to_string()))),
    })
}

fn binary(b: &BinaryExpr, store: &Store, t_ms: i64) -> Result<Value, PromqlError> {
    let op = b.op;
    let return_bool = b.return_bool();
    let comparison = op.is_comparison_operator();
    if let Some(m) = &b.modifier
        && matches!(
            m.card,
            VectorMatchCardinality::ManyToOne(_) | VectorMatchCardinality::OneToMany(_)
        )
    {
        return Err(unsupported("group_left/group_right"));
    }
    if let Some(m) = &b.modifier
        && (m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some())
    {
        return Err(unsupported("fill modifier"));
    }
    let lhs = eval(&b.lhs, store, t_ms)?;
    let rhs = eval(&b.rhs, store, t_ms)?;
    if op.is_set_operator() {
        let (Value::Vector(l), Value::Vector(r)) = (lhs, rhs) else {
            return Err(PromqlError::Eval(format!(
                "{op} is defined between instant vectors only"
            )));
        };
        return Ok(Value::Vector(set_op(b, l, r)));
    }
    // A comparison keeps the vector's value and labels (name included) unless `bool`.
    let result = |l: f64, r: f64, kept: f64| -> Result<Option<f64>, PromqlError> {
        let out = apply(op, l, r)?;
        Ok(if comparison {
            if return_bool {
                Some(if out.is_some() { 1.0 } else { 0.0 })
            } else {
                out.map(|_| kept)
            }
        } else {
            out
        })
    };
    let keep_name = comparison && !return_bool;
    let relabel = |l: Labels| if keep_name { l } else { drop_name(l) };
    match (lhs, rhs) {
        (Value::Scalar(l), Value::Scalar(r)) => {
            Ok(Value::Scalar(result(l, r, l)?.unwrap_or(f64::NAN)))
        }
        (Value::Vector(v), Value::Scalar(s)) => {
            let mut out = Vec::new();
            for (labels, x) in v {
                if let Some(y) = result(x, s, x)? {
                    out.push((relabel(labels), y));
                }
            }
            Ok(Value::Vector(out))
        }
        (Value::Scalar(s), Value::Vector(v)) => {
            let mut out = Vec::new();
            for (labels, x) in v {
                if let Some(y) = result(s, x, x)? {
                    out.push((relabel(labels), y));
                }
            }
            Ok(Value::Vector(out))
        }
        (Value::Vector(l), Value::Vector(r)) => {
            let sig = signature_fn(b);
            let mut right: BTreeMap<Labels, f64> = BTreeMap::new();
            for (labels, v) in r {
                if right.insert(sig(&labels), v).is_some() {
                    return Err(PromqlError::Eval(format!(
                        "many-to-many matching not allowed: duplicate series on the right of {op}"
                    )));
                }
            }
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            for (labels, x) in l {
                let key = sig(&labels);
                let Some(&y) = right.get(&key) else { continue };
                if !seen.insert(key) {
                    return Err(PromqlError::Eval(format!(
                        "many-to-many matching not allowed: duplicate series on the left of {op}"
                    )));
                }
                if let Some(z) = result(x, y, x)? {
                    out.push((result_labels(b, relabel(labels)), z));
                }
            }
            Ok(Value::Vector(out))
        }
        _ => Err(PromqlError::Eval(format!(
            "{op} is not defined on a range vector"
        ))),
    }
}

/// The matching signature of a vector-vector operation: `on(...)` labels, or all labels but
/// `__name__` and the `ignoring(...)` ones.
fn signature_fn(b: &BinaryExpr) -> impl Fn(&Labels) -> Labels + '_ {
    move |labels: &Labels| match b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
        Some(LabelModifier::Include(on)) => labels
            .iter()
            .filter(|(k, _)| on.labels.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        Some(LabelModifier::Exclude(ignoring)) => labels
            .iter()
            .filter(|(k, _)| k.as_str() != "__name__" && !ignoring.labels.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        None => drop_name(labels.clone()),
    }
}

/// One-to-one result labels: `on(...)` keeps only those, `ignoring(...)` drops those.
fn result_labels(b: &BinaryExpr, labels: Labels) -> Labels {
    match b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
        Some(LabelModifier::Include(on)) => labels
            .into_iter()
            .filter(|(k, _)| on.labels.contains(k))
            .collect(),
        Some(LabelModifier::Exclude(ignoring)) => labels
            .into_iter()
            .filter(|(k, _)| !ignoring.labels.contains(k))
            .collect(),
        None => labels,
    }
}

fn set_op(b: &BinaryExpr, l: Vec<(Labels, f64)>, r: Vec<(Labels, f64)>) -> Vec<(Labels, f64)> {
    let sig = signature_fn(b);
    match b.op.id() {
        token::T_LAND => {
            let right: HashSet<Labels> = r.iter().map(|(l, _)| sig(l)).collect();
            l.into_iter()
                .filter(|(x, _)| right.contains(&sig(x)))
                .collect()
        }
        token::T_LUNLESS => {
            let right: HashSet<Labels> = r.iter().map(|(l, _)| sig(l)).collect();
            l.into_iter()
                .filter(|(x, _)| !right.contains(&sig(x)))
                .collect()
        }
        _ => {
            let left: HashSet<Labels> = l.iter().map(|(x, _)| sig(x)).collect();
            let mut out = l;
            out.extend(r.into_iter().filter(|(x, _)| !left.contains(&sig(x))));
            out
        }
    }
}
