//! Finding tools from inside a script: `catalog.search(query, options)` and
//! `catalog.describe(...names)` in the guest are calls of the reserved
//! names [`SEARCH`] and [`DESCRIBE`] (a dot makes them no tool name). They
//! pass the gateway like any call — rate limit, audit — and read only the
//! catalog; they show only tools the caller's mode may call, so a script
//! learns nothing an agent could not already use, and a name it may not
//! call is answered as a name that does not exist.

use serde_json::{json, Map, Value};

use crate::{
    catalog::{quote_name, Catalog, SchemaAnswer},
    search::Query,
    spec::Tier,
};

pub const SEARCH: &str = "catalog.search";
pub const DESCRIBE: &str = "catalog.describe";

/// At most this many hits from one `catalog.search`.
pub const MAX_HITS: usize = 20;
/// At most this many names in one `catalog.describe`.
pub const MAX_DESCRIBED: usize = 20;
/// At most this long a query, in characters.
pub const MAX_QUERY_CHARS: usize = 500;
/// At most this many problems are named; the rest are counted.
const MAX_PROBLEMS: usize = 10;
/// Hits asked of the catalog before the caller's policy filters them.
const CANDIDATES: usize = 50;

pub fn is_discovery(name: &str) -> bool {
    name == SEARCH || name == DESCRIBE
}

/// The answer to a discovery call, or what is wrong with its arguments.
/// `may_call` says which tiers the caller's mode grants.
/// `may_call(tool, tier)` says what the caller's policy lets through.
pub fn answer(
    catalog: &Catalog,
    name: &str,
    args: &Value,
    may_call: impl Fn(&str, Tier) -> bool,
) -> Result<Value, Vec<String>> {
    let answer = if name == SEARCH {
        search(catalog, args, may_call)
    } else {
        describe(catalog, args, may_call)
    };
    answer.map_err(|mut problems| {
        if problems.len() > MAX_PROBLEMS {
            let more = problems.len() - MAX_PROBLEMS;
            problems.truncate(MAX_PROBLEMS);
            problems.push(format!("… and {more} more"));
        }
        problems
    })
}

fn search(
    catalog: &Catalog,
    args: &Value,
    may_call: impl Fn(&str, Tier) -> bool,
) -> Result<Value, Vec<String>> {
    let mut problems = Vec::new();
    let fields = object(args, &["query", "tier", "limit"], &mut problems);
    let query = match get(fields, "query") {
        Some(Value::String(q)) if q.chars().count() <= MAX_QUERY_CHARS => q.clone(),
        Some(Value::String(q)) => {
            problems.push(format!(
                "`query` has {} characters; at most {MAX_QUERY_CHARS}: a few words say what the tool does",
                q.chars().count()
            ));
            String::new()
        }
        _ => {
            problems.push("`query` must be a string, e.g. catalog.search(\"start a vm\")".into());
            String::new()
        }
    };
    let limit = match get(fields, "limit") {
        None => 5,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_HITS as u64).contains(&n) => n as usize,
            _ => {
                problems.push(format!(
                    "`limit` must be a whole number from 1 to {MAX_HITS}"
                ));
                5
            }
        },
    };
    let asked: Vec<Tier> = match get(fields, "tier") {
        None => Vec::new(),
        Some(v) => {
            let list: Vec<&Value> = match v {
                Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            let mut tiers = Vec::new();
            for t in list {
                match t.as_str().and_then(|s| s.parse::<Tier>().ok()) {
                    Some(t) if t != Tier::Forbidden => tiers.push(t),
                    _ => problems
                        .push("`tier` must be read, operate or admin, or a list of them".into()),
                }
            }
            tiers
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let tiers: Vec<Tier> = [Tier::Read, Tier::Operate, Tier::Admin]
        .into_iter()
        .filter(|t| asked.is_empty() || asked.contains(t))
        .collect();
    let results = catalog.search(&Query {
        text: query,
        tiers,
        backend: None,
        limit: Some(CANDIDATES),
    });
    let hits: Vec<Value> = results
        .hits
        .iter()
        .filter(|h| may_call(&h.name, h.tier))
        .take(limit)
        .map(|h| {
            let mut hit = json!({
                "name": h.name,
                "summary": h.summary,
                "tier": h.tier.as_str(),
                "signature": h.signature,
            });
            if let Some(e) = &h.endpoint {
                hit["endpoint"] = json!(e);
            }
            hit
        })
        .collect();
    // The catalog's own hint counts every tool; this one says nothing of
    // what the caller cannot call.
    let empty = hits.is_empty();
    let mut out = json!({"hits": hits});
    if empty {
        out["hint"] = json!("no tool this identity may call matches; try other words for what it should do (\"list vms\", \"start a container\")");
    }
    Ok(out)
}

fn describe(
    catalog: &Catalog,
    args: &Value,
    may_call: impl Fn(&str, Tier) -> bool,
) -> Result<Value, Vec<String>> {
    let mut problems = Vec::new();
    let fields = object(args, &["names"], &mut problems);
    let names: Vec<String> = match get(fields, "names") {
        Some(Value::Array(a))
            if !a.is_empty() && a.len() <= MAX_DESCRIBED && a.iter().all(Value::is_string) =>
        {
            // A repeated name is described once.
            let mut names: Vec<String> = Vec::new();
            for n in a.iter().filter_map(Value::as_str) {
                if !names.iter().any(|m| m == n) {
                    names.push(n.to_string());
                }
            }
            names
        }
        _ => {
            problems.push(format!(
                "give 1 to {MAX_DESCRIBED} tool names as strings, e.g. catalog.describe(\"vm_start\")"
            ));
            Vec::new()
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let described: Vec<Value> = names
        .iter()
        .map(|n| {
            // Decided before any work: a name that may not be called costs
            // what an unknown one does, and reads the same.
            let callable = catalog
                .get(n)
                .is_some_and(|e| may_call(&e.spec.name, e.spec.tier));
            let found = if callable {
                catalog.schemas(std::slice::from_ref(n)).pop()
            } else {
                None
            };
            match found {
                Some(SchemaAnswer::Found {
                    name,
                    tier,
                    endpoint,
                    typescript,
                    ..
                }) => {
                    let mut d = json!({"name": name, "tier": tier.as_str(), "typescript": typescript});
                    if let Some(e) = endpoint {
                        d["endpoint"] = json!(e);
                    }
                    d
                }
                // Unknown and not callable read the same.
                _ => json!({
                    "name": quote_name(n),
                    "error": format!("no tool named `{}` that this identity may call; catalog.search finds tools by what they do", quote_name(n)),
                }),
            }
        })
        .collect();
    Ok(Value::Array(described))
}

/// Field `key` of the argument object, if it is one.
fn get<'a>(fields: Option<&'a Map<String, Value>>, key: &str) -> Option<&'a Value> {
    fields.and_then(|f| f.get(key))
}

/// The argument object's fields, with a problem for anything but an
/// object and for fields not in `known`.
fn object<'a>(
    args: &'a Value,
    known: &[&str],
    problems: &mut Vec<String>,
) -> Option<&'a Map<String, Value>> {
    match args {
        Value::Object(m) => {
            for k in m.keys().filter(|k| !known.contains(&k.as_str())) {
                problems.push(format!(
                    "unknown field `{}`; the fields are {}",
                    quote_name(k),
                    known.join(", ")
                ));
            }
            Some(m)
        }
        _ => {
            problems.push("the argument must be an object".into());
            None
        }
    }
}
