//! `crypto.getRandomValues` and `crypto.randomUUID`. The bytes come from
//! the host through WASI's `random_get`, the one door randomness has into
//! the sandbox, so a durable execution's journal records them and a
//! replay reads the same bytes back. No `crypto.subtle`: keys and
//! signatures belong to the tools, not to scripts.

use boa_engine::{
    js_string,
    object::{
        builtins::{AlignedVec, JsArrayBuffer},
        ObjectInitializer,
    },
    Context, JsArgs, JsNativeError, JsObject, JsResult, JsValue, NativeFunction,
};

/// Most bytes one `getRandomValues` fills, as the Web Crypto standard
/// says (and as many as the host hands out in one draw).
const QUOTA: usize = 65_536;

const CLASSES: &str = r#"(function (native) {
  'use strict';
  const INTEGER_ARRAYS = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array,
    Int32Array, Uint32Array, BigInt64Array, BigUint64Array];
  const failure = (name, message) => { const e = new Error(message); e.name = name; return e; };
  const hex = (b) => (b < 16 ? '0' : '') + b.toString(16);
  const crypto = {
    getRandomValues(array) {
      if (!INTEGER_ARRAYS.some((T) => array instanceof T)) {
        throw new TypeError('crypto.getRandomValues: give an integer typed array, e.g. new Uint8Array(16)');
      }
      if (array.byteLength > 65536) {
        throw failure('QuotaExceededError', `crypto.getRandomValues: ${array.byteLength} bytes asked, at most 65536 in one call`);
      }
      if (array.byteLength > 0) {
        new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(new Uint8Array(native.bytes(array.byteLength)));
      }
      return array;
    },
    randomUUID() {
      const b = new Uint8Array(native.bytes(16));
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      const h = Array.from(b, hex).join('');
      return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
    },
  };
  Object.defineProperty(crypto, Symbol.toStringTag, { value: 'Crypto' });
  Object.defineProperty(globalThis, 'crypto', {
    value: Object.freeze(crypto), writable: true, enumerable: false, configurable: true,
  });
})"#;

/// Puts `crypto` on the realm being built, built at its first use
/// (lazy.rs).
pub(crate) fn install(ctx: &mut Context) -> JsResult<()> {
    crate::lazy::install(ctx, &["crypto"], &[], CLASSES, natives)
}

fn natives(ctx: &mut Context) -> JsObject {
    let mut natives = ObjectInitializer::new(ctx);
    natives.function(NativeFunction::from_fn_ptr(bytes), js_string!("bytes"), 1);
    natives.build()
}

/// `bytes(n)`: an `ArrayBuffer` of `n` bytes drawn from the host.
fn bytes(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let n = args.get_or_undefined(0).to_number(ctx)?;
    if !(n >= 0.0 && n <= QUOTA as f64) {
        return Err(JsNativeError::range()
            .with_message("crypto: at most 65536 random bytes in one call")
            .into());
    }
    let mut block = AlignedVec::from_iter(0, std::iter::repeat_n(0u8, n as usize));
    getrandom::fill(&mut block[..]).map_err(|e| {
        JsNativeError::error().with_message(format!("crypto: the host gave no random bytes ({e})"))
    })?;
    Ok(JsArrayBuffer::from_byte_block(block, ctx)?.into())
}
