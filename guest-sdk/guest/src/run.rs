//! One execution: evaluate the prepared script, then drive its promise to
//! completion, waiting on the host only when the job queue is empty.

use std::path::Path;

use airlock_guest_sdk::abi::{
    LogLevel, JS_STACK_SIZE, KIND_DEADLOCK, KIND_RUNTIME, KIND_RUNTIME_LIMIT, KIND_SYNTAX,
    KIND_TOOL, RECURSION_DEPTH, STATUS_OK, STATUS_TIMER, STATUS_TOOL_ERROR,
};
use boa_engine::{
    builtins::promise::PromiseState,
    error::{EngineError, RuntimeLimitError},
    js_string,
    object::builtins::JsPromise,
    Context, JsError, JsNativeError, JsObject, JsValue, Script, Source,
};
use serde_json::{json, Value};

use crate::{host, json, module_syntax, readings, realm, regexp_literals, script, typescript};

/// The script's name in stack traces.
pub const SCRIPT_NAME: &str = "script.js";

/// How a script may be written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// As agents write it: JavaScript, or one of the shapes turned into
    /// it (a Markdown fence around it, `export default`, TypeScript).
    Lenient,
    /// JavaScript as written, nothing rewritten: a reviewed script.
    AsWritten,
}

/// Runs `source` to completion (or, `check_only`, only parses it: `Ok`
/// is then `null`). `Ok` is the result value as JSON; `Err` a guest
/// error object (see `abi`).
pub fn execute(
    source: &str,
    form: Form,
    check_only: bool,
    ctx: &mut Context,
) -> Result<Value, Value> {
    let outcome = evaluate(source, form, check_only, ctx);
    // The literals' compiled objects and the objects made from them belong
    // to this realm: keeping them would keep it alive past a reset.
    regexp_literals::arm(Vec::new());
    outcome
}

fn evaluate(source: &str, form: Form, check_only: bool, ctx: &mut Context) -> Result<Value, Value> {
    regexp_literals::arm(Vec::new());
    let syntax = |e: script::SyntaxError| {
        let message = match script::module_hint(source, e.line) {
            Some(hint) => format!("{} ({hint})", e.message),
            None => e.message,
        };
        syntax_error(message, e.line, e.column)
    };
    // JavaScript as written; failing that, with its module syntax
    // rewritten where it is made of tokens (`export default` made
    // `return`, type-only imports and exports blanked: never inside a
    // string, template or comment); failing that, TypeScript with its
    // types blanked (every position kept). A script that is none of these
    // gets the JavaScript parser's error. A reviewed script (a runbook)
    // runs as written or not at all: what its approver read is what runs.
    let unfenced = script::unfenced(source);
    // A fence anywhere in reviewed code (a runbook's script follows the
    // line its input is put on, so a fence around it is not its first
    // line) is refused as one around it is.
    let fenced = || {
        matches!(unfenced, std::borrow::Cow::Owned(_))
            || source.lines().any(|l| l.trim_start().starts_with("```"))
    };
    if form == Form::AsWritten && fenced() {
        // It parses as JavaScript (template literals, one tagging the
        // next) and means something else than its reader sees: refused.
        return Err(syntax_error(
            "a reviewed script is JavaScript as written, and this one has a Markdown code fence (a line starting with ```): remove the fence's lines".into(),
            1,
            1,
        ));
    }
    let source: &str = &unfenced;
    if let Some(found) = readings::first(source, form == Form::AsWritten) {
        return Err(syntax_error(found.message.into(), found.line, found.column));
    }
    let rewritten;
    let stripped;
    let first = script::prepare(source, ctx);
    // A script whose module syntax was rewritten goes on to the stripper
    // even when the rewrite parses as JavaScript: the rewrite followed
    // swc's TypeScript reading of it, so swc's reading decides the rest
    // too (TypeScript and JavaScript can lex the same text apart: `a < b
    // > /`/` is a division and a template to one, a regular expression
    // to the other).
    let (source, first) = match first {
        Err(e) if form == Form::Lenient => match module_syntax::rewritten(source) {
            Some(text) => {
                rewritten = text;
                (rewritten.as_str(), Err(e))
            }
            None => (source, Err(e)),
        },
        Err(e) => return Err(syntax(e)),
        ok => (source, ok),
    };
    let (source, prepared) = match first {
        Ok(prepared) => (source, prepared),
        Err(as_js) => match typescript::strip(source) {
            typescript::Stripped::JavaScript(js) => {
                stripped = js;
                match script::prepare(&stripped, ctx) {
                    Ok(prepared) => (stripped.as_str(), prepared),
                    Err(_) => return Err(syntax(as_js)),
                }
            }
            typescript::Stripped::Refused {
                message,
                line,
                column,
            } => return Err(syntax_error(message, line, column)),
            // Read further as TypeScript than as JavaScript: most likely
            // TypeScript with a mistake of its own.
            typescript::Stripped::Invalid {
                message,
                line,
                column,
            } if (line, column) > (as_js.line, as_js.column) => {
                return Err(syntax_error(
                    format!("{message} (read as TypeScript)"),
                    line,
                    column,
                ))
            }
            typescript::Stripped::Invalid { .. } | typescript::Stripped::NotTypeScript => {
                return Err(syntax(as_js))
            }
        },
    };
    // Checked as it would run: parsed, rewritten and compiled (early
    // errors such as a stray `new.target` come from the compiler).
    if check_only {
        return match compile(&prepared.code, ctx).or_else(|_| compile(&script::wrap(source), ctx)) {
            Ok(_) => Ok(Value::Null),
            Err(e) => Err(syntax_error(
                format!("the script does not compile: {e}"),
                1,
                1,
            )),
        };
    }
    let prepared_calls = prepared.calls_result;
    let mut positions = Positions {
        edits: prepared.edits,
        last_line: script::end_of(source).0,
    };
    let mut takes_factory = !prepared.literals.is_empty();
    let parsed = match compile(&prepared.code, ctx) {
        Ok(script) => {
            regexp_literals::arm(prepared.literals);
            script
        }
        Err(_) => match compile(&script::wrap(source), ctx) {
            // The rewrite broke the script (a parser corner case): run it
            // unchanged.
            Ok(script) if !positions.edits.is_empty() => {
                if positions.edits.iter().any(|e| e.removed == 0) {
                    host::log(
                        LogLevel::Warn,
                        "airlock: could not take the last expression as the result; end the script with `return <value>`",
                    );
                }
                positions.edits.clear();
                takes_factory = false;
                script
            }
            _ => return Err(syntax(script::wrapped_syntax_error(source, ctx))),
        },
    };
    let main = parsed
        .evaluate(ctx)
        .map_err(|e| thrown(e, &positions, ctx))?;
    let args: Vec<JsValue> = if takes_factory {
        vec![regexp_literals::factory(ctx).into()]
    } else {
        Vec::new()
    };
    let value = match main.as_callable() {
        Some(main) => main
            .call(&JsValue::undefined(), &args, ctx)
            .map_err(|e| thrown(e, &positions, ctx))?,
        None => JsValue::undefined(),
    };
    let mut promise = value
        .as_object()
        .and_then(|o| JsPromise::from_object(o).ok())
        .ok_or_else(|| json!({"kind": KIND_RUNTIME, "message": "internal: the script wrapper did not produce a promise", "stack": null}))?;

    let outcome = drive(&mut promise, prepared_calls, &positions, ctx);
    // The promise the outcome came from is the script's own: its
    // rejection is the outcome, not a warning besides it.
    report_unhandled(&promise, ctx);
    outcome
}

/// A syntax error at the agent's `line` and `column`, as the guest reports it.
fn syntax_error(message: String, line: u32, column: u32) -> Value {
    json!({"kind": KIND_SYNTAX, "message": message, "line": line, "column": column})
}

fn compile(code: &str, ctx: &mut Context) -> boa_engine::JsResult<Script> {
    Script::parse(
        Source::from_bytes(code.as_bytes()).with_path(Path::new(SCRIPT_NAME)),
        None,
        ctx,
    )
}

/// `calls_result`: the script is one function, called once its value is
/// in (see [`script::Prepared::calls_result`]); `promise` is then the
/// promise of that call.
fn drive(
    promise: &mut JsPromise,
    calls_result: bool,
    positions: &Positions,
    ctx: &mut Context,
) -> Result<Value, Value> {
    let mut called = !calls_result;
    loop {
        if let Err(e) = ctx.run_jobs() {
            return Err(thrown(e, positions, ctx));
        }
        match promise.state() {
            // A script that is one function (`async () => { ... }`, the
            // shape other code-mode servers ask for, or `export default`
            // of one): it is called, once, and its result is the script's.
            PromiseState::Fulfilled(v) if !called && v.as_callable().is_some() => {
                called = true;
                let f = v.as_callable().expect("checked callable");
                let r = f
                    .call(&JsValue::undefined(), &[], ctx)
                    .map_err(|e| thrown(e, positions, ctx))?;
                *promise = JsPromise::resolve(r, ctx).map_err(|e| thrown(e, positions, ctx))?;
                continue;
            }
            PromiseState::Fulfilled(v) => {
                return json::to_json(&v, "", "result", json::Mode::Strict, ctx)
                    .map_err(|e| thrown(e, positions, ctx));
            }
            PromiseState::Rejected(e) => return Err(failure(&e, positions, ctx)),
            PromiseState::Pending => {}
        }
        if !realm::has_pending() {
            return Err(deadlock());
        }
        let Some((completion, payload)) = host::wait() else {
            return Err(deadlock());
        };
        let Some(pending) = realm::take_pending(completion.id) else {
            continue; // a cancelled timer that fired anyway
        };
        let dispatched = match (pending, completion.status) {
            (realm::Pending::Call { resolve, reject }, STATUS_OK) => {
                match json::from_json_bytes(&payload, ctx) {
                    Ok(v) => resolve.call(&JsValue::undefined(), &[v], ctx),
                    Err(e) => match e.into_opaque(ctx) {
                        Ok(err) => reject.call(&JsValue::undefined(), &[err], ctx),
                        Err(e) => Err(e),
                    },
                }
            }
            (realm::Pending::Call { reject, .. }, STATUS_TOOL_ERROR) => {
                let err = tool_error(completion.id, &payload, ctx);
                reject.call(&JsValue::undefined(), &[err], ctx)
            }
            (realm::Pending::Timer { callback, args }, STATUS_TIMER) => {
                callback.call(&JsValue::undefined(), &args, ctx)
            }
            (_, status) => Err(JsNativeError::error()
                .with_message(format!("internal: unexpected completion status {status}"))
                .into()),
        };
        if let Err(e) = dispatched {
            // An exception thrown by a timer callback ends the execution, as
            // an uncaught exception would in any other runtime.
            return Err(thrown(e, positions, ctx));
        }
    }
}

/// An error that escaped to the top. The engine's own limits are not JS
/// exceptions (a script cannot catch them) and are reported as such.
fn thrown(e: JsError, positions: &Positions, ctx: &mut Context) -> Value {
    match e.as_engine() {
        Some(EngineError::RuntimeLimit(RuntimeLimitError::Recursion)) => {
            json!({"kind": KIND_RUNTIME_LIMIT, "limit": "recursion_depth", "value": RECURSION_DEPTH})
        }
        Some(EngineError::RuntimeLimit(RuntimeLimitError::StackSize)) => {
            json!({"kind": KIND_RUNTIME_LIMIT, "limit": "js_stack_size", "value": JS_STACK_SIZE})
        }
        Some(other) => {
            json!({"kind": KIND_RUNTIME, "message": format!("the JavaScript engine failed: {other}"), "stack": null})
        }
        None => match e.into_opaque(ctx) {
            Ok(v) => failure(&v, positions, ctx),
            Err(e) => json!({"kind": KIND_RUNTIME, "message": e.to_string(), "stack": null}),
        },
    }
}

fn deadlock() -> Value {
    json!({
        "kind": KIND_DEADLOCK,
        "message": "the script is waiting on a promise that can never settle: no tool call or timer is pending (a `new Promise` whose resolve is never called?)",
    })
}

/// Builds the JS error a failed tool call rejects with: an `Error` named
/// `ToolError` carrying `tool`, `code`, `message` and `details`. The realm
/// remembers which call this object belongs to, so that only this very
/// object, escaping, is reported as that call's failure.
fn tool_error(call: u32, payload: &[u8], ctx: &mut Context) -> JsValue {
    let parsed: Value = serde_json::from_slice(payload).unwrap_or_else(|_| json!({}));
    let text = |k: &str| {
        parsed
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (tool, code, message) = (text("tool"), text("code"), text("message"));
    let err: JsObject = JsNativeError::error()
        .with_message(format!("{tool}: {message}"))
        .into_opaque(ctx);
    let _ = err.set(js_string!("name"), js_string!("ToolError"), false, ctx);
    let _ = err.set(
        js_string!("message"),
        boa_engine::JsString::from(format!("{tool}: {message}").as_str()),
        false,
        ctx,
    );
    let _ = err.set(
        js_string!("tool"),
        boa_engine::JsString::from(tool.as_str()),
        false,
        ctx,
    );
    let _ = err.set(
        js_string!("code"),
        boa_engine::JsString::from(code.as_str()),
        false,
        ctx,
    );
    let details = parsed.get("details").cloned().unwrap_or(Value::Null);
    if let Ok(d) = JsValue::from_json(&details, ctx) {
        let _ = err.set(js_string!("details"), d, false, ctx);
    }
    realm::remember_tool_error(&err, call);
    err.into()
}

/// Classifies a value that escaped the script: the error object of a failed
/// tool call (the very object the realm made for it, so a script cannot
/// forge one by throwing a look-alike), or any other exception.
fn failure(value: &JsValue, positions: &Positions, ctx: &mut Context) -> Value {
    if let Some(obj) = value.as_object() {
        let get = |k, ctx: &mut Context| {
            obj.get(k, ctx)
                .ok()
                .and_then(|v| v.as_string().map(|s| s.to_std_string_lossy()))
        };
        if let Some(call) = realm::tool_error_call(&obj) {
            let tool = get(js_string!("tool"), ctx).unwrap_or_default();
            let code = get(js_string!("code"), ctx).unwrap_or_default();
            let message = get(js_string!("message"), ctx).unwrap_or_default();
            return json!({"kind": KIND_TOOL, "call": call, "tool": tool, "code": code, "message": message});
        }
        if JsError::from_opaque(value.clone()).try_native(ctx).is_ok() {
            let message = with_hint(realm::render(value, ctx));
            let stack = get(js_string!("stack"), ctx).map(|s| positions.fix_stack(&s));
            return json!({"kind": KIND_RUNTIME, "message": message, "stack": stack});
        }
    }
    let message = format!("Uncaught {}", realm::render(value, ctx));
    json!({"kind": KIND_RUNTIME, "message": message, "stack": null})
}

/// What `require` and a dynamic `import()` are told.
const MODULES: &str = "there are no modules here: a script is one file, and systems are reached through tools: `search` finds one, then `await tools.NAME(args)` calls it";

/// What a script reached for that a sandbox has not, and the way that
/// works, added to the `ReferenceError` that names it.
fn with_hint(message: String) -> String {
    const HINTS: &[(&str, &str)] = &[
        ("fetch", "there is no network here: reach systems through tools.NAME(args) (`search` finds them)"),
        ("XMLHttpRequest", "there is no network here: reach systems through tools.NAME(args) (`search` finds them)"),
        ("WebSocket", "there is no network here: reach systems through tools.NAME(args) (`search` finds them)"),
        ("require", MODULES),
        ("module", "there are no modules here: a script is one file; its last expression is the result"),
        ("exports", "there are no modules here: a script is one file; its last expression is the result"),
        ("process", "there is no process environment here: pass what the script needs as values in it, and secrets stay with the tools"),
        ("Deno", "this is not Deno: a sandboxed JavaScript runtime whose only capability is tools.NAME(args)"),
        ("Bun", "this is not Bun: a sandboxed JavaScript runtime whose only capability is tools.NAME(args)"),
    ];
    // A dynamic `import()`: boa has no module loader here.
    if message.starts_with("TypeError: module resolution is disabled") {
        return format!("{message} ({MODULES})");
    }
    let Some(rest) = message.strip_prefix("ReferenceError: ") else {
        return message;
    };
    let name = rest.split_whitespace().next().unwrap_or("");
    match HINTS.iter().find(|(n, _)| *n == name) {
        Some((_, hint)) => format!("{message} ({hint})"),
        None => message,
    }
}

/// Maps positions in the evaluated (wrapped, rewritten) source back to the
/// agent's script.
struct Positions {
    edits: Vec<script::Edit>,
    last_line: u32,
}

impl Positions {
    /// Rewrites `script.js:LINE:COL` frames to the agent's lines and
    /// columns, and drops frames of Airlock's own wrapper and prelude.
    fn fix_stack(&self, stack: &str) -> String {
        let needle = format!("{SCRIPT_NAME}:");
        let mut out = String::with_capacity(stack.len());
        for frame in stack.lines() {
            let Some(i) = frame.find(&needle) else {
                if !frame.contains("unknown at") && !frame.trim().is_empty() {
                    out.push_str(frame);
                    out.push('\n');
                }
                continue;
            };
            let (head, tail) = frame.split_at(i + needle.len());
            let mut nums = tail.splitn(2, ':');
            let line = nums.next().and_then(|l| l.parse::<u32>().ok());
            let rest = nums.next().unwrap_or("");
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            let column = rest[..digits].parse::<u32>().ok();
            let (Some(line), Some(column)) = (line, column) else {
                out.push_str(frame);
                out.push('\n');
                continue;
            };
            let column = script::original_column(&self.edits, line, column);
            let line = line.saturating_sub(script::LINE_OFFSET);
            if line == 0 || line > self.last_line {
                continue; // the wrapper's own frame
            }
            out.push_str(&format!("{head}{line}:{column}{}\n", &rest[digits..]));
        }
        out
    }
}

/// A promise rejected with nobody to handle it does not fail the execution,
/// but it is reported, because it usually hides a bug.
fn report_unhandled(main: &JsPromise, ctx: &mut Context) {
    let main_obj: JsObject = main.clone().into();
    for promise in realm::take_unhandled(&main_obj) {
        if let Ok(p) = JsPromise::from_object(promise) {
            if let PromiseState::Rejected(reason) = p.state() {
                let text = realm::render(&reason, ctx);
                host::log(LogLevel::Warn, &format!("Uncaught (in promise) {text}"));
            }
        }
    }
}
