//! HTML-like comments (`<!--` anywhere, `-->` first on a line), a rule
//! of scripts in web pages that JavaScript keeps for scripts (Annex B):
//! the rest of the line is a comment. TypeScript, modules and most
//! people read the same text as code (`x <!--y` is `x < !(--y)`), and a
//! backtick after it opens a template for them but not for the sandbox:
//! text a reader sees as a string would run as code. So a script that
//! has one is refused, at its line and column, with what to write.
//!
//! The check costs nothing unless the text holds `<!--` or `-->`; then
//! swc's parser says where its lexer took one as a comment (it lexes
//! them as the sandbox's parser does). A script swc cannot parse is
//! judged by its text alone: refused wherever `<!--`, or `-->` first on
//! a line, appears.

use swc_common::{input::StringInput, sync::Lrc, FileName, Globals, SourceMap, Spanned, GLOBALS};
use swc_ecma_parser::{error::SyntaxError, Parser, Syntax, TsSyntax};

/// Put on a line of its own, as the sandbox runs a script: the script's
/// lines keep their numbers + 1.
const PREFIX: &str = "async function __airlock_comments() {\n";
const SUFFIX: &str = "\n}";

/// Whether `script` could hold an HTML-like comment at all.
pub fn possible(script: &str) -> bool {
    script.contains("<!--") || script.contains("-->")
}

/// Where (line and column, 1-based, columns in code points) the first
/// HTML-like comment of `script` starts, if it has one.
pub fn first(script: &str) -> Option<(u32, u32)> {
    if !possible(script) {
        return None;
    }
    let parsed = GLOBALS.set(&Globals::new(), || comments_found(script));
    match parsed {
        Some(found) => found,
        None => by_text(script),
    }
}

/// What swc's lexer took as HTML-like comments: `None` when the script
/// does not parse, `Some(None)` when it has none.
fn comments_found(script: &str) -> Option<Option<(u32, u32)>> {
    let wrapped = format!("{PREFIX}{script}{SUFFIX}");
    let cm: Lrc<SourceMap> = Default::default();
    let file = cm.new_source_file(FileName::Anon.into(), wrapped);
    let mut parser = Parser::new(
        Syntax::Typescript(TsSyntax::default()),
        StringInput::from(&*file),
        None,
    );
    parser.parse_script().ok()?;
    let first = parser
        .take_script_module_errors()
        .into_iter()
        .filter(|e| matches!(e.kind(), SyntaxError::LegacyCommentInModule))
        .map(|e| e.span().lo)
        .min();
    Some(first.and_then(|at| {
        let loc = cm.try_lookup_char_pos(at).ok()?;
        Some((
            (loc.line as u32).saturating_sub(1).max(1),
            loc.col.0 as u32 + 1,
        ))
    }))
}

/// The first `<!--`, or `-->` first on a line, in the text.
fn by_text(script: &str) -> Option<(u32, u32)> {
    for (i, line) in script.split('\n').enumerate() {
        let lead = line.len() - line.trim_start_matches([' ', '\t']).len();
        let at = line
            .find("<!--")
            .or_else(|| line[lead..].starts_with("-->").then_some(lead));
        if let Some(at) = at {
            return Some((i as u32 + 1, line[..at].chars().count() as u32 + 1));
        }
    }
    None
}

/// What a script with an HTML-like comment is told.
pub const REFUSED: &str = "`<!--` (or `-->` first on a line) starts a comment in this sandbox's JavaScript, an old rule for scripts in web pages, while TypeScript and modules read it as code: the rest of its line would not mean what it reads as. Write `< !--` or `- ->` with a space, or use `//` for a comment";
