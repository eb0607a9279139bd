//! How the guest's own versions of boa's built-ins are put in place: the
//! intrinsics they stand on, read while a realm is built (before any
//! script could replace them), and a method replaced with the attributes
//! a built-in has. The realm and every fast path (`json_*`, `array_sort`,
//! `regexp_*`, ...) use this; it uses none of them.

use std::cell::RefCell;

use boa_engine::{
    object::FunctionObjectBuilder, property::PropertyDescriptor, Context, JsNativeError, JsObject,
    JsResult, JsString, NativeFunction,
};

thread_local! {
    static OBJECT_KEYS: RefCell<Option<JsObject>> = const { RefCell::new(None) };
}

/// Keeps the intrinsic `Object.keys` of the realm being built.
pub(crate) fn keep_object_keys(ctx: &mut Context) -> JsResult<()> {
    let object_ctor = ctx.intrinsics().constructors().object().constructor();
    let keys = intrinsic(&object_ctor, "keys", ctx)?;
    OBJECT_KEYS.with(|k| *k.borrow_mut() = Some(keys));
    Ok(())
}

/// The intrinsic `Object.keys`, captured before any script could replace it.
pub(crate) fn object_keys(_ctx: &mut Context) -> JsObject {
    OBJECT_KEYS.with(|k| k.borrow().clone().expect("realm initialised"))
}

/// Puts `function` in place of `target`'s method `name`, with the
/// attributes a built-in method has (writable, configurable, not
/// enumerable): for the guest's own versions of boa's built-ins.
pub(crate) fn replace_method(
    target: &JsObject,
    name: JsString,
    length: usize,
    function: NativeFunction,
    ctx: &mut Context,
) -> JsResult<()> {
    let method = FunctionObjectBuilder::new(ctx.realm(), function)
        .name(name.clone())
        .length(length)
        .build();
    target.define_property_or_throw(
        name,
        PropertyDescriptor::builder()
            .value(method)
            .writable(true)
            .enumerable(false)
            .configurable(true),
        ctx,
    )?;
    Ok(())
}

/// The object (usually a function) under `name` on `on`, read while the
/// realm is built, before any script could replace it.
pub(crate) fn intrinsic(on: &JsObject, name: &str, ctx: &mut Context) -> JsResult<JsObject> {
    on.get(JsString::from(name), ctx)?
        .as_object()
        .ok_or_else(|| {
            JsNativeError::typ()
                .with_message(format!("{name} missing"))
                .into()
        })
}
