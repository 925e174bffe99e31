//! Evaluates parsed CEL rules over JSON values, for the subset the parser reads. A rule
//! this evaluator cannot run reports [`EvalError::Unsupported`], and the caller skips it.

use serde_json::Value;

use super::parse::{Expr, Lit, MacroKind};

/// Why a rule gave no boolean.
#[derive(Debug, Clone, PartialEq)]
pub enum EvalError {
    /// The rule uses something this evaluator does not implement.
    Unsupported(String),
    /// The rule failed at run time (e.g. `no such key`), as on a real server.
    Runtime(String),
}

type Scope<'a> = Vec<(&'a str, Value)>;

/// Evaluates `expr` with `self` bound to `value`.
pub fn eval_rule(expr: &Expr, value: &Value) -> Result<bool, EvalError> {
    let mut scope: Scope<'_> = vec![("self", value.clone())];
    match eval(expr, &mut scope)? {
        Value::Bool(result) => Ok(result),
        other => Err(EvalError::Runtime(format!(
            "rule gave {other}, not a boolean"
        ))),
    }
}

fn unsupported(what: impl Into<String>) -> EvalError {
    EvalError::Unsupported(what.into())
}

fn runtime(what: impl Into<String>) -> EvalError {
    EvalError::Runtime(what.into())
}

fn truth(value: &Value) -> Result<bool, EvalError> {
    value
        .as_bool()
        .ok_or_else(|| runtime(format!("no such overload: {value} is not a bool")))
}

fn numbers_equal(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

fn order(a: &Value, b: &Value) -> Result<std::cmp::Ordering, EvalError> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .zip(y.as_f64())
            .and_then(|(x, y)| x.partial_cmp(&y))
            .ok_or_else(|| runtime("cannot compare numbers")),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Ok(x.cmp(y)),
        _ => Err(runtime(format!("no such overload: {a} < {b}"))),
    }
}

fn eval<'a>(expr: &'a Expr, scope: &mut Scope<'a>) -> Result<Value, EvalError> {
    match expr {
        Expr::Lit(lit) => Ok(match lit {
            Lit::Bool(b) => Value::Bool(*b),
            Lit::Int(i) => Value::from(*i),
            Lit::Uint(u) => Value::from(*u),
            Lit::Double(d) => Value::from(*d),
            Lit::Str(s) => Value::from(s.clone()),
            Lit::Null => Value::Null,
        }),
        Expr::Ident(name) => scope
            .iter()
            .rev()
            .find(|(var, _)| var == name)
            .map(|(_, value)| value.clone())
            .ok_or_else(|| unsupported(format!("variable {name}"))),
        Expr::Select {
            operand,
            field,
            test_only,
        } => {
            let object = eval(operand, scope)?;
            let found = object.get(field.as_str()).filter(|v| !v.is_null());
            if *test_only {
                return Ok(Value::Bool(found.is_some()));
            }
            found
                .cloned()
                .ok_or_else(|| runtime(format!("no such key: {field}")))
        }
        Expr::List(items) => items
            .iter()
            .map(|item| eval(item, scope))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Expr::Map(_) => Err(unsupported("map literals")),
        Expr::Comprehension {
            kind,
            iter_var,
            range,
            body,
        } => {
            let items: Vec<Value> = match eval(range, scope)? {
                Value::Array(items) => items,
                Value::Object(map) => map.keys().cloned().map(Value::from).collect(),
                other => return Err(runtime(format!("cannot iterate over {other}"))),
            };
            let mut results = Vec::with_capacity(items.len());
            for item in &items {
                scope.push((iter_var.as_str(), item.clone()));
                let result = eval(body, scope);
                scope.pop();
                results.push(result?);
            }
            let bools = || results.iter().map(truth).collect::<Result<Vec<_>, _>>();
            Ok(match kind {
                MacroKind::All => Value::Bool(bools()?.iter().all(|b| *b)),
                MacroKind::Exists => Value::Bool(bools()?.iter().any(|b| *b)),
                MacroKind::ExistsOne => Value::Bool(bools()?.iter().filter(|b| **b).count() == 1),
                MacroKind::Map => Value::Array(results),
                MacroKind::Filter => Value::Array(
                    items
                        .into_iter()
                        .zip(bools()?)
                        .filter_map(|(item, keep)| keep.then_some(item))
                        .collect(),
                ),
            })
        }
        Expr::Call {
            target,
            function,
            args,
        } => call(target.as_deref(), function, args, scope),
    }
}

fn call<'a>(
    target: Option<&'a Expr>,
    function: &str,
    args: &'a [Expr],
    scope: &mut Scope<'a>,
) -> Result<Value, EvalError> {
    match function {
        "_&&_" | "_||_" => {
            let stop = function == "_||_";
            let left = eval(&args[0], scope).and_then(|v| truth(&v));
            if left == Ok(stop) {
                return Ok(Value::Bool(stop));
            }
            let right = eval(&args[1], scope).and_then(|v| truth(&v))?;
            if right == stop {
                return Ok(Value::Bool(stop));
            }
            left.map(Value::Bool)
        }
        "_?_:_" => {
            let condition = truth(&eval(&args[0], scope)?)?;
            eval(&args[if condition { 1 } else { 2 }], scope)
        }
        _ => {
            let target = target.map(|t| eval(t, scope)).transpose()?;
            let values = args
                .iter()
                .map(|a| eval(a, scope))
                .collect::<Result<Vec<_>, _>>()?;
            apply(target, function, &values)
        }
    }
}

fn apply(target: Option<Value>, function: &str, args: &[Value]) -> Result<Value, EvalError> {
    use std::cmp::Ordering::{Greater, Less};
    let receiver_or_first = || target.clone().or_else(|| args.first().cloned());
    let text = |v: &Value| {
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| runtime(format!("{v} is not a string")))
    };
    Ok(match (function, args) {
        ("!_", [a]) => Value::Bool(!truth(a)?),
        ("-_", [a]) => Value::from(-a.as_f64().ok_or_else(|| runtime("not a number"))?),
        ("_==_", [a, b]) => Value::Bool(numbers_equal(a, b)),
        ("_!=_", [a, b]) => Value::Bool(!numbers_equal(a, b)),
        ("_<_", [a, b]) => Value::Bool(order(a, b)? == Less),
        ("_<=_", [a, b]) => Value::Bool(order(a, b)? != Greater),
        ("_>_", [a, b]) => Value::Bool(order(a, b)? == Greater),
        ("_>=_", [a, b]) => Value::Bool(order(a, b)? != Less),
        ("@in", [a, Value::Array(list)]) => Value::Bool(list.iter().any(|v| numbers_equal(a, v))),
        ("@in", [Value::String(key), Value::Object(map)]) => Value::Bool(map.contains_key(key)),
        ("_+_", [Value::String(a), Value::String(b)]) => Value::from(format!("{a}{b}")),
        ("_+_", [Value::Array(a), Value::Array(b)]) => {
            Value::Array(a.iter().chain(b).cloned().collect())
        }
        ("_+_" | "_-_" | "_*_", [Value::Number(a), Value::Number(b)]) => {
            let (a, b) = a
                .as_i64()
                .zip(b.as_i64())
                .ok_or_else(|| unsupported("non-integer arithmetic"))?;
            Value::from(
                match function {
                    "_+_" => a.checked_add(b),
                    "_-_" => a.checked_sub(b),
                    _ => a.checked_mul(b),
                }
                .ok_or_else(|| runtime("integer overflow"))?,
            )
        }
        ("size", _) => match receiver_or_first() {
            Some(Value::String(s)) => Value::from(s.chars().count()),
            Some(Value::Array(l)) => Value::from(l.len()),
            Some(Value::Object(m)) => Value::from(m.len()),
            other => return Err(runtime(format!("no size of {other:?}"))),
        },
        ("startsWith", [prefix]) => {
            Value::Bool(text(&target.unwrap_or_default())?.starts_with(&text(prefix)?))
        }
        ("endsWith", [suffix]) => {
            Value::Bool(text(&target.unwrap_or_default())?.ends_with(&text(suffix)?))
        }
        ("contains", [part]) => {
            Value::Bool(text(&target.unwrap_or_default())?.contains(&text(part)?))
        }
        ("matches", [pattern]) => {
            let regex = regex::Regex::new(&text(pattern)?).map_err(|e| runtime(e.to_string()))?;
            Value::Bool(regex.is_match(&text(&target.unwrap_or_default())?))
        }
        ("_[_]", [Value::Array(list), index]) => index
            .as_u64()
            .and_then(|i| list.get(i as usize))
            .cloned()
            .ok_or_else(|| runtime("index out of range"))?,
        ("_[_]", [Value::Object(map), Value::String(key)]) => map
            .get(key)
            .cloned()
            .ok_or_else(|| runtime(format!("no such key: {key}")))?,
        _ => return Err(unsupported(format!("function {function}"))),
    })
}
