//! Ranked search over the catalog: BM25F over a tool's name, summary,
//! parameter names and description, with the synonyms operators actually
//! use, so "reboot the vm", "restart qemu guest" and "power cycle a
//! machine" land on the same tool.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::spec::{Tier, ToolSpec};

const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Field weights: a word in the name says more than one in the prose.
const W_NAME: f32 = 3.0;
const W_SUMMARY: f32 = 2.0;
const W_PARAMS: f32 = 1.0;
const W_DESCRIPTION: f32 = 0.7;
/// What the parameters say of themselves, and the values they take.
const W_PARAM_TEXT: f32 = 0.2;
/// The words operators use that the tool's own text does not.
const W_KEYWORDS: f32 = 2.0;
const FIELDS: usize = 6;
/// What each part of a name's compound word counts for (`fsinfo` as `fs`
/// and `info`), beside the compound itself.
const PART_WEIGHT: f32 = 1.0;
/// Parts shorter than this are not split off: `a`+`cme` would match noise.
const MIN_PART: usize = 2;
/// A synonym counts for less than the word the agent typed.
const SYNONYM_WEIGHT: f32 = 0.6;
/// Added when every word of a tool's name is asked for, and for each word
/// past the first: a longer name named in full is the more precise match.
const NAME_COVERED_BONUS: f32 = 2.5;
const NAME_COVERED_PER_WORD: f32 = 0.5;
const COVER_EXP: f32 = 0.5;

/// What a read-only tool's score is worth when the query asks for a change.
const READ_ONLY_WHEN_CHANGING: f32 = 0.5;

/// What a changing tool's score is worth when the query asks for nothing
/// to change ("ceph managers" wants the list, not "create manager").
const CHANGING_WHEN_LOOKING: f32 = 0.8;

/// A query that opens with one of these asks to see, whatever verbs
/// follow ("what vms run on pve2", "which guests are stopped").
const QUESTION_WORDS: &[&str] = &[
    "what", "which", "who", "whom", "whose", "when", "where", "why", "is", "are", "was", "were",
    "list", "show", "view", "display", "find",
];

/// Nouns that are verbs too ("backup vm"): a query with one of them but
/// no verb of [`CHANGE_VERBS`] may ask for either.
const NOUN_OR_VERB: &[&str] = &["backup", "snapshot"];

/// Verbs that ask for a change, not a look (a word whose synonym is one
/// counts: "kill" is "stop").
const CHANGE_VERBS: &[&str] = &[
    "create",
    "add",
    "new",
    "make",
    "delete",
    "remove",
    "destroy",
    "update",
    "set",
    "edit",
    "change",
    "modify",
    "start",
    "stop",
    "shutdown",
    "reboot",
    "restart",
    "migrate",
    "clone",
    "resize",
    "grow",
    "rollback",
    "restore",
    "enable",
    "disable",
    "apply",
    "wipe",
    "upload",
    "download",
    "run",
    "grant",
    "revoke",
    "suspend",
    "resume",
    "reset",
    "send",
    "take",
    "bring",
    "put",
    "freeze",
    "thaw",
    "unlock",
    "lock",
    "renew",
    "order",
    "register",
    "join",
    "attach",
    "detach",
    "mount",
    "unmount",
    "trigger",
    "mark",
    "flush",
    "reload",
    "sync",
    "import",
    "execute",
    "exec",
    "initialize",
    "init",
    "format",
    "regenerate",
    "generate",
    "rotate",
    "give",
    "assign",
    "allow",
    "deny",
    "block",
    "open",
    "close",
    "turn",
    "switch",
    "install",
    "upgrade",
    "rename",
    "replace",
    "convert",
    "prune",
    "trim",
    "wake",
    "kick",
    "drain",
    "refresh",
    "ban",
];

/// Words of a query that count; the rest are ignored.
pub const MAX_QUERY_WORDS: usize = 32;

pub const DEFAULT_LIMIT: usize = 10;
pub const MAX_LIMIT: usize = 50;

/// Words that carry no meaning in a query about tools.
const STOPWORDS: &[&str] = &[
    "a", "an", "the", "to", "of", "for", "on", "in", "at", "my", "me", "i", "is", "are", "be",
    "what", "please", "with", "and", "or", "do", "does", "how", "can", "from", "this", "that",
    "these", "those", "it", "its", "by", "into", "tool", "tools", "want", "need", "should",
    "would", "could", "some", "any", "every", "each", "there", "their", "them", "another", "other",
];

/// Phrases rewritten before splitting into words.
const PHRASES: &[(&str, &str)] = &[
    ("power on", "start"),
    ("power off", "stop shutdown"),
    ("power cycle", "reboot"),
    ("shut down", "shutdown"),
    ("virtual machine", "vm"),
    ("high availability", "ha"),
    ("resource pool", "pool"),
    ("api token", "token"),
    ("file system", "filesystem"),
    ("roll back", "rollback"),
    ("back up", "backup"),
    ("ip set", "ipset"),
    ("cloud-init", "cloudinit"),
    ("cloud init", "cloudinit"),
    ("right now", "currently"),
    ("user account", "user"),
    ("at boot", "onboot"),
    ("on boot", "onboot"),
    ("let's encrypt", "acme letsencrypt"),
    ("lets encrypt", "acme letsencrypt"),
    ("how full", "usage"),
    ("free space", "usage"),
    ("disk space", "usage"),
    ("switch on", "enable start"),
    ("turn on", "enable start"),
    ("switch off", "disable stop"),
    ("turn off", "disable stop"),
];

/// Groups of words that mean the same to an operator.
const SYNONYMS: &[&[&str]] = &[
    &["vm", "qemu", "kvm", "qm"],
    &["ct", "lxc", "container", "pct"],
    // Ceph's and PVE's short names.
    &["mgr", "manager"],
    &["mon", "monitor"],
    &["fs", "filesystem", "cephfs"],
    &["mds", "metadata"],
    &["reboot", "restart"],
    &["start", "boot", "launch", "poweron"],
    &["stop", "halt", "kill", "poweroff"],
    &["shutdown", "poweroff"],
    &[
        "delete", "destroy", "remove", "rm", "purge", "erase", "revoke",
    ],
    &["disk", "volume", "drive"],
    &["snapshot", "snap", "checkpoint"],
    &["backup", "vzdump", "dump", "archive"],
    &["restore", "recover", "rollback"],
    &["node", "host", "server", "hypervisor"],
    &["storage", "datastore"],
    &["migrate", "move", "relocate", "transfer"],
    &["clone", "copy", "duplicate"],
    &["create", "new", "make", "add", "provision"],
    &["list", "which", "show", "enumerate", "inventory", "all"],
    &[
        "status", "state", "running", "stopped", "online", "offline", "health", "healthy", "up",
        "down", "paused",
    ],
    &["config", "configuration", "settings", "options"],
    &["resize", "grow", "extend", "enlarge"],
    &["task", "job", "upid"],
    &["log", "syslog", "journal"],
    &["network", "net", "nic", "interface", "iface", "bridge"],
    &["firewall", "fw"],
    &["memory", "ram", "mem"],
    &["cpu", "cores", "vcpu", "processor"],
    &[
        "usage",
        "utilization",
        "load",
        "metrics",
        "stats",
        "statistics",
    ],
    &["update", "modify", "change", "set", "edit"],
    &["suspend", "pause", "hibernate"],
    &["resume", "unpause", "continue"],
    &["console", "vnc", "terminal", "shell", "spice"],
    &["cluster", "datacenter"],
    &["wait", "poll"],
    &["fail", "failed", "failure", "error", "broken"],
    &["recent", "newest", "latest", "last"],
    &["user", "account"],
];

/// A "guest" is either kind; expanded one way only.
const ONE_WAY: &[(&str, &[&str])] = &[
    ("quorate", &["quorum", "status"]),
    ("thin", &["lvmthin"]),
    ("appliance", &["aplinfo"]),
    ("template", &["aplinfo"]),
    // "usage" now is a status; its history is the RRD.
    ("usage", &["status"]),
    ("history", &["rrd", "rrddata"]),
    // "…now" asks for the action to run.
    ("now", &["create", "start", "run"]),
    ("iso", &["content", "image"]),
    ("memory", &["config"]),
    ("quorum", &["status"]),
    ("ip", &["network", "interface", "address"]),
    // Opening a port is a firewall rule.
    ("port", &["firewall", "rule"]),
    ("block", &["firewall", "rule", "ipset"]),
    ("blacklist", &["firewall", "rule", "ipset"]),
    ("blocklist", &["firewall", "rule", "ipset"]),
    ("ban", &["firewall", "rule", "ipset"]),
    ("guest", &["vm", "container"]),
    ("machine", &["vm"]),
    ("instance", &["vm", "container"]),
];

/// Words left as they are by the stemmer (it would merge them with words of
/// another meaning: "stopped" is a state, "stop" an action).
const NO_STEM: &[&str] = &[
    "stopped", "running", "status", "paused", "always", "ha", "os", "alias", "bus", "mapping",
    "setting",
];

/// Plurals the stemmer's rules get wrong: too short, or nouns in "-ing"
/// whose singular is left whole.
const SHORT_PLURALS: &[(&str, &str)] = &[
    ("vms", "vm"),
    ("cts", "ct"),
    ("ips", "ip"),
    ("mappings", "mapping"),
    ("settings", "setting"),
];

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hit {
    pub name: String,
    pub summary: String,
    pub tier: Tier,
    pub backend: String,
    /// What the backend calls (`GET /nodes/{node}/qemu`), where it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// One-line TypeScript signature.
    pub signature: String,
    pub score: f32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Results {
    pub hits: Vec<Hit>,
    /// How to search better, when the query found nothing useful.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// How a script calls the first hit, its result in a typed variable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

impl Results {
    /// Adds `note` to the hint (after what it says already): why part of
    /// the search could not be made, say.
    pub fn add_hint(&mut self, note: String) {
        self.hint = Some(match self.hint.take() {
            Some(hint) => format!("{hint} {note}"),
            None => note,
        });
    }
}

/// What to look for.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub text: String,
    /// Only these tiers (all when empty).
    pub tiers: Vec<Tier>,
    /// Only this backend.
    pub backend: Option<String>,
    /// At most this many hits (default 10, at most 50).
    pub limit: Option<usize>,
}

struct Doc {
    /// The name's distinct words a query must ask for to name the tool in
    /// full, in order. A first word that names an argument the call takes
    /// in its path (`node` in `node_ceph_pool_list`) is the scope that
    /// argument gives, so "list ceph pools" names that tool, unless what
    /// is left is a single word (`node_status` is not named by "status").
    name_terms: Vec<String>,
    /// It only reads.
    read_only: bool,
}

/// Where a term occurs: its idf, and per document its field-weighted,
/// length-normalised frequency (BM25F's tf before saturation). Built once;
/// a query touches only the documents its words occur in.
struct Postings {
    idf: f32,
    docs: Vec<(u32, f32)>,
}

pub struct Index {
    docs: Vec<Doc>,
    postings: HashMap<String, Postings>,
    synonyms: HashMap<String, Vec<String>>,
    /// [`CHANGE_VERBS`] and [`NOUN_OR_VERB`], stemmed once.
    change_verbs: HashSet<String>,
    noun_or_verb: HashSet<String>,
}

impl Index {
    pub fn build<'a>(specs: impl IntoIterator<Item = &'a ToolSpec>) -> Self {
        let synonyms = synonym_table();
        let mut docs = Vec::new();
        let mut counts: Vec<[HashMap<String, f32>; FIELDS]> = Vec::new();
        let mut lens: Vec<[f32; FIELDS]> = Vec::new();
        for spec in specs {
            let params = spec.param_names().join(" ");
            let param_text = spec.param_text();
            let texts = [
                spec.name.as_str(),
                spec.summary.as_str(),
                params.as_str(),
                spec.description.as_str(),
                param_text.as_str(),
                spec.keywords.as_str(),
            ];
            let mut fields: [HashMap<String, f32>; FIELDS] = Default::default();
            let mut len = [0f32; FIELDS];
            for (i, text) in texts.iter().enumerate() {
                for t in terms(text) {
                    *fields[i].entry(t).or_default() += 1.0;
                    len[i] += 1.0;
                }
            }
            counts.push(fields);
            lens.push(len);
            let mut name_terms = terms(&spec.name);
            let mut distinct = HashSet::new();
            name_terms.retain(|t| distinct.insert(t.clone()));
            let scoped = name_terms
                .first()
                .is_some_and(|first| spec.path_params.iter().any(|p| stem(p) == *first));
            if scoped && name_terms.len() >= 3 {
                name_terms.remove(0);
            }
            docs.push(Doc {
                name_terms,
                read_only: spec.hints.read_only,
            });
        }
        // Names run PVE's words together (`fsinfo`, `lvmthin`, `sendkey`):
        // where a name's word is two words the index knows, each counts too.
        let known: HashSet<String> = counts
            .iter()
            .flat_map(|f| f.iter().flat_map(|m| m.keys().cloned()))
            .chain(synonyms.keys().cloned())
            .collect();
        // So do parameter names (`norebalance`).
        for fields in &mut counts {
            for f in [0, 2] {
                let parts: Vec<String> = fields[f]
                    .keys()
                    .filter_map(|t| split_compound(t, &known, &synonyms))
                    .flat_map(|(a, b)| [a, b])
                    .collect();
                for part in parts {
                    *fields[f].entry(part).or_default() += PART_WEIGHT;
                }
            }
        }
        let n = docs.len().max(1) as f32;
        let mut avg = [0f32; FIELDS];
        for len in &lens {
            for (a, l) in avg.iter_mut().zip(len) {
                *a += l / n;
            }
        }
        let mut tfs: HashMap<String, Vec<(u32, f32)>> = HashMap::new();
        for (d, fields) in counts.iter().enumerate() {
            let mut by_term: HashMap<&String, f32> = HashMap::new();
            for (f, w) in [
                W_NAME,
                W_SUMMARY,
                W_PARAMS,
                W_DESCRIPTION,
                W_PARAM_TEXT,
                W_KEYWORDS,
            ]
            .iter()
            .enumerate()
            {
                let norm = 1.0 - B + B * lens[d][f] / avg[f].max(1.0);
                for (t, c) in &fields[f] {
                    *by_term.entry(t).or_default() += w * c / norm;
                }
            }
            for (t, tf) in by_term {
                tfs.entry(t.clone()).or_default().push((d as u32, tf));
            }
        }
        let postings = tfs
            .into_iter()
            .map(|(t, docs)| {
                let df = docs.len() as f32;
                let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                (t, Postings { idf, docs })
            })
            .collect();
        Self {
            docs,
            postings,
            synonyms,
            change_verbs: CHANGE_VERBS.iter().map(|v| stem(v)).collect(),
            noun_or_verb: NOUN_OR_VERB.iter().map(|v| stem(v)).collect(),
        }
    }

    /// Scores every document for `text`; returns `(doc index, score)` for
    /// the positive ones, best first.
    pub fn rank(&self, text: &str) -> Vec<(usize, f32)> {
        // The distinct words, the first MAX_QUERY_WORDS of them: a query is
        // a few words, and a long one must not cost in its length.
        let mut words: Vec<String> = Vec::new();
        for w in terms(text) {
            if words.len() == MAX_QUERY_WORDS {
                break;
            }
            if !words.contains(&w) {
                words.push(w);
            }
        }
        if words.is_empty() {
            return Vec::new();
        }
        let meanings = meanings(&words, &self.synonyms);
        // "delete a backup job" asks for a change: a tool that only reads
        // is not what was meant, however well its name matches.
        let question = text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .find(|w| !w.is_empty())
            .is_some_and(|w| QUESTION_WORDS.contains(&w.to_lowercase().as_str()));
        let changes = !question
            && meanings
                .iter()
                .any(|m| m.iter().any(|w| self.change_verbs.contains(*w)));
        let looks = question || !changes && !words.iter().any(|w| self.noun_or_verb.contains(w));
        // Each word the agent typed counts once per tool: by itself or by
        // its best-matching synonym, never by both.
        let nw = words.len();
        let mut best = vec![0f32; self.docs.len() * nw];
        for (wi, w) in words.iter().enumerate() {
            let own = std::iter::once((w, 1.0));
            let others = self
                .synonyms
                .get(w)
                .into_iter()
                .flatten()
                .map(|s| (s, SYNONYM_WEIGHT));
            for (t, qw) in own.chain(others) {
                let Some(p) = self.postings.get(t) else {
                    continue;
                };
                for &(d, tf) in &p.docs {
                    let s = qw * p.idf * tf / (K1 + tf);
                    let cell = &mut best[d as usize * nw + wi];
                    if s > *cell {
                        *cell = s;
                    }
                }
            }
        }
        let mut scored: Vec<(usize, f32)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, doc)| {
                let mut score: f32 = best[i * nw..(i + 1) * nw].iter().sum();
                if score <= 0.0 {
                    return None;
                }
                if covers(&meanings, &doc.name_terms) {
                    let share = (doc.name_terms.len() as f32 / nw as f32).min(1.0);
                    score += (NAME_COVERED_BONUS
                        + NAME_COVERED_PER_WORD * (doc.name_terms.len() - 1) as f32)
                        * share.powf(COVER_EXP);
                }
                if changes && doc.read_only {
                    score *= READ_ONLY_WHEN_CHANGING;
                } else if looks && !doc.read_only {
                    score *= CHANGING_WHEN_LOOKING;
                }
                Some((i, score))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored
    }
}

/// `word` as two words of `known` run together, the split with the longer
/// shorter part (`sendkey` is `send`+`key`); none for a word that is
/// already a synonym or too short.
fn split_compound(
    word: &str,
    known: &HashSet<String>,
    synonyms: &HashMap<String, Vec<String>>,
) -> Option<(String, String)> {
    if word.len() < 2 * MIN_PART + 1 || synonyms.contains_key(word) || !word.is_ascii() {
        return None;
    }
    (MIN_PART..=word.len() - MIN_PART)
        .filter_map(|i| {
            let (a, b) = (stem(&word[..i]), stem(&word[i..]));
            (known.contains(&a) && known.contains(&b)).then(|| (i.min(word.len() - i), a, b))
        })
        .max_by_key(|(shorter, _, _)| *shorter)
        .map(|(_, a, b)| (a, b))
}

/// What each word the agent typed stands for: itself and its synonyms.
fn meanings<'a>(
    words: &'a [String],
    synonyms: &'a HashMap<String, Vec<String>>,
) -> Vec<HashSet<&'a String>> {
    words
        .iter()
        .map(|w| {
            std::iter::once(w)
                .chain(synonyms.get(w).into_iter().flatten())
                .collect()
        })
        .collect()
}

/// Whether every word of a tool's name is asked for, each by a word of
/// its own: "node" asks for `node` or its synonym `host`, not both, so
/// `node_hosts` is not named in full by "vms on a node". A bipartite
/// matching (Kuhn's augmenting paths), polynomial in both word counts.
fn covers(meanings: &[HashSet<&String>], name_terms: &[String]) -> bool {
    if name_terms.is_empty() || name_terms.len() > meanings.len() {
        return false;
    }
    // For each query word, the name term it was given to.
    let mut given: Vec<Option<usize>> = vec![None; meanings.len()];
    fn augment(
        t: usize,
        name: &[String],
        meanings: &[HashSet<&String>],
        given: &mut [Option<usize>],
        seen: &mut [bool],
    ) -> bool {
        for q in 0..meanings.len() {
            if seen[q] || !meanings[q].contains(&name[t]) {
                continue;
            }
            seen[q] = true;
            let free = match given[q] {
                None => true,
                Some(other) => augment(other, name, meanings, given, seen),
            };
            if free {
                given[q] = Some(t);
                return true;
            }
        }
        false
    }
    (0..name_terms.len()).all(|t| {
        let mut seen = vec![false; meanings.len()];
        augment(t, name_terms, meanings, &mut given, &mut seen)
    })
}

fn synonym_table() -> HashMap<String, Vec<String>> {
    let mut table: HashMap<String, Vec<String>> = HashMap::new();
    for group in SYNONYMS {
        let stems: Vec<String> = group.iter().map(|w| stem(w)).collect();
        for a in &stems {
            for b in &stems {
                if a != b {
                    let e = table.entry(a.clone()).or_default();
                    if !e.contains(b) {
                        e.push(b.clone());
                    }
                }
            }
        }
    }
    for (word, targets) in ONE_WAY {
        let e = table.entry(stem(word)).or_default();
        for t in *targets {
            let t = stem(t);
            if !e.contains(&t) {
                e.push(t);
            }
        }
    }
    table
}

/// Lower-cased, phrase-rewritten, split, stop-worded and stemmed words.
pub fn terms(text: &str) -> Vec<String> {
    let mut text = text.to_lowercase();
    for (phrase, with) in PHRASES {
        if text.contains(phrase) {
            text = text.replace(phrase, with);
        }
    }
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty() && !STOPWORDS.contains(w))
        .map(stem)
        .collect()
}

/// A light English stemmer: plurals, common verb endings and a final `e`,
/// so "migrate", "migrates", "migrating" and "migrated" meet.
pub fn stem(word: &str) -> String {
    let w = strip(word);
    if w.len() > 4 && w.ends_with('e') && !NO_STEM.contains(&w.as_str()) {
        return w[..w.len() - 1].to_string();
    }
    w
}

fn strip(word: &str) -> String {
    let w = word.to_lowercase();
    if let Some((_, one)) = SHORT_PLURALS.iter().find(|(many, _)| *many == w) {
        return one.to_string();
    }
    if NO_STEM.contains(&w.as_str()) || w.len() <= 3 || w.bytes().any(|b| b.is_ascii_digit()) {
        return w;
    }
    if let Some(base) = w.strip_suffix("ies") {
        return format!("{base}y");
    }
    for suffix in ["ing", "ed"] {
        if let Some(base) = w.strip_suffix(suffix) {
            if base.len() >= 3 {
                return undouble(base);
            }
        }
    }
    if let Some(base) = w.strip_suffix("es") {
        if base.ends_with("sh")
            || base.ends_with("ch")
            || base.ends_with('x')
            || base.ends_with("ss")
        {
            return base.to_string();
        }
    }
    if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        return w[..w.len() - 1].to_string();
    }
    w
}

fn undouble(base: &str) -> String {
    let b = base.as_bytes();
    let n = b.len();
    if n >= 2 && b[n - 1] == b[n - 2] && !matches!(b[n - 1], b'l' | b's' | b'z') {
        return base[..n - 1].to_string();
    }
    base.to_string()
}

/// What to say when a query finds nothing useful.
pub fn guidance(tool_count: usize, examples: &[&str]) -> String {
    format!(
        "No tool matched. Describe what you want to do in a few words, e.g. {}. \
         You can also filter by tier (read, operate, admin) or backend. The catalog has {tool_count} tools.",
        examples.iter().map(|e| format!("\"{e}\"")).collect::<Vec<_>>().join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems() {
        assert_eq!(stem("containers"), "container");
        assert_eq!(stem("snapshots"), "snapshot");
        assert_eq!(stem("stopped"), "stopped");
        assert_eq!(stem("migrating"), "migrat");
        assert_eq!(stem("migrate"), "migrat");
        assert_eq!(stem("migrated"), "migrat");
        assert_eq!(stem("volumes"), stem("volume"));
        assert_eq!(stem("cloning"), stem("clone"));
        assert_eq!(stem("started"), "start");
        assert_eq!(stem("node"), "node");
        assert_eq!(stem("mappings"), stem("mapping"));
        assert_eq!(stem("policies"), "policy");
        assert_eq!(stem("status"), "status");
        assert_eq!(stem("disks"), "disk");
        assert_eq!(stem("net0"), "net0");
    }

    #[test]
    fn a_name_is_named_in_full_only_by_distinct_words() {
        let synonyms = synonym_table();
        let asked = terms("list vms on a node");
        let m = meanings(&asked, &synonyms);
        assert!(covers(&m, &terms("vm_list")));
        // `node` means node or host, but not both at once.
        assert!(!covers(&m, &terms("node_hosts")));
        assert!(!covers(&m, &terms("vm_list_all")));
        let both = terms("node and host");
        assert!(covers(&meanings(&both, &synonyms), &terms("node_hosts")));
    }

    #[test]
    fn terms_drop_stopwords_and_rewrite_phrases() {
        assert_eq!(terms("Power on the VM"), ["start", "vm"]);
        assert_eq!(
            terms("which containers are stopped?"),
            ["which", "container", "stopped"]
        );
        assert!(terms("the of a").is_empty());
    }

    fn spec(name: &str, read_only: bool, summary: &str, path_params: &[&str]) -> ToolSpec {
        let tier = if read_only { Tier::Read } else { Tier::Admin };
        ToolSpec {
            name: name.into(),
            summary: summary.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object", "properties": {}}),
            output_schema: None,
            tier,
            hints: crate::spec::Hints::for_tier(tier),
            backend: "pve".into(),
            path_params: path_params.iter().map(|p| p.to_string()).collect(),
            endpoint: None,
            keywords: String::new(),
            key: String::new(),
            aliases: Vec::new(),
        }
    }

    fn first(index: &Index, specs: &[ToolSpec], query: &str) -> String {
        let ranked = index.rank(query);
        specs[ranked[0].0].name.clone()
    }

    #[test]
    fn a_name_run_together_is_found_by_its_parts() {
        let known = HashSet::from(["fs".to_string(), "info".to_string(), "os".to_string()]);
        let synonyms = synonym_table();
        assert_eq!(
            split_compound("fsinfo", &known, &synonyms),
            Some(("fs".into(), "info".into()))
        );
        assert_eq!(split_compound("fsx", &known, &synonyms), None);
        let specs = [
            spec("vm_agent_fsinfo", true, "Execute get-fsinfo.", &[]),
            spec("vm_agent_info", true, "Agent info.", &[]),
            spec("node_ceph_fs", true, "Ceph file systems.", &[]),
        ];
        let index = Index::build(&specs);
        assert_eq!(first(&index, &specs, "vm fs info"), "vm_agent_fsinfo");
    }

    /// The same words twice, a tool that changes first: only what the
    /// query asks for (a look or a change) can put the reader first.
    fn twins(name: &str, summary: &str) -> [ToolSpec; 2] {
        [
            spec(&format!("{name}_x"), false, summary, &[]),
            spec(&format!("{name}_y"), true, summary, &[]),
        ]
    }

    #[test]
    fn a_query_without_a_verb_asks_to_look() {
        let specs = twins("ceph_mgr", "Ceph managers.");
        let index = Index::build(&specs);
        assert_eq!(first(&index, &specs, "ceph managers"), "ceph_mgr_y");
        assert_eq!(first(&index, &specs, "add a ceph manager"), "ceph_mgr_x");
        // A noun that is a verb too may ask for either: the order stands.
        let specs = twins("vm_backup", "Backups of a vm.");
        let index = Index::build(&specs);
        let ranked = index.rank("backup vm");
        assert_eq!(ranked[0].1, ranked[1].1);
    }

    #[test]
    fn a_question_looks_whatever_verbs_follow() {
        let specs = twins("vm", "Vms that run on a node.");
        let index = Index::build(&specs);
        assert_eq!(first(&index, &specs, "what vms run on pve2"), "vm_y");
        assert_eq!(first(&index, &specs, "run vms on pve2"), "vm_x");
    }

    #[test]
    fn a_path_argument_scopes_a_name_without_being_asked() {
        let specs = [
            spec("pool_list", true, "Resource pools.", &[]),
            spec("node_ceph_pool_list", true, "Ceph pools.", &["node"]),
        ];
        let index = Index::build(&specs);
        assert_eq!(
            first(&index, &specs, "list ceph pools"),
            "node_ceph_pool_list"
        );
        assert_eq!(first(&index, &specs, "list pools"), "pool_list");
    }

    #[test]
    fn keywords_find_a_tool_its_own_words_do_not() {
        let mut wol = spec("node_wakeonlan", false, "Try to wake a node.", &["node"]);
        wol.keywords = "wake on lan magic packet".into();
        let specs = [
            wol,
            spec("node_start_all", false, "Start all guests.", &["node"]),
        ];
        let index = Index::build(&specs);
        assert_eq!(
            first(&index, &specs, "send a magic packet"),
            "node_wakeonlan"
        );
    }
}
