//! The Airlock guest: a JavaScript runtime (boa_engine) that runs one agent
//! script at a time inside the wasm sandbox. Its only way out is the host
//! imports in [`host`]; see `airlock_guest_sdk::abi` for the contract.

mod host;
mod json;
mod realm;
mod run;
mod script;

use std::cell::RefCell;

use airlock_guest_sdk::abi::{ABI_VERSION, FINISH_ERROR, FINISH_OK};
use boa_engine::{Context, Source};

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

/// Runs one script in the current realm and reports through `finish`.
#[no_mangle]
pub extern "C" fn airlock_run(script_len: u32) {
    let bytes = host::script(script_len);
    let source = String::from_utf8_lossy(&bytes);
    let outcome = CONTEXT.with(|c| {
        let mut slot = c.borrow_mut();
        let ctx = slot.get_or_insert_with(realm::new_context);
        run::execute(&source, ctx)
    });
    match outcome {
        Ok(value) => host::finish(FINISH_OK, &serde_json::to_vec(&value).unwrap_or_default()),
        Err(error) => host::finish(
            FINISH_ERROR,
            &serde_json::to_vec(&error).unwrap_or_default(),
        ),
    }
}

/// Replaces the realm with a brand-new one (reuse mode, between scripts).
#[no_mangle]
pub extern "C" fn airlock_reset() {
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
