//! HTML-like comments (`<!--` anywhere, `-->` first on a line), a rule
//! of scripts in web pages that JavaScript keeps for scripts (Annex B):
//! the rest of the line is a comment. TypeScript, modules and most
//! people read the same text as code (`x <!--y` is `x < !(--y)`), and a
//! backtick after it opens a template for them but not for the sandbox:
//! text a reader sees as a string would run as code.
//!
//! Where such a comment starts depends on how the text around it is
//! lexed (a regular expression or a division, a template or not, which
//! characters end a line), and every parser that is not the sandbox's
//! own can be led to see it elsewhere (an attacker's review did so with
//! TypeScript's instantiation expressions, and with separators a
//! line-based look missed). So the two character sequences are refused
//! wherever they appear, in strings and comments too, with what to
//! write instead: nothing can then be an HTML-like comment.

/// Where (line and column, 1-based, columns in code points; lines as
/// `\n` ends them) the first `<!--` or `-->` of `script` starts.
pub fn first(script: &str) -> Option<(u32, u32)> {
    let at = [script.find("<!--"), script.find("-->")]
        .into_iter()
        .flatten()
        .min()?;
    let before = &script[..at];
    let line = before.matches('\n').count() as u32 + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    Some((line, before[start..].chars().count() as u32 + 1))
}

/// Whether `script` holds either sequence.
pub fn possible(script: &str) -> bool {
    first(script).is_some()
}

/// What a script with one is told.
pub const REFUSED: &str = "`<!--` and `-->` are refused anywhere in a script: in this sandbox's JavaScript they can start a comment (an old rule for scripts in web pages) where TypeScript, modules and people read code, so a line would not mean what it reads as. In code write `a < !--b` or `n-- > 0` with spaces; in a string write `\"<!\" + \"--\"` or `\"\\x3C!--\"`; in a comment, leave it out";
