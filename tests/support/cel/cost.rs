//! Worst-case cost of CRD validation rules, estimated the way kube-apiserver does when a
//! CRD is created or updated (apiextensions-apiserver's CEL validation over cel-go's
//! checker cost model):
//!
//! - sizes come from the schema: `maxItems`, `maxProperties`, and `maxLength` × 4 (bytes
//!   per code point); an unbounded string or list is as large as the 3 MiB request allows;
//! - identifiers and field selections cost 1, other calls 1 plus their arguments; string
//!   and list equality, ordering, `+` and `in` cost in proportion to their size (0.1 per
//!   byte for strings); a comprehension costs its range size × (condition + step);
//! - a rule costs its estimate × the number of times it can run (the product of the
//!   sizes of the lists and maps above it), at most 10,000,000 per rule and 100,000,000
//!   for all rules of one CRD.

use std::collections::BTreeMap;

use serde_json::Value;

use super::parse::{Expr, Lit, MacroKind, parse};

/// Most estimated cost of one rule, times its cardinality (`StaticEstimatedCostLimit`).
pub const PER_RULE_LIMIT: u64 = 10_000_000;
/// Most estimated cost of all rules of one CRD (`StaticEstimatedCRDCostLimit`).
pub const PER_CRD_LIMIT: u64 = 100_000_000;
/// Largest request body the API server accepts, in bytes.
pub const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;
/// Cost of traversing one byte of a string.
const STRING_TRAVERSAL_FACTOR: f64 = 0.1;
/// Cost of one byte of a regular expression.
const REGEX_LENGTH_FACTOR: f64 = 0.25;

/// The CEL type of a schema node, with its worst-case size.
#[derive(Clone, Debug)]
pub enum Ty {
    Str {
        max: u64,
    },
    Scalar,
    List {
        elem: Box<Ty>,
        max: u64,
    },
    Map {
        value: Box<Ty>,
        max: u64,
    },
    Object {
        fields: BTreeMap<String, Ty>,
        max: u64,
    },
    Dyn,
}

impl Ty {
    /// Worst-case size: bytes of a string, entries of a list or map, 1 for a scalar.
    fn size(&self) -> u64 {
        match self {
            Ty::Str { max } | Ty::List { max, .. } | Ty::Map { max, .. } => *max,
            Ty::Object { max, .. } => *max,
            Ty::Scalar => 1,
            Ty::Dyn => u64::MAX,
        }
    }

    /// Smallest serialized size of a value of this type, in bytes (`""`, `{}`, `[]`, `0`).
    fn min_serialized_size(schema: &Value) -> u64 {
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => 2,
            Some("boolean") => 4,
            Some("integer") | Some("number") => 1,
            _ => 2,
        }
    }

    /// The CEL type of a structural schema node.
    pub fn of_schema(schema: &Value) -> Ty {
        let bound = |key: &str| schema.get(key).and_then(Value::as_u64);
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => {
                let max = match (bound("maxLength"), schema.get("enum")) {
                    (Some(max), _) => max.saturating_mul(4),
                    (None, Some(Value::Array(values))) => values
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|v| v.len() as u64)
                        .max()
                        .unwrap_or(0),
                    _ => MAX_REQUEST_BYTES - 2,
                };
                Ty::Str { max }
            }
            Some("array") => {
                let items = schema.get("items").unwrap_or(&Value::Null);
                let max = bound("maxItems")
                    .unwrap_or((MAX_REQUEST_BYTES - 2) / (Ty::min_serialized_size(items) + 1));
                Ty::List {
                    elem: Box::new(Ty::of_schema(items)),
                    max,
                }
            }
            Some("object") => {
                let max = bound("maxProperties").unwrap_or((MAX_REQUEST_BYTES - 2) / 4);
                if let Some(Value::Object(properties)) = schema.get("properties") {
                    let fields = properties
                        .iter()
                        .map(|(name, child)| (name.clone(), Ty::of_schema(child)))
                        .collect();
                    Ty::Object { fields, max }
                } else if let Some(value @ Value::Object(_)) = schema.get("additionalProperties") {
                    Ty::Map {
                        value: Box::new(Ty::of_schema(value)),
                        max,
                    }
                } else {
                    Ty::Dyn
                }
            }
            Some(_) => Ty::Scalar,
            None => Ty::Dyn,
        }
    }
}

fn factor(size: u64, factor: f64) -> u64 {
    if size == u64::MAX {
        return u64::MAX;
    }
    (size as f64 * factor).ceil() as u64
}

/// Estimates expression costs with variables bound to schema types.
struct Coster {
    vars: Vec<(String, Ty)>,
}

impl Coster {
    fn lookup(&self, name: &str) -> Ty {
        self.vars
            .iter()
            .rev()
            .find(|(var, _)| var == name)
            .map(|(_, ty)| ty.clone())
            .unwrap_or(Ty::Dyn)
    }

    /// The static type of `expr`, as far as sizes need it.
    fn ty(&mut self, expr: &Expr) -> Ty {
        match expr {
            Expr::Lit(Lit::Str(text)) => Ty::Str {
                max: text.len() as u64,
            },
            Expr::Lit(_) => Ty::Scalar,
            Expr::Ident(name) => self.lookup(name),
            Expr::Select {
                test_only: true, ..
            } => Ty::Scalar,
            Expr::Select { operand, field, .. } => match self.ty(operand) {
                Ty::Object { fields, .. } => fields.get(field).cloned().unwrap_or(Ty::Dyn),
                Ty::Map { value, .. } => *value,
                _ => Ty::Dyn,
            },
            Expr::List(items) => Ty::List {
                elem: Box::new(items.first().map_or(Ty::Dyn, |item| self.ty(item))),
                max: items.len() as u64,
            },
            Expr::Map(entries) => Ty::Map {
                value: Box::new(entries.first().map_or(Ty::Dyn, |(_, v)| self.ty(v))),
                max: entries.len() as u64,
            },
            Expr::Comprehension {
                kind: MacroKind::Map | MacroKind::Filter,
                range,
                ..
            } => Ty::List {
                elem: Box::new(Ty::Dyn),
                max: self.ty(range).size(),
            },
            Expr::Comprehension { .. } => Ty::Scalar,
            Expr::Call {
                function,
                args,
                target,
            } => match function.as_str() {
                "_[_]" => match args.first().map(|list| self.ty(list)) {
                    Some(Ty::List { elem, .. }) => *elem,
                    Some(Ty::Map { value, .. }) => *value,
                    _ => Ty::Dyn,
                },
                "_?_:_" => args.get(1).map_or(Ty::Dyn, |then| self.ty(then)),
                "_+_" => match (self.ty(&args[0]), self.ty(&args[1])) {
                    (Ty::Str { max: a }, Ty::Str { max: b }) => Ty::Str {
                        max: a.saturating_add(b),
                    },
                    (Ty::List { elem, max: a }, right) => Ty::List {
                        elem,
                        max: a.saturating_add(right.size()),
                    },
                    _ => Ty::Scalar,
                },
                "lowerAscii" | "upperAscii" | "trim" => {
                    target.as_ref().map_or(Ty::Dyn, |t| self.ty(t))
                }
                _ => Ty::Scalar,
            },
        }
    }

    /// Worst-case cost of evaluating `expr` once.
    fn cost(&mut self, expr: &Expr) -> u64 {
        match expr {
            Expr::Lit(_) => 0,
            Expr::Ident(_) => 1,
            Expr::Select { operand, .. } => self.cost(operand).saturating_add(1),
            Expr::List(items) => items
                .iter()
                .fold(10, |sum, item| sum.saturating_add(self.cost(item))),
            Expr::Map(entries) => entries.iter().fold(30, |sum, (k, v)| {
                sum.saturating_add(self.cost(k))
                    .saturating_add(self.cost(v))
            }),
            Expr::Comprehension {
                kind,
                iter_var,
                range,
                body,
            } => {
                let range_ty = self.ty(range);
                let elem = match &range_ty {
                    Ty::List { elem, .. } => (**elem).clone(),
                    Ty::Map { .. } | Ty::Object { .. } => Ty::Str {
                        max: MAX_REQUEST_BYTES - 2,
                    },
                    _ => Ty::Dyn,
                };
                let range_cost = self.cost(range);
                self.vars.push((iter_var.clone(), elem));
                let body = self.cost(body);
                self.vars.pop();
                // (accumulator init, loop condition, loop step around the body, result)
                let (init, condition, step, result) = match kind {
                    MacroKind::All => (0, 2, body.saturating_add(1), 1),
                    MacroKind::Exists => (0, 3, body.saturating_add(1), 1),
                    MacroKind::ExistsOne => (0, 0, body.saturating_add(2), 2),
                    MacroKind::Map => (10, 0, body.saturating_add(12), 1),
                    MacroKind::Filter => (10, 0, body.saturating_add(13), 1),
                };
                range_cost
                    .saturating_add(init)
                    .saturating_add(result)
                    .saturating_add(range_ty.size().saturating_mul(condition + step))
            }
            Expr::Call {
                target,
                function,
                args,
            } => {
                let target_cost = target.as_ref().map_or(0, |t| self.cost(t));
                let arg_costs: Vec<u64> = args.iter().map(|a| self.cost(a)).collect();
                let arg_sum = arg_costs
                    .iter()
                    .fold(target_cost, |sum, c| sum.saturating_add(*c));
                let own = match function.as_str() {
                    "_&&_" | "_||_" => 0,
                    "_?_:_" => {
                        return arg_costs[0].saturating_add(arg_costs[1].max(arg_costs[2]));
                    }
                    "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" => {
                        let smaller = self.ty(&args[0]).size().min(self.ty(&args[1]).size());
                        factor(smaller, STRING_TRAVERSAL_FACTOR)
                    }
                    "_+_" => factor(self.ty(expr).size(), STRING_TRAVERSAL_FACTOR),
                    "@in" => match self.ty(&args[1]) {
                        list @ Ty::List { .. } => list.size(),
                        _ => 1,
                    },
                    "matches" => {
                        let text = target
                            .as_ref()
                            .map_or(Ty::Dyn, |t| self.ty(t))
                            .size()
                            .saturating_add(1);
                        let regex = args.first().map_or(Ty::Dyn, |r| self.ty(r)).size();
                        factor(text, STRING_TRAVERSAL_FACTOR)
                            .saturating_mul(factor(regex, REGEX_LENGTH_FACTOR))
                    }
                    "contains" => {
                        let text = target.as_ref().map_or(Ty::Dyn, |t| self.ty(t)).size();
                        let part = args.first().map_or(Ty::Dyn, |r| self.ty(r)).size();
                        factor(text, STRING_TRAVERSAL_FACTOR)
                            .saturating_mul(factor(part, STRING_TRAVERSAL_FACTOR))
                    }
                    "startsWith" | "endsWith" => factor(
                        args.first().map_or(Ty::Dyn, |r| self.ty(r)).size(),
                        STRING_TRAVERSAL_FACTOR,
                    ),
                    _ => 1,
                };
                own.saturating_add(arg_sum)
            }
        }
    }
}

/// Worst-case cost of one evaluation of `rule` on a node of schema `schema`.
pub fn rule_cost(rule: &str, schema: &Value) -> Result<u64, String> {
    let expr = parse(rule)?;
    let ty = Ty::of_schema(schema);
    let mut coster = Coster {
        vars: vec![("self".into(), ty.clone()), ("oldSelf".into(), ty)],
    };
    Ok(coster.cost(&expr))
}

/// The estimate of one rule of a CRD.
#[derive(Clone, Debug)]
pub struct RuleCost {
    /// Where the rule sits below `openAPIV3Schema`, as the API server names it
    /// (`properties[spec].properties[tasks].items.x-kubernetes-validations[0].rule`).
    pub path: String,
    /// The rule's source.
    pub rule: String,
    /// One evaluation's worst-case cost.
    pub cost: u64,
    /// How many times the rule can run in one object.
    pub cardinality: u64,
}

impl RuleCost {
    /// The cost the API server compares with [`PER_RULE_LIMIT`].
    pub fn total(&self) -> u64 {
        self.cost.saturating_mul(self.cardinality)
    }
}

/// Every rule of an `openAPIV3Schema`, with its estimated cost. Rules are named from the
/// schema root (`openAPIV3Schema` is not part of the path).
pub fn schema_rule_costs(root: &Value) -> Result<Vec<RuleCost>, String> {
    fn walk(
        node: &Value,
        path: &str,
        cardinality: u64,
        out: &mut Vec<RuleCost>,
    ) -> Result<(), String> {
        if let Some(Value::Array(rules)) = node.get("x-kubernetes-validations") {
            for (index, rule) in rules.iter().enumerate() {
                let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
                let cost = rule_cost(text, node).map_err(|e| format!("{path}: {text}: {e}"))?;
                let prefix = if path.is_empty() {
                    String::new()
                } else {
                    format!("{path}.")
                };
                out.push(RuleCost {
                    path: format!("{prefix}x-kubernetes-validations[{index}].rule"),
                    rule: text.to_owned(),
                    cost,
                    cardinality,
                });
            }
        }
        let join = |segment: &str| {
            if path.is_empty() {
                segment.to_owned()
            } else {
                format!("{path}.{segment}")
            }
        };
        if let Some(Value::Object(properties)) = node.get("properties") {
            for (name, child) in properties {
                walk(
                    child,
                    &join(&format!("properties[{name}]")),
                    cardinality,
                    out,
                )?;
            }
        }
        let own_size = Ty::of_schema(node).size();
        if let Some(items) = node.get("items") {
            walk(
                items,
                &join("items"),
                cardinality.saturating_mul(own_size),
                out,
            )?;
        }
        if let Some(value @ Value::Object(_)) = node.get("additionalProperties") {
            let name = join("additionalProperties");
            walk(value, &name, cardinality.saturating_mul(own_size), out)?;
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, "", 1, &mut out)?;
    Ok(out)
}

/// Why the API server would refuse a CRD's rules: `(field path, message)` pairs in the
/// real server's words.
pub fn budget_violations(root: &Value) -> Result<Vec<(String, String)>, String> {
    let costs = schema_rule_costs(root)?;
    let mut violations: Vec<(String, String)> = costs
        .iter()
        .filter(|rule| rule.total() > PER_RULE_LIMIT)
        .map(|rule| {
            (
                rule.path.clone(),
                format!(
                    "Forbidden: estimated rule cost exceeds budget by factor of {} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
                    budget_factor(rule.total(), PER_RULE_LIMIT)
                ),
            )
        })
        .collect();
    let total = costs
        .iter()
        .fold(0u64, |sum, rule| sum.saturating_add(rule.total()));
    if total > PER_CRD_LIMIT {
        violations.push((
            String::new(),
            format!(
                "Forbidden: x-kubernetes-validations: total CRD cost exceeds budget by factor of {} (try reducing the number of rules, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
                budget_factor(total, PER_CRD_LIMIT)
            ),
        ));
    }
    Ok(violations)
}

/// `cost / limit` the way the API server prints it.
fn budget_factor(cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    if factor > 100.0 {
        "more than 100x".into()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    }
}
