//! Runbooks: scripts an operator reviewed once, which agents run by name
//! with arguments, within bounds the operator set.
//!
//! A runbook is one TOML file, kept in git and reviewed like code:
//!
//! ```toml
//! name = "drain_node"
//! description = "Migrate every running VM off a node."
//! tiers = ["read", "admin"]     # the tiers its calls may have
//! max_changes = 20              # calls above read in one run, at most
//! run_by = ["olga"]             # optional: who may run it (default: anyone)
//!
//! [input]                       # JSON Schema of its arguments
//! type = "object"
//! required = ["node"]
//! properties.node = { type = "string" }
//!
//! [[calls]]                     # each tool above read it may call
//! tool = "vm_migrate"
//! args.node = { enum = ["pve1", "pve2", "pve3"] }   # bounds: a schema per argument
//!
//! [script]                      # last, as TOML keeps keys after a table in it
//! source = '''
//! const vms = await tools.vm_list({ node: input.node });
//! ...
//! '''
//! ```
//!
//! Its version is the SHA-256 of the file's bytes: `sha256sum FILE` tells
//! a reviewer which version they read, and any edit (a comment too) is a
//! new version that needs its own approval. The file is parsed and
//! checked here; the store ([`RunbookStore`]) keeps the text.
//!
//! A run's calls are held to the file ([`RunbookRun::admit`]): reads of
//! any tool when `read` is among the tiers; a change only of a tool under
//! `[[calls]]`, of a declared tier, with every bounded argument inside its
//! schema, and no more than `max_changes` of them. An approved version's
//! changes inside those bounds need no approval of their own: the
//! operator approved them, as a class, by approving the version.

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicU32, Ordering},
};

use jsonschema::Validator;
use serde::Deserialize;
use serde_json::{Map, Value};

use airlock_approver::summary::SummaryKey;
use airlock_catalog::{
    digest::sha256_hex,
    spec::{Hints, Tier, ToolSpec},
    validate::ArgsValidator,
};

/// The largest runbook file accepted.
pub const MAX_RUNBOOK_BYTES: usize = 128 * 1024;
/// The longest runbook name.
pub const MAX_NAME_CHARS: usize = 48;
/// The longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 500;
/// The most changes a runbook may declare for one run.
pub const MAX_RUN_CHANGES: u32 = 1000;
/// The most tools a runbook may list under `[[calls]]`.
pub const MAX_CALLS: usize = 64;
/// What an audit line records for a bounded list or object.
const STRUCTURED: &str = "(structured value)";
/// The longest bounded argument value written to an audit line.
const MAX_BOUND_VALUE_CHARS: usize = 64;

/// Why a runbook file was refused: the field and the rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunbookError {
    #[error("the runbook file is {bytes} bytes; at most {MAX_RUNBOOK_BYTES} are accepted")]
    TooLarge { bytes: usize },
    #[error("the runbook file is not valid TOML for a runbook: {0}")]
    Syntax(String),
    #[error("runbook field `{field}`: {rule}")]
    Field { field: String, rule: String },
}

fn field(field: impl Into<String>, rule: impl Into<String>) -> RunbookError {
    RunbookError::Field {
        field: field.into(),
        rule: rule.into(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileForm {
    name: String,
    description: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    run_by: Vec<String>,
    tiers: Vec<Tier>,
    max_changes: u32,
    #[serde(default)]
    calls: Vec<CallForm>,
    script: ScriptForm,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptForm {
    source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallForm {
    tool: String,
    #[serde(default)]
    args: BTreeMap<String, Value>,
}

/// One tool above read a runbook may call, and the bounds on its
/// arguments.
pub struct Allowed {
    pub tool: String,
    bounds: Vec<Bound>,
}

/// One argument's bound: its schema compiled, and whether it fixes the
/// value (`enum`, `const`, a closed number range): only then does the
/// audit line record the value itself ([`Recorded`]).
struct Bound {
    arg: String,
    validator: Validator,
    fixes: Fixes,
}

/// How much of a value a bound fixes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fixes {
    /// Anything the schema admits: recorded by its keyed tag.
    Nothing,
    /// One of a list (`enum`, `const`): recorded as it is.
    Listed,
    /// A number between two ends: a number is recorded as it is.
    Range,
}

impl Fixes {
    fn of(schema: &Value) -> Self {
        let has = |k: &str| schema.get(k).is_some();
        if has("enum") || has("const") {
            Fixes::Listed
        } else if (has("minimum") || has("exclusiveMinimum"))
            && (has("maximum") || has("exclusiveMaximum"))
        {
            Fixes::Range
        } else {
            Fixes::Nothing
        }
    }

    fn value(self, v: &Value) -> bool {
        match self {
            Fixes::Listed => true,
            Fixes::Range => v.is_number(),
            Fixes::Nothing => false,
        }
    }
}

/// How a bounded value is written to a runbook call's audit line: the
/// value where its bound fixes it (an auditor checks it against the
/// file), else `{"hmac": TAG}`, the deployment-keyed tag an approver is
/// shown for a secret (`summary::SummaryKey::value_tag`): enough to
/// check a claimed value with the key, nothing of the value without it.
pub struct Recorded;

impl Recorded {
    /// The key of a tag in a line.
    pub const TAG: &'static str = "hmac";

    fn tag(v: &Value, key: &SummaryKey) -> Value {
        let mut m = Map::new();
        m.insert(Self::TAG.into(), Value::String(key.value_tag(v)));
        Value::Object(m)
    }

    /// Whether a line's value is a tag, not a value.
    fn is_tag(v: &Value) -> bool {
        v.as_object()
            .is_some_and(|m| m.len() == 1 && m.get(Self::TAG).is_some_and(Value::is_string))
    }
}

/// A parsed, checked runbook file.
pub struct Runbook {
    pub name: String,
    pub description: String,
    /// Who may run it; empty: anyone whose mode allows its calls.
    pub run_by: Vec<String>,
    pub tiers: Vec<Tier>,
    pub max_changes: u32,
    pub calls: Vec<Allowed>,
    pub source: String,
    /// SHA-256 (hex) of the file's bytes.
    pub version: String,
    input_validator: ArgsValidator,
    /// As a tool: what search's signature is drawn from.
    spec: ToolSpec,
}

impl std::fmt::Debug for Runbook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runbook")
            .field("name", &self.name)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// The version of a runbook file: the SHA-256 of its bytes.
pub fn version_of(text: &str) -> String {
    sha256_hex(text.as_bytes())
}

/// The short form of a version people read and type (its first 12
/// hex digits); commands take any unambiguous prefix of 8 or more.
pub fn short(version: &str) -> &str {
    &version[..version.len().min(12)]
}

/// Whether `name` may name a runbook: what scripts write after
/// `runbooks.`, so a JavaScript identifier in lower case.
pub fn check_name(name: &str) -> Result<(), RunbookError> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(field(
            "name",
            format!("a lower-case letter, then letters, digits or `_`, at most {MAX_NAME_CHARS} (scripts call it as runbooks.NAME), e.g. \"drain_node\""),
        ))
    }
}

fn compile(schema: &Value, at: &str) -> Result<Validator, RunbookError> {
    // A bound read under another draft (`$schema`) or taken from
    // elsewhere (`$ref`) may not mean what its text says: a draft-04
    // `const` bounds nothing, and the audit would still treat it as
    // fixing the value.
    if let Some(k) = ["$schema", "$ref", "$dynamicRef", "$vocabulary", "$id"]
        .into_iter()
        .find(|k| schema.get(*k).is_some())
    {
        return Err(field(
            at,
            format!(
                "`{k}` is not allowed in a bound: write the schema inline, in the default draft"
            ),
        ));
    }
    jsonschema::options()
        .should_validate_formats(false)
        .build(schema)
        .map_err(|e| field(at, format!("not a JSON Schema that compiles: {e}")))
}

impl Runbook {
    /// Parses and checks a runbook file; the error names the field and
    /// the rule it broke.
    pub fn parse(text: &str) -> Result<Self, RunbookError> {
        if text.len() > MAX_RUNBOOK_BYTES {
            return Err(RunbookError::TooLarge { bytes: text.len() });
        }
        let form: FileForm = toml::from_str(text).map_err(|e| {
            // The parser's message quotes the line, which is the
            // operator's own file: fine to show them.
            RunbookError::Syntax(e.message().to_string())
        })?;
        check_name(&form.name)?;
        let description = form.description.trim().to_string();
        if description.is_empty()
            || description.chars().count() > MAX_DESCRIPTION_CHARS
            || description.chars().any(char::is_control)
        {
            return Err(field(
                "description",
                format!("one to {MAX_DESCRIPTION_CHARS} characters on one line, no control characters, saying what it does, for agents and approvers"),
            ));
        }
        if form.tiers.is_empty() {
            return Err(field(
                "tiers",
                "name the tiers its calls may have, e.g. [\"read\", \"operate\"]",
            ));
        }
        if form.tiers.contains(&Tier::Forbidden) {
            return Err(field(
                "tiers",
                "\"forbidden\" tools are never run, by a runbook either",
            ));
        }
        if form.max_changes > MAX_RUN_CHANGES {
            return Err(field(
                "max_changes",
                format!("at most {MAX_RUN_CHANGES} changes in one run"),
            ));
        }
        for who in &form.run_by {
            if who.is_empty() || who.len() > 256 || who.chars().any(char::is_control) {
                return Err(field(
                    "run_by",
                    "identities, as the [identities] table names them",
                ));
            }
        }
        let input = form.input.unwrap_or_else(|| {
            serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false})
        });
        if input.get("type").and_then(Value::as_str) != Some("object") {
            return Err(field(
                "input",
                "a JSON Schema of type \"object\" (a run is given one object of arguments)",
            ));
        }
        // Compiled once, by the validator its runs are checked with.
        let spec = ToolSpec {
            name: format!("runbooks.{}", form.name),
            summary: String::new(),
            description: String::new(),
            input_schema: input,
            output_schema: None,
            tier: Tier::Read,
            hints: Hints::default(),
            backend: "runbooks".into(),
            path_params: Vec::new(),
            endpoint: None,
            keywords: String::new(),
            key: String::new(),
            aliases: Vec::new(),
        };
        let input_validator = ArgsValidator::new(&spec).map_err(|e| field("input", e))?;
        if form.calls.len() > MAX_CALLS {
            return Err(field("calls", format!("at most {MAX_CALLS} tools")));
        }
        let mut calls = Vec::with_capacity(form.calls.len());
        for (i, c) in form.calls.into_iter().enumerate() {
            if c.tool.is_empty() || c.tool.len() > airlock_catalog::catalog::MAX_NAME_BYTES {
                return Err(field(format!("calls[{i}].tool"), "a tool's catalog name"));
            }
            if calls.iter().any(|a: &Allowed| a.tool == c.tool) {
                return Err(field(
                    format!("calls[{i}].tool"),
                    format!("{} is listed twice: give its bounds once", c.tool),
                ));
            }
            let mut bounds = Vec::with_capacity(c.args.len());
            for (arg, schema) in c.args {
                let validator = compile(&schema, &format!("calls[{i}].args.{arg}"))?;
                let fixes = Fixes::of(&schema);
                bounds.push(Bound {
                    arg,
                    validator,
                    fixes,
                });
            }
            calls.push(Allowed {
                tool: c.tool,
                bounds,
            });
        }
        if form.script.source.trim().is_empty() {
            return Err(field("script.source", "the script the runbook runs"));
        }
        Ok(Self {
            name: form.name,
            description,
            run_by: form.run_by,
            tiers: form.tiers,
            max_changes: form.max_changes,
            calls,
            source: form.script.source,
            version: version_of(text),
            input_validator,
            spec,
        })
    }

    /// JSON Schema of the arguments a run is given.
    pub fn input(&self) -> &Value {
        &self.spec.input_schema
    }

    /// What is wrong with `args` as this runbook's input, empty if
    /// nothing.
    pub fn input_problems(&self, args: &Value) -> Vec<String> {
        self.input_validator.problems(args)
    }

    /// Whether `identity` may run it.
    pub fn may_run(&self, identity: &str) -> bool {
        self.run_by.is_empty() || self.run_by.iter().any(|w| w == identity)
    }

    /// Whether the call stays inside the file: its tier declared, a change
    /// listed under `[[calls]]`, every bounded argument inside its
    /// schema. Returns the bounded arguments as the audit line records
    /// them ([`Recorded`]: values only where the bound fixes them, tags
    /// keyed with `key` otherwise), which `audit verify` checks.
    pub fn check(
        &self,
        tool: &str,
        tier: Tier,
        args: &Value,
        key: &SummaryKey,
    ) -> Result<Map<String, Value>, OutOfBounds> {
        self.check_args(tool, tier, args, Some(key))
    }

    /// [`Runbook::check`] with `key`; without, the values are a line's,
    /// where a tag (or, on lines written before tags, `[redacted]` or a
    /// cut value) cannot be held to its bound again.
    fn check_args(
        &self,
        tool: &str,
        tier: Tier,
        args: &Value,
        key: Option<&SummaryKey>,
    ) -> Result<Map<String, Value>, OutOfBounds> {
        let recorded = key.is_none();
        if !self.tiers.contains(&tier) {
            return Err(OutOfBounds(format!(
                "{tool} is a {tier} tool and runbook {} declares tiers [{}]",
                self.name,
                self.tiers
                    .iter()
                    .map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let allowed = self.calls.iter().find(|a| a.tool == tool);
        let Some(allowed) = allowed else {
            if tier == Tier::Read {
                return Ok(Map::new());
            }
            return Err(OutOfBounds(format!(
                "{tool} is not among the calls runbook {} declares ([[calls]])",
                self.name
            )));
        };
        let mut seen = Map::new();
        for Bound {
            arg,
            validator: bound,
            fixes,
        } in &allowed.bounds
        {
            let value = args.get(arg).unwrap_or(&Value::Null);
            let secret = airlock_catalog::redact::is_secret(arg);
            if recorded && Recorded::is_tag(value) {
                // A value its bound fixes is never hidden behind a tag.
                if *fixes == Fixes::Listed && !secret {
                    return Err(OutOfBounds(format!(
                        "the line of {tool} records args.{arg} by a tag, where runbook {}'s bound fixes the value and the line must show it",
                        self.name
                    )));
                }
                seen.insert(arg.clone(), value.clone());
                continue;
            }
            // A value the line had to cut (a long string, a list) is not
            // the value the bound held: it was checked when it was sent.
            let was_cut = value.as_str().is_some_and(|v| {
                v == STRUCTURED
                    || (v.ends_with('…') && v.chars().count() == MAX_BOUND_VALUE_CHARS + 1)
            });
            if recorded
                && (was_cut
                    || (secret && value.as_str() == Some(airlock_catalog::redact::REDACTED)))
            {
                seen.insert(arg.clone(), value.clone());
                continue;
            }
            if !bound.is_valid(value) {
                return Err(OutOfBounds(format!(
                    "args.{arg} of {tool} is outside the bound runbook {} sets for it",
                    self.name
                )));
            }
            // A value reaches the line only where the bound fixes it; else
            // its keyed tag does. A secret's never does, nor its tag (the
            // key lives beside the audit in the database: a dump of both
            // could be tried against a dictionary): that it was given.
            let shown = match key {
                Some(_) if secret && !value.is_null() => {
                    Value::String(airlock_catalog::redact::REDACTED.into())
                }
                Some(key) if !value.is_null() && !fixes.value(value) => Recorded::tag(value, key),
                _ => cut(value),
            };
            seen.insert(arg.clone(), shown);
        }
        Ok(seen)
    }

    /// Whether `bound` values recorded for a call of `tool` are inside the
    /// bounds: what `audit verify` checks a line against.
    pub fn check_recorded(
        &self,
        tool: &str,
        tier: Tier,
        recorded: &Map<String, Value>,
    ) -> Result<(), OutOfBounds> {
        let args = Value::Object(recorded.clone());
        let seen = self.check_args(tool, tier, &args, None)?;
        // A line that left a bounded argument out cannot be checked.
        if seen.len() != recorded.len() && tier != Tier::Read {
            return Err(OutOfBounds(format!(
                "the line of {tool} records arguments runbook {} does not bound",
                self.name
            )));
        }
        Ok(())
    }
}

/// A bounded argument's value as written to the line: scalars whole
/// (strings cut), anything else by its kind.
fn cut(v: &Value) -> Value {
    match v {
        Value::String(s) if s.chars().count() > MAX_BOUND_VALUE_CHARS => {
            Value::String(s.chars().take(MAX_BOUND_VALUE_CHARS).collect::<String>() + "…")
        }
        Value::Array(_) | Value::Object(_) => Value::String(STRUCTURED.into()),
        other => other.clone(),
    }
}

/// A call outside what a runbook declares, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OutOfBounds(pub String);

/// What a runbook lets a call outside its bounds do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outside {
    /// Refused unsent (the default).
    #[default]
    Refuse,
    /// Asks for approval as a call outside any runbook would.
    Ask,
}

/// One run of a runbook, set on the caller of every call its script
/// makes: the version, whether (and by whom) it is approved, and the
/// changes it has made so far.
pub struct RunbookRun {
    pub runbook: std::sync::Arc<Runbook>,
    /// Who approved this version, if anyone did.
    pub approved_by: Option<String>,
    /// This run's id, on every line its calls write.
    pub id: String,
    pub outside: Outside,
    changes: AtomicU32,
}

impl std::fmt::Debug for RunbookRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunbookRun")
            .field("runbook", &self.runbook.name)
            .field("version", &self.runbook.version)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl PartialEq for RunbookRun {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for RunbookRun {}

/// What a run's call may do, by [`RunbookRun::admit`].
#[derive(Debug, PartialEq)]
pub enum Admitted {
    /// Inside the bounds, and a read: it goes on as any read.
    Read,
    /// Inside the bounds, a change of an approved version: it needs no
    /// approval of its own. Carries the bounded arguments' values.
    Change { bound: Map<String, Value> },
    /// Outside the bounds, and the deployment asks: it goes on as a call
    /// outside any runbook.
    Ask { why: String },
    /// Refused unsent.
    Refused { why: String },
}

impl RunbookRun {
    pub fn new(
        runbook: std::sync::Arc<Runbook>,
        approved_by: Option<String>,
        id: String,
        outside: Outside,
    ) -> Self {
        Self {
            runbook,
            approved_by,
            id,
            outside,
            changes: AtomicU32::new(0),
        }
    }

    /// Changes admitted so far in this run.
    pub fn changes(&self) -> u32 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Holds one call of the run to the runbook's file; `key` tags the
    /// bounded values its line records ([`Recorded`]).
    pub fn admit(&self, tool: &str, tier: Tier, args: &Value, key: &SummaryKey) -> Admitted {
        let rb = &self.runbook;
        let bound = match rb.check(tool, tier, args, key) {
            Ok(bound) => bound,
            Err(OutOfBounds(why)) => {
                return match self.outside {
                    Outside::Refuse => Admitted::Refused {
                        why: format!("{why}; a runbook's calls stay inside its file (its operator may set [runbooks] outside_bounds = \"ask\" to ask for approval instead)"),
                    },
                    Outside::Ask => Admitted::Ask { why },
                }
            }
        };
        if tier == Tier::Read {
            return Admitted::Read;
        }
        if self.approved_by.is_none() {
            return Admitted::Refused {
                why: format!(
                    "version {} of runbook {} is not approved, so it makes no changes: an operator other than its author reviews it and runs `airlock runbook approve {} {}`",
                    short(&rb.version),
                    rb.name,
                    rb.name,
                    rb.version
                ),
            };
        }
        let before = self.changes.fetch_add(1, Ordering::SeqCst);
        if before >= rb.max_changes {
            self.changes.fetch_sub(1, Ordering::SeqCst);
            return Admitted::Refused {
                why: format!(
                    "runbook {} makes at most {} changes in one run (max_changes), and this would be change {}",
                    rb.name,
                    rb.max_changes,
                    before + 1
                ),
            };
        }
        Admitted::Change { bound }
    }
}

/// A runbook version as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub name: String,
    pub version: String,
    /// The file as added.
    pub text: String,
    /// Who added it (`airlock runbook add --by`).
    pub author: String,
    pub added_ms: i64,
    pub approved_by: Option<String>,
    pub approved_ms: Option<i64>,
    pub retired_ms: Option<i64>,
}

impl Stored {
    pub fn status(&self) -> &'static str {
        match (self.retired_ms, &self.approved_by) {
            (Some(_), _) => "retired",
            (None, Some(_)) => "approved",
            (None, None) => "unapproved",
        }
    }
}

/// Why the store refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no runbook named {0}: `airlock runbook list` shows them")]
    UnknownName(String),
    #[error("runbook {name} has no version starting {version}: `airlock runbook show {name}` lists its versions")]
    UnknownVersion { name: String, version: String },
    #[error("runbook {name}: {version} starts more than one of its versions; give more of it")]
    Ambiguous { name: String, version: String },
    #[error("give at least 8 hex digits of the version (`airlock runbook list` shows 12)")]
    ShortVersion,
    #[error("give the whole version to approve, 64 hex digits (what `sha256sum FILE` and `airlock runbook add` print): a short prefix can be matched by another file made to look alike")]
    WholeVersion,
    #[error("{by} added version {version} of runbook {name}, so another person must approve it (four eyes)")]
    OwnVersion {
        name: String,
        version: String,
        by: String,
    },
    #[error("version {version} of runbook {name} is retired; add it again (`airlock runbook add`) to bring it back")]
    Retired { name: String, version: String },
    #[error("the runbook store is unavailable: {0}")]
    Storage(String),
}

/// Runbook versions, in the state backend (SQLite or PostgreSQL), so
/// every replica runs the same approved versions.
pub trait RunbookStore: Send + Sync {
    /// Keeps a version (or, if kept already, makes it current again,
    /// un-retired, its approval kept: the same bytes were reviewed).
    /// Returns it, and whether it was new.
    fn add(
        &self,
        name: &str,
        text: &str,
        author: &str,
        now_ms: i64,
    ) -> Result<(Stored, bool), StoreError>;
    /// Every version of `name`, the current one first.
    fn versions(&self, name: &str) -> Result<Vec<Stored>, StoreError>;
    /// The current version of each runbook not retired (the one added
    /// last), by name.
    fn current(&self) -> Result<Vec<Stored>, StoreError>;
    /// Approves the version of `name` that `version` starts (8+ hex
    /// digits), unless `by` added it.
    fn approve(
        &self,
        name: &str,
        version: &str,
        by: &str,
        now_ms: i64,
    ) -> Result<Stored, StoreError>;
    /// Retires every version of `name`; returns how many were live.
    fn retire(&self, name: &str, now_ms: i64) -> Result<u32, StoreError>;
}

/// The version of `name` that `prefix` names, among `versions`; what
/// both stores' `approve` resolves with.
pub fn pick<'a>(
    name: &str,
    versions: &'a [Stored],
    prefix: &str,
) -> Result<&'a Stored, StoreError> {
    if prefix.len() < 8 || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(StoreError::ShortVersion);
    }
    let prefix = prefix.to_ascii_lowercase();
    let mut hits = versions.iter().filter(|s| s.version.starts_with(&prefix));
    match (hits.next(), hits.next()) {
        (Some(s), None) => Ok(s),
        (Some(_), Some(_)) => Err(StoreError::Ambiguous {
            name: name.into(),
            version: prefix,
        }),
        (None, _) if versions.is_empty() => Err(StoreError::UnknownName(name.into())),
        (None, _) => Err(StoreError::UnknownVersion {
            name: name.into(),
            version: prefix,
        }),
    }
}

/// The version `version` names exactly (all 64 hex digits): what an
/// approval takes, since a prefix of a digest people compare by eye can
/// be ground out for another file.
pub fn pick_whole<'a>(
    name: &str,
    versions: &'a [Stored],
    version: &str,
) -> Result<&'a Stored, StoreError> {
    if version.len() != 64 || !version.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(StoreError::WholeVersion);
    }
    pick(name, versions, version)
}

/// The four-eyes rule of a version's approval, the same in both stores.
pub fn may_approve(s: &Stored, by: &str) -> Result<(), StoreError> {
    if s.retired_ms.is_some() {
        return Err(StoreError::Retired {
            name: s.name.clone(),
            version: short(&s.version).into(),
        });
    }
    if airlock_approver::person::same(&s.author, by) {
        return Err(StoreError::OwnVersion {
            name: s.name.clone(),
            version: short(&s.version).into(),
            by: by.into(),
        });
    }
    Ok(())
}

/// A runbook as `search` shows it beside the tools.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Found {
    /// Always `"runbook"`: what tells it from a tool in a result.
    pub kind: &'static str,
    /// What a script calls: `runbooks.NAME`.
    pub call: String,
    pub description: String,
    /// `approved` (its changes run without asking) or `unapproved` (its
    /// changes are refused).
    pub status: &'static str,
    /// The current version, short.
    pub version: String,
    /// The tiers its calls may have.
    pub tiers: Vec<Tier>,
    /// JSON Schema of its argument.
    pub input_schema: Value,
    /// Its argument as a TypeScript type.
    pub signature: String,
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 2)
        .map(str::to_lowercase)
        .collect()
}

/// The current runbooks matching `query`'s words in their name or
/// description (a word matching the start of one of theirs), best
/// first; with `tiers`, only those whose calls may have one of them.
pub fn search(current: &[Stored], query: &str, tiers: &[Tier], limit: usize) -> Vec<Found> {
    let asked = words(query);
    let mut scored: Vec<(usize, Found)> = current
        .iter()
        .filter_map(|s| {
            let rb = Runbook::parse(&s.text).ok()?;
            if !tiers.is_empty() && !rb.tiers.iter().any(|t| tiers.contains(t)) {
                return None;
            }
            let name_words = words(&rb.name.replace('_', " "));
            let all: Vec<String> = name_words
                .iter()
                .cloned()
                .chain(words(&rb.description))
                .collect();
            let score: usize = asked
                .iter()
                .map(|w| {
                    if name_words.iter().any(|n| n.starts_with(w.as_str())) {
                        2
                    } else if all.iter().any(|n| n.starts_with(w.as_str())) {
                        1
                    } else {
                        0
                    }
                })
                .sum();
            (score > 0).then(|| {
                (
                    score,
                    Found {
                        kind: "runbook",
                        call: format!("runbooks.{}", rb.name),
                        signature: airlock_catalog::typescript::signature(&rb.spec),
                        description: rb.description.clone(),
                        status: if s.approved_by.is_some() {
                            "approved"
                        } else {
                            "unapproved"
                        },
                        version: short(&s.version).to_string(),
                        tiers: rb.tiers.clone(),
                        input_schema: rb.input().clone(),
                    },
                )
            })
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.call.cmp(&b.1.call)));
    scored.into_iter().take(limit).map(|(_, f)| f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FILE: &str = r#"name = "restart_web"
description = "Reboot the web VMs."
tiers = ["read", "operate"]
max_changes = 2

[[calls]]
tool = "vm_reboot"
args.vmid = { enum = [100, 101] }
args.timeout = { type = "null" }

[script]
source = "1"
"#;

    fn key() -> SummaryKey {
        SummaryKey::new([7; 32])
    }

    fn run(approved: bool) -> RunbookRun {
        RunbookRun::new(
            std::sync::Arc::new(Runbook::parse(FILE).unwrap()),
            approved.then(|| "bob".to_string()),
            "rb-1".into(),
            Outside::Refuse,
        )
    }

    #[test]
    fn a_change_inside_the_file_of_an_approved_version_needs_no_approval() {
        let r = run(true);
        let a = r.admit(
            "vm_reboot",
            Tier::Operate,
            &json!({"node": "pve1", "vmid": 100}),
            &key(),
        );
        let Admitted::Change { bound } = a else {
            panic!("{a:?}")
        };
        // An absent argument is null, and its bound says so.
        assert_eq!(Value::Object(bound), json!({"vmid": 100, "timeout": null}));
    }

    #[test]
    fn what_the_file_does_not_declare_is_refused() {
        let r = run(true);
        for (tool, tier, args, says) in [
            (
                "vm_reboot",
                Tier::Operate,
                json!({"vmid": 102}),
                "args.vmid",
            ),
            (
                "vm_reboot",
                Tier::Operate,
                json!({"vmid": 100, "timeout": 5}),
                "args.timeout",
            ),
            (
                "vm_stop",
                Tier::Operate,
                json!({"vmid": 100}),
                "not among the calls",
            ),
            (
                "vm_delete",
                Tier::Admin,
                json!({"vmid": 100}),
                "declares tiers [read, operate]",
            ),
        ] {
            match r.admit(tool, tier, &args, &key()) {
                Admitted::Refused { why } => assert!(why.contains(says), "{why}"),
                other => panic!("{tool} {args}: {other:?}"),
            }
        }
        // A read of any tool is a read.
        assert_eq!(
            r.admit("vm_list", Tier::Read, &json!({}), &key()),
            Admitted::Read
        );
    }

    #[test]
    fn an_unapproved_version_makes_no_change_and_max_changes_holds() {
        let r = run(false);
        let a = r.admit("vm_reboot", Tier::Operate, &json!({"vmid": 100}), &key());
        assert!(
            matches!(a, Admitted::Refused { ref why } if why.contains("is not approved")),
            "{a:?}"
        );
        let r = run(true);
        for _ in 0..2 {
            assert!(matches!(
                r.admit("vm_reboot", Tier::Operate, &json!({"vmid": 101}), &key()),
                Admitted::Change { .. }
            ));
        }
        let a = r.admit("vm_reboot", Tier::Operate, &json!({"vmid": 101}), &key());
        assert!(
            matches!(a, Admitted::Refused { ref why } if why.contains("max_changes")),
            "{a:?}"
        );
        assert_eq!(r.changes(), 2);
    }

    #[test]
    fn outside_the_file_asks_when_the_deployment_says_so() {
        let r = RunbookRun::new(
            std::sync::Arc::new(Runbook::parse(FILE).unwrap()),
            Some("bob".into()),
            "rb-2".into(),
            Outside::Ask,
        );
        let a = r.admit("vm_stop", Tier::Operate, &json!({"vmid": 100}), &key());
        assert!(matches!(a, Admitted::Ask { .. }), "{a:?}");
        assert_eq!(r.changes(), 0, "an asked call is not one of the run's own");
    }

    #[test]
    fn a_bounded_secret_is_checked_but_never_recorded() {
        let file = FILE.replace(
            "args.timeout = { type = \"null\" }",
            "args.cipassword = { type = \"string\", minLength = 12 }",
        );
        let rb = Runbook::parse(&file).unwrap();
        let args = json!({"vmid": 100, "cipassword": "correct horse battery"});
        let seen = rb.check("vm_reboot", Tier::Operate, &args, &key()).unwrap();
        assert_eq!(seen["cipassword"], airlock_catalog::redact::REDACTED);
        assert!(!Value::Object(seen.clone()).to_string().contains("horse"));
        assert!(rb.check_recorded("vm_reboot", Tier::Operate, &seen).is_ok());
        // Lines written before tags said `[redacted]`: they still verify.
        let old = json!({"vmid": 100, "cipassword": airlock_catalog::redact::REDACTED});
        assert!(rb
            .check_recorded("vm_reboot", Tier::Operate, old.as_object().unwrap())
            .is_ok());
        let short = json!({"vmid": 100, "cipassword": "short"});
        assert!(rb
            .check("vm_reboot", Tier::Operate, &short, &key())
            .is_err());
    }

    #[test]
    fn a_line_shows_only_the_values_a_bound_fixes() {
        let file = FILE.replace(
            "args.timeout = { type = \"null\" }",
            "args.text = { type = \"string\", maxLength = 100 }\nargs.cores = { minimum = 1, maximum = 8 }\nargs.memory = { minimum = 512 }\nargs.node = { const = \"pve1\" }",
        );
        let rb = Runbook::parse(&file).unwrap();
        let args = json!({"vmid": 100, "text": "db root pw: Hunter2-S3cr3t!", "cores": 4,
                          "memory": 2048, "node": "pve1"});
        let seen = rb.check("vm_reboot", Tier::Operate, &args, &key()).unwrap();
        let tag = |v: Value| json!({ "hmac": key().value_tag(&v) });
        assert_eq!(
            Value::Object(seen.clone()),
            json!({"vmid": 100, "text": tag(json!("db root pw: Hunter2-S3cr3t!")), "cores": 4,
                   "memory": tag(json!(2048)), "node": "pve1"})
        );
        assert!(!Value::Object(seen.clone()).to_string().contains("Hunter2"));
        assert!(rb.check_recorded("vm_reboot", Tier::Operate, &seen).is_ok());
        // Another deployment's key tags the same value otherwise.
        let other = SummaryKey::new([9; 32]).value_tag(&json!("db root pw: Hunter2-S3cr3t!"));
        assert_ne!(seen["text"]["hmac"], json!(other));
        // A line that hides a value its bound fixes is named.
        let mut hidden = seen.clone();
        hidden.insert("vmid".into(), tag(json!(100)));
        let e = rb
            .check_recorded("vm_reboot", Tier::Operate, &hidden)
            .unwrap_err();
        assert!(e.0.contains("args.vmid") && e.0.contains("fixes"), "{e}");
    }

    #[test]
    fn the_version_is_the_file_s_hash_and_any_edit_changes_it() {
        let a = Runbook::parse(FILE).unwrap();
        let b = Runbook::parse(&format!("{FILE}# a comment\n")).unwrap();
        assert_eq!(a.version, version_of(FILE));
        assert_ne!(a.version, b.version);
    }

    #[test]
    fn a_bad_file_names_the_field_and_the_rule() {
        for (text, says) in [
            (FILE.replace("restart_web", "Restart-Web"), "`name`"),
            (
                FILE.replace("[\"read\", \"operate\"]", "[\"forbidden\"]"),
                "`tiers`",
            ),
            (
                FILE.replace("max_changes = 2", "max_changes = 100000"),
                "`max_changes`",
            ),
            (
                FILE.replace("{ enum = [100, 101] }", "{ type = 7 }"),
                "calls[0].args.vmid",
            ),
            // Under draft 4 a `const` bounds nothing, yet reads as fixing
            // the value (found by an attacker's review).
            (
                FILE.replace(
                    "{ enum = [100, 101] }",
                    "{ \"$schema\" = \"http://json-schema.org/draft-04/schema#\", const = 100 }",
                ),
                "`$schema` is not allowed in a bound",
            ),
            (
                FILE.replace("source = \"1\"", "source = \"  \""),
                "script.source",
            ),
            (
                FILE.replace("max_changes = 2", "max_changes = 2\nsecret = 1"),
                "unknown field",
            ),
            ("x".repeat(MAX_RUNBOOK_BYTES + 1), "at most"),
        ] {
            let e = Runbook::parse(&text).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn a_version_is_picked_by_an_unambiguous_prefix_of_eight_or_more() {
        let s = |v: &str| Stored {
            name: "n".into(),
            version: v.into(),
            text: String::new(),
            author: "a".into(),
            added_ms: 0,
            approved_by: None,
            approved_ms: None,
            retired_ms: None,
        };
        let versions = [
            s(&format!("abcdef01{}", "0".repeat(56))),
            s(&format!("abcdef02{}", "0".repeat(56))),
        ];
        assert_eq!(
            pick("n", &versions, "abcdef"),
            Err(StoreError::ShortVersion)
        );
        assert!(matches!(
            pick("n", &versions, "abcdef0"),
            Err(StoreError::ShortVersion)
        ));
        assert_eq!(
            pick("n", &versions, "ABCDEF02").unwrap().version,
            versions[1].version
        );
        assert!(matches!(
            pick("n", &versions, "abcdef03"),
            Err(StoreError::UnknownVersion { .. })
        ));
        assert_eq!(
            pick_whole("n", &versions, "abcdef02"),
            Err(StoreError::WholeVersion)
        );
        assert!(pick_whole("n", &versions, &versions[1].version).is_ok());
        let same = [
            s(&format!("abcdef01{}", "1".repeat(56))),
            s(&format!("abcdef01{}", "2".repeat(56))),
        ];
        assert!(matches!(
            pick("n", &same, "abcdef01"),
            Err(StoreError::Ambiguous { .. })
        ));
    }
}
