//! Text the sandbox's JavaScript parser reads one way and people (and
//! other parsers) another, refused before it is parsed. An attacker's
//! review found each: what a reviewer reads as a string or a comment
//! must not run.
//!
//! - boa reads a `/` after the name `async` as the start of a regular
//!   expression where every other JavaScript engine reads a division
//!   (`async /`…`/`): a template a reader sees became code. Refused:
//!   `async` followed (past spaces and comments) by a `/` that starts no
//!   comment, wherever it stands: a look at the text, as for `<!--`, since
//!   where boa's strings and comments end is what is in doubt.
//! - In reviewed code (a runbook), characters a reviewer does not see:
//!   line and paragraph separators (a terminal shows one line; the
//!   parser, two), bidirectional controls ("Trojan Source"), zero-width
//!   characters, a byte order mark (whitespace to JavaScript, not to a
//!   line-based look) and a lone carriage return.

/// What was found, where (1-based line as `\n` ends them, column in code
/// points), and what to write instead.
pub struct Found {
    pub line: u32,
    pub column: u32,
    pub message: &'static str,
}

fn at(script: &str, offset: usize, message: &'static str) -> Found {
    let before = &script[..offset];
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    Found {
        line: before.matches('\n').count() as u32 + 1,
        column: before[start..].chars().count() as u32 + 1,
        message,
    }
}

const ASYNC_SLASH: &str = "`async` followed by `/` is refused: this sandbox's JavaScript reads that `/` as the start of a regular expression where other engines read a division, so the line would not mean what it reads as. Name the value otherwise than `async`";

const INVISIBLE: &str = "a reviewed script may not hold characters a reviewer cannot see: line or paragraph separators (U+2028, U+2029), bidirectional controls, zero-width characters, a byte order mark or a lone carriage return. Write it with plain line breaks (\\n), and escapes (\\u2028) inside strings";

/// Whether `c` is JavaScript whitespace other than a line terminator.
fn blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{b}' | '\u{c}' | '\u{a0}' | '\u{feff}')
        || (c != '\u{2028}' && c != '\u{2029}' && c.is_whitespace() && !is_line_break(c))
}

fn is_line_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

fn identifier_part(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// `async`, then whitespace and comments, then a `/` that starts no
/// comment.
fn async_then_slash(script: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(found) = script[from..].find("async") {
        let start = from + found;
        from = start + "async".len();
        let before = script[..start].chars().next_back();
        let after = script[from..].chars().next();
        if before.is_some_and(identifier_part) || after.is_some_and(identifier_part) {
            continue;
        }
        let rest = &script[from..];
        let mut i = 0;
        loop {
            let tail = &rest[i..];
            let Some(c) = tail.chars().next() else { break };
            if tail.starts_with("//") {
                let end = tail.find(is_line_break).unwrap_or(tail.len());
                i += end;
            } else if let Some(inside) = tail.strip_prefix("/*") {
                i += inside.find("*/").map_or(tail.len(), |e| e + 4);
            } else if is_line_break(c) || blank(c) {
                i += c.len_utf8();
            } else {
                if c == '/' {
                    return Some(start);
                }
                break;
            }
        }
    }
    None
}

/// A character of reviewed code a reviewer cannot see.
fn invisible(script: &str) -> Option<usize> {
    let bytes = script.as_bytes();
    script.char_indices().find_map(|(i, c)| {
        let hidden = matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{061c}'
                | '\u{feff}'
        ) || (c == '\r' && bytes.get(i + 1) != Some(&b'\n'));
        hidden.then_some(i)
    })
}

/// The first thing in `script` read two ways, if any; `reviewed` adds
/// what a reviewer cannot see.
pub fn first(script: &str, reviewed: bool) -> Option<Found> {
    let slash = async_then_slash(script).map(|i| (i, ASYNC_SLASH));
    let hidden = reviewed
        .then(|| invisible(script))
        .flatten()
        .map(|i| (i, INVISIBLE));
    let (offset, message) = [slash, hidden].into_iter().flatten().min_by_key(|f| f.0)?;
    Some(at(script, offset, message))
}
