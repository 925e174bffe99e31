//! CEL as a CRD's validation rules use it: a parser for the subset they use, the API
//! server's static cost estimate, and an evaluator over JSON objects.
//!
//! Include with `#[path = "support/cel.rs"] mod cel;`.

#[path = "cel/cost.rs"]
pub mod cost;
#[path = "cel/eval.rs"]
pub mod eval;
#[path = "cel/parse.rs"]
pub mod parse;
