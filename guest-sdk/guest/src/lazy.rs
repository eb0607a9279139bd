//! Globals built when a script first reaches for them. `Intl`, `URL` and
//! `crypto` are a few hundred lines of JavaScript with their tables; built
//! into the pre-initialised realm, every fresh instance carried their
//! objects and started three times slower (`1+1` p50 0.031 → 0.103 ms,
//! docs/PERFORMANCE.md), whether the script used them or not; holding
//! only their compiled code cost as much (0.119 ms): what the realm holds,
//! every fresh instance pays for. Here the realm holds small stand-ins: a
//! global's getter, or a method that builds the real thing (parsed,
//! compiled and run at that moment: `Intl` about 9 ms, `URL` and `crypto`
//! under 1 ms, once per execution) and hands over to it. Building draws on
//! nothing outside the realm (no clock, no randomness), so a replay
//! builds the same.

use boa_engine::{
    object::builtins::JsArray, Context, JsNativeError, JsObject, JsResult, JsString, JsValue,
    NativeFunction, Script, Source,
};

// A global stays an accessor for good: boa caches a global's lookup per
// place in the code, and a place that once saw an accessor calls what it
// finds there later as a getter (a data property put there by the build
// made the second `crypto.getRandomValues` in a loop "not a callable
// function").
const STAND_INS: &str = r#"(function (load, globals, methods) {
  'use strict';
  const values = new Map();
  let built = false;
  const accessor = (name) => ({
    get() { build(); return values.get(name); },
    set(value) { values.set(name, value); },
    enumerable: false, configurable: true,
  });
  const build = () => {
    if (built) return;
    built = true;
    load();
    for (const name of globals) {
      const made = Object.getOwnPropertyDescriptor(globalThis, name);
      if (!values.has(name) && made && 'value' in made) values.set(name, made.value);
      Object.defineProperty(globalThis, name, accessor(name));
    }
  };
  for (const name of globals) Object.defineProperty(globalThis, name, accessor(name));
  for (const [owner, name] of methods) {
    const proto = globalThis[owner].prototype;
    const stand = { [name](...args) { build(); return proto[name].apply(this, args); } }[name];
    Object.defineProperty(proto, name, { value: stand, writable: true, enumerable: false, configurable: true });
  }
})"#;

/// Puts stand-ins for `globals` and for the methods `(constructor, name)`
/// on the realm; the first use of any of them parses and runs `source` (a
/// function expression) with the object `natives` builds, and that must
/// define them all.
pub(crate) fn install(
    ctx: &mut Context,
    globals: &[&str],
    methods: &[(&str, &str)],
    source: &'static str,
    natives: fn(&mut Context) -> JsObject,
) -> JsResult<()> {
    let loader = NativeFunction::from_copy_closure(move |_, _, ctx| {
        let installer = Script::parse(Source::from_bytes(source), None, ctx)?.evaluate(ctx)?;
        let installer = installer
            .as_callable()
            .ok_or_else(|| JsNativeError::typ().with_message("a lazy global is not a function"))?;
        let natives = natives(ctx);
        installer.call(&JsValue::undefined(), &[natives.into()], ctx)?;
        Ok(JsValue::undefined())
    })
    .to_js_function(ctx.realm());
    let globals = JsArray::from_iter(
        globals.iter().map(|g| JsValue::from(JsString::from(*g))),
        ctx,
    );
    let methods: Vec<JsValue> = methods
        .iter()
        .map(|(owner, name)| {
            JsArray::from_iter(
                [
                    JsValue::from(JsString::from(*owner)),
                    JsValue::from(JsString::from(*name)),
                ],
                ctx,
            )
            .into()
        })
        .collect();
    let methods = JsArray::from_iter(methods, ctx);
    let installer = ctx.eval(Source::from_bytes(STAND_INS))?;
    let installer = installer
        .as_callable()
        .ok_or_else(|| JsNativeError::typ().with_message("stand-ins are not a function"))?;
    installer.call(
        &JsValue::undefined(),
        &[loader.into(), globals.into(), methods.into()],
        ctx,
    )?;
    Ok(())
}
