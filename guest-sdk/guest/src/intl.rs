//! `Intl` and the built-ins' `toLocale*String`/`localeCompare`, in English
//! and without ICU's locale data (boa's `intl` feature costs more than the
//! rest of the guest together; see docs/PERFORMANCE.md). The formats are
//! JavaScript (intl.js), evaluated once when the realm is built; sorting
//! is here, in Rust, because `array.sort((a, b) => a.localeCompare(b))`
//! calls it n log n times.
//!
//! The order is the Unicode collation algorithm's in outline, for the
//! strings agents sort (names, ids, paths): punctuation and symbols, then
//! digits, then letters; letters alike in case and accent first, then by
//! accent, then lower case before upper; with `numeric`, runs of digits by
//! their value.

use std::cmp::Ordering;

use boa_engine::{
    js_string, object::ObjectInitializer, Context, JsArgs, JsObject, JsResult, JsValue,
    NativeFunction,
};
use icu_normalizer::DecomposingNormalizerBorrowed;

const CLASSES: &str = include_str!("intl.js");

/// Puts `Intl` and the locale methods on the realm being built, built at
/// the first use of any of them (lazy.rs).
pub(crate) fn install(ctx: &mut Context) -> JsResult<()> {
    crate::lazy::install(
        ctx,
        &["Intl"],
        &[
            ("Number", "toLocaleString"),
            ("BigInt", "toLocaleString"),
            ("Date", "toLocaleString"),
            ("Date", "toLocaleDateString"),
            ("Date", "toLocaleTimeString"),
            ("String", "localeCompare"),
            ("Array", "toLocaleString"),
        ],
        CLASSES,
        natives,
    )
}

fn natives(ctx: &mut Context) -> JsObject {
    let mut natives = ObjectInitializer::new(ctx);
    natives.function(
        NativeFunction::from_fn_ptr(collate),
        js_string!("collate"),
        6,
    );
    natives.build()
}

/// `collate(a, b, level, numeric, ignorePunctuation, upperFirst)`: -1, 0
/// or 1. Level 1 (`base`) compares base letters, level 2 (`accent`) adds
/// accents, level 3 (`case`) adds case but not accents, level 4
/// (`variant`, the default) both; canonically equivalent strings are equal
/// at every level.
fn collate(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let a = args
        .get_or_undefined(0)
        .to_string(ctx)?
        .to_std_string_lossy();
    let b = args
        .get_or_undefined(1)
        .to_string(ctx)?
        .to_std_string_lossy();
    let level = args.get_or_undefined(2).to_number(ctx)? as u8;
    let options = Options {
        numeric: args.get_or_undefined(3).to_boolean(),
        ignore_punctuation: args.get_or_undefined(4).to_boolean(),
        upper_first: args.get_or_undefined(5).to_boolean(),
    };
    let order = compare(&a, &b, level, options);
    Ok(JsValue::from(match order {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }))
}

#[derive(Clone, Copy)]
struct Options {
    numeric: bool,
    ignore_punctuation: bool,
    upper_first: bool,
}

/// One collation element: what it sorts by at each level.
#[derive(PartialEq, Eq)]
struct Element {
    /// Punctuation and symbols (0), digits (1), letters and the rest (2).
    group: u8,
    /// The folded character, a punctuation mark's rank, or a digit run's
    /// value (leading zeros gone).
    base: Vec<char>,
    /// Combining marks after it, in order.
    accents: Vec<char>,
    /// Upper case.
    upper: bool,
}

fn is_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// ASCII punctuation and symbols in the order the Unicode collation
/// tables give them (white space first, `$` last); other symbols after
/// them by code point.
const PUNCTUATION: &str = "_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$";

fn punctuation_rank(c: char) -> char {
    if c.is_whitespace() || c.is_control() {
        return '\0';
    }
    match PUNCTUATION.find(c) {
        Some(i) => char::from(1 + i as u8),
        None => c,
    }
}

fn elements(s: &str, options: Options) -> Vec<Element> {
    let chars: Vec<char> = DecomposingNormalizerBorrowed::new_nfd()
        .normalize_iter(s.chars())
        .collect();
    let mut out: Vec<Element> = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_mark(c) {
            if let Some(last) = out.last_mut() {
                last.accents.push(c);
            }
            i += 1;
            continue;
        }
        if options.numeric && c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let run = &chars[start..i];
            let first = run.iter().position(|&d| d != '0').unwrap_or(run.len() - 1);
            out.push(Element {
                group: 1,
                base: run[first..].to_vec(),
                accents: Vec::new(),
                upper: false,
            });
            continue;
        }
        let group = if c.is_alphabetic() {
            2
        } else if c.is_numeric() {
            1
        } else {
            0
        };
        i += 1;
        if group == 0 && options.ignore_punctuation {
            continue;
        }
        if group == 0 {
            out.push(Element {
                group,
                base: vec![punctuation_rank(c)],
                accents: Vec::new(),
                upper: false,
            });
            continue;
        }
        let lower: Vec<char> = c.to_lowercase().collect();
        out.push(Element {
            group,
            upper: lower.as_slice() != [c],
            base: lower,
            accents: Vec::new(),
        });
    }
    out
}

fn compare(a: &str, b: &str, level: u8, options: Options) -> Ordering {
    let (x, y) = (elements(a, options), elements(b, options));
    let primary = |e: &Element| {
        (
            e.group,
            e.base.len() * usize::from(e.group == 1),
            e.base.clone(),
        )
    };
    let order = x
        .iter()
        .map(primary)
        .cmp(y.iter().map(primary))
        .then_with(|| {
            if level == 2 || level == 4 {
                x.iter()
                    .map(|e| &e.accents)
                    .cmp(y.iter().map(|e| &e.accents))
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| {
            if level >= 3 {
                // case (3) and variant (4) tell lower from upper case
                let case = |e: &Element| e.upper != options.upper_first;
                x.iter().map(case).cmp(y.iter().map(case))
            } else {
                Ordering::Equal
            }
        });
    order
}
