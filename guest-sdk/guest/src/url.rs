//! `URL` and `URLSearchParams`, the way agents build Proxmox API paths and
//! read query strings. The parsing is the `url` crate's (the WHATWG URL
//! Standard, as browsers and Node read URLs); the classes around it are
//! JavaScript, evaluated once when the realm is built. Nothing here reaches
//! a network: a URL is only text.

use boa_engine::{
    js_string,
    object::{builtins::JsArray, ObjectInitializer},
    Context, JsArgs, JsObject, JsResult, JsString, JsValue, NativeFunction,
};
use url::{quirks, Url};

const CLASSES: &str = r#"(function (native) {
  'use strict';
  const define = (name, value) => Object.defineProperty(globalThis, name, {
    value, writable: true, enumerable: false, configurable: true,
  });
  const text = (v) => {
    if (typeof v === 'symbol') throw new TypeError('URL: a Symbol cannot be converted to text');
    return String(v);
  };
  // A search-params object's list, and the URL it writes back to: kept
  // out of reach of scripts.
  const lists = new WeakMap();
  const owners = new WeakMap();

  class URLSearchParams {
    constructor(init = '') {
      let list = [];
      if (init instanceof URLSearchParams) list = lists.get(init).map(([k, v]) => [k, v]);
      else if (init !== null && typeof init === 'object' && typeof init[Symbol.iterator] === 'function') {
        for (const pair of init) {
          const p = Array.from(pair);
          if (p.length !== 2) throw new TypeError('URLSearchParams: each pair must be [name, value]');
          list.push([text(p[0]), text(p[1])]);
        }
      } else if (init !== null && typeof init === 'object') {
        for (const k of Object.keys(init)) list.push([k, text(init[k])]);
      } else {
        let s = text(init);
        if (s.startsWith('?')) s = s.slice(1);
        list = native.formParse(s);
      }
      lists.set(this, list);
    }
    #changed() {
      const owner = owners.get(this);
      if (owner) owner(this.toString());
    }
    get size() { return lists.get(this).length; }
    append(name, value) { lists.get(this).push([text(name), text(value)]); this.#changed(); }
    delete(name, value) {
      const n = text(name), v = value === undefined ? undefined : text(value);
      lists.set(this, lists.get(this).filter(([k, x]) => !(k === n && (v === undefined || x === v))));
      this.#changed();
    }
    get(name) { const n = text(name); const hit = lists.get(this).find(([k]) => k === n); return hit ? hit[1] : null; }
    getAll(name) { const n = text(name); return lists.get(this).filter(([k]) => k === n).map(([, v]) => v); }
    has(name, value) {
      const n = text(name), v = value === undefined ? undefined : text(value);
      return lists.get(this).some(([k, x]) => k === n && (v === undefined || x === v));
    }
    set(name, value) {
      const n = text(name), v = text(value);
      const list = lists.get(this);
      const at = list.findIndex(([k]) => k === n);
      if (at < 0) list.push([n, v]);
      else lists.set(this, list.filter(([k], i) => k !== n || i === at).map((p, i) => p[0] === n ? [n, v] : p));
      this.#changed();
    }
    sort() {
      const list = lists.get(this);
      // Stable, by UTF-16 code units, as the standard says.
      lists.set(this, list.map((p, i) => [p, i]).sort((a, b) => (a[0][0] < b[0][0] ? -1 : a[0][0] > b[0][0] ? 1 : a[1] - b[1])).map(([p]) => p));
      this.#changed();
    }
    forEach(callback, thisArg) {
      const list = lists.get(this);
      for (let i = 0; i < list.length; i++) callback.call(thisArg, list[i][1], list[i][0], this);
    }
    *entries() { for (const [k, v] of lists.get(this)) yield [k, v]; }
    *keys() { for (const [k] of lists.get(this)) yield k; }
    *values() { for (const [, v] of lists.get(this)) yield v; }
    [Symbol.iterator]() { return this.entries(); }
    toString() { return native.formSerialize(lists.get(this)); }
    get [Symbol.toStringTag]() { return 'URLSearchParams'; }
  }

  class URL {
    #parts;
    #params = null;
    constructor(url, base) {
      if (arguments.length === 0) throw new TypeError('URL: 1 argument required, e.g. new URL("https://pve1:8006/api2/json")');
      const parts = native.parse(text(url), base === undefined ? undefined : text(base));
      if (parts === null) {
        throw new TypeError(base === undefined
          ? `URL: "${text(url)}" is not an absolute URL; give one such as "https://pve1:8006/api2/json", or a base: new URL(path, "https://pve1:8006")`
          : `URL: "${text(url)}" is not a valid URL against the base "${text(base)}"`);
      }
      this.#parts = parts;
    }
    static canParse(url, base) {
      return native.parse(text(url), base === undefined ? undefined : text(base)) !== null;
    }
    static parse(url, base) {
      try { return new URL(url, base); } catch { return null; }
    }
    #set(field, value) {
      // The standard's parser drops tabs and newlines from a setter's
      // value as from a whole URL; the setters here would keep them.
      const v = field === 'href' ? text(value) : text(value).replace(/[\t\n\r]/g, '');
      const parts = native.set(this.#parts[0], field, v);
      if (parts === null) {
        if (field === 'href') throw new TypeError(`URL: "${text(value)}" is not an absolute URL`);
        return;
      }
      this.#parts = parts;
      if (this.#params !== null && (field === 'href' || field === 'search')) {
        lists.set(this.#params, native.formParse(parts[9].slice(1)));
      }
    }
    get searchParams() {
      if (this.#params === null) {
        const params = new URLSearchParams(this.#parts[9]);
        owners.set(params, (query) => {
          const parts = native.set(this.#parts[0], 'search', query);
          if (parts !== null) this.#parts = parts;
        });
        this.#params = params;
      }
      return this.#params;
    }
    get href() { return this.#parts[0]; }
    set href(v) { this.#set('href', v); }
    get origin() { return this.#parts[1]; }
    get protocol() { return this.#parts[2]; }
    set protocol(v) { this.#set('protocol', v); }
    get username() { return this.#parts[3]; }
    set username(v) { this.#set('username', v); }
    get password() { return this.#parts[4]; }
    set password(v) { this.#set('password', v); }
    get host() { return this.#parts[5]; }
    set host(v) { this.#set('host', v); }
    get hostname() { return this.#parts[6]; }
    set hostname(v) { this.#set('hostname', v); }
    get port() { return this.#parts[7]; }
    set port(v) { this.#set('port', v); }
    get pathname() { return this.#parts[8]; }
    set pathname(v) { this.#set('pathname', v); }
    get search() { return this.#parts[9]; }
    set search(v) { this.#set('search', v); }
    get hash() { return this.#parts[10]; }
    set hash(v) { this.#set('hash', v); }
    toString() { return this.#parts[0]; }
    toJSON() { return this.#parts[0]; }
    get [Symbol.toStringTag]() { return 'URL'; }
  }
  define('URL', URL);
  define('URLSearchParams', URLSearchParams);
})"#;

/// Puts `URL` and `URLSearchParams` on the realm being built, built at
/// their first use (lazy.rs).
pub(crate) fn install(ctx: &mut Context) -> JsResult<()> {
    crate::lazy::install(ctx, &["URL", "URLSearchParams"], &[], CLASSES, natives)
}

fn natives(ctx: &mut Context) -> JsObject {
    let mut natives = ObjectInitializer::new(ctx);
    natives.function(NativeFunction::from_fn_ptr(parse), js_string!("parse"), 2);
    natives.function(NativeFunction::from_fn_ptr(set), js_string!("set"), 3);
    natives.function(
        NativeFunction::from_fn_ptr(form_parse),
        js_string!("formParse"),
        1,
    );
    natives.function(
        NativeFunction::from_fn_ptr(form_serialize),
        js_string!("formSerialize"),
        1,
    );
    natives.build()
}

fn string(value: &JsValue) -> Option<String> {
    value.as_string().map(|s| s.to_std_string_lossy())
}

/// The URL's fields in the order the classes read them.
fn fields(url: &Url) -> [String; 11] {
    [
        quirks::href(url).to_string(),
        quirks::origin(url),
        quirks::protocol(url).to_string(),
        quirks::username(url).to_string(),
        quirks::password(url).to_string(),
        quirks::host(url).to_string(),
        quirks::hostname(url).to_string(),
        quirks::port(url).to_string(),
        quirks::pathname(url).to_string(),
        quirks::search(url).to_string(),
        quirks::hash(url).to_string(),
    ]
}

fn parts(url: &Url, ctx: &mut Context) -> JsValue {
    JsArray::from_iter(
        fields(url)
            .into_iter()
            .map(|f| JsValue::from(JsString::from(f.as_str()))),
        ctx,
    )
    .into()
}

/// `parse(input, base?)`: the parts of the URL, or `null` when it is not one.
fn parse(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let input = string(args.get_or_undefined(0)).unwrap_or_default();
    let parsed = match string(args.get_or_undefined(1)) {
        Some(base) => Url::parse(&base).and_then(|b| b.join(&input)),
        None => Url::parse(&input),
    };
    Ok(match parsed {
        Ok(url) => parts(&url, ctx),
        Err(_) => JsValue::null(),
    })
}

/// `set(href, field, value)`: the parts after setting one field the way the
/// standard's setters do, or `null` when the href does not parse (a
/// setter that refuses a value leaves the URL as it was).
fn set(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let href = string(args.get_or_undefined(0)).unwrap_or_default();
    let field = string(args.get_or_undefined(1)).unwrap_or_default();
    let value = string(args.get_or_undefined(2)).unwrap_or_default();
    let Ok(mut url) = Url::parse(&href) else {
        return Ok(JsValue::null());
    };
    let done = match field.as_str() {
        "href" => quirks::set_href(&mut url, &value).is_ok(),
        "protocol" => quirks::set_protocol(&mut url, &value).is_ok(),
        "username" => quirks::set_username(&mut url, &value).is_ok(),
        "password" => quirks::set_password(&mut url, &value).is_ok(),
        "host" => quirks::set_host(&mut url, &value).is_ok(),
        "hostname" => quirks::set_hostname(&mut url, &value).is_ok(),
        "port" => quirks::set_port(&mut url, &value).is_ok(),
        "pathname" => {
            quirks::set_pathname(&mut url, &value);
            true
        }
        "search" => {
            quirks::set_search(&mut url, &value);
            true
        }
        "hash" => {
            quirks::set_hash(&mut url, &value);
            true
        }
        _ => false,
    };
    if !done && field == "href" {
        return Ok(JsValue::null());
    }
    // A set whose href reads back as another URL (a host that appears
    // once the href is parsed again) is not made: what a script reads
    // must be what it would send.
    match Url::parse(url.as_str()) {
        Ok(again) if fields(&again) == fields(&url) => Ok(parts(&url, ctx)),
        _ => Ok(Url::parse(&href).map_or(JsValue::null(), |old| parts(&old, ctx))),
    }
}

/// `formParse(query)`: `[[name, value], ...]` as
/// `application/x-www-form-urlencoded` reads it.
fn form_parse(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let query = string(args.get_or_undefined(0)).unwrap_or_default();
    let pairs: Vec<JsValue> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| {
            JsArray::from_iter(
                [
                    JsValue::from(JsString::from(k.as_ref())),
                    JsValue::from(JsString::from(v.as_ref())),
                ],
                ctx,
            )
            .into()
        })
        .collect();
    Ok(JsArray::from_iter(pairs, ctx).into())
}

/// `formSerialize([[name, value], ...])`: the query string.
fn form_serialize(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let mut out = form_urlencoded::Serializer::new(String::new());
    if let Some(list) = args.get_or_undefined(0).as_object() {
        let list = JsArray::from_object(list.clone())?;
        for i in 0..list.length(ctx)? {
            let pair = list.get(i, ctx)?;
            let Some(pair) = pair.as_object() else {
                continue;
            };
            let k = pair.get(0, ctx)?.to_string(ctx)?.to_std_string_lossy();
            let v = pair.get(1, ctx)?.to_string(ctx)?.to_std_string_lossy();
            out.append_pair(&k, &v);
        }
    }
    Ok(JsValue::from(JsString::from(out.finish().as_str())))
}
