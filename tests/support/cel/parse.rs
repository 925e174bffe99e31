//! A parser for the subset of CEL that CRD validation rules use: literals, identifiers,
//! field selection, calls, the usual operators, list/map literals and the macros `has`,
//! `all`, `exists`, `exists_one`, `map` and `filter` (expanded to comprehensions).

/// A parsed CEL expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `true`, `1`, `"a"`, `null`, ...
    Lit(Lit),
    /// A variable: `self`, `oldSelf`, an iteration variable.
    Ident(String),
    /// `operand.field`; `test_only` for `has(operand.field)`.
    Select {
        operand: Box<Expr>,
        field: String,
        test_only: bool,
    },
    /// A function or operator call; operators use CEL's names (`_==_`, `@in`, `!_`, ...).
    Call {
        target: Option<Box<Expr>>,
        function: String,
        args: Vec<Expr>,
    },
    /// `[a, b]`.
    List(Vec<Expr>),
    /// `{k: v}`.
    Map(Vec<(Expr, Expr)>),
    /// A macro over a list or map.
    Comprehension {
        kind: MacroKind,
        iter_var: String,
        range: Box<Expr>,
        body: Box<Expr>,
    },
}

/// The comprehension macros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MacroKind {
    All,
    Exists,
    ExistsOne,
    Map,
    Filter,
}

/// A literal value.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(String),
    Null,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Lit(Lit),
    Op(&'static str),
}

const OPERATORS: [&str; 24] = [
    "==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "+", "-", "*", "/", "%", "?", ":", ".", ",",
    "(", ")", "[", "]", "{", "}",
];

fn tokenize(source: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            tokens.push(match word.as_str() {
                "true" => Token::Lit(Lit::Bool(true)),
                "false" => Token::Lit(Lit::Bool(false)),
                "null" => Token::Lit(Lit::Null),
                _ => Token::Ident(word),
            });
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            if i < chars.len() && chars[i] == 'u' {
                i += 1;
                let value = text.parse().map_err(|_| format!("bad number {text}"))?;
                tokens.push(Token::Lit(Lit::Uint(value)));
            } else if text.contains('.') {
                let value = text.parse().map_err(|_| format!("bad number {text}"))?;
                tokens.push(Token::Lit(Lit::Double(value)));
            } else {
                let value = text.parse().map_err(|_| format!("bad number {text}"))?;
                tokens.push(Token::Lit(Lit::Int(value)));
            }
        } else if c == '"' || c == '\'' {
            i += 1;
            let mut text = String::new();
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    i += 1;
                }
                text.push(chars[i]);
                i += 1;
            }
            if i == chars.len() {
                return Err("unterminated string".into());
            }
            i += 1;
            tokens.push(Token::Lit(Lit::Str(text)));
        } else {
            let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let op = OPERATORS
                .iter()
                .find(|op| rest.starts_with(**op))
                .ok_or_else(|| format!("unexpected character {c:?}"))?;
            i += op.len();
            tokens.push(Token::Op(op));
        }
    }
    Ok(tokens)
}

/// Parses a CEL expression.
pub fn parse(source: &str) -> Result<Expr, String> {
    let mut parser = Parser {
        tokens: tokenize(source)?,
        at: 0,
    };
    let expr = parser.expr()?;
    if parser.at != parser.tokens.len() {
        return Err(format!("unexpected {:?}", parser.tokens[parser.at]));
    }
    Ok(expr)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

fn call(function: &str, args: Vec<Expr>) -> Expr {
    Expr::Call {
        target: None,
        function: function.into(),
        args,
    }
}

impl Parser {
    fn peek_op(&self, op: &str) -> bool {
        matches!(self.tokens.get(self.at), Some(Token::Op(o)) if *o == op)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let found = self.peek_op(op);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect_op(&mut self, op: &str) -> Result<(), String> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(format!(
                "expected {op}, found {:?}",
                self.tokens.get(self.at)
            ))
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        let condition = self.binary(0)?;
        if self.eat_op("?") {
            let then = self.binary(0)?;
            self.expect_op(":")?;
            let otherwise = self.expr()?;
            return Ok(call("_?_:_", vec![condition, then, otherwise]));
        }
        Ok(condition)
    }

    /// Binary operators by precedence level: `||`, `&&`, relations, `+ -`, `* / %`.
    fn binary(&mut self, level: usize) -> Result<Expr, String> {
        const LEVELS: [&[&str]; 5] = [
            &["||"],
            &["&&"],
            &["==", "!=", "<=", ">=", "<", ">", "in"],
            &["+", "-"],
            &["*", "/", "%"],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut left = self.binary(level + 1)?;
        loop {
            let op = match self.tokens.get(self.at) {
                Some(Token::Op(op)) if LEVELS[level].contains(op) => *op,
                Some(Token::Ident(word)) if word == "in" && level == 2 => "in",
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.binary(level + 1)?;
            let function = if op == "in" {
                "@in".to_owned()
            } else {
                format!("_{op}_")
            };
            left = call(&function, vec![left, right]);
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat_op("!") {
            return Ok(call("!_", vec![self.unary()?]));
        }
        if self.eat_op("-") {
            return Ok(call("-_", vec![self.unary()?]));
        }
        self.member()
    }

    fn args(&mut self, close: &str) -> Result<Vec<Expr>, String> {
        let mut args = Vec::new();
        if self.eat_op(close) {
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            if self.eat_op(close) {
                return Ok(args);
            }
            self.expect_op(",")?;
        }
    }

    fn member(&mut self) -> Result<Expr, String> {
        let mut expr = self.primary()?;
        loop {
            if self.eat_op(".") {
                let Some(Token::Ident(field)) = self.tokens.get(self.at).cloned() else {
                    return Err("expected a field name after '.'".into());
                };
                self.at += 1;
                if self.eat_op("(") {
                    let args = self.args(")")?;
                    expr = receiver_call(expr, &field, args)?;
                } else {
                    expr = Expr::Select {
                        operand: Box::new(expr),
                        field,
                        test_only: false,
                    };
                }
            } else if self.eat_op("[") {
                let index = self.expr()?;
                self.expect_op("]")?;
                expr = call("_[_]", vec![expr, index]);
            } else {
                return Ok(expr);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, String> {
        let token = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or("unexpected end of expression")?;
        self.at += 1;
        match token {
            Token::Lit(lit) => Ok(Expr::Lit(lit)),
            Token::Ident(name) => {
                if !self.eat_op("(") {
                    return Ok(Expr::Ident(name));
                }
                let mut args = self.args(")")?;
                if name == "has" {
                    return match args.pop() {
                        Some(Expr::Select { operand, field, .. }) if args.is_empty() => {
                            Ok(Expr::Select {
                                operand,
                                field,
                                test_only: true,
                            })
                        }
                        _ => Err("has() needs one field selection".into()),
                    };
                }
                Ok(call(&name, args))
            }
            Token::Op("(") => {
                let expr = self.expr()?;
                self.expect_op(")")?;
                Ok(expr)
            }
            Token::Op("[") => Ok(Expr::List(self.args("]")?)),
            Token::Op("{") => {
                let mut entries = Vec::new();
                if self.eat_op("}") {
                    return Ok(Expr::Map(entries));
                }
                loop {
                    let key = self.expr()?;
                    self.expect_op(":")?;
                    entries.push((key, self.expr()?));
                    if self.eat_op("}") {
                        return Ok(Expr::Map(entries));
                    }
                    self.expect_op(",")?;
                }
            }
            Token::Op(op) => Err(format!("unexpected {op}")),
        }
    }
}

fn receiver_call(target: Expr, function: &str, mut args: Vec<Expr>) -> Result<Expr, String> {
    let kind = match function {
        "all" => Some(MacroKind::All),
        "exists" => Some(MacroKind::Exists),
        "exists_one" => Some(MacroKind::ExistsOne),
        "map" => Some(MacroKind::Map),
        "filter" => Some(MacroKind::Filter),
        _ => None,
    };
    match (kind, args.len()) {
        (Some(kind), 2) => {
            let body = args.pop().ok_or("missing macro body")?;
            let Some(Expr::Ident(iter_var)) = args.pop() else {
                return Err(format!("{function}() needs a variable name first"));
            };
            Ok(Expr::Comprehension {
                kind,
                iter_var,
                range: Box::new(target),
                body: Box::new(body),
            })
        }
        _ => Ok(Expr::Call {
            target: Some(Box::new(target)),
            function: function.into(),
            args,
        }),
    }
}
