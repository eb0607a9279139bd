//! `JSON.stringify` writing one buffer, when there is no replacer.
//!
//! boa 0.22 builds a string for every value, a vector for every member and
//! another for every object and array, so each character of the result is
//! copied once per level it is nested in; on the 1,000-row round trip of
//! docs/PERFORMANCE.md (issue 19) `JSON.stringify` took twice as long as
//! building the rows. This one follows the same steps of the language's
//! `SerializeJSONProperty` — the same `Get`s in the same order, `toJSON`
//! called with the same key, boxed primitives unwrapped through the same
//! conversions, the same errors — and appends to a single buffer. Nesting
//! deeper than the realm's recursion limit ends the script with that
//! limit's error (boa's own recursed until the guest's stack ran out, a
//! trap at about 3,000 levels).
//!
//! With a replacer (a function or a property list) or a boxed `space`,
//! boa's own `JSON.stringify` runs, unchanged. `sandbox/tests/language.rs`
//! compares the two: a replacer that returns every value unchanged takes
//! boa's path and must give the same text and the same side effects.

use std::collections::HashSet;

use airlock_guest_sdk::abi::RECURSION_DEPTH;
use boa_engine::{
    error::{EngineError, RuntimeLimitError},
    js_string,
    property::PropertyKey,
    string::JsStrVariant,
    value::JsVariant,
    Context, JsArgs, JsBigInt, JsError, JsNativeError, JsObject, JsResult, JsStr, JsString,
    JsValue, NativeFunction,
};

thread_local! {
    /// Objects and arrays being written, over all `JSON.stringify` calls
    /// under way (one thread runs the realm).
    static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The intrinsics a stringify needs, captured before any script runs:
/// boa's `JSON.stringify`, `JSON.isRawJSON`, `Array.isArray` and
/// `Reflect.get`.
type Intrinsics = (JsObject, JsObject, JsObject, JsObject);

/// Replaces `JSON.stringify` in the realm being built.
pub fn install(ctx: &mut Context) -> JsResult<()> {
    let method = crate::builtins::intrinsic;
    let json = method(&ctx.global_object(), "JSON", ctx)?;
    let array = ctx.intrinsics().constructors().array().constructor();
    let intrinsics = (
        method(&json, "stringify", ctx)?,
        method(&json, "isRawJSON", ctx)?,
        method(&array, "isArray", ctx)?,
        method(&ctx.intrinsics().objects().reflect(), "get", ctx)?,
    );
    let stringify = NativeFunction::from_copy_closure_with_captures(stringify, intrinsics);
    crate::builtins::replace_method(&json, js_string!("stringify"), 3, stringify, ctx)
}

fn stringify(
    this: &JsValue,
    args: &[JsValue],
    intrinsics: &Intrinsics,
    ctx: &mut Context,
) -> JsResult<JsValue> {
    let (replacer, space) = (args.get_or_undefined(1), args.get_or_undefined(2));
    if replacer.is_object() || space.is_object() {
        return intrinsics.0.call(this, args, ctx);
    }
    let mut writer = Writer {
        out: Vec::new(),
        gap: gap(space),
        indent: Vec::new(),
        stack: HashSet::new(),
        intrinsics,
        to_json: js_string!("toJSON").into(),
        length: js_string!("length").into(),
    };
    let written = writer.property(args.get_or_undefined(0).clone(), Key::Empty, ctx)?;
    Ok(if written {
        writer.finish().into()
    } else {
        JsValue::undefined()
    })
}

/// The `space` argument as the text one level of nesting adds: up to 10
/// spaces for a number, the first 10 code units of a string, else none.
fn gap(space: &JsValue) -> Vec<u16> {
    if let Some(n) = space.as_number() {
        let n = n.trunc();
        let count = if n.is_nan() || n < 1.0 {
            0
        } else {
            n.min(10.0) as usize
        };
        return vec![u16::from(b' '); count];
    }
    match space.as_string() {
        Some(s) => s.iter().take(10).collect(),
        None => Vec::new(),
    }
}

/// The key a value was read under, made a string only if `toJSON` asks.
#[derive(Clone)]
enum Key {
    Empty,
    Index(u32),
    Name(JsString),
}

impl Key {
    fn value(&self) -> JsValue {
        match self {
            Key::Empty => js_string!().into(),
            Key::Index(i) => JsString::from(i.to_string()).into(),
            Key::Name(s) => s.clone().into(),
        }
    }
}

struct Writer<'a> {
    out: Vec<u16>,
    gap: Vec<u16>,
    indent: Vec<u16>,
    /// The objects and arrays being written, to refuse a cycle.
    stack: HashSet<JsObject>,
    intrinsics: &'a Intrinsics,
    /// Keys read for every object, made once.
    to_json: PropertyKey,
    length: PropertyKey,
}

impl Writer<'_> {
    /// `SerializeJSONProperty` for a value already read from its holder.
    /// Returns false, having written nothing, where the language's answer
    /// is undefined.
    fn property(&mut self, mut value: JsValue, key: Key, ctx: &mut Context) -> JsResult<bool> {
        if value.is_object() || value.is_bigint() {
            let to_json = self.get_v(&value, ctx)?;
            if let Some(f) = to_json.as_callable() {
                value = f.call(&value, &[key.value()], ctx)?;
            }
        }
        if let Some(obj) = value.as_object() {
            if obj.is::<f64>() {
                value = value.to_number(ctx)?.into();
            } else if obj.is::<JsString>() {
                value = value.to_string(ctx)?.into();
            } else if let Some(b) = obj.downcast_ref::<bool>().map(|b| *b) {
                value = b.into();
            } else if let Some(big) = obj.downcast_ref::<JsBigInt>().map(|b| b.clone()) {
                value = big.into();
            } else if obj.prototype().is_none() && self.is_raw_json(&value, ctx)? {
                let raw = obj.get(js_string!("rawJSON"), ctx)?;
                if let Some(s) = raw.as_string() {
                    self.out.extend(s.iter());
                    return Ok(true);
                }
                return Ok(false);
            }
        }
        match value.variant() {
            JsVariant::Null => self.ascii("null"),
            JsVariant::Boolean(true) => self.ascii("true"),
            JsVariant::Boolean(false) => self.ascii("false"),
            JsVariant::String(s) => self.quote(&s),
            JsVariant::Integer32(i) => self.ascii(&i.to_string()),
            JsVariant::Float64(n) => self.number(n, ctx)?,
            JsVariant::BigInt(_) => {
                return Err(JsNativeError::typ()
                    .with_message("cannot serialize bigint to JSON")
                    .into())
            }
            JsVariant::Object(obj) if !obj.is_callable() => {
                let members = if self.is_array(&obj, ctx)? {
                    Self::array_members
                } else {
                    Self::object_members
                };
                self.nested(&obj, members, ctx)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `GetV(value, "toJSON")`. A BigInt is read through its prototype with
    /// the primitive as the receiver (`Reflect.get`), so a getter sees the
    /// same `this` as in the language.
    fn get_v(&self, value: &JsValue, ctx: &mut Context) -> JsResult<JsValue> {
        if let Some(obj) = value.as_object() {
            return obj.get(self.to_json.clone(), ctx);
        }
        let wrapper = value.to_object(ctx)?;
        self.intrinsics.3.call(
            &JsValue::undefined(),
            &[wrapper.into(), js_string!("toJSON").into(), value.clone()],
            ctx,
        )
    }

    fn is_raw_json(&self, value: &JsValue, ctx: &mut Context) -> JsResult<bool> {
        let answer =
            self.intrinsics
                .1
                .call(&JsValue::undefined(), std::slice::from_ref(value), ctx)?;
        Ok(answer.to_boolean())
    }

    /// `IsArray`: an array, or a proxy for one (asked of `Array.isArray`,
    /// which also throws for a revoked proxy, as the language does).
    fn is_array(&self, obj: &JsObject, ctx: &mut Context) -> JsResult<bool> {
        if obj.is_array() {
            return Ok(true);
        }
        if !obj.is::<boa_engine::builtins::proxy::Proxy>() {
            return Ok(false);
        }
        let answer = self
            .intrinsics
            .2
            .call(&JsValue::undefined(), &[obj.clone().into()], ctx)?;
        Ok(answer.to_boolean())
    }

    fn number(&mut self, n: f64, ctx: &mut Context) -> JsResult<()> {
        if !n.is_finite() {
            self.ascii("null");
        } else if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_991.0 {
            // Integers a double holds exactly print as the integer (and -0
            // as 0), as Number's toString does.
            self.ascii(&(n as i64).to_string());
        } else {
            let text = JsValue::from(n).to_string(ctx)?;
            self.out.extend(text.iter());
        }
        Ok(())
    }

    /// Enters `obj`: refuses a cycle, and nesting past the recursion limit.
    /// The depth counts every `JSON.stringify` under way, so a `toJSON`
    /// or getter that calls it again nests against the same limit.
    fn enter(&mut self, obj: &JsObject) -> JsResult<()> {
        if self.stack.contains(obj) {
            return Err(JsNativeError::typ()
                .with_message("cyclic object value")
                .into());
        }
        if DEPTH.get() >= RECURSION_DEPTH as usize {
            return Err(JsError::from(EngineError::RuntimeLimit(
                RuntimeLimitError::Recursion,
            )));
        }
        DEPTH.set(DEPTH.get() + 1);
        self.stack.insert(obj.clone());
        self.indent.extend_from_slice(&self.gap);
        Ok(())
    }

    fn leave(&mut self, obj: &JsObject) {
        DEPTH.set(DEPTH.get() - 1);
        self.stack.remove(obj);
        let depth = self.indent.len() - self.gap.len();
        self.indent.truncate(depth);
    }

    /// Before a member: `,` after the first, then a new line and the
    /// indentation when there is a gap.
    fn separator(&mut self, first: bool) {
        if !first {
            self.out.push(u16::from(b','));
        }
        if !self.gap.is_empty() {
            self.out.push(u16::from(b'\n'));
            self.out.extend_from_slice(&self.indent);
        }
    }

    /// After the last member, when there was one: the closing line.
    fn close(&mut self, bracket: u8) {
        if !self.gap.is_empty() {
            self.out.push(u16::from(b'\n'));
            let outer = self.indent.len() - self.gap.len();
            self.out.extend_from_slice(&self.indent[..outer]);
        }
        self.out.push(u16::from(bracket));
    }

    /// Writes `obj`'s members between `enter` and `leave`, which run
    /// whether the members fail or not.
    fn nested(
        &mut self,
        obj: &JsObject,
        members: fn(&mut Self, &JsObject, &mut Context) -> JsResult<()>,
        ctx: &mut Context,
    ) -> JsResult<()> {
        self.enter(obj)?;
        let result = members(self, obj, ctx);
        self.leave(obj);
        result
    }

    /// `SerializeJSONArray`, inside `nested`.
    fn array_members(&mut self, obj: &JsObject, ctx: &mut Context) -> JsResult<()> {
        let length = obj.get(self.length.clone(), ctx)?.to_length(ctx)?;
        self.out.push(u16::from(b'['));
        if length == 0 {
            self.out.push(u16::from(b']'));
            return Ok(());
        }
        for index in 0..length {
            self.separator(index == 0);
            let value = obj.get(index, ctx)?;
            let key = u32::try_from(index)
                .map_or_else(|_| Key::Name(JsString::from(index.to_string())), Key::Index);
            if !self.property(value, key, ctx)? {
                self.ascii("null");
            }
        }
        self.close(b']');
        Ok(())
    }

    /// `SerializeJSONObject`, inside `nested`.
    fn object_members(&mut self, obj: &JsObject, ctx: &mut Context) -> JsResult<()> {
        let keys = crate::builtins::object_keys(ctx).call(
            &JsValue::undefined(),
            &[obj.clone().into()],
            ctx,
        )?;
        let keys = keys
            .as_object()
            .ok_or_else(|| JsNativeError::typ().with_message("Object.keys gave no array"))?;
        let count = keys.get(self.length.clone(), ctx)?.to_length(ctx)?;
        self.out.push(u16::from(b'{'));
        let mut first = true;
        for i in 0..count {
            let name = keys.get(i, ctx)?.to_string(ctx)?;
            let value = obj.get(name.clone(), ctx)?;
            let mark = self.out.len();
            self.separator(first);
            self.quote(&name);
            self.out.push(u16::from(b':'));
            if !self.gap.is_empty() {
                self.out.push(u16::from(b' '));
            }
            if self.property(value, Key::Name(name), ctx)? {
                first = false;
            } else {
                self.out.truncate(mark);
            }
        }
        if first {
            self.out.push(u16::from(b'}'));
        } else {
            self.close(b'}');
        }
        Ok(())
    }

    fn ascii(&mut self, text: &str) {
        self.out.extend(text.bytes().map(u16::from));
    }

    /// `QuoteJSONString`.
    fn quote(&mut self, s: &JsString) {
        self.out.push(u16::from(b'"'));
        let units = match s.as_str().variant() {
            JsStrVariant::Latin1(bytes) => {
                for &b in bytes {
                    self.unit(u16::from(b));
                }
                self.out.push(u16::from(b'"'));
                return;
            }
            JsStrVariant::Utf16(wide) => wide,
        };
        let mut i = 0;
        while i < units.len() {
            let u = units[i];
            match u {
                0xd800..0xdc00
                    if units
                        .get(i + 1)
                        .is_some_and(|n| (0xdc00..0xe000).contains(n)) =>
                {
                    self.out.extend_from_slice(&units[i..i + 2]);
                    i += 1;
                }
                0xd800..0xe000 => self.escape(u),
                _ => self.unit(u),
            }
            i += 1;
        }
        self.out.push(u16::from(b'"'));
    }

    /// One code unit of a string that is not a surrogate.
    fn unit(&mut self, u: u16) {
        match u {
            0x08 => self.ascii("\\b"),
            0x09 => self.ascii("\\t"),
            0x0a => self.ascii("\\n"),
            0x0c => self.ascii("\\f"),
            0x0d => self.ascii("\\r"),
            0x22 => self.ascii("\\\""),
            0x5c => self.ascii("\\\\"),
            0..0x20 => self.escape(u),
            _ => self.out.push(u),
        }
    }

    fn escape(&mut self, unit: u16) {
        self.ascii(&format!("\\u{unit:04x}"));
    }

    /// The result, one byte a character when every character fits.
    fn finish(self) -> JsString {
        if self.out.iter().all(|&u| u <= 0xff) {
            let bytes: Vec<u8> = self.out.iter().map(|&u| u as u8).collect();
            JsString::from(JsStr::latin1(&bytes))
        } else {
            JsString::from(&self.out[..])
        }
    }
}
