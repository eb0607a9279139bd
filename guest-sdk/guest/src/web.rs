//! The web-platform globals every other JavaScript runtime agents meet
//! has (browsers, Node, Deno, Workers) and boa has not: `atob`/`btoa`,
//! `TextEncoder`/`TextDecoder` (UTF-8) and `structuredClone`. Written in
//! JavaScript, evaluated once when the realm is built (so in the
//! pre-initialised snapshot a fresh instance starts from), and drawing on
//! nothing outside the realm: no time, no randomness. And `performance`,
//! which agents time their steps with: built at its first use (lazy.rs),
//! reading `Date.now()`'s clock (journaled, whole milliseconds).

use boa_engine::{Context, JsResult, Source};

const WEB: &str = r#"(function () {
  'use strict';
  const define = (name, value) => Object.defineProperty(globalThis, name, {
    value, writable: true, enumerable: false, configurable: true,
  });
  const failure = (name, message) => { const e = new Error(message); e.name = name; return e; };
  const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const VALUE = new Map();
  for (let i = 0; i < ALPHABET.length; i++) VALUE.set(ALPHABET[i], i);

  define('btoa', function btoa(data) {
    if (arguments.length === 0) throw new TypeError('btoa: 1 argument required');
    const s = String(data);
    const code = (i) => {
      const c = s.charCodeAt(i);
      if (c > 255) throw failure('InvalidCharacterError', 'btoa: the string has characters outside Latin-1 (encode it first: btoa(String.fromCharCode(...new TextEncoder().encode(s))))');
      return c;
    };
    const out = [];
    for (let i = 0; i < s.length; i += 3) {
      const a = code(i);
      const b = i + 1 < s.length ? code(i + 1) : 0;
      const c = i + 2 < s.length ? code(i + 2) : 0;
      const t = (a << 16) | (b << 8) | c;
      out.push(ALPHABET[(t >> 18) & 63] + ALPHABET[(t >> 12) & 63]
        + (i + 1 < s.length ? ALPHABET[(t >> 6) & 63] : '=')
        + (i + 2 < s.length ? ALPHABET[t & 63] : '='));
    }
    return out.join('');
  });

  define('atob', function atob(data) {
    if (arguments.length === 0) throw new TypeError('atob: 1 argument required');
    let s = String(data).replace(/[\t\n\f\r ]/g, '');
    if (s.length % 4 === 0) s = s.replace(/==?$/, '');
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) {
      throw failure('InvalidCharacterError', 'atob: the string is not valid base64');
    }
    const chunks = [], codes = [];
    let bits = 0, held = 0;
    for (let i = 0; i < s.length; i++) {
      bits = ((bits << 6) | VALUE.get(s[i])) & 0xffffff;
      held += 6;
      if (held >= 8) {
        held -= 8;
        codes.push((bits >> held) & 255);
        if (codes.length >= 4096) { chunks.push(String.fromCharCode(...codes)); codes.length = 0; }
      }
    }
    chunks.push(String.fromCharCode(...codes));
    return chunks.join('');
  });

  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(input = '') {
      const s = String(input);
      const bytes = [];
      for (let i = 0; i < s.length; i++) {
        let c = s.charCodeAt(i);
        if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
          const d = s.charCodeAt(i + 1);
          if (d >= 0xdc00 && d <= 0xdfff) { c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00); i++; }
          else c = 0xfffd;
        } else if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
        if (c < 0x80) bytes.push(c);
        else if (c < 0x800) bytes.push(0xc0 | (c >> 6), 0x80 | (c & 63));
        else if (c < 0x10000) bytes.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
        else bytes.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      }
      return new Uint8Array(bytes);
    }
  }
  define('TextEncoder', TextEncoder);

  class TextDecoder {
    #fatal;
    constructor(label = 'utf-8', options = {}) {
      const l = String(label).trim().toLowerCase();
      if (l !== 'utf-8' && l !== 'utf8' && l !== 'unicode-1-1-utf-8') {
        throw new RangeError(`TextDecoder: only utf-8 is available here, not "${label}"`);
      }
      this.#fatal = Boolean(options && options.fatal);
    }
    get encoding() { return 'utf-8'; }
    get fatal() { return this.#fatal; }
    decode(input) {
      if (input === undefined) return '';
      let bytes;
      if (input instanceof ArrayBuffer) bytes = new Uint8Array(input);
      else if (ArrayBuffer.isView(input)) bytes = new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
      else throw new TypeError('TextDecoder.decode: give an ArrayBuffer or a typed array');
      const chunks = [];
      let i = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
      const bad = () => {
        if (this.#fatal) throw new TypeError('TextDecoder: the bytes are not valid UTF-8');
        return 0xfffd;
      };
      const parts = [];
      while (i < bytes.length) {
        if (parts.length >= 4096) { chunks.push(String.fromCodePoint(...parts)); parts.length = 0; }
        const a = bytes[i];
        if (a < 0x80) { parts.push(a); i++; continue; }
        let c, n, min;
        if (a >= 0xc2 && a <= 0xdf) { c = a & 31; n = 1; min = 0x80; }
        else if (a >= 0xe0 && a <= 0xef) { c = a & 15; n = 2; min = 0x800; }
        else if (a >= 0xf0 && a <= 0xf4) { c = a & 7; n = 3; min = 0x10000; }
        else { parts.push(bad()); i++; continue; }
        let j = 1;
        for (; j <= n; j++) {
          const b = bytes[i + j];
          if (b === undefined || (b & 0xc0) !== 0x80) break;
          c = (c << 6) | (b & 63);
        }
        if (j <= n || c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
          parts.push(bad());
          i += j;
          continue;
        }
        parts.push(c);
        i += n + 1;
      }
      chunks.push(String.fromCodePoint(...parts));
      return chunks.join('');
    }
  }
  define('TextDecoder', TextDecoder);

  define('structuredClone', function structuredClone(value) {
    const seen = new Map();
    const clone = (v) => {
      if (v === null || (typeof v !== 'object' && typeof v !== 'function' && typeof v !== 'symbol')) return v;
      if (typeof v === 'function' || typeof v === 'symbol') {
        throw failure('DataCloneError', `structuredClone: a ${typeof v} cannot be cloned`);
      }
      if (seen.has(v)) return seen.get(v);
      let out;
      if (Array.isArray(v)) {
        out = new Array(v.length);
        seen.set(v, out);
        for (let i = 0; i < v.length; i++) if (i in v) out[i] = clone(v[i]);
        return out;
      }
      if (v instanceof Date) out = new Date(v.getTime());
      else if (v instanceof RegExp) out = new RegExp(v.source, v.flags);
      else if (v instanceof Map) { out = new Map(); seen.set(v, out); for (const [k, x] of v) out.set(clone(k), clone(x)); return out; }
      else if (v instanceof Set) { out = new Set(); seen.set(v, out); for (const x of v) out.add(clone(x)); return out; }
      else if (v instanceof ArrayBuffer) out = v.slice(0);
      else if (ArrayBuffer.isView(v)) {
        const buffer = clone(v.buffer);
        out = v instanceof DataView ? new DataView(buffer, v.byteOffset, v.byteLength)
          : new v.constructor(buffer, v.byteOffset, v.length);
      }
      else if (v instanceof Error) { out = new Error(v.message); out.name = v.name; if ('cause' in v) out.cause = clone(v.cause); }
      else if (v instanceof Promise || v instanceof WeakMap || v instanceof WeakSet) {
        throw failure('DataCloneError', `structuredClone: a ${v.constructor.name} cannot be cloned`);
      }
      else {
        out = {};
        seen.set(v, out);
        for (const k of Object.keys(v)) out[k] = clone(v[k]);
        return out;
      }
      seen.set(v, out);
      return out;
    };
    return clone(value);
  });
})"#;

/// `performance.now()`: milliseconds since the script first reached for
/// `performance`, from `Date.now()`'s clock. That clock is the one a
/// durable execution journals, at the resolution the script sees (whole
/// milliseconds), so a replay reads the same times; a finer clock would
/// only be a second journal of the same thing.
const PERFORMANCE: &str = r#"(function () {
  'use strict';
  const origin = Date.now();
  const performance = {
    timeOrigin: origin,
    now() { return Date.now() - origin; },
    toJSON() { return { timeOrigin: origin }; },
  };
  Object.defineProperty(performance, Symbol.toStringTag, { value: 'Performance' });
  Object.defineProperty(globalThis, 'performance', {
    value: Object.freeze(performance), writable: true, enumerable: false, configurable: true,
  });
})"#;

/// Defines the globals above on the realm being built.
pub(crate) fn install(ctx: &mut Context) -> JsResult<()> {
    let installer = ctx.eval(Source::from_bytes(WEB))?;
    if let Some(f) = installer.as_callable() {
        f.call(&boa_engine::JsValue::undefined(), &[], ctx)?;
    }
    crate::lazy::install(ctx, &["performance"], &[], PERFORMANCE, |ctx| {
        boa_engine::object::ObjectInitializer::new(ctx).build()
    })
}
