//! The audit trail as the console shows it: one pass over the chain (the
//! store's export, a file or PostgreSQL page by page) that verifies every
//! line as `airlock audit verify` does, keeps the newest lines matching a
//! search, and sums up the newest executions (who, how they ended, calls
//! per tool, how long) and those still running.
//!
//! The pass reads the whole chain: the verdict shown is about every line
//! up to the newest shown, not only the page. What it keeps is bounded
//! whatever the chain's size ([`MAX_SHOWN`] lines, [`MAX_EXECUTIONS`]
//! executions of at most [`MAX_TOOLS_PER_EXECUTION`] tools each), and one
//! pass runs at a time per process (the console answers "busy" to
//! another meanwhile), so a person holding F5 costs one core, not all.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    io::Write,
};

use airlock_gateway::audit::{AuditError, AuditStore, Verdict, Verifier, MAX_LINE_BYTES};
use serde_json::{Map, Value};

/// Lines a search shows, newest first.
pub const MAX_SHOWN: usize = 200;
/// Executions the executions page sums up, newest first.
pub const MAX_EXECUTIONS: usize = 100;
/// Tools counted per execution; the rest are counted as "other".
pub const MAX_TOOLS_PER_EXECUTION: usize = 32;
/// The longest value a search field takes.
pub const MAX_FIELD_CHARS: usize = 256;

/// What a person searches the trail for; every given field must match
/// exactly (times: from `since`, up to `until`, at their precision).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Search {
    pub identity: Option<String>,
    pub tool: Option<String>,
    pub plan: Option<String>,
    pub execution: Option<String>,
    pub event: Option<String>,
    /// `YYYY-MM-DD`, optionally with `THH:MM` or `THH:MM:SS` (UTC).
    pub since: Option<String>,
    pub until: Option<String>,
}

impl Search {
    /// A search from a query string's fields, or what is wrong with one.
    pub fn from_query(q: &HashMap<String, String>) -> Result<Search, String> {
        let field = |name: &str| -> Result<Option<String>, String> {
            match q.get(name).map(|v| v.trim()) {
                None | Some("") => Ok(None),
                Some(v) if v.chars().count() > MAX_FIELD_CHARS => Err(format!(
                    "{name} is longer than {MAX_FIELD_CHARS} characters"
                )),
                Some(v) => Ok(Some(v.to_string())),
            }
        };
        let time = |name: &str| -> Result<Option<String>, String> {
            let v = field(name)?;
            if let Some(t) = &v {
                if !time_shape(t) {
                    return Err(format!(
                        "{name} `{t}` is not a UTC time like 2026-12-03, 2026-12-03T14:05 or 2026-12-03T14:05:09"
                    ));
                }
            }
            Ok(v)
        };
        Ok(Search {
            identity: field("identity")?,
            tool: field("tool")?,
            plan: field("plan")?,
            execution: field("execution")?,
            event: field("event")?,
            since: time("since")?,
            until: time("until")?,
        })
    }

    pub fn is_empty(&self) -> bool {
        *self == Search::default()
    }

    fn matches(&self, line: &Map<String, Value>) -> bool {
        let is = |key: &str, want: &Option<String>| {
            want.as_ref()
                .is_none_or(|w| line.get(key).and_then(Value::as_str) == Some(w.as_str()))
        };
        let ts = line.get("ts").and_then(Value::as_str).unwrap_or("");
        is("identity", &self.identity)
            && is("tool", &self.tool)
            && is("plan", &self.plan)
            && is("execution", &self.execution)
            && is("event", &self.event)
            && self.since.as_ref().is_none_or(|s| ts >= s.as_str())
            && self
                .until
                .as_ref()
                .is_none_or(|u| ts.get(..u.len()).is_some_and(|head| head <= u.as_str()))
    }
}

/// `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM` or `YYYY-MM-DDTHH:MM:SS`.
fn time_shape(t: &str) -> bool {
    let shape = match t.len() {
        10 => "dddd-dd-dd",
        16 => "dddd-dd-ddTdd:dd",
        19 => "dddd-dd-ddTdd:dd:dd",
        _ => return false,
    };
    t.bytes().zip(shape.bytes()).all(|(c, s)| match s {
        b'd' => c.is_ascii_digit(),
        other => c == other,
    })
}

/// One execution, summed up from its lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Execution {
    pub id: String,
    pub identity: String,
    pub started: String,
    /// `None` while it has no end line (running, or its process died).
    pub outcome: Option<String>,
    pub wall_ms: Option<u64>,
    pub plan: Option<String>,
    pub mode: Option<String>,
    /// Calls by tool, as the call lines name them.
    pub calls: BTreeMap<String, u64>,
}

/// What one pass found.
pub struct Trail {
    pub verdict: Verdict,
    /// Lines read (the chain's length, up to a broken line).
    pub lines: u64,
    /// Matching lines, newest first, at most [`MAX_SHOWN`].
    pub shown: Vec<Map<String, Value>>,
    /// How many lines matched in all.
    pub matched: u64,
    /// The newest executions, newest first.
    pub executions: Vec<Execution>,
}

/// Reads the chain once; see the module's documentation.
pub fn read(audit: &dyn AuditStore, search: &Search) -> Result<Trail, AuditError> {
    let mut pass = Pass {
        search,
        partial: Vec::new(),
        verifier: Verifier::default(),
        lines: 0,
        shown: VecDeque::new(),
        matched: 0,
        executions: HashMap::new(),
        order: VecDeque::new(),
    };
    audit.export(&mut pass)?;
    let Pass {
        verifier,
        lines,
        shown,
        matched,
        mut executions,
        order,
        ..
    } = pass;
    Ok(Trail {
        verdict: verifier.verdict(),
        lines,
        shown: shown.into_iter().rev().collect(),
        matched,
        executions: order
            .into_iter()
            .rev()
            .filter_map(|id| executions.remove(&id))
            .collect(),
    })
}

struct Pass<'a> {
    search: &'a Search,
    /// The start of a line whose end has not come yet.
    partial: Vec<u8>,
    verifier: Verifier,
    lines: u64,
    shown: VecDeque<Map<String, Value>>,
    matched: u64,
    executions: HashMap<String, Execution>,
    /// Execution ids, oldest first, at most [`MAX_EXECUTIONS`].
    order: VecDeque<String>,
}

impl Pass<'_> {
    fn line(&mut self, bytes: &[u8]) {
        self.lines += 1;
        // The verdict covers every line; a broken chain still lists
        // (the page says from where nothing is vouched for).
        self.verifier.line(bytes);
        let Ok(Value::Object(line)) = serde_json::from_slice::<Value>(bytes) else {
            return;
        };
        self.execution(&line);
        if self.search.matches(&line) {
            self.matched += 1;
            if self.shown.len() == MAX_SHOWN {
                self.shown.pop_front();
            }
            self.shown.push_back(line);
        }
    }

    fn execution(&mut self, line: &Map<String, Value>) {
        let text = |k: &str| line.get(k).and_then(Value::as_str).map(str::to_string);
        let Some(id) = text("execution") else {
            return;
        };
        match line.get("event").and_then(Value::as_str) {
            Some("execution_start") => {
                if self.order.len() == MAX_EXECUTIONS {
                    if let Some(old) = self.order.pop_front() {
                        self.executions.remove(&old);
                    }
                }
                self.order.push_back(id.clone());
                self.executions.insert(
                    id.clone(),
                    Execution {
                        id,
                        identity: text("identity").unwrap_or_default(),
                        started: text("ts").unwrap_or_default(),
                        plan: text("plan"),
                        mode: text("plan_mode"),
                        ..Execution::default()
                    },
                );
            }
            Some("execution_end") => {
                if let Some(e) = self.executions.get_mut(&id) {
                    e.outcome = Some(text("outcome").unwrap_or_else(|| "?".into()));
                    e.wall_ms = line.get("wall_ms").and_then(Value::as_u64);
                }
            }
            // Calls that ran: a refused one (an unknown tool's made-up
            // name among them) takes no place in the counts.
            Some("call") if line.get("decision").and_then(Value::as_str) == Some("allowed") => {
                if let Some(e) = self.executions.get_mut(&id) {
                    let tool = text("tool").unwrap_or_else(|| "?".into());
                    let key =
                        if e.calls.len() < MAX_TOOLS_PER_EXECUTION || e.calls.contains_key(&tool) {
                            tool
                        } else {
                            "(other tools)".into()
                        };
                    *e.calls.entry(key).or_default() += 1;
                }
            }
            _ => {}
        }
    }
}

impl Write for Pass<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(end + 1);
            if self.partial.is_empty() {
                self.line(head);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(head);
                self.line(&whole);
            }
            rest = tail;
        }
        // A line longer than any the chain writes is cut here: the
        // verifier then reports it broken.
        let room = (MAX_LINE_BYTES + 1).saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&rest[..rest.len().min(room)]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_search_names_its_bad_field() {
        let s = Search::from_query(&query(&[("identity", " alice "), ("since", "2026-12-03")]))
            .unwrap();
        assert_eq!(s.identity.as_deref(), Some("alice"));
        for (k, v, needle) in [
            ("since", "yesterday", "since `yesterday` is not a UTC time"),
            ("until", "2026-12-3", "until `2026-12-3`"),
            ("tool", &"x".repeat(300), "tool is longer than 256"),
        ] {
            let e = Search::from_query(&query(&[(k, v)])).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
        assert!(Search::from_query(&query(&[("tool", "")]))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn times_match_at_their_precision() {
        let line = |ts: &str| {
            serde_json::json!({"ts": ts, "event": "call", "identity": "alice"})
                .as_object()
                .unwrap()
                .clone()
        };
        let s = Search {
            since: Some("2026-12-03T14:05".into()),
            until: Some("2026-12-03".into()),
            ..Search::default()
        };
        assert!(s.matches(&line("2026-12-03T14:05:00.000Z")));
        assert!(
            s.matches(&line("2026-12-03T23:59:59.999Z")),
            "until a day is to its end"
        );
        assert!(!s.matches(&line("2026-12-03T14:04:59.999Z")));
        assert!(!s.matches(&line("2026-12-04T00:00:00.000Z")));
    }
}
