//! `%TypedArray%.prototype.fill` that writes the buffer's bytes directly.
//!
//! boa's `fill` stores every element through the generic element set,
//! about 70 ns each in the guest: 70 ms to fill a megabyte
//! (docs/PERFORMANCE.md, issue 38). When nothing the script wrote can run
//! in between — the value is a number and the start and end are numbers
//! or absent, so converting them calls no `valueOf` — and the array is a
//! Number-typed view over an ordinary `ArrayBuffer`, the first element is
//! stored by the language's own element set (so its conversion to the
//! element type is boa's, NaN bits included) and its bytes are copied over
//! the rest of the range. That is what the language's loop writes: one
//! converted value, the same in every element. Anything else — BigInt
//! arrays, a shared buffer, an object as the value, a short range — goes
//! to boa's own `fill`, unchanged.

use boa_engine::{
    builtins::typed_array::TypedArrayKind,
    js_string,
    object::builtins::{JsArrayBuffer, JsTypedArray},
    Context, JsArgs, JsObject, JsResult, JsValue, NativeFunction,
};

/// Below this many elements boa's own loop is quick enough.
const SHORT: usize = 16;

/// Replaces `%TypedArray%.prototype.fill` in the realm being built.
pub fn install(ctx: &mut Context) -> JsResult<()> {
    let proto = ctx.intrinsics().constructors().typed_array().prototype();
    let original = crate::builtins::intrinsic(&proto, "fill", ctx)?;
    let fill = NativeFunction::from_copy_closure_with_captures(fill, original);
    crate::builtins::replace_method(&proto, js_string!("fill"), 1, fill, ctx)
}

fn fill(
    this: &JsValue,
    args: &[JsValue],
    original: &JsObject,
    ctx: &mut Context,
) -> JsResult<JsValue> {
    if filled(this, args, ctx)? {
        return Ok(this.clone());
    }
    original.call(this, args, ctx)
}

/// Fills as the language would and says so, or leaves it to boa.
fn filled(this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<bool> {
    let Some(object) = this.as_object() else {
        return Ok(false);
    };
    let Ok(array) = JsTypedArray::from_object(object.clone()) else {
        return Ok(false);
    };
    let Some(size) = array.kind().and_then(element_size) else {
        return Ok(false);
    };
    let value = args.get_or_undefined(0);
    let (start, end) = (args.get_or_undefined(1), args.get_or_undefined(2));
    let plain = |v: &JsValue| v.is_undefined() || v.is_number();
    if !value.is_number() || !plain(start) || !plain(end) {
        return Ok(false);
    }
    // Out of bounds or detached reads as 0: boa's fill gives the error.
    let len = array.length(ctx)?;
    let start = relative(start, len, 0);
    let end = relative(end, len, len);
    if end <= start || end - start < SHORT || u32::try_from(start).is_err() {
        return Ok(false);
    }
    let Some(buffer) = array.buffer(ctx)?.as_object() else {
        return Ok(false);
    };
    let Ok(buffer) = JsArrayBuffer::from_object(buffer) else {
        return Ok(false); // a SharedArrayBuffer
    };
    let offset = array.byte_offset(ctx)?;
    // The language's own store of the first element: the conversion to
    // the element type is boa's.
    object.set(start as u32, value.clone(), true, ctx)?;
    let Some(mut data) = buffer.data_mut() else {
        return Ok(false);
    };
    let (first, stop) = (offset + start * size, offset + end * size);
    if stop > data.len() {
        return Ok(false);
    }
    let (head, rest) = data[first..stop].split_at_mut(size);
    if size == 1 {
        rest.fill(head[0]);
    } else {
        for element in rest.chunks_exact_mut(size) {
            element.copy_from_slice(head);
        }
    }
    Ok(true)
}

fn element_size(kind: TypedArrayKind) -> Option<usize> {
    use TypedArrayKind::*;
    match kind {
        Int8 | Uint8 | Uint8Clamped => Some(1),
        Int16 | Uint16 => Some(2),
        Int32 | Uint32 | Float32 => Some(4),
        Float64 => Some(8),
        _ => None, // BigInt64, BigUint64: BigInt content
    }
}

/// An index argument (a number or undefined) as the language clamps it:
/// `ToIntegerOrInfinity`, negative counts from the end, within `0..=len`.
fn relative(arg: &JsValue, len: usize, absent: usize) -> usize {
    let Some(n) = arg.as_number() else {
        return absent;
    };
    let n = if n.is_nan() { 0.0 } else { n.trunc() };
    if n < 0.0 {
        (len as f64 + n).max(0.0) as usize
    } else {
        n.min(len as f64) as usize
    }
}
