//! `Symbol.for` and `Symbol.keyFor` with a registry that belongs to the
//! realm.
//!
//! boa keeps the symbol registry in a process-wide static. In reuse mode
//! the process — the wasm instance — outlives the realm, so every key a
//! script registered stayed in the instance's memory for the scripts
//! after it: five 1 MiB keys made a later script run out of
//! `memory_bytes` (found by the attacker review). Here the registry is
//! emptied with the realm, and the language sees no difference: the same
//! symbol for the same key within a realm, its key back from `keyFor`.

use std::{cell::RefCell, collections::HashMap};

use boa_engine::{
    js_string, Context, JsArgs, JsNativeError, JsResult, JsString, JsSymbol, JsValue,
    NativeFunction,
};

use crate::builtins;

#[derive(Default)]
struct Registry {
    by_key: HashMap<JsString, JsSymbol>,
    by_symbol: HashMap<JsSymbol, JsString>,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

/// Forgets every registered symbol: the realm that registered them is
/// being replaced.
pub fn clear() {
    REGISTRY.with(|r| *r.borrow_mut() = Registry::default());
}

/// Puts the realm's own `for` and `keyFor` on `Symbol`.
pub fn install(ctx: &mut Context) -> JsResult<()> {
    let symbol = ctx.intrinsics().constructors().symbol().constructor();
    builtins::replace_method(
        &symbol,
        js_string!("for"),
        1,
        NativeFunction::from_fn_ptr(symbol_for),
        ctx,
    )?;
    builtins::replace_method(
        &symbol,
        js_string!("keyFor"),
        1,
        NativeFunction::from_fn_ptr(key_for),
        ctx,
    )
}

fn symbol_for(_: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let key = args.get_or_undefined(0).to_string(ctx)?;
    REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        if let Some(symbol) = r.by_key.get(&key) {
            return Ok(symbol.clone().into());
        }
        let symbol = JsSymbol::new(Some(key.clone()))
            .ok_or_else(|| JsNativeError::range().with_message("Symbol.for: too many symbols"))?;
        r.by_key.insert(key.clone(), symbol.clone());
        r.by_symbol.insert(symbol.clone(), key);
        Ok(symbol.into())
    })
}

fn key_for(_: &JsValue, args: &[JsValue], _: &mut Context) -> JsResult<JsValue> {
    let symbol = args
        .get_or_undefined(0)
        .as_symbol()
        .ok_or_else(|| JsNativeError::typ().with_message("Symbol.keyFor: sym is not a symbol"))?;
    Ok(REGISTRY.with(|r| {
        r.borrow()
            .by_symbol
            .get(&symbol)
            .cloned()
            .map(JsValue::from)
            .unwrap_or_default()
    }))
}
