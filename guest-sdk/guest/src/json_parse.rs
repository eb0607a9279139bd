//! `JSON.parse`, built straight from serde_json's parse.
//!
//! boa 0.22 checks the text with serde_json and then parses it a second
//! time as a JavaScript expression, compiles that to bytecode and runs it.
//! On a 1,000-row round trip through `JSON.stringify` and `JSON.parse`
//! the second pass was 40% of the guest's time (docs/PERFORMANCE.md,
//! issue 19). The value serde_json already produced is the same value, so
//! this `JSON.parse` converts it and stops there. Errors are boa's: the
//! same check, the same `SyntaxError` text. With a reviver, boa's own
//! `JSON.parse` runs, since a reviver sees each value's source text.

use boa_engine::{
    js_string, Context, JsArgs, JsNativeError, JsObject, JsResult, JsValue, NativeFunction,
};

/// Replaces `JSON.parse` in the realm being built.
pub fn install(ctx: &mut Context) -> JsResult<()> {
    let json = crate::builtins::intrinsic(&ctx.global_object(), "JSON", ctx)?;
    let original = crate::builtins::intrinsic(&json, "parse", ctx)?;
    let parse = NativeFunction::from_copy_closure_with_captures(parse, original);
    crate::builtins::replace_method(&json, js_string!("parse"), 2, parse, ctx)
}

fn parse(
    this: &JsValue,
    args: &[JsValue],
    original: &JsObject,
    ctx: &mut Context,
) -> JsResult<JsValue> {
    if args.get_or_undefined(1).is_callable() {
        return original.call(this, args, ctx);
    }
    let text = args
        .get_or_undefined(0)
        .to_string(ctx)?
        .to_std_string()
        .map_err(|e| JsNativeError::syntax().with_message(e.to_string()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| JsNativeError::syntax().with_message(e.to_string()))?;
    JsValue::from_json(&value, ctx)
}
