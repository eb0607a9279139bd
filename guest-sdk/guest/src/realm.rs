//! One JavaScript realm: the globals a script sees and the state the event
//! loop keeps for it.
//!
//! Globals added to the standard library: `tools` (a proxy: `tools.x(args)`
//! calls tool `x`), `callTool(name, args)`, `catalog.search(query,
//! options)` and `catalog.describe(...names)` (finding tools: calls the
//! gateway answers from its catalog), `console.log/info/warn/error`,
//! `setTimeout(fn, ms, ...args)` and `clearTimeout(id)`; the web globals
//! agents reach for (web.rs, url.rs, crypto.rs, intl.rs). Nothing else: no
//! `fetch`, `require`, `process`, file or network access. `Date` reads the
//! host's clock; `Math.random` and `crypto` the host's randomness. A timer never outlives
//! the execution that armed it.

use std::{cell::RefCell, collections::HashMap, rc::Rc};

use airlock_guest_sdk::abi::{LogLevel, JS_STACK_SIZE, RECURSION_DEPTH};
use boa_engine::{
    builtins::promise::OperationType,
    context::HostHooks,
    js_string,
    object::{builtins::JsPromise, ObjectInitializer},
    property::Attribute,
    Context, JsArgs, JsNativeError, JsObject, JsResult, JsValue, NativeFunction, Source,
};

use crate::{host, json};

/// What a pending id will deliver when the host completes it.
pub enum Pending {
    Call {
        resolve: JsObject,
        reject: JsObject,
    },
    Timer {
        callback: JsObject,
        args: Vec<JsValue>,
    },
}

#[derive(Default)]
struct RealmState {
    pending: HashMap<u32, Pending>,
    /// Rejected promises that had no handler when they were rejected.
    unhandled: Vec<JsObject>,
    /// The error objects failed tool calls rejected with, and their call
    /// ids (at most one per call, so bounded by `tool_calls`).
    tool_errors: Vec<(JsObject, u32)>,
}

thread_local! {
    static STATE: RefCell<RealmState> = RefCell::new(RealmState::default());
}

pub fn take_pending(id: u32) -> Option<Pending> {
    STATE.with(|s| s.borrow_mut().pending.remove(&id))
}

pub fn has_pending() -> bool {
    STATE.with(|s| !s.borrow().pending.is_empty())
}

pub fn remember_tool_error(error: &JsObject, call: u32) {
    STATE.with(|s| s.borrow_mut().tool_errors.push((error.clone(), call)));
}

/// The call whose failure `object` is, if it is one of the error objects
/// the realm made for a failed call (identity, not look-alike fields).
pub fn tool_error_call(object: &JsObject) -> Option<u32> {
    STATE.with(|s| {
        s.borrow()
            .tool_errors
            .iter()
            .find(|(e, _)| JsObject::equals(e, object))
            .map(|(_, call)| *call)
    })
}

/// Promises still rejected and unhandled, other than `except`.
pub fn take_unhandled(except: &JsObject) -> Vec<JsObject> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        std::mem::take(&mut s.unhandled)
            .into_iter()
            .filter(|p| !JsObject::equals(p, except))
            .collect()
    })
}

struct Hooks;

impl HostHooks for Hooks {
    fn promise_rejection_tracker(
        &self,
        promise: &JsObject<boa_engine::builtins::promise::Promise>,
        operation: OperationType,
        _context: &mut Context,
    ) {
        let promise = promise.clone().upcast();
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            match operation {
                OperationType::Reject => s.unhandled.push(promise),
                OperationType::Handle => s.unhandled.retain(|p| !JsObject::equals(p, &promise)),
            }
        });
    }
}

const PRELUDE: &str = r#"(function (call) {
  'use strict';
  const define = (name, value) => Object.defineProperty(globalThis, name, {
    value, writable: false, enumerable: false, configurable: false,
  });
  define('callTool', function callTool(name, args) { return call(name, args); });
  define('tools', new Proxy(Object.create(null), {
    get(_target, name) {
      if (typeof name !== 'string' || name === 'then' || name === 'toJSON') return undefined;
      return function (args) { return call(name, args); };
    },
    has(_target, name) { return typeof name === 'string'; },
    set() { return false; },
    defineProperty() { return false; },
    deleteProperty() { return false; },
  }));
  // Runbooks an operator approved, by name: the host runs each in an
  // instance of its own and answers its value.
  define('runbooks', new Proxy(Object.create(null), {
    get(_target, name) {
      if (typeof name !== 'string' || name === 'then' || name === 'toJSON') return undefined;
      return function (args) { return call('runbooks.' + name, args === undefined ? {} : args); };
    },
    has(_target, name) { return typeof name === 'string'; },
    set() { return false; },
    defineProperty() { return false; },
    deleteProperty() { return false; },
  }));
  // Finding tools from inside the script: calls of names no tool can have.
  define('catalog', Object.freeze({
    search(query, options) {
      const o = options === undefined ? {} : options;
      if (o === null || typeof o !== 'object' || Array.isArray(o)) {
        return Promise.reject(new TypeError('catalog.search(query, options): options must be an object, e.g. { tier: "read", limit: 5 }'));
      }
      return call('catalog.search', Object.assign({}, o, { query }));
    },
    describe(...names) { return call('catalog.describe', { names: names.flat() }); },
  }));
})"#;

/// Builds a new context with a fresh realm and Airlock's globals, and
/// forgets everything the previous realm left pending.
pub fn new_context() -> Context {
    STATE.with(|s| *s.borrow_mut() = RealmState::default());
    crate::symbol_registry::clear();
    let mut ctx = Context::builder()
        .host_hooks(Rc::new(Hooks))
        .build()
        .expect("building the JS context cannot fail");
    let limits = ctx.runtime_limits_mut();
    limits.set_recursion_limit(RECURSION_DEPTH as usize);
    limits.set_stack_size_limit(JS_STACK_SIZE as usize);
    install(&mut ctx).expect("installing Airlock globals cannot fail");
    ctx
}

fn install(ctx: &mut Context) -> JsResult<()> {
    crate::builtins::keep_object_keys(ctx)?;
    crate::json_parse::install(ctx)?;
    crate::json_stringify::install(ctx)?;
    crate::array_sort::install(ctx)?;
    crate::regexp_literals::install(ctx)?;
    crate::regexp_test::install(ctx)?;
    crate::typed_array_fill::install(ctx)?;
    crate::symbol_registry::install(ctx)?;
    crate::web::install(ctx)?;
    crate::url::install(ctx)?;
    crate::crypto::install(ctx)?;
    crate::intl::install(ctx)?;

    let mut console = ObjectInitializer::new(ctx);
    for (name, level) in [
        ("log", LogLevel::Log),
        ("info", LogLevel::Info),
        ("warn", LogLevel::Warn),
        ("error", LogLevel::Error),
        ("debug", LogLevel::Debug),
    ] {
        console.function(
            NativeFunction::from_copy_closure(move |_, args, ctx| {
                let line = format_console(args, ctx);
                host::log(level, &line);
                Ok(JsValue::undefined())
            }),
            boa_engine::JsString::from(name),
            0,
        );
    }
    let console = console.build();
    ctx.register_global_property(
        js_string!("console"),
        console,
        Attribute::WRITABLE | Attribute::CONFIGURABLE,
    )?;

    ctx.register_global_callable(
        js_string!("setTimeout"),
        2,
        NativeFunction::from_fn_ptr(set_timeout),
    )?;
    ctx.register_global_callable(
        js_string!("clearTimeout"),
        1,
        NativeFunction::from_fn_ptr(clear_timeout),
    )?;

    let installer = ctx.eval(Source::from_bytes(PRELUDE))?;
    let installer = installer
        .as_callable()
        .ok_or_else(|| JsNativeError::typ().with_message("prelude is not a function"))?;
    let call = boa_engine::object::FunctionObjectBuilder::new(
        ctx.realm(),
        NativeFunction::from_fn_ptr(call_tool),
    )
    .name(js_string!("callTool"))
    .length(2)
    .build();
    installer.call(&JsValue::undefined(), &[call.into()], ctx)?;
    Ok(())
}

/// `callTool(name, args)`: hands the call to the host and returns a promise
/// settled when the host completes it.
fn call_tool(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let name = args.get_or_undefined(0);
    let Some(name) = name.as_string() else {
        return Err(JsNativeError::typ()
            .with_message(
                "callTool(name, args): name must be a string, e.g. callTool(\"node_list\", {})",
            )
            .into());
    };
    let name = name.to_std_string_lossy();
    let arg = args.get_or_undefined(1);
    let value = if arg.is_undefined() {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        json::to_json(
            arg,
            &format!("tools.{name}(args): "),
            "args",
            json::Mode::Strict,
            ctx,
        )?
    };
    let bytes = serde_json::to_vec(&value).expect("a JSON value always serializes");
    let id = host::call_start(&name, &bytes);
    let (promise, resolvers) = JsPromise::new_pending(ctx);
    STATE.with(|s| {
        s.borrow_mut().pending.insert(
            id,
            Pending::Call {
                resolve: resolvers.resolve.into(),
                reject: resolvers.reject.into(),
            },
        )
    });
    Ok(promise.into())
}

fn set_timeout(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let Some(callback) = args.get_or_undefined(0).as_callable() else {
        return Err(JsNativeError::typ()
            .with_message("setTimeout(callback, ms): callback must be a function")
            .into());
    };
    let ms = args.get_or_undefined(1).to_number(ctx)?;
    let ms = if ms.is_finite() && ms > 0.0 {
        ms.min(u32::MAX as f64) as u32
    } else {
        0
    };
    let rest = args.iter().skip(2).cloned().collect();
    let id = host::timer_start(ms);
    STATE.with(|s| {
        s.borrow_mut().pending.insert(
            id,
            Pending::Timer {
                callback,
                args: rest,
            },
        )
    });
    Ok(JsValue::from(id))
}

fn clear_timeout(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let id = args.get_or_undefined(0).to_number(ctx)?;
    if id.is_finite() && id >= 1.0 && id <= u32::MAX as f64 {
        let id = id as u32;
        let removed = STATE.with(|s| {
            let mut s = s.borrow_mut();
            match s.pending.get(&id) {
                Some(Pending::Timer { .. }) => s.pending.remove(&id).is_some(),
                _ => false,
            }
        });
        if removed {
            host::cancel(id);
        }
    }
    Ok(JsValue::undefined())
}

/// Renders console arguments like a browser would, in one line: strings as
/// they are, other values as (lenient) JSON, errors as `Name: message`.
fn format_console(args: &[JsValue], ctx: &mut Context) -> String {
    let mut out = String::new();
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&render(arg, ctx));
    }
    out
}

pub fn render(value: &JsValue, ctx: &mut Context) -> String {
    if let Some(s) = value.as_string() {
        return s.to_std_string_lossy();
    }
    if value.is_undefined() {
        return "undefined".into();
    }
    if let Some(obj) = value.as_object() {
        if let Ok(native) = boa_engine::JsError::from_opaque(value.clone()).try_native(ctx) {
            let name = obj
                .get(js_string!("name"), ctx)
                .ok()
                .and_then(|n| n.as_string().map(|s| s.to_std_string_lossy()))
                .unwrap_or_else(|| "Error".into());
            return format!("{name}: {}", native.message());
        }
    }
    match json::to_json(value, "", "value", json::Mode::Lenient, ctx) {
        Ok(serde_json::Value::String(s)) if !value.is_string() => s,
        Ok(v) if value.is_object() => v.to_string(),
        _ => value
            .to_string(ctx)
            .map(|s| s.to_std_string_lossy())
            .unwrap_or_else(|_| "[unprintable]".into()),
    }
}
