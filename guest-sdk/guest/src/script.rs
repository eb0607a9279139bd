//! Turning an agent's script into something boa can run, and reporting
//! syntax errors against the lines the agent wrote.
//!
//! A script runs as the body of an async arrow function, so `await` works at
//! the top level and `return x` ends it early. Its result is the value of its
//! last top-level statement when that statement is an expression statement:
//!
//! ```js
//! const nodes = await tools.node_list({});
//! nodes.length            // result: the number of nodes
//! ```
//!
//! ```js
//! const nodes = await tools.node_list({});
//! for (const n of nodes) console.log(n.node)   // result: null (a `for` is not an expression)
//! ```
//!
//! To find that statement the script is first parsed on its own (as an
//! async function body, which also yields its syntax errors at the agent's
//! own positions); the statement's start tells where to insert `return `.
//! Stack traces are mapped back to the agent's lines and columns.

use std::collections::{HashMap, HashSet};

use boa_engine::{
    ast::{
        expression::Expression, scope::Scope, statement::Statement, Declaration, Position, Span,
        Spanned, StatementListItem,
    },
    parser::{Error as ParseError, Parser},
    Context, Source,
};

use crate::regexp_literals::{self, Literal};

/// Put on its own line so every line of the script keeps its number + 1.
/// Evaluating the wrapped text gives the async function; the guest calls
/// it (`run`), with `regexp_literals::factory` as its one parameter when
/// regular expression literals were rewritten (so the factory is no
/// global, and the call stack is the same with literals or without).
const PREFIX: &str = "(async () => {\n";
const FACTORY_PREFIX: &str = "(async (__airlock_regexp) => {\n";
const SUFFIX: &str = "\n})";
/// The form parsed to analyse the script; also one line in front.
const ANALYSIS_PREFIX: &str = "async function main() {\n";
const ANALYSIS_SUFFIX: &str = "\n}";

/// Lines added in front of the agent's first line.
pub const LINE_OFFSET: u32 = 1;

/// A syntax error located in the agent's own text (1-based).
pub struct SyntaxError {
    pub message: String,
    pub line: u32,
    pub column: u32,
}

/// The source to evaluate, what was changed in it (so positions can be
/// mapped back), and the regular expression literals it now calls for.
/// Evaluating `code` gives the script as an async function; when there are
/// literals, it takes `regexp_literals::factory` as its parameter.
pub struct Prepared {
    pub code: String,
    pub edits: Vec<Edit>,
    pub literals: Vec<Literal>,
    /// The script is one function (an arrow or function expression, or
    /// `export default` of one): the runner calls its value.
    pub calls_result: bool,
}

/// One change to a line of the script: on `line` of the evaluated text
/// (the agent's line + [`LINE_OFFSET`]), at `column` (the agent's, 1-based,
/// in code points), `removed` characters became `added` ones. Lines are
/// never added or removed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Edit {
    pub line: u32,
    pub column: u32,
    pub removed: u32,
    pub added: u32,
}

/// Length of the inserted `return `.
pub const INSERTED: u32 = 7;

/// Returns the source to evaluate: the wrapped script, with the last
/// expression statement turned into a `return` and each regular expression
/// literal into a call that compiles it once (`regexp_literals`).
pub fn prepare(script: &str, ctx: &mut Context) -> Result<Prepared, SyntaxError> {
    // Parse the script as the body of an async function declaration: no
    // parenthesised wrapper for the parser to backtrack over, and a script
    // that closes the body early shows up as a second top-level item.
    let analysed = format!("{ANALYSIS_PREFIX}{script}{ANALYSIS_SUFFIX}");
    let ast = Parser::new(Source::from_bytes(analysed.as_bytes()))
        .parse_script(&Scope::new_global(), ctx.interner_mut())
        .map_err(|e| shifted(syntax_error(&e, script), script))?;
    let body = match ast.statements().statements() {
        [StatementListItem::Declaration(d)] => match d.as_ref() {
            Declaration::AsyncFunctionDeclaration(f) => f.body().statements(),
            _ => return Err(unbalanced()),
        },
        _ => return Err(unbalanced()),
    };
    // (byte offset in `script`, bytes removed, text inserted, edit)
    let mut changes: Vec<(usize, usize, String, Edit)> = Vec::new();
    let mut results = Vec::new();
    result_statements(body, &mut results);
    let offsets = offsets_of(&analysed, &results);
    for at in results {
        // `return <expr>` is always valid where an expression statement
        // stood: the expression starts on this line (no ASI hazard) and an
        // expression statement never starts with `{`, `function` or `class`.
        if let Some(start) = offsets
            .get(&(at.line_number(), at.column_number()))
            .and_then(|o| o.checked_sub(ANALYSIS_PREFIX.len()))
            .filter(|&o| starts_a_statement(script, o))
        {
            let edit = Edit {
                line: at.line_number(),
                column: at.column_number(),
                removed: 0,
                added: INSERTED,
            };
            changes.push((start, 0, "return ".into(), edit));
        }
    }
    let literals = regexp_literals::find(script, &ast, ctx.interner())
        .and_then(|found| literal_changes(&analysed, script, found, &mut changes))
        .unwrap_or_default();
    changes.sort_by_key(|c| c.0);
    let (prefix, suffix) = if literals.is_empty() {
        (PREFIX, SUFFIX)
    } else {
        (FACTORY_PREFIX, SUFFIX)
    };
    let mut code = String::with_capacity(
        prefix.len()
            + script.len()
            + suffix.len()
            + changes.iter().map(|c| c.2.len()).sum::<usize>(),
    );
    code.push_str(prefix);
    let mut done = 0;
    for (start, removed, text, _) in &changes {
        code.push_str(&script[done..*start]);
        code.push_str(text);
        done = start + removed;
    }
    code.push_str(&script[done..]);
    code.push_str(suffix);
    Ok(Prepared {
        code,
        edits: changes.into_iter().map(|c| c.3).collect(),
        literals,
        calls_result: one_function(body),
    })
}

/// Whether the script is one function: its only statement an arrow or
/// function expression (parenthesised or not), or `return` of one (an
/// `export default` unwrapped).
fn one_function(body: &[StatementListItem]) -> bool {
    use boa_engine::ast::statement::Statement as S;
    let [StatementListItem::Statement(only)] = body else {
        return false;
    };
    let mut e = match only.as_ref() {
        S::Expression(e) => e,
        S::Return(r) => match r.target() {
            Some(e) => e,
            None => return false,
        },
        _ => return false,
    };
    while let Expression::Parenthesized(p) = e {
        e = p.expression();
    }
    matches!(
        e,
        Expression::ArrowFunction(_)
            | Expression::AsyncArrowFunction(_)
            | Expression::FunctionExpression(_)
            | Expression::AsyncFunctionExpression(_)
    )
}

/// Whether byte `offset` of `script` can begin a statement: what comes
/// before it ends one (`;`, a brace, a condition's `)`, a label's or a
/// case's `:`, `else`, `do`, a line break) or nothing does. A position inside an
/// expression (after a name, a `.` or a `]`) is refused: `return` there
/// would still parse, and mean something else.
fn starts_a_statement(script: &str, offset: usize) -> bool {
    let before = script[..offset].trim_end();
    // A line break before it: the statement before ended there (written
    // without `;`, as many scripts are).
    if script[before.len()..offset].contains('\n') {
        return true;
    }
    let Some(last) = before.chars().last() else {
        return true;
    };
    if matches!(last, ';' | '{' | '}' | ')' | ':') {
        return true;
    }
    if last.is_alphanumeric() || last == '_' || last == '$' {
        let word: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        // Read backwards: `else` and `do` end before a statement.
        return word == "esle" || word == "od";
    }
    false
}

/// Where the statements whose value is the script's result start, as
/// `eval` gives a script's completion value: its last statement when that
/// is an expression statement; when it is a block, an `if … else` or a
/// `try … catch`, the last expression statement of each of its branches.
fn result_statements(body: &[StatementListItem], out: &mut Vec<Position>) {
    if let Some(StatementListItem::Statement(last)) = body.last() {
        completion_of(last, out);
    }
}

fn completion_of(statement: &Statement, out: &mut Vec<Position>) {
    match statement {
        Statement::Expression(expr) => out.push(leftmost(expr)),
        Statement::Block(block) => result_statements(block.statement_list().statements(), out),
        Statement::If(branch) => {
            completion_of(branch.body(), out);
            if let Some(other) = branch.else_node() {
                completion_of(other, out);
            }
        }
        Statement::Try(attempt) => {
            result_statements(attempt.block().statement_list().statements(), out);
            if let Some(catch) = attempt.catch() {
                result_statements(catch.block().statement_list().statements(), out);
            }
        }
        _ => {}
    }
}

/// Adds one change per literal to `changes`, each checked against the
/// script's own text; `None` (and no change at all) if any is not where
/// the parser said.
fn literal_changes(
    analysed: &str,
    script: &str,
    found: Vec<Literal>,
    changes: &mut Vec<(usize, usize, String, Edit)>,
) -> Option<Vec<Literal>> {
    if found.is_empty() {
        return None;
    }
    let mut wanted = found.iter().map(|l| key(l.start)).peekable();
    let mut starts = Vec::with_capacity(found.len());
    for (offset, line, column) in positions(analysed) {
        if wanted.peek() == Some(&(line, column)) {
            starts.push(offset.checked_sub(ANALYSIS_PREFIX.len())?);
            wanted.next();
        }
    }
    if starts.len() != found.len() {
        return None;
    }
    let mut mine = Vec::with_capacity(found.len());
    for (index, (literal, start)) in found.iter().zip(&starts).enumerate() {
        if !script[*start..].starts_with(&literal.text) {
            return None;
        }
        let replacement = Literal::replacement(index);
        let edit = Edit {
            line: literal.start.line_number(),
            column: literal.start.column_number(),
            removed: literal.text.chars().count() as u32,
            added: replacement.len() as u32,
        };
        mine.push((*start, literal.text.len(), replacement, edit));
    }
    changes.extend(mine);
    Some(found)
}

fn key(p: Position) -> (u32, u32) {
    (p.line_number(), p.column_number())
}

/// The agent's column for `column` on `line` of the evaluated text; a
/// position inside inserted text is put at the insertion's start.
pub fn original_column(edits: &[Edit], line: u32, column: u32) -> u32 {
    let mut shift: i64 = 0;
    for e in edits.iter().filter(|e| e.line == line) {
        let start = e.column as i64 + shift;
        let col = column as i64;
        if col >= start + e.added as i64 {
            shift += e.added as i64 - e.removed as i64;
        } else if col >= start {
            return e.column;
        } else {
            break;
        }
    }
    (column as i64 - shift).max(1) as u32
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
        Expression::Assign(a) => match a.lhs() {
            boa_engine::ast::expression::operator::assign::AssignTarget::Access(access) => {
                Some(leftmost_access(access))
            }
            _ => None,
        },
        Expression::Update(u) => match u.target() {
            boa_engine::ast::expression::operator::update::UpdateTarget::PropertyAccess(access) => {
                Some(leftmost_access(access))
            }
            _ => None,
        },
        _ => None,
    };
    match child {
        Some(c) if key(c) < key(own) => c,
        _ => own,
    }
}

/// Where a property access starts: where its target does.
fn leftmost_access(a: &boa_engine::ast::expression::access::PropertyAccess) -> Position {
    use boa_engine::ast::expression::access::PropertyAccess;
    match a {
        PropertyAccess::Simple(s) => leftmost(s.target()),
        PropertyAccess::Private(p) => leftmost(p.target()),
        PropertyAccess::Super(s) => s.span().start(),
    }
}

/// The script as the body of an async arrow function (to be called).
pub fn wrap(script: &str) -> String {
    format!("{PREFIX}{script}{SUFFIX}")
}

/// Every character's byte offset with its 1-based line and code-point
/// column, counting lines as boa does (LF, CR, CRLF, U+2028, U+2029), and
/// finally the position just past the end.
fn positions(text: &str) -> impl Iterator<Item = (usize, u32, u32)> + '_ {
    let mut chars = text.char_indices().peekable();
    let (mut line, mut col) = (1u32, 1u32);
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let Some((i, c)) = chars.next() else {
            done = true;
            return Some((text.len(), line, col));
        };
        let here = (i, line, col);
        match c {
            '\r' => {
                if let Some(&(_, '\n')) = chars.peek() {
                    chars.next();
                }
                (line, col) = (line + 1, 1);
            }
            '\n' | '\u{2028}' | '\u{2029}' => (line, col) = (line + 1, 1),
            _ => col += 1,
        }
        Some(here)
    })
}

/// Byte offsets of boa positions, by (line, column), in one pass over the
/// text however many positions are wanted.
fn offsets_of(text: &str, wanted: &[Position]) -> HashMap<(u32, u32), usize> {
    let wanted: HashSet<(u32, u32)> = wanted
        .iter()
        .map(|p| (p.line_number(), p.column_number()))
        .collect();
    let mut found = HashMap::with_capacity(wanted.len());
    for (i, l, c) in positions(text) {
        if found.len() == wanted.len() {
            break;
        }
        if wanted.contains(&(l, c)) {
            found.insert((l, c), i);
        }
    }
    found
}

/// The syntax error of the wrapped script, for errors only a full script
/// parse finds (scope analysis: redeclarations and the like). Positions are
/// mapped back to the agent's text.
pub fn wrapped_syntax_error(script: &str, ctx: &mut Context) -> SyntaxError {
    let wrapped = wrap(script);
    match Parser::new(Source::from_bytes(wrapped.as_bytes()))
        .parse_script(&Scope::new_global(), ctx.interner_mut())
    {
        Err(e) => shifted(syntax_error(&e, script), script),
        Ok(_) => SyntaxError {
            message: "the script could not be compiled".into(),
            line: 1,
            column: 1,
        },
    }
}

fn unbalanced() -> SyntaxError {
    SyntaxError {
        message: "unbalanced braces: the script closes a block it did not open".into(),
        line: 1,
        column: 1,
    }
}

/// Moves an error found in a wrapped text (script on line 2) back to the
/// agent's lines; one in a wrapper line is put at the nearest end.
fn shifted(mut err: SyntaxError, script: &str) -> SyntaxError {
    if err.line > LINE_OFFSET {
        err.line -= LINE_OFFSET;
    } else {
        (err.line, err.column) = (1, 1);
    }
    let last = end_of(script);
    if (err.line, err.column) > last {
        (err.line, err.column) = last;
    }
    err
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
        Some(p) => (p.line_number(), p.column_number()),
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

/// Line and column just after the last character of `script`.
pub fn end_of(script: &str) -> (u32, u32) {
    positions(script).last().map_or((1, 1), |(_, l, c)| (l, c))
}

// The shapes scripts come in besides a plain body, turned into one, every
// line and column kept: a script inside one Markdown code fence (here),
// and `export default` of the script's function (`module_syntax`: it
// becomes `return`, padded, so the function is the result, which the
// runner calls). A script that
// is one function expression or arrow function needs nothing here: its
// value is a function, and the runner calls it (`Prepared::calls_result`).

/// One Markdown code fence around the script removed (its lines left
/// empty). Done before anything else: a fenced script parses as
/// JavaScript (two template literals, one tagging the other) and fails
/// only when it runs.
pub fn unfenced(source: &str) -> std::borrow::Cow<'_, str> {
    let mut lines: Vec<&str> = source.split('\n').collect();
    let mut changed = false;
    // One fence around everything: its first and last non-blank lines.
    let first = lines.iter().position(|l| !l.trim().is_empty());
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    if let (Some(first), Some(last)) = (first, last) {
        let opens = lines[first].trim_start().starts_with("```");
        let closes = last > first && lines[last].trim() == "```";
        let inner_fences = lines[first + 1..last.max(first + 1)]
            .iter()
            .any(|l| l.trim_start().starts_with("```"));
        if opens && closes && !inner_fences {
            lines[first] = "";
            lines[last] = "";
            changed = true;
        }
    }
    if changed {
        std::borrow::Cow::Owned(lines.join("\n"))
    } else {
        std::borrow::Cow::Borrowed(source)
    }
}

/// What to write instead of a module-only form the parser refused on
/// `line` (1-based).
pub fn module_hint(source: &str, line: u32) -> Option<&'static str> {
    let imports = source
        .lines()
        .nth(line.saturating_sub(1) as usize)
        .is_some_and(|l| {
            let l = l.trim_start();
            l.starts_with("import ") || l.starts_with("import{") || l.starts_with("export ")
        });
    imports.then_some(
        "a script is one file, not a module: there is nothing to import or export. Tools are on `tools` (tools.NAME(args); `search` finds them), and the value of the last expression is the result",
    )
}
