//! `RegExp.prototype.test` without the match array, for the objects the
//! script's regular expression literals make.
//!
//! boa answers `test` through `exec`'s path: it copies the object's
//! compiled matcher, matches, and builds the whole match array (`index`,
//! `input`, `groups`, the captures) to return a boolean — 1.5–2 µs a
//! test, most of the regex filter's time once its literal is compiled
//! once (docs/PERFORMANCE.md, issue 38). The matcher is private to boa, so
//! the guest keeps its own copy of each literal's (`regexp_literals::
//! Matcher`: the same regress, the same input) and, for an object the
//! literal factory made lately, answers `test` with it.
//!
//! Everything a script can see happens as the specification orders it:
//! the argument's `ToString`, then the `exec` lookup, and when `exec` is
//! still the built-in one, the `lastIndex` read and its `ToLength` (a
//! `valueOf` there still runs). Anything else — an `exec` the script put
//! on the object or the prototype, a global or sticky regexp (whose
//! `lastIndex` test moves), an object the factory did not make or made
//! long ago — goes to boa's own `test`, or,
//! once `exec` has been read, on along the specification's steps with the
//! value read, so no getter runs twice. `RegExp.prototype.compile` (Annex
//! B), the one way to give an object another matcher, makes the guest
//! forget that object's copy first; since the argument's `toString` or an
//! `exec` getter may call it, the copy is looked up again once both have
//! run, at the point where boa takes its matcher.

use boa_engine::{
    js_string, Context, JsArgs, JsNativeError, JsObject, JsResult, JsValue, NativeFunction,
};

use crate::{builtins, regexp_literals};

/// Puts the guest's `test` and the forgetting `compile` on
/// `%RegExp.prototype%`.
pub fn install(ctx: &mut Context) -> JsResult<()> {
    let proto = ctx.intrinsics().constructors().regexp().prototype();
    let test = builtins::intrinsic(&proto, "test", ctx)?;
    let exec = builtins::intrinsic(&proto, "exec", ctx)?;
    let compile = builtins::intrinsic(&proto, "compile", ctx)?;
    let fast = NativeFunction::from_copy_closure_with_captures(fast_test, (test, exec));
    builtins::replace_method(&proto, js_string!("test"), 1, fast, ctx)?;
    let forgetting = NativeFunction::from_copy_closure_with_captures(forgetting_compile, compile);
    builtins::replace_method(&proto, js_string!("compile"), 2, forgetting, ctx)
}

fn fast_test(
    this: &JsValue,
    args: &[JsValue],
    (test, exec): &(JsObject, JsObject),
    ctx: &mut Context,
) -> JsResult<JsValue> {
    let Some(object) = this
        .as_object()
        .filter(|o| regexp_literals::matcher_of(o).is_some())
    else {
        return test.call(this, args, ctx);
    };
    // test ( S ), steps 3–4: ToString, then RegExpExec.
    let input = args.get_or_undefined(0).to_string(ctx)?;
    let own_exec = object.get(js_string!("exec"), ctx)?;
    let is_builtin = own_exec
        .as_object()
        .is_some_and(|f| JsObject::equals(&f, exec));
    if !is_builtin {
        // RegExpExec, step 4 onwards, with the `exec` already read.
        let Some(callable) = own_exec.as_callable() else {
            // Not callable: the built-in exec on the object itself.
            return found(exec.call(this, &[input.into()], ctx)?);
        };
        let result = callable.call(this, &[input.into()], ctx)?;
        if !result.is_object() && !result.is_null() {
            return Err(JsNativeError::typ()
                .with_message("regexp exec returned neither object nor null")
                .into());
        }
        return found(result);
    }
    // The argument's `toString` or the `exec` getter may have recompiled
    // the object: the matcher is the one it holds now.
    let Some(matcher) = regexp_literals::matcher_of(&object) else {
        return found(exec.call(this, &[input.into()], ctx)?);
    };
    // RegExpBuiltinExec, steps 2 and 7: `lastIndex` is read and converted,
    // then not used (neither global nor sticky). boa takes the matcher
    // before this read, so a `compile` in a `valueOf` here does not change
    // the answer: neither does it here.
    object.get(js_string!("lastIndex"), ctx)?.to_length(ctx)?;
    Ok(matcher.finds(&input).into())
}

fn found(result: JsValue) -> JsResult<JsValue> {
    Ok((!result.is_null()).into())
}

fn forgetting_compile(
    this: &JsValue,
    args: &[JsValue],
    compile: &JsObject,
    ctx: &mut Context,
) -> JsResult<JsValue> {
    if let Some(object) = this.as_object() {
        regexp_literals::forget(&object);
    }
    compile.call(this, args, ctx)
}
