//! TypeScript in, JavaScript out: the types of a script written in
//! TypeScript are blanked (swc's strip-only mode: every annotation,
//! interface, type alias, generic argument, `as`, `satisfies` and `!`
//! becomes spaces), so the JavaScript left keeps every line and column
//! where the agent wrote it, and errors point at the agent's own code.
//! The script is untrusted text: it is parsed here, inside the sandbox,
//! and only when it does not parse as JavaScript (a JavaScript script
//! pays nothing).
//!
//! Module forms that are only about types (`import type`, `export
//! interface`) are erased before this, where they are tokens
//! (`module_syntax`).
//!
//! Nothing is type-checked: a type name a script uses without declaring
//! it (the ones `get_schema` hands out, say) is fine, as it is to `tsc
//! --isolatedModules`. TypeScript that is not only types (`enum`,
//! `namespace` with values, parameter properties) would need code
//! generated; it is refused with what to write instead.

use std::sync::{Arc, Mutex};

use swc_common::{
    errors::{DiagnosticBuilder, Emitter, Handler},
    sync::Lrc,
    BytePos, Globals, SourceMap, GLOBALS,
};
use swc_ts_fast_strip::{operate, Mode, Options};

/// The script becomes an async function's body, as it runs, so
/// top-level `await` and `return` parse; on a line of its own, so its
/// lines keep their numbers + 1.
const PREFIX: &str = "async function __airlock_typescript() {\n";
const SUFFIX: &str = "\n}";

/// What stripping a script's types gave.
pub enum Stripped {
    /// The script as JavaScript, every position kept.
    JavaScript(String),
    /// TypeScript this mode cannot run, at the agent's line and column
    /// (1-based): what to write instead.
    Refused {
        message: String,
        line: u32,
        column: u32,
    },
    /// It does not parse as TypeScript either: the TypeScript parser's
    /// first error, at the agent's line and column (a script that reads
    /// further as TypeScript than as JavaScript is told this one).
    Invalid {
        message: String,
        line: u32,
        column: u32,
    },
    /// Stripped, but not in a form whose positions can be trusted.
    NotTypeScript,
}

/// A diagnostic's message, where it points, and whether it names
/// syntax the stripper does not support (`enum`, `namespace`).
type Diagnostic = (String, Option<BytePos>, bool);

/// The first error the parser or the stripper reported, and where.
#[derive(Clone, Default)]
struct First(Arc<Mutex<Option<Diagnostic>>>);

impl Emitter for First {
    fn emit(&mut self, db: &mut DiagnosticBuilder<'_>) {
        let mut first = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            let unsupported = matches!(
                &db.code,
                Some(swc_common::errors::DiagnosticId::Error(code)) if code == "UnsupportedSyntax"
            );
            *first = Some((
                db.message(),
                db.span.primary_span().map(|s| s.lo),
                unsupported,
            ));
        }
    }
}

/// Strips the types of `script`.
pub fn strip(script: &str) -> Stripped {
    let wrapped = format!("{PREFIX}{script}{SUFFIX}");
    let cm: Lrc<SourceMap> = Default::default();
    let first = First::default();
    let handler = Handler::with_emitter(false, false, Box::new(first.clone()));
    let options = Options {
        mode: Mode::StripOnly,
        module: Some(false),
        ..Default::default()
    };
    let result = GLOBALS.set(&Globals::new(), || operate(&cm, &handler, wrapped, options));
    match result {
        Ok(out) => {
            let code = out.code;
            match code
                .strip_prefix(PREFIX)
                .and_then(|c| c.strip_suffix(SUFFIX))
            {
                Some(body) => Stripped::JavaScript(body.to_string()),
                // Blanking never moves the wrapper; should it have, the
                // positions could not be trusted.
                None => Stripped::NotTypeScript,
            }
        }
        Err(_) => {
            let said = first.0.lock().unwrap_or_else(|p| p.into_inner()).take();
            match said {
                Some((message, Some(at), unsupported)) => {
                    // Columns in code points, as boa counts them.
                    let Ok(loc) = cm.try_lookup_char_pos(at) else {
                        return Stripped::NotTypeScript;
                    };
                    let (line, column) = (
                        (loc.line as u32).saturating_sub(1).max(1),
                        loc.col.0 as u32 + 1,
                    );
                    if unsupported {
                        Stripped::Refused {
                            message: instead(&message),
                            line,
                            column,
                        }
                    } else {
                        Stripped::Invalid {
                            message: message.trim().to_string(),
                            line,
                            column,
                        }
                    }
                }
                _ => Stripped::NotTypeScript,
            }
        }
    }
}

/// The stripper's refusal, and what runs instead.
fn instead(message: &str) -> String {
    let what = if message.contains("enum") {
        "an `enum`: write a plain object instead, e.g. `const Color = { Red: 0, Green: 1 } as const;`"
    } else if message.contains("namespace") || message.contains("module") {
        "a `namespace` with values: write plain objects or functions instead"
    } else if message.contains("parameter propert") {
        "a constructor parameter property (`constructor(private x: T)`): declare the field and assign it in the constructor"
    } else {
        "TypeScript that would need code generated, not just types removed"
    };
    format!(
        "TypeScript runs here with its types removed, so it cannot have {what} ({})",
        message.trim()
    )
}
