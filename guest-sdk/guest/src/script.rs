//! Turning an agent's script into something boa can run, and reporting
//! syntax errors against the lines the agent wrote.
//!
//! A script runs as the body of an async arrow function, so `await` works at
//! the top level and `return x` ends it early. Its result is the value of its
//! last top-level statement when that statement is an expression statement:
//!
//! ```js
//! const nodes = await tools.list_nodes({});
//! nodes.length            // result: the number of nodes
//! ```
//!
//! ```js
//! const nodes = await tools.list_nodes({});
//! for (const n of nodes) console.log(n.node)   // result: null (a `for` is not an expression)
//! ```
//!
//! To find that statement the script is parsed once on its own; its span
//! tells where to insert `return `. Only that line's columns shift, and
//! line numbers are reported against the original text.

use boa_engine::{
    ast::{
        expression::Expression, scope::Scope, statement::Statement, Position, Span, Spanned,
        StatementListItem,
    },
    parser::{Error as ParseError, Parser},
    Context, Source,
};

/// Put on its own line so every line of the script keeps its number + 1.
const PREFIX: &str = "(async () => {\n";
const SUFFIX: &str = "\n})()";

/// Lines added in front of the agent's first line.
pub const LINE_OFFSET: u32 = 1;

/// A syntax error located in the agent's own text (1-based).
pub struct SyntaxError {
    pub message: String,
    pub line: u32,
    pub column: u32,
}

/// The source to evaluate and where `return ` was inserted (line and
/// column in the wrapped text), so positions can be mapped back.
pub struct Prepared {
    pub code: String,
    pub inserted_at: Option<(u32, u32)>,
}

/// Length of the inserted `return `.
pub const INSERTED: u32 = 7;

/// Returns the source to evaluate: the wrapped script, with the last
/// expression statement turned into a `return`.
pub fn prepare(script: &str, ctx: &mut Context) -> Result<Prepared, SyntaxError> {
    let (code, inserted_at) = rewrite(script, ctx)?;
    Ok(Prepared { code, inserted_at })
}

fn rewrite(script: &str, ctx: &mut Context) -> Result<(String, Option<(u32, u32)>), SyntaxError> {
    let wrapped = wrap(script);
    let ast = Parser::new(Source::from_bytes(wrapped.as_bytes()))
        .parse_script(&Scope::new_global(), ctx.interner_mut())
        .map_err(|e| syntax_error(&e, script))?;

    let body = match ast.statements().statements() {
        [StatementListItem::Statement(stmt)] => wrapper_body(stmt),
        _ => None,
    };
    let Some(body) = body else {
        // The script closed our wrapper early, e.g. `}); (() => {`.
        return Err(SyntaxError {
            message: "unbalanced braces or parentheses: the script closes a block it did not open"
                .into(),
            line: 1,
            column: 1,
        });
    };
    let Some(StatementListItem::Statement(last)) = body.last() else {
        return Ok((wrapped, None));
    };
    let Statement::Expression(expr) = last.as_ref() else {
        return Ok((wrapped, None));
    };
    // `return <expr>` is always valid where an expression statement
    // stood: the expression starts on this line (no ASI hazard) and an
    // expression statement never starts with `{`, `function` or `class`.
    let at = leftmost(expr);
    match offset_of(&wrapped, at) {
        Some(start) => {
            let mut out = String::with_capacity(wrapped.len() + INSERTED as usize);
            out.push_str(&wrapped[..start]);
            out.push_str("return ");
            out.push_str(&wrapped[start..]);
            Ok((out, Some((at.line_number(), at.column_number()))))
        }
        None => Ok((wrapped, None)),
    }
}

/// Where an expression starts. boa's span of a call covers only its
/// arguments, so descend to the leftmost operand and take the earliest
/// position seen.
fn leftmost(e: &Expression) -> Position {
    use boa_engine::ast::expression::access::PropertyAccess;
    let own = e.span().start();
    let child = match e {
        Expression::Call(c) => Some(leftmost(c.function())),
        Expression::PropertyAccess(PropertyAccess::Simple(a)) => Some(leftmost(a.target())),
        Expression::PropertyAccess(PropertyAccess::Private(a)) => Some(leftmost(a.target())),
        Expression::Binary(b) => Some(leftmost(b.lhs())),
        Expression::Conditional(c) => Some(leftmost(c.condition())),
        Expression::Optional(o) => Some(leftmost(o.target())),
        Expression::TaggedTemplate(t) => Some(leftmost(t.tag())),
        Expression::Parenthesized(p) => Some(leftmost(p.expression())),
        _ => None,
    };
    let key = |p: Position| (p.line_number(), p.column_number());
    match child {
        Some(c) if key(c) < key(own) => c,
        _ => own,
    }
}

/// The script as the body of an async arrow function, called at once.
pub fn wrap(script: &str) -> String {
    format!("{PREFIX}{script}{SUFFIX}")
}

fn wrapper_body(stmt: &Statement) -> Option<&[StatementListItem]> {
    let Statement::Expression(Expression::Call(call)) = stmt else {
        return None;
    };
    if !call.args().is_empty() {
        return None;
    }
    let mut callee = call.function();
    while let Expression::Parenthesized(p) = callee {
        callee = p.expression();
    }
    match callee {
        Expression::AsyncArrowFunction(f) => Some(f.body().statements()),
        _ => None,
    }
}

/// Byte offset of a boa position (1-based line and code-point column, with
/// boa's line terminators: LF, CR, CRLF, U+2028, U+2029).
fn offset_of(text: &str, pos: Position) -> Option<usize> {
    let (want_line, want_col) = (pos.line_number(), pos.column_number());
    let (mut line, mut col) = (1u32, 1u32);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if line == want_line && col == want_col {
            return Some(i);
        }
        match c {
            '\r' => {
                if let Some(&(_, '\n')) = chars.peek() {
                    chars.next();
                }
                line += 1;
                col = 1;
            }
            '\n' | '\u{2028}' | '\u{2029}' => {
                line += 1;
                col = 1;
            }
            _ => col += 1,
        }
    }
    (line == want_line && col == want_col).then_some(text.len())
}

fn syntax_error(err: &ParseError, script: &str) -> SyntaxError {
    let (message, pos) = match err {
        ParseError::Expected {
            expected,
            found,
            span,
            context,
        } => {
            let wanted = match &expected[..] {
                [one] => format!("'{one}'"),
                many => many
                    .iter()
                    .map(|t| format!("'{t}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            let message = format!("expected {wanted} but found '{found}' in {context}");
            (message, Some(start(span)))
        }
        ParseError::Unexpected {
            message,
            found,
            span,
        } => (
            format!("unexpected '{found}': {message}"),
            Some(start(span)),
        ),
        ParseError::AbruptEnd => (
            "unexpected end of script (an unclosed bracket, brace or string?)".into(),
            None,
        ),
        ParseError::General { message, position } => (message.to_string(), Some(*position)),
        ParseError::Lex { err } => match err {
            boa_engine::parser::lexer::Error::Syntax(message, position) => {
                (message.to_string(), Some(*position))
            }
            other => (other.to_string(), None),
        },
        ParseError::ScopeAnalysis { err } => (format!("invalid scope: {err}"), None),
    };
    let (line, column) = match pos {
        Some(p) => map_position(p.line_number(), p.column_number(), script),
        None => end_of(script),
    };
    SyntaxError {
        message,
        line,
        column,
    }
}

fn start(span: &Span) -> Position {
    span.start()
}

/// Maps a line/column in the wrapped text back to the agent's text. A
/// position in the suffix (an unclosed block) is reported at the end.
pub fn map_position(line: u32, column: u32, script: &str) -> (u32, u32) {
    let line = line.saturating_sub(LINE_OFFSET);
    if line == 0 {
        return (1, 1);
    }
    let (last_line, last_col) = end_of(script);
    if line > last_line {
        return (last_line, last_col);
    }
    (line, column)
}

/// Line and column just after the last character of `script`.
pub fn end_of(script: &str) -> (u32, u32) {
    let (mut line, mut col) = (1u32, 1u32);
    let mut chars = script.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                line += 1;
                col = 1;
            }
            '\n' | '\u{2028}' | '\u{2029}' => {
                line += 1;
                col = 1;
            }
            _ => col += 1,
        }
    }
    (line, col)
}
