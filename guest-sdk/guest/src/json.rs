//! Values crossing the boundary as JSON.
//!
//! Tool arguments and the script's result leave the realm through
//! [`to_json`]. It follows `JSON.stringify` where that is safe (`toJSON` is
//! honoured, `undefined` properties are left out, `undefined` in an array
//! becomes `null`, non-finite numbers become `null`) and refuses, with the
//! path of the offending value, what `JSON.stringify` would silently lose or
//! choke on: functions, symbols, BigInts, cycles, Maps, Sets and Promises
//! that were never awaited. `Error` objects keep their `name` and
//! `message`, which `JSON.stringify` would drop.

use boa_engine::{
    object::builtins::{JsMap, JsPromise, JsSet},
    value::JsVariant,
    Context, JsError, JsNativeError, JsObject, JsResult, JsValue,
};
use serde_json::{Map, Number, Value};

/// Deeper nesting than this is refused instead of exhausting the stack.
/// Well under the host's JSON parser's own limit (128), so anything the
/// guest hands over parses on the host; and no real tool data comes close.
pub const MAX_DEPTH: usize = 64;

/// Largest integer a double holds exactly; integral numbers up to this
/// magnitude are written without a fraction (`3`, not `3.0`).
const SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// How strictly a value is converted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Crossing the boundary: anything JSON cannot carry is an error.
    Strict,
    /// Rendering for the console: anything JSON cannot carry becomes a
    /// descriptive string such as `"[Function f]"` or `"[Circular]"`.
    Lenient,
}

/// Converts `value` to JSON. `root` names it in error messages (`result`,
/// `args`) and `context` says where it was going (`tools.vm_start: `).
/// Top-level `undefined` is `null`.
pub fn to_json(
    value: &JsValue,
    context: &str,
    root: &str,
    mode: Mode,
    ctx: &mut Context,
) -> JsResult<Value> {
    let mut walker = Walker {
        mode,
        ancestors: Vec::new(),
        path: Vec::new(),
        root,
        context,
    };
    Ok(walker.walk(value, ctx)?.unwrap_or(Value::Null))
}

enum Segment {
    Index(u32),
    Key(String),
}

struct Walker<'a> {
    mode: Mode,
    ancestors: Vec<JsObject>,
    path: Vec<Segment>,
    root: &'a str,
    context: &'a str,
}

impl Walker<'_> {
    fn path_string(&self) -> String {
        render_path(self.root, &self.path)
    }

    fn refuse(&self, what: &str, hint: &str) -> JsResult<Option<Value>> {
        match self.mode {
            Mode::Lenient => Ok(Some(Value::String(format!("[{what}]")))),
            Mode::Strict => Err(JsNativeError::typ()
                .with_message(format!(
                    "{}{} is {what}, which cannot cross the sandbox boundary as JSON; {hint}",
                    self.context,
                    self.path_string()
                ))
                .into()),
        }
    }

    fn walk(&mut self, value: &JsValue, ctx: &mut Context) -> JsResult<Option<Value>> {
        match value.variant() {
            JsVariant::Undefined => Ok(None),
            JsVariant::Null => Ok(Some(Value::Null)),
            JsVariant::Boolean(b) => Ok(Some(Value::Bool(b))),
            JsVariant::String(s) => Ok(Some(Value::String(s.to_std_string_lossy()))),
            JsVariant::Integer32(i) => Ok(Some(Value::from(i))),
            JsVariant::Float64(f) => Ok(Some(number(f))),
            JsVariant::BigInt(b) => match self.mode {
                Mode::Lenient => Ok(Some(Value::String(format!("{b}n")))),
                Mode::Strict => self.refuse("a BigInt", "convert it with Number(x) or String(x)"),
            },
            JsVariant::Symbol(_) => self.refuse("a Symbol", "use a string instead"),
            JsVariant::Object(obj) => self.walk_object(obj, ctx),
        }
    }

    fn walk_object(&mut self, obj: JsObject, ctx: &mut Context) -> JsResult<Option<Value>> {
        if obj.is_callable() {
            let name = obj
                .get(boa_engine::js_string!("name"), ctx)
                .ok()
                .and_then(|n| n.as_string().map(|s| s.to_std_string_lossy()))
                .filter(|n| !n.is_empty());
            let what = match (self.mode, name) {
                (Mode::Lenient, Some(n)) => format!("Function {n}"),
                (Mode::Lenient, None) => "Function".to_string(),
                (Mode::Strict, _) => "a function".to_string(),
            };
            return self.refuse(&what, "call it and pass its result instead");
        }
        if JsPromise::from_object(obj.clone()).is_ok() {
            return self.refuse("a Promise", "did you forget `await`?");
        }
        if JsMap::from_object(obj.clone()).is_ok() {
            return self.refuse("a Map", "convert it with Object.fromEntries(map)");
        }
        if JsSet::from_object(obj.clone()).is_ok() {
            return self.refuse("a Set", "convert it with [...set]");
        }
        if self.ancestors.iter().any(|a| JsObject::equals(a, &obj)) {
            return match self.mode {
                Mode::Lenient => Ok(Some(Value::String("[Circular]".into()))),
                Mode::Strict => Err(JsNativeError::typ()
                    .with_message(format!(
                        "{}{} refers back to an object that contains it (a cycle), which JSON cannot carry; copy the fields you need instead",
                        self.context,
                        self.path_string()
                    ))
                    .into()),
            };
        }
        if self.ancestors.len() >= MAX_DEPTH {
            return match self.mode {
                Mode::Lenient => Ok(Some(Value::String("[Too deep]".into()))),
                Mode::Strict => Err(JsNativeError::range()
                    .with_message(format!(
                        "{}{} is nested more than {MAX_DEPTH} levels deep; flatten the value",
                        self.context,
                        self.path_string()
                    ))
                    .into()),
            };
        }

        let to_json = obj.get(boa_engine::js_string!("toJSON"), ctx)?;
        if let Some(f) = to_json.as_callable() {
            let key = match self.path.last() {
                Some(Segment::Key(k)) => JsValue::from(boa_engine::JsString::from(k.as_str())),
                Some(Segment::Index(i)) => {
                    JsValue::from(boa_engine::JsString::from(i.to_string().as_str()))
                }
                None => JsValue::from(boa_engine::js_string!("")),
            };
            let replaced = f.call(&JsValue::from(obj.clone()), &[key], ctx)?;
            // A toJSON returning the same object would loop forever.
            if replaced
                .as_object()
                .is_some_and(|r| JsObject::equals(&r, &obj))
            {
                return Ok(Some(Value::Object(Map::new())));
            }
            self.ancestors.push(obj);
            let out = self.walk(&replaced, ctx);
            self.ancestors.pop();
            return out;
        }

        self.ancestors.push(obj.clone());
        let out = if obj.is_array() {
            self.walk_array(&obj, ctx)
        } else {
            self.walk_plain(&obj, ctx)
        };
        self.ancestors.pop();
        out.map(Some)
    }

    fn walk_array(&mut self, obj: &JsObject, ctx: &mut Context) -> JsResult<Value> {
        let len = length(obj, ctx)?;
        let len = u32::try_from(len)
            .map_err(|_| JsNativeError::range().with_message("array too long"))?;
        let mut out = Vec::with_capacity(len.min(1 << 16) as usize);
        for i in 0..len {
            let item = obj.get(i, ctx)?;
            self.path.push(Segment::Index(i));
            let v = self.walk(&item, ctx);
            self.path.pop();
            out.push(v?.unwrap_or(Value::Null));
        }
        Ok(Value::Array(out))
    }

    fn walk_plain(&mut self, obj: &JsObject, ctx: &mut Context) -> JsResult<Value> {
        let mut out = Map::new();
        if let Ok(native) = JsError::from_opaque(JsValue::from(obj.clone())).try_native(ctx) {
            // Error objects: their name and message are not enumerable, so
            // JSON.stringify would turn every caught error into `{}`.
            let name = obj.get(boa_engine::js_string!("name"), ctx)?;
            let name = name.to_string(ctx)?.to_std_string_lossy();
            out.insert("name".into(), Value::String(name));
            out.insert(
                "message".into(),
                Value::String(native.message().to_string()),
            );
        }
        for key in enumerable_keys(obj, ctx)? {
            let item = obj.get(boa_engine::JsString::from(key.as_str()), ctx)?;
            self.path.push(Segment::Key(key.clone()));
            let v = self.walk(&item, ctx);
            self.path.pop();
            if let Some(v) = v? {
                out.insert(key, v);
            }
        }
        Ok(Value::Object(out))
    }
}

/// Own enumerable string keys in property order (what `Object.keys` gives).
fn enumerable_keys(obj: &JsObject, ctx: &mut Context) -> JsResult<Vec<String>> {
    let keys_fn = crate::builtins::object_keys(ctx);
    let keys = keys_fn.call(&JsValue::undefined(), &[JsValue::from(obj.clone())], ctx)?;
    let keys = keys
        .as_object()
        .ok_or_else(|| JsNativeError::typ().with_message("Object.keys returned a non-object"))?;
    let len = length(&keys, ctx)?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let k = keys.get(i, ctx)?;
        out.push(k.to_string(ctx)?.to_std_string_lossy());
    }
    Ok(out)
}

/// `ToLength(obj.length)`.
fn length(obj: &JsObject, ctx: &mut Context) -> JsResult<u64> {
    let len = obj
        .get(boa_engine::js_string!("length"), ctx)?
        .to_length(ctx)?;
    Ok(len)
}

fn number(f: f64) -> Value {
    if !f.is_finite() {
        return Value::Null;
    }
    if f.fract() == 0.0 && f.abs() <= SAFE_INTEGER {
        // -0 is written as 0, like JSON.stringify.
        return Value::from(f as i64);
    }
    Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

fn render_path(root: &str, path: &[Segment]) -> String {
    let mut s = String::from(root);
    for seg in path {
        match seg {
            Segment::Index(i) => s.push_str(&format!("[{i}]")),
            Segment::Key(k) if is_identifier(k) => {
                s.push('.');
                s.push_str(k);
            }
            Segment::Key(k) => s.push_str(&format!("[{}]", Value::String(k.clone()))),
        }
    }
    s
}

fn is_identifier(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// Parses JSON bytes from the host into a JS value. The host only sends
/// JSON it produced itself, but a malformed payload still becomes a JS
/// error rather than a panic.
pub fn from_json_bytes(bytes: &[u8], ctx: &mut Context) -> JsResult<JsValue> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        JsNativeError::syntax().with_message(format!("tool result is not valid JSON: {e}"))
    })?;
    JsValue::from_json(&value, ctx)
}
