//! `Array.prototype.sort` with a numeric comparator, without calling it.
//!
//! Sorting by a number is what scripts do most with data (`vms.sort((a, b)
//! => b.mem - a.mem)`), and in boa every comparison is a call into the
//! interpreter: 20,000 numbers take about 290,000 calls, most of the
//! sort's time (docs/PERFORMANCE.md, issue 19). When the comparator is
//! exactly one of these arrow functions or function expressions —
//!
//!   `(a, b) => a - b`, `(a, b) => b - a`,
//!   `(a, b) => a.k - b.k`, `(a, b) => b.k - a.k`,
//!   or the same bodies as `{ return …; }`,
//!
//! read, for a function the script wrote (not a built-in, bound or
//! proxy), from its one-line source text through the realm's own
//! `Function.prototype.toString` (captured before any script runs, so a
//! script cannot fake it) — and the array is an ordinary dense array whose
//! elements are all own, writable data properties holding numbers (or
//! ordinary objects whose own data property `k` holds a number), with no
//! NaN, the result is computed by a stable numeric sort instead. It is the
//! same result: such a comparator has no side effects, is consistent, and
//! orders exactly as `<` does (equal when the difference is 0, which
//! covers -0 and +0, or NaN, which only infinities of one sign give and
//! which the language treats as 0); boa's sort is stable too. Anything
//! else — another comparator, a hole, a getter, a proxy, a frozen array, a
//! string among the numbers — goes to boa's own sort, unchanged.

use boa_engine::{
    builtins::function::OrdinaryFunction, js_string, property::PropertyKey, Context, JsArgs,
    JsObject, JsResult, JsString, JsValue, NativeFunction,
};

/// Replaces `Array.prototype.sort` in the realm being built.
pub fn install(ctx: &mut Context) -> JsResult<()> {
    let proto = ctx.intrinsics().constructors().array().prototype();
    let original = crate::builtins::intrinsic(&proto, "sort", ctx)?;
    let function_proto = ctx.intrinsics().constructors().function().prototype();
    let to_string = crate::builtins::intrinsic(&function_proto, "toString", ctx)?;
    let sort = NativeFunction::from_copy_closure_with_captures(sort, (original, to_string));
    crate::builtins::replace_method(&proto, js_string!("sort"), 1, sort, ctx)
}

fn sort(
    this: &JsValue,
    args: &[JsValue],
    (original, to_string): &(JsObject, JsObject),
    ctx: &mut Context,
) -> JsResult<JsValue> {
    if let (Some(array), Some(compare)) = (this.as_object(), args.get_or_undefined(0).as_object()) {
        // Only a function the script wrote has source text: asking any
        // other for it reads its `name`, which a script can make a getter.
        if array.is_array() && compare.is::<OrdinaryFunction>() {
            let text = to_string.call(&compare.clone().into(), &[], ctx)?;
            let recognized = text
                .as_string()
                .filter(|t| t.len() <= MAX_COMPARATOR_TEXT)
                .and_then(|t| recognize(&t.to_std_string_escaped()));
            if let Some(order) = recognized {
                if numeric_sort(&array, &order, ctx)? {
                    return Ok(this.clone());
                }
            }
        }
    }
    original.call(this, args, ctx)
}

/// The longest comparator source looked at: the recognised ones are
/// short, and a long one is not copied to find out.
const MAX_COMPARATOR_TEXT: usize = 256;

/// A comparator that orders by a number: ascending or not, by the
/// elements themselves or by one property of each.
#[derive(Debug, PartialEq, Eq)]
struct Order {
    descending: bool,
    key: Option<String>,
}

/// Splits one line of source text into identifiers and single punctuation
/// characters, dropping whitespace. Anything else (digits first, quotes, slashes that
/// may open a comment) makes the text unrecognised.
fn tokens(text: &str) -> Option<Vec<String>> {
    // A line break can end a statement (`return` alone returns undefined):
    // one-line comparators only.
    if text.contains(['\n', '\r', '\u{2028}', '\u{2029}']) {
        return None;
    }
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c.is_ascii_alphabetic() || c == '_' || c == '$' {
            let mut ident = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
                    ident.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(ident);
        } else if "(),=>-.{};".contains(c) {
            out.push(c.to_string());
            chars.next();
        } else {
            return None;
        }
    }
    Some(out)
}

fn is_ident(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && !matches!(
            t,
            "function" | "return" | "async" | "await" | "yield" | "this" | "arguments" | "new"
        )
}

/// Which numeric order the comparator's source text is, if it is one.
fn recognize(text: &str) -> Option<Order> {
    let t = tokens(text)?;
    let t: Vec<&str> = t.iter().map(String::as_str).collect();
    // `(a, b) => BODY`, or `function [name](a, b) { return …; }`.
    let (a, b, body, arrow) = match t.as_slice() {
        ["(", a, ",", b, ")", "=", ">", body @ ..] => (*a, *b, body, true),
        ["function", "(", a, ",", b, ")", body @ ..] => (*a, *b, body, false),
        ["function", name, "(", a, ",", b, ")", body @ ..] if is_ident(name) => {
            (*a, *b, body, false)
        }
        _ => return None,
    };
    if !is_ident(a) || !is_ident(b) || a == b {
        return None;
    }
    let expr = match body {
        ["{", "return", e @ .., ";", "}"] | ["{", "return", e @ .., "}"] => e,
        e if arrow && e.first() != Some(&"{") => e,
        _ => return None,
    };
    let (x, y, key) = match expr {
        [x, "-", y] => (*x, *y, None),
        [x, ".", k, "-", y, ".", k2] if k == k2 && is_ident(k) => (*x, *y, Some(k.to_string())),
        _ => return None,
    };
    let descending = match (x, y) {
        _ if x == a && y == b => false,
        _ if x == b && y == a => true,
        _ => return None,
    };
    Some(Order { descending, key })
}

/// The own data property `key` of `object`, without running anything
/// (no getter, no proxy trap): `None` when it is not that.
fn own_data(object: &JsObject, key: &PropertyKey) -> Option<(JsValue, bool)> {
    let found = object.borrow().properties().get(key)?;
    let value = found.value()?.clone();
    Some((value, found.writable() == Some(true)))
}

/// Sorts `array` numerically in place when every element allows it;
/// `Ok(false)` (nothing touched) when one does not.
fn numeric_sort(array: &JsObject, order: &Order, ctx: &mut Context) -> JsResult<bool> {
    let Some((length, _)) = own_data(array, &js_string!("length").into()) else {
        return Ok(false);
    };
    let Some(length) = length.as_number().filter(|n| *n <= u32::MAX as f64) else {
        return Ok(false);
    };
    let key: Option<PropertyKey> = order.key.as_deref().map(|k| JsString::from(k).into());
    // Grown as elements are found, not sized by `length`: a sparse array
    // claims any length and holds nothing (its first hole sends it to
    // boa's sort).
    let mut items: Vec<(f64, JsValue)> = Vec::new();
    for i in 0..length as u32 {
        let Some((value, true)) = own_data(array, &i.into()) else {
            return Ok(false); // a hole, an accessor or a read-only element
        };
        let number = match &key {
            None => value.as_number(),
            Some(k) => match value.as_object() {
                Some(o) if o.is_ordinary() => own_data(&o, k).and_then(|(v, _)| v.as_number()),
                _ => None,
            },
        };
        match number {
            Some(n) if !n.is_nan() => items.push((n, value)),
            _ => return Ok(false),
        }
    }
    // Stable, as the language's sort is; equal numbers keep their order.
    if order.descending {
        items.sort_by(|p, q| q.0.partial_cmp(&p.0).expect("no NaN"));
    } else {
        items.sort_by(|p, q| p.0.partial_cmp(&q.0).expect("no NaN"));
    }
    for (i, (_, value)) in items.into_iter().enumerate() {
        array.set(i as u32, value, true, ctx)?;
    }
    Ok(true)
}
