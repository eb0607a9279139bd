//! Module syntax in a script, where a script cannot have it: `export
//! default` of the script's function, and the module forms TypeScript
//! erases (`import type …`, `export type …`, `export interface …`,
//! `export type { … }`). Agents write them; a script (an async function's
//! body once wrapped) cannot hold them, so they are rewritten, every line
//! and column kept: `export default` becomes `return`, padded, and the
//! type-only forms become spaces.
//!
//! Only where they are tokens. The script is parsed with swc's TypeScript
//! parser as a module, and only top-level module declarations in that
//! tree are touched: a line of a template literal, a string or a comment
//! that reads `import type …` or `export default …` stays as written, so
//! text its reader (and TypeScript) sees as a string never runs as code.
//! A script that does not parse as a module is left as it is (its own
//! syntax error is what the agent gets).
//!
//! Done only after a script failed to parse as JavaScript, so a valid
//! script is never touched, and only after `readings` refused what a
//! script's parser and a module's read apart (HTML-like comments).

use swc_common::{
    input::StringInput, sync::Lrc, BytePos, FileName, Globals, SourceMap, Spanned, GLOBALS,
};
use swc_ecma_ast::{Decl, DefaultDecl, ModuleDecl, ModuleItem};
use swc_ecma_parser::{Parser, Syntax, TsSyntax};

use crate::readings::is_line_break;

/// What one top-level declaration becomes.
enum Change {
    /// Its text from `from` up to `to` (byte offsets) becomes spaces.
    Blank { from: usize, to: usize },
    /// `export default` (from `from` up to `to`, where the value starts)
    /// becomes `return`, padded to the same width.
    Return { from: usize, to: usize },
}

/// The script with its module syntax rewritten, or `None` when there was
/// none to rewrite (or the script does not parse as a module).
pub fn rewritten(script: &str) -> Option<String> {
    // swc drops a leading byte order mark before it counts positions, so
    // its spans would land three bytes early in the text (an attacker's
    // review made a blanked line keep its last bytes, a backtick among
    // them). Nothing is rewritten in such a script.
    if script.contains('\u{feff}') {
        return None;
    }
    let changes = GLOBALS.set(&Globals::new(), || changes(script))?;
    if changes.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(script.len());
    let mut done = 0;
    for change in changes {
        let (from, to) = match change {
            Change::Blank { from, to } | Change::Return { from, to } => (from, to),
        };
        if from < done || to < from || to > script.len() {
            return None; // overlapping or out of order: trust none of it
        }
        if !script.is_char_boundary(from) || !script.is_char_boundary(to) {
            return None;
        }
        out.push_str(&script[done..from]);
        let span = &script[from..to];
        match change {
            // What is blanked is a declaration that starts with its
            // keyword, or trust none of it.
            Change::Blank { .. } if !span.starts_with("import") && !span.starts_with("export") => {
                return None
            }
            Change::Blank { .. } => out.extend(span.chars().map(blank)),
            Change::Return { .. } => {
                // `export`, space, `default`, space, and nothing else; and
                // `return` must end its line's statement no earlier than
                // the value: a line break after it would return nothing.
                let words: Vec<&str> = span.split_whitespace().collect();
                if words != ["export", "default"] || span.chars().any(is_line_break) {
                    return None;
                }
                out.push_str("return");
                out.extend(span.chars().skip("return".len()).map(|_| ' '));
            }
        }
        done = to;
    }
    out.push_str(&script[done..]);
    Some(out)
}

/// The changes, in source order, from the script parsed as a TypeScript
/// module; `None` when it does not parse as one.
fn changes(script: &str) -> Option<Vec<Change>> {
    let cm: Lrc<SourceMap> = Default::default();
    let file = cm.new_source_file(FileName::Anon.into(), script.to_string());
    let start = file.start_pos;
    let mut parser = Parser::new(
        Syntax::Typescript(TsSyntax::default()),
        StringInput::from(&*file),
        None,
    );
    // Errors the parser recovers from (a top-level `return`, which a
    // script may have and a module may not) leave the tree whole; only
    // its positions are used here.
    let module = parser.parse_module().ok()?;
    let at = |pos: BytePos| pos.0.checked_sub(start.0).map(|o| o as usize);
    let mut found = Vec::new();
    for item in &module.body {
        let ModuleItem::ModuleDecl(decl) = item else {
            continue;
        };
        let change = match decl {
            ModuleDecl::Import(import) if import.type_only => Change::Blank {
                from: at(import.span.lo)?,
                to: at(import.span.hi)?,
            },
            ModuleDecl::ExportNamed(named) if named.type_only => Change::Blank {
                from: at(named.span.lo)?,
                to: at(named.span.hi)?,
            },
            // `export` before a type: the type stays, for the stripper.
            ModuleDecl::ExportDecl(export)
                if matches!(export.decl, Decl::TsInterface(_) | Decl::TsTypeAlias(_)) =>
            {
                Change::Blank {
                    from: at(export.span.lo)?,
                    to: at(export.decl.span().lo)?,
                }
            }
            ModuleDecl::ExportDefaultExpr(export) => Change::Return {
                from: at(export.span.lo)?,
                to: at(export.expr.span().lo)?,
            },
            ModuleDecl::ExportDefaultDecl(export) => match &export.decl {
                DefaultDecl::Fn(f) => Change::Return {
                    from: at(export.span.lo)?,
                    to: at(f.function.span.lo.min(f.span().lo))?,
                },
                DefaultDecl::Class(c) => Change::Return {
                    from: at(export.span.lo)?,
                    to: at(c.class.span.lo.min(c.span().lo))?,
                },
                DefaultDecl::TsInterfaceDecl(_) => continue,
            },
            _ => continue,
        };
        found.push(change);
    }
    Some(found)
}

/// A character of erased text: a space, except line breaks, which keep
/// every later line where it was.
fn blank(c: char) -> char {
    if is_line_break(c) {
        c
    } else {
        ' '
    }
}
