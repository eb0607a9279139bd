//! Text the sandbox's JavaScript parser reads one way and people (and
//! other parsers) another, refused before it is parsed: what a reviewer
//! reads as a string or a comment must not run. Each was found by an
//! attacker's review, and each is a look at the text, in strings and
//! comments too, since where boa's strings and comments end is what is
//! in doubt.
//!
//! - HTML-like comments (`<!--` anywhere, `-->` first on a line), a rule
//!   of scripts in web pages that JavaScript keeps for scripts (Annex B):
//!   the rest of the line is a comment. TypeScript, modules and most
//!   people read the same text as code (`x <!--y` is `x < !(--y)`), and a
//!   backtick after it opens a template for them but not for the sandbox.
//!   Where such a comment starts depends on lexing every other parser can
//!   be led to do otherwise (TypeScript's instantiation expressions, line
//!   separators a line-based look missed), so both sequences are refused
//!   wherever they appear: nothing can then be an HTML-like comment.
//! - boa reads a `/` after the name `async` as the start of a regular
//!   expression where every other JavaScript engine reads a division
//!   (`async /`…`/`): a template a reader sees became code. Refused:
//!   `async` followed (past spaces and comments) by a `/` that starts no
//!   comment.
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

/// What a script with `<!--` or `-->` is told.
const HTML_COMMENT: &str = "`<!--` and `-->` are refused anywhere in a script: in this sandbox's JavaScript they can start a comment (an old rule for scripts in web pages) where TypeScript, modules and people read code, so a line would not mean what it reads as. In code write `a < !--b` or `n-- > 0` with spaces; in a string write `\"<!\" + \"--\"` or `\"\\x3C!--\"`; in a comment, leave it out";

const ASYNC_SLASH: &str = "`async` followed by `/` is refused: this sandbox's JavaScript reads that `/` as the start of a regular expression where other engines read a division, so the line would not mean what it reads as. Name the value otherwise than `async`";

const INVISIBLE: &str = "a reviewed script may not hold characters a reviewer cannot see: line or paragraph separators (U+2028, U+2029), bidirectional controls, zero-width characters, a byte order mark or a lone carriage return. Write it with plain line breaks (\\n), and escapes (\\u2028) inside strings";

/// A JavaScript line terminator.
pub fn is_line_break(c: char) -> bool {
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
            // JavaScript's white space and line terminators.
            } else if c.is_whitespace() || c == '\u{feff}' {
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

/// Where `<!--` or `-->` first stands.
fn html_comment(script: &str) -> Option<usize> {
    [script.find("<!--"), script.find("-->")]
        .into_iter()
        .flatten()
        .min()
}

/// The first thing in `script` read two ways, if any; `reviewed` adds
/// what a reviewer cannot see.
pub fn first(script: &str, reviewed: bool) -> Option<Found> {
    let comment = html_comment(script).map(|i| (i, HTML_COMMENT));
    let slash = async_then_slash(script).map(|i| (i, ASYNC_SLASH));
    let hidden = reviewed
        .then(|| invisible(script))
        .flatten()
        .map(|i| (i, INVISIBLE));
    let (offset, message) = [comment, slash, hidden]
        .into_iter()
        .flatten()
        .min_by_key(|f| f.0)?;
    Some(at(script, offset, message))
}
