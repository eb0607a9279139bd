//! Regular expression literals compiled once per execution instead of once
//! per evaluation.
//!
//! boa compiles a literal's pattern with regress every time the literal is
//! evaluated, so `lines.filter((l) => /ERROR .* ms/.test(l))` compiles the
//! same pattern once per line; compiling, not matching, was most of the
//! regex filter's time (docs/PERFORMANCE.md, issue 38). Nothing in boa's
//! API reaches the literal's evaluation, so the script's text is changed
//! instead: each literal `/p/f` becomes `(__airlock_regexp(N))`, a call
//! of a function the script's wrapper takes as a parameter, which compiles
//! literal N the first time and afterwards makes a new
//! RegExp object from a copy of that compiled matcher. It is the object
//! the literal would have made — a new object each time, of the realm's
//! `%RegExp.prototype%`, with the same internal matcher, source and flags
//! and an own `lastIndex` of 0 (writable, not enumerable, not
//! configurable) — only without compiling the pattern again.
//!
//! What could tell the difference is kept as it was:
//! - `Function.prototype.toString` gives back the literal's own text (the
//!   guest's version puts it back in place of the call);
//! - stack positions are mapped to the agent's columns (`script::Edit`);
//! - the text is left as written when the script names the factory itself,
//!   writes an identifier escape (`\u`), which could spell its name, or
//!   `eval` (a direct eval could declare that name, read the factory, or
//!   make a function whose text holds the call), or has a `with`
//!   statement, whose object could supply a binding of that name; then
//!   literals are compiled per evaluation, as before;
//! - memory: a compiled matcher is kept for at most [`KEPT`] literals, so
//!   a script of many large patterns holds little more than before (each
//!   object still has its own copy, as boa's do).
//!
//! Stack text a script reads itself (`new Error().stack`) is not mapped:
//! its columns after a literal move, as they did after the inserted
//! `return`.

use std::{cell::RefCell, collections::VecDeque, ops::ControlFlow, rc::Rc, str::FromStr};

use boa_engine::{
    ast::{
        expression::RegExpLiteral,
        statement::With,
        visitor::{VisitWith, Visitor},
        Position, Script, Spanned,
    },
    builtins::regexp::RegExp,
    interner::Interner,
    js_string,
    object::{builtins::JsRegExp, FunctionObjectBuilder, ObjectInitializer},
    parser::lexer::regex::RegExpFlags,
    property::Attribute,
    string::{CodePoint, JsStrVariant},
    Context, JsArgs, JsNativeError, JsObject, JsResult, JsString, JsValue, NativeFunction,
};
use regress::{Flags, Regex};

/// The name the rewritten literals call: the parameter of the script's
/// wrapper (`script::FACTORY_PREFIX`).
pub const FACTORY: &str = "__airlock_regexp";

/// At most this many literals keep a compiled matcher for the execution.
pub const KEPT: usize = 32;

/// One literal of the script: where it starts (in the analysed text's
/// coordinates, which the wrapped text shares), its text, and what it
/// compiles.
pub struct Literal {
    pub start: Position,
    pub text: String,
    pattern: JsString,
    flags: JsString,
}

impl Literal {
    /// What replaces literal `index` in the evaluated text.
    pub fn replacement(index: usize) -> String {
        format!("({FACTORY}({index}))")
    }
}

/// The literals of `script` (the parsed form of `source`), in source
/// order, or `None` when its text must not be rewritten (see the module
/// docs).
pub fn find(source: &str, script: &Script, interner: &Interner) -> Option<Vec<Literal>> {
    if source.contains(FACTORY) || source.contains("\\u") || source.contains("eval") {
        return None;
    }
    let mut finder = Finder {
        interner,
        found: Vec::new(),
    };
    if script.visit_with(&mut finder).is_break() {
        return None;
    }
    let mut found = finder.found;
    found.sort_by_key(|l| (l.start.line_number(), l.start.column_number()));
    Some(found)
}

struct Finder<'a> {
    interner: &'a Interner,
    found: Vec<Literal>,
}

impl<'ast> Visitor<'ast> for Finder<'_> {
    type BreakTy = ();

    fn visit_reg_exp_literal(&mut self, node: &'ast RegExpLiteral) -> ControlFlow<()> {
        let pattern = self.interner.resolve_expect(node.pattern());
        let flags = self.interner.resolve_expect(node.flags());
        self.found.push(Literal {
            start: node.span().start(),
            text: format!("/{pattern}/{flags}"),
            pattern: JsString::from(pattern.utf16()),
            flags: JsString::from(flags.utf16()),
        });
        ControlFlow::Continue(())
    }

    fn visit_with(&mut self, _: &'ast With) -> ControlFlow<()> {
        ControlFlow::Break(())
    }
}

struct Entry {
    literal: Literal,
    compiled: Option<RegExp>,
    /// The guest's own copy of the matcher, for `test`
    /// (`regexp_test`); none for a global or sticky literal.
    matcher: Option<Rc<Matcher>>,
}

/// A literal's pattern compiled by regress as boa compiles it (the same
/// regress, the same code units or code points, boa's own flag mapping),
/// so it matches what the object's internal matcher matches.
pub struct Matcher {
    regex: Regex,
    full_unicode: bool,
}

impl Matcher {
    /// `None` for a global or sticky literal (its `test` reads and writes
    /// `lastIndex`, which boa's path keeps doing) or flags boa would not
    /// have taken.
    fn new(pattern: &JsString, flags: &JsString) -> Option<Self> {
        let flags = RegExpFlags::from_str(&flags.to_std_string_escaped()).ok()?;
        if flags.intersects(RegExpFlags::GLOBAL | RegExpFlags::STICKY) {
            return None;
        }
        let full_unicode = flags.intersects(RegExpFlags::UNICODE | RegExpFlags::UNICODE_SETS);
        let regex = if full_unicode {
            Regex::from_unicode(
                pattern.code_points().map(CodePoint::as_u32),
                Flags::from(flags),
            )
        } else {
            // Code units, as boa compiles a pattern without `u` or `v`.
            Regex::from_unicode(pattern.iter().map(u32::from), Flags::from(flags))
        };
        Some(Self {
            regex: regex.ok()?,
            full_unicode,
        })
    }

    /// Whether the pattern matches `input` anywhere from its start: what
    /// RegExpBuiltinExec decides for a regexp that is neither global nor
    /// sticky, with the same regress calls.
    pub fn finds(&self, input: &JsString) -> bool {
        match (self.full_unicode, input.as_str().variant()) {
            (_, JsStrVariant::Latin1(_)) => self
                .regex
                .find_from_ucs2(&input.to_vec(), 0)
                .next()
                .is_some(),
            (true, JsStrVariant::Utf16(units)) => {
                self.regex.find_from_utf16(units, 0).next().is_some()
            }
            (false, JsStrVariant::Utf16(units)) => {
                self.regex.find_from_ucs2(units, 0).next().is_some()
            }
        }
    }
}

/// How many objects the factory made most recently are remembered with
/// their matcher: a literal evaluated in a callback is tested right after
/// it is made, and a hoisted one is the only one made.
const RECENT: usize = 8;

thread_local! {
    /// The running execution's literals; empty between executions.
    static TABLE: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    /// How many entries of `TABLE` hold a compiled matcher.
    static KEPT_NOW: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Objects the factory made lately, newest first, with their literal's
    /// matcher. `RegExp.prototype.compile`, the one way to give an
    /// existing object another matcher, removes its object first.
    static MADE: RefCell<VecDeque<(JsObject, Rc<Matcher>)>> =
        const { RefCell::new(VecDeque::new()) };
}

/// The matcher of `object`, when the factory made it lately and nothing
/// has recompiled it since.
pub fn matcher_of(object: &JsObject) -> Option<Rc<Matcher>> {
    MADE.with(|m| {
        m.borrow()
            .iter()
            .find(|(made, _)| JsObject::equals(made, object))
            .map(|(_, matcher)| matcher.clone())
    })
}

/// Forgets `object`'s matcher: it is being recompiled.
pub fn forget(object: &JsObject) {
    MADE.with(|m| {
        m.borrow_mut()
            .retain(|(made, _)| !JsObject::equals(made, object))
    });
}

fn remember(object: &JsObject, matcher: Option<Rc<Matcher>>) {
    if let Some(matcher) = matcher {
        MADE.with(|m| {
            let mut m = m.borrow_mut();
            m.push_front((object.clone(), matcher));
            m.truncate(RECENT);
        });
    }
}

/// Makes `literals` the ones `__airlock_regexp(N)` answers for, until the
/// next call (an empty list when the text was left as written).
pub fn arm(literals: Vec<Literal>) {
    MADE.with(|m| m.borrow_mut().clear());
    KEPT_NOW.with(|k| k.set(0));
    TABLE.with(|t| {
        *t.borrow_mut() = literals
            .into_iter()
            .map(|literal| Entry {
                literal,
                compiled: None,
                matcher: None,
            })
            .collect()
    });
}

/// Puts the text-restoring `Function.prototype.toString` in the realm
/// being built (after anything that captures the intrinsic `toString`,
/// such as the sort).
pub fn install(ctx: &mut Context) -> JsResult<()> {
    let function_proto = ctx.intrinsics().constructors().function().prototype();
    let original = crate::builtins::intrinsic(&function_proto, "toString", ctx)?;
    let to_string = NativeFunction::from_copy_closure_with_captures(restoring_to_string, original);
    crate::builtins::replace_method(&function_proto, js_string!("toString"), 0, to_string, ctx)
}

/// The function the rewritten script's wrapper takes as its parameter
/// [`FACTORY`]: a parameter, not a global, so nothing new is visible on
/// the global object.
pub fn factory(ctx: &mut Context) -> JsObject {
    FunctionObjectBuilder::new(ctx.realm(), NativeFunction::from_fn_ptr(make))
        .name(js_string!(FACTORY))
        .length(1)
        .build()
        .into()
}

/// `__airlock_regexp(N)`: a new RegExp object for literal N.
fn make(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let index = args
        .get_or_undefined(0)
        .as_number()
        .filter(|n| n.fract() == 0.0 && *n >= 0.0)
        .map(|n| n as usize);
    let known = TABLE.with(|t| {
        let t = t.borrow();
        index.and_then(|i| t.get(i)).map(|e| {
            (
                e.compiled.clone(),
                e.matcher.clone(),
                e.literal.pattern.clone(),
                e.literal.flags.clone(),
            )
        })
    });
    let Some((compiled, matcher, pattern, flags)) = known else {
        return Err(JsNativeError::typ()
            .with_message(format!(
                "{FACTORY} is Airlock's own, for the script's regular expression literals"
            ))
            .into());
    };
    if let Some(compiled) = compiled {
        // A shared shape, as boa's own template gives literals: property
        // lookups on a unique shape were a third slower.
        let proto = ctx.intrinsics().constructors().regexp().prototype();
        let object = ObjectInitializer::with_native_data_and_proto(compiled, proto, ctx)
            .property(js_string!("lastIndex"), 0, Attribute::WRITABLE)
            .build();
        remember(&object, matcher);
        return Ok(object.into());
    }
    // The first evaluation compiles, exactly as the literal would have.
    let object: JsObject = JsRegExp::new(pattern.clone(), flags.clone(), ctx)?.into();
    if KEPT_NOW.with(|k| k.get()) < KEPT {
        let compiled = object.downcast_ref::<RegExp>().map(|r| r.clone());
        if let (Some(i), Some(compiled)) = (index, compiled) {
            let matcher = Matcher::new(&pattern, &flags).map(Rc::new);
            remember(&object, matcher.clone());
            TABLE.with(|t| {
                if let Some(e) = t.borrow_mut().get_mut(i) {
                    e.compiled = Some(compiled);
                    e.matcher = matcher;
                    KEPT_NOW.with(|k| k.set(k.get() + 1));
                }
            });
        }
    }
    Ok(object.into())
}

/// The intrinsic `toString`, with each `(__airlock_regexp(N))` in a
/// function's text put back as literal N's own text.
fn restoring_to_string(
    this: &JsValue,
    args: &[JsValue],
    original: &JsObject,
    ctx: &mut Context,
) -> JsResult<JsValue> {
    let text = original.call(this, args, ctx)?;
    let restored = TABLE.with(|t| {
        let t = t.borrow();
        if t.is_empty() {
            return None;
        }
        let marker = format!("({FACTORY}(");
        let s = text.as_string()?.to_std_string().ok()?;
        if !s.contains(&marker) {
            return None;
        }
        Some(restore(&s, &marker, |i| {
            t.get(i).map(|e| e.literal.text.clone())
        }))
    });
    Ok(restored.map_or(text, |s| JsString::from(s.as_str()).into()))
}

/// `text` with every `MARKER N))` replaced by `literal(N)`.
fn restore(text: &str, marker: &str, literal: impl Fn(usize) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let after = &rest[at + marker.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let original = after[..digits]
            .parse::<usize>()
            .ok()
            .filter(|_| after[digits..].starts_with("))"))
            .and_then(&literal);
        match original {
            Some(original) => {
                out.push_str(&rest[..at]);
                out.push_str(&original);
                rest = &after[digits + 2..];
            }
            None => {
                out.push_str(&rest[..at + marker.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
