//! The Airlock guest: a JavaScript runtime (boa_engine) that runs one agent
//! script at a time inside the wasm sandbox. Its only way out is the host
//! imports in [`host`]; see `airlock_guest_sdk::abi` for the contract.

mod array_sort;
mod builtins;
mod crypto;
mod host;
mod intl;
mod json;
mod json_parse;
mod json_stringify;
mod lazy;
mod module_syntax;
mod readings;
mod realm;
mod regexp_literals;
mod regexp_test;
mod run;
mod script;
mod symbol_registry;
mod typed_array_fill;
mod typescript;
mod url;
mod web;

use std::cell::RefCell;

use airlock_guest_sdk::{
    abi::{ABI_VERSION, FINISH_ERROR, FINISH_OK, FINISH_TRUNCATED, RUN_AS_WRITTEN, RUN_CHECK_ONLY},
    fit,
};
use boa_engine::{Context, Source};
use serde_json::Value;

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Pre-initialisation: build the realm once so a snapshot of memory holds
/// it, then run a script that touches the parser, compiler and common
/// builtins so their lazily built tables are in the snapshot too. Must not
/// call any host import.
#[export_name = "wizer-initialize"]
pub extern "C" fn initialize() {
    let mut ctx = realm::new_context();
    let _ = ctx.eval(Source::from_bytes(
        "(async () => { const a = [3, 1, 2].map((x) => ({ x, s: `${x}` })).sort((p, q) => p.x - q.x); \
         return JSON.stringify({ a, n: Object.keys(a).length, d: new Date(0).toISOString() }); })()",
    ));
    let _ = ctx.run_jobs();
    drop(ctx);
    CONTEXT.with(|c| *c.borrow_mut() = Some(realm::new_context()));
    // Start every execution with the collector's allocation count at zero,
    // so a script does not pay for collecting the realm's construction.
    boa_engine::gc::force_collect();
}

#[no_mangle]
pub extern "C" fn airlock_abi_version() -> u32 {
    ABI_VERSION
}

/// Runs one script in the current realm and reports through `finish`, the
/// result already cut to `result_bytes`: the cutting is paid from this
/// execution's memory and clock, and the host refuses a larger outcome
/// unread.
#[no_mangle]
pub extern "C" fn airlock_run(script_len: u32, result_bytes: u32, flags: u32) {
    let bytes = host::script(script_len);
    let source = String::from_utf8_lossy(&bytes);
    let form = match flags & RUN_AS_WRITTEN {
        0 => run::Form::Lenient,
        _ => run::Form::AsWritten,
    };
    let check_only = flags & RUN_CHECK_ONLY != 0;
    let outcome = CONTEXT.with(|c| {
        let mut slot = c.borrow_mut();
        let ctx = slot.get_or_insert_with(realm::new_context);
        run::execute(&source, form, check_only, ctx)
    });
    match outcome {
        Ok(value) => {
            let text = serde_json::to_vec(&value).unwrap_or_default();
            if text.len() <= result_bytes as usize {
                host::finish(FINISH_OK, &text);
            } else {
                let cut = fit::truncate(&value, result_bytes as usize);
                drop(value);
                let wrapped = serde_json::json!({"value": cut, "original_bytes": text.len()});
                drop(text);
                host::finish(
                    FINISH_TRUNCATED,
                    &serde_json::to_vec(&wrapped).unwrap_or_default(),
                );
            }
        }
        Err(error) => host::finish(
            FINISH_ERROR,
            &serde_json::to_vec(&capped_texts(error)).unwrap_or_default(),
        ),
    }
}

/// An error object with its texts cut to `fit::MESSAGE_CHARS`, so it fits
/// in the slack the host reads beyond `result_bytes`.
fn capped_texts(mut error: Value) -> Value {
    if let Value::Object(fields) = &mut error {
        for (_, v) in fields.iter_mut() {
            if let Value::String(s) = v {
                if s.len() > fit::MESSAGE_CHARS {
                    *s = fit::capped(s);
                }
            }
        }
    }
    error
}

/// Replaces the realm with a brand-new one (reuse mode, between scripts).
#[no_mangle]
pub extern "C" fn airlock_reset() {
    // Nothing of the old realm may outlive it (the symbol registry and
    // the realm's pending work are emptied by `new_context`).
    regexp_literals::arm(Vec::new());
    CONTEXT.with(|c| {
        let mut slot = c.borrow_mut();
        *slot = None; // drop the old realm before building the next
                      // Reclaim it now, while the instance is idle, not during the next
                      // script.
        boa_engine::gc::force_collect();
        *slot = Some(realm::new_context());
        boa_engine::gc::force_collect();
    });
}
