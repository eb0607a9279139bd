//! The catalog: every backend's tools under one namespace, each with its
//! compiled validator, TypeScript signature and a place in the search
//! index.
//!
//! Name clashes are settled by backend order (the order of the
//! configuration): the first backend keeps the name, a later one's tool is
//! renamed `<backend>_<name>`, and if that is taken too it is left out.
//! Every clash is reported so startup can log it.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::{
    search::{self, Hit, Index, Query, Results},
    spec::{is_js_identifier, Hints, Tier, ToolSpec},
    typescript,
    validate::ArgsValidator,
    visible,
};

/// The longest tool name looked up, in bytes. A longer one is refused
/// before any lookup or suggestion: fuzzy matching costs time in the
/// name's length for every tool, and a script or client chooses the name.
pub const MAX_NAME_BYTES: usize = 256;

/// How much of an unknown name a message quotes, in characters.
pub const QUOTED_NAME_CHARS: usize = 64;

/// Why `name` cannot name a tool, when it is longer than [`MAX_NAME_BYTES`].
pub fn name_too_long(name: &str) -> Option<String> {
    (name.len() > MAX_NAME_BYTES).then(|| {
        format!(
            "a tool name is at most {MAX_NAME_BYTES} bytes; this one is {}",
            name.len()
        )
    })
}

/// An unknown name as messages quote it: its first
/// [`QUOTED_NAME_CHARS`] characters, made visible, and its length if cut.
pub fn quote_name(name: &str) -> String {
    visible::quote(name, QUOTED_NAME_CHARS)
}

pub struct Entry {
    pub spec: ToolSpec,
    pub signature: String,
    /// The name its result type has in `get_schema`'s declarations:
    /// `VmListResult`, or `VmListResult2` for a second tool whose name
    /// folds to the same (`vmList`).
    pub result_type: String,
    /// How a script calls it (`search` shows it for the first hit).
    pub example: String,
    validator: ArgsValidator,
}

impl Entry {
    /// Problems with `args` under this tool's schema; empty when valid.
    pub fn problems(&self, args: &Value) -> Vec<String> {
        self.validator.problems(args)
    }
}

/// A name two backends both offered, and how it was settled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Clash {
    pub name: String,
    pub kept_by: String,
    pub other: String,
    /// The other backend's tool's new name, or `None` if it was left out.
    pub renamed_to: Option<String>,
}

impl std::fmt::Display for Clash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.renamed_to {
            Some(n) => write!(f, "tool `{}` is offered by {} and {}; {}'s is available as `{n}`", self.name, self.kept_by, self.other, self.other),
            None => write!(f, "tool `{}` is offered by {} and {}; {}'s is left out (its prefixed name is taken too)", self.name, self.kept_by, self.other, self.other),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CatalogError {
    #[error("backend {backend} offers a tool named `{name}`, which is not a valid JavaScript identifier")]
    InvalidName { backend: String, name: String },
    #[error("tool `{tool}`: {message}")]
    BadSchema { tool: String, message: String },
}

pub struct Catalog {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    /// Every key, name and alias → the tools it names (policy lists).
    naming: HashMap<String, Vec<usize>>,
    index: Index,
}

/// Example queries offered when a search finds nothing.
const EXAMPLES: &[&str] = &[
    "list vms",
    "start container",
    "snapshot a vm",
    "node status",
];

/// The answer for one name asked of `get_schema`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SchemaAnswer {
    Found {
        name: String,
        tier: Tier,
        hints: Hints,
        backend: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        json_schema: Value,
        typescript: String,
    },
    Unknown {
        name: String,
        error: String,
        did_you_mean: Vec<String>,
    },
}

impl Catalog {
    /// Merges backends' tools in the given order.
    pub fn build(
        sources: Vec<(String, Vec<ToolSpec>)>,
    ) -> Result<(Self, Vec<Clash>), CatalogError> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut result_types: HashMap<String, u32> = HashMap::new();
        let mut clashes = Vec::new();
        for (backend, specs) in sources {
            for mut spec in specs {
                spec.backend = backend.clone();
                if spec.key.is_empty() {
                    spec.key = format!("{backend}:{}", spec.name);
                }
                if !is_js_identifier(&spec.name) {
                    return Err(CatalogError::InvalidName {
                        backend,
                        name: spec.name,
                    });
                }
                if let Some(&i) = by_name.get(&spec.name) {
                    let renamed = format!("{backend}_{}", spec.name);
                    let free = is_js_identifier(&renamed) && !by_name.contains_key(&renamed);
                    clashes.push(Clash {
                        name: spec.name.clone(),
                        kept_by: entries[i].spec.backend.clone(),
                        other: backend.clone(),
                        renamed_to: free.then(|| renamed.clone()),
                    });
                    if !free {
                        continue;
                    }
                    spec.name = renamed;
                }
                let validator =
                    ArgsValidator::new(&spec).map_err(|message| CatalogError::BadSchema {
                        tool: spec.name.clone(),
                        message,
                    })?;
                let signature = typescript::signature(&spec);
                by_name.insert(spec.name.clone(), entries.len());
                let folded = typescript::result_type(&spec.name);
                let count = result_types.entry(folded.clone()).or_insert(0u32);
                *count += 1;
                let result_type = match *count {
                    1 => folded,
                    n => format!("{folded}{n}"),
                };
                let example = typescript::example(&spec, &result_type);
                entries.push(Entry {
                    spec,
                    signature,
                    result_type,
                    example,
                    validator,
                });
            }
        }
        let mut naming: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            let mut names: Vec<&String> = vec![&e.spec.key, &e.spec.name];
            names.extend(&e.spec.aliases);
            names.sort();
            names.dedup();
            for n in names {
                naming.entry(n.clone()).or_default().push(i);
            }
        }
        let index = Index::build(entries.iter().map(|e| &e.spec));
        Ok((
            Self {
                entries,
                by_name,
                naming,
                index,
            },
            clashes,
        ))
    }

    /// How many tools a policy list entry names (by key, catalog name or
    /// alias): an allow list entry that names more than one allows none
    /// of them by that name.
    pub fn named_by(&self, entry: &str) -> usize {
        self.naming.get(entry).map_or(0, Vec::len)
    }

    /// The catalog names of the tools whose key is `key` (one, or several
    /// tools that make the same backend operation), sorted.
    pub fn names_of_key(&self, key: &str) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .naming
            .get(key)
            .into_iter()
            .flatten()
            .map(|&i| &self.entries[i].spec)
            .filter(|s| s.key == key)
            .map(|s| s.name.as_str())
            .collect();
        names.sort_unstable();
        names
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Ranked hits for `query`. Forbidden tools are only listed when the
    /// query asks for that tier explicitly: they can never be called. When
    /// one would have been the best hit, the hint names it, so "set node
    /// dns servers" says why the tool that does it is not among the hits.
    pub fn search(&self, query: &Query) -> Results {
        let limit = query
            .limit
            .unwrap_or(search::DEFAULT_LIMIT)
            .clamp(1, search::MAX_LIMIT);
        let wanted = |e: &Entry| {
            let tier_ok = if query.tiers.is_empty() {
                e.spec.tier != Tier::Forbidden
            } else {
                query.tiers.contains(&e.spec.tier)
            };
            tier_ok && query.backend.as_ref().is_none_or(|b| &e.spec.backend == b)
        };
        let ranked = self.index.rank(&query.text);
        let best_forbidden = ranked
            .iter()
            .map(|&(i, score)| (&self.entries[i], score))
            .find(|(e, _)| query.backend.as_ref().is_none_or(|b| &e.spec.backend == b))
            .filter(|(e, _)| query.tiers.is_empty() && e.spec.tier == Tier::Forbidden);
        let hits: Vec<Hit> = ranked
            .into_iter()
            .map(|(i, score)| (&self.entries[i], score))
            .filter(|(e, _)| wanted(e))
            .take(limit)
            .map(|(e, score)| Hit {
                name: e.spec.name.clone(),
                summary: e.spec.summary.clone(),
                tier: e.spec.tier,
                backend: e.spec.backend.clone(),
                endpoint: e.spec.endpoint.clone(),
                signature: e.signature.clone(),
                score: (score * 100.0).round() / 100.0,
            })
            .collect();
        let hint = match best_forbidden {
            Some((e, _)) => Some(format!(
                "The best match, `{}`{}, is in tier forbidden: no one may call it until the operator moves it to another tier in Airlock's configuration. Search with tier \"forbidden\" to list such tools.",
                e.spec.name,
                e.spec
                    .endpoint
                    .as_deref()
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            )),
            None => hits
                .is_empty()
                .then(|| search::guidance(self.len(), EXAMPLES)),
        };
        let example = hits
            .first()
            .and_then(|h| self.by_name.get(&h.name))
            .map(|&i| self.entries[i].example.clone());
        Results {
            hits,
            hint,
            example,
        }
    }

    /// One answer per requested name: the schema and its TypeScript, or an
    /// error with suggestions. Never all-or-nothing. A name longer than
    /// [`MAX_NAME_BYTES`] is answered by that rule, without a lookup or
    /// suggestions; an unknown name is quoted by [`quote_name`].
    pub fn schemas(&self, names: &[String]) -> Vec<SchemaAnswer> {
        names
            .iter()
            .map(|name| match name_too_long(name) {
                Some(error) => SchemaAnswer::Unknown {
                    name: quote_name(name),
                    error,
                    did_you_mean: Vec::new(),
                },
                None => self.schema(name),
            })
            .collect()
    }

    fn schema(&self, name: &str) -> SchemaAnswer {
        match self.get(name) {
            Some(e) => SchemaAnswer::Found {
                name: name.to_string(),
                tier: e.spec.tier,
                hints: e.spec.hints,
                backend: e.spec.backend.clone(),
                endpoint: e.spec.endpoint.clone(),
                json_schema: e.spec.input_schema.clone(),
                typescript: typescript::declarations([(&e.spec, e.result_type.as_str())]),
            },
            None => SchemaAnswer::Unknown {
                name: quote_name(name),
                error: format!("no tool named `{}`", quote_name(name)),
                did_you_mean: self.suggest(name),
            },
        }
    }

    /// Up to three names close to `name`: similar spelling first, then what
    /// a search for its words finds. None for a name longer than
    /// [`MAX_NAME_BYTES`]: it names no tool, and matching it would cost
    /// time in its length.
    pub fn suggest(&self, name: &str) -> Vec<String> {
        if name_too_long(name).is_some() {
            return Vec::new();
        }
        let mut out = similar_names(name, self.entries.iter().map(|e| e.spec.name.as_str()));
        for (i, _) in self.index.rank(&name.replace(['_', '-', '.'], " ")) {
            if out.len() >= 3 {
                break;
            }
            let n = &self.entries[i].spec.name;
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }
}

/// Up to three of `names` spelt like `name` (Jaro-Winkler ≥ 0.85), closest
/// first: the did-you-mean of a misspelt tool name in a request or in the
/// configuration (a backend's tier overrides, before any catalog exists).
pub fn similar_names<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    if name_too_long(name).is_some() {
        return Vec::new();
    }
    let lower = name.to_lowercase();
    let mut close: Vec<(f64, &str)> = names
        .map(|n| (strsim::jaro_winkler(&lower, &n.to_lowercase()), n))
        .filter(|(s, _)| *s >= 0.85)
        .collect();
    close.sort_by(|a, b| b.0.total_cmp(&a.0));
    close
        .into_iter()
        .map(|(_, n)| n.to_string())
        .take(3)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, tier: Tier, summary: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            summary: summary.into(),
            description: String::new(),
            input_schema: json!({"type": "object", "properties": {"node": {"type": "string"}}}),
            output_schema: None,
            tier,
            hints: Hints::for_tier(tier),
            backend: String::new(),
            path_params: vec![],
            endpoint: None,
            keywords: String::new(),
            key: String::new(),
            aliases: Vec::new(),
        }
    }

    #[test]
    fn clashes_are_settled_by_order_and_reported() {
        let (cat, clashes) = Catalog::build(vec![
            (
                "pve".into(),
                vec![tool("node_list", Tier::Read, "List nodes")],
            ),
            (
                "quox".into(),
                vec![
                    tool("node_list", Tier::Read, "Collector nodes"),
                    tool("pve_x", Tier::Read, "x"),
                ],
            ),
            ("extra".into(), vec![tool("node_list", Tier::Read, "again")]),
        ])
        .unwrap();
        assert_eq!(cat.get("node_list").unwrap().spec.backend, "pve");
        assert_eq!(
            cat.get("quox_node_list").unwrap().spec.summary,
            "Collector nodes"
        );
        assert_eq!(clashes.len(), 2);
        assert_eq!(clashes[0].renamed_to.as_deref(), Some("quox_node_list"));
        assert!(clashes[1].to_string().contains("extra"));
        // Same input, same outcome.
        let (again, _) = Catalog::build(vec![
            (
                "pve".into(),
                vec![tool("node_list", Tier::Read, "List nodes")],
            ),
            (
                "quox".into(),
                vec![tool("node_list", Tier::Read, "Collector nodes")],
            ),
        ])
        .unwrap();
        assert!(again.contains("quox_node_list"));
    }

    /// Two tools whose names fold to one type name get two type names, and
    /// `search`'s example names the type its tool's schema declares.
    #[test]
    fn result_types_are_told_apart() {
        let mut a = tool("vm_list", Tier::Read, "List VMs");
        a.output_schema = Some(json!({"type": "array"}));
        let mut b = tool("vmList", Tier::Read, "Enumerate guests");
        b.output_schema = Some(json!({"type": "string"}));
        let (cat, _) = Catalog::build(vec![("pve".into(), vec![a, b])]).unwrap();
        let schema = |name: &str| match cat.schemas(&[name.to_string()]).remove(0) {
            SchemaAnswer::Found { typescript, .. } => typescript,
            other => panic!("{other:?}"),
        };
        assert!(
            schema("vm_list").contains("type VmListResult = unknown[];"),
            "{}",
            schema("vm_list")
        );
        assert!(
            schema("vmList").contains("type VmListResult2 = string;"),
            "{}",
            schema("vmList")
        );
        let found = cat.search(&Query {
            text: "enumerate".into(),
            ..Query::default()
        });
        assert_eq!(found.hits[0].name, "vmList");
        assert_eq!(
            found.example.as_deref(),
            Some("const r: VmListResult2 = await tools.vmList({});")
        );
    }

    #[test]
    fn only_a_querys_first_words_count() {
        let (cat, _) = Catalog::build(vec![(
            "pve".into(),
            vec![
                tool("vm_stop", Tier::Operate, "Stop a VM"),
                tool("node_list", Tier::Read, "List nodes"),
            ],
        )])
        .unwrap();
        let first = |text: String| {
            cat.search(&Query {
                text,
                ..Query::default()
            })
            .hits
            .first()
            .map(|h| h.name.clone())
        };
        assert_eq!(first("stop vm".into()).as_deref(), Some("vm_stop"));
        // 5,000 distinct words after them change nothing, and words past
        // the first 32 are not read at all: "list nodes" there finds nothing.
        let junk: String = (0..5000).map(|i| format!(" w{i}x")).collect();
        assert_eq!(first(format!("stop vm{junk}")).as_deref(), Some("vm_stop"));
        assert_eq!(first(format!("{junk} list nodes")), None);
    }

    #[test]
    fn bad_names_and_schemas_fail_the_build() {
        let err = Catalog::build(vec![("b".into(), vec![tool("vm-start", Tier::Read, "")])])
            .err()
            .unwrap();
        assert!(matches!(err, CatalogError::InvalidName { .. }));
        let mut bad = tool("x", Tier::Read, "");
        bad.input_schema = json!({"type": 12});
        let err = Catalog::build(vec![("b".into(), vec![bad])]).err().unwrap();
        assert!(matches!(err, CatalogError::BadSchema { .. }), "{err:?}");
    }

    #[test]
    fn schemas_answer_per_name_with_suggestions() {
        let (cat, _) = Catalog::build(vec![(
            "pve".into(),
            vec![
                tool("start_vm", Tier::Operate, "Start a VM"),
                tool("stop_vm", Tier::Operate, "Stop a VM"),
            ],
        )])
        .unwrap();
        let answers = cat.schemas(&["start_vm".into(), "strat_vm".into()]);
        assert!(
            matches!(&answers[0], SchemaAnswer::Found { typescript, .. } if typescript.contains("function start_vm"))
        );
        match &answers[1] {
            SchemaAnswer::Unknown { did_you_mean, .. } => assert_eq!(did_you_mean[0], "start_vm"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn long_names_are_refused_without_lookup_or_suggestions() {
        let (cat, _) = Catalog::build(vec![(
            "pve".into(),
            vec![tool("start_vm", Tier::Operate, "Start a VM")],
        )])
        .unwrap();
        // Long, but close enough to a tool that matching would suggest it.
        let near = format!("start_vm{}", " start vm".repeat(300_000));
        assert!(cat.suggest(&near[..200]).contains(&"start_vm".to_string()));
        assert!(cat.suggest(&near).is_empty());
        let answers = cat.schemas(&[near.clone(), format!("x\u{1b}[2K{}", "x".repeat(100))]);
        match &answers[0] {
            SchemaAnswer::Unknown {
                name,
                error,
                did_you_mean,
            } => {
                assert_eq!(
                    error,
                    &format!(
                        "a tool name is at most 256 bytes; this one is {}",
                        near.len()
                    )
                );
                assert!(did_you_mean.is_empty(), "no suggestions for a long name");
                assert!(name.len() < 100 && name.ends_with(&format!("({} bytes)", near.len())));
            }
            other => panic!("{other:?}"),
        }
        assert!(serde_json::to_string(&answers).unwrap().len() < 1024);
        match &answers[1] {
            SchemaAnswer::Unknown { name, error, .. } => {
                assert!(
                    !name.contains('\u{1b}') && !error.contains('\u{1b}'),
                    "{error}"
                );
                assert!(
                    error.contains("x\\u{1b}[2K") && error.contains("(105 bytes)"),
                    "{error}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn forbidden_tools_are_hidden_from_search_unless_asked_for() {
        let (cat, _) = Catalog::build(vec![(
            "pve".into(),
            vec![
                tool("vm_console", Tier::Forbidden, "Open a VM console"),
                tool("vm_status", Tier::Read, "VM status"),
            ],
        )])
        .unwrap();
        let r = cat.search(&Query {
            text: "vm console".into(),
            ..Query::default()
        });
        assert!(r.hits.iter().all(|h| h.name != "vm_console"));
        // It would have been first: the hint says where it is.
        let hint = r.hint.unwrap();
        assert!(
            hint.contains("`vm_console`") && hint.contains("tier forbidden"),
            "{hint}"
        );
        // Not when a tool one may call is the better match.
        let r = cat.search(&Query {
            text: "vm status".into(),
            ..Query::default()
        });
        assert_eq!(r.hits[0].name, "vm_status");
        assert_eq!(r.hint, None);
        // Nor when tiers are asked for: a script's discovery asks for its own.
        let r = cat.search(&Query {
            text: "vm console".into(),
            tiers: vec![Tier::Read],
            ..Query::default()
        });
        assert_eq!(r.hint, None);
        let r = cat.search(&Query {
            text: "vm console".into(),
            tiers: vec![Tier::Forbidden],
            ..Query::default()
        });
        assert_eq!(r.hits[0].name, "vm_console");
        let r = cat.search(&Query {
            text: "the of".into(),
            ..Query::default()
        });
        assert!(r.hits.is_empty());
        assert!(r.hint.unwrap().contains("e.g."));
    }
}
