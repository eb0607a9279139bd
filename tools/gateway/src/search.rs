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
/// A synonym counts for less than the word the agent typed.
const SYNONYM_WEIGHT: f32 = 0.6;
/// Added when every word of a tool's name is asked for, and for each word
/// past the first: a longer name named in full is the more precise match.
const NAME_COVERED_BONUS: f32 = 2.5;
const NAME_COVERED_PER_WORD: f32 = 0.5;

/// What a read-only tool's score is worth when the query asks for a change.
const READ_ONLY_WHEN_CHANGING: f32 = 0.5;

/// Verbs (stemmed) that ask for a change, not a look.
const CHANGE_VERBS: &[&str] = &[
    "create", "add", "new", "make", "delete", "remove", "destroy", "update", "set", "edit",
    "change", "modify", "start", "stop", "shutdown", "reboot", "restart", "migrate", "clone",
    "resize", "grow", "rollback", "restore", "enable", "disable", "apply", "wipe", "upload",
    "download", "run", "grant", "revoke", "suspend", "resume", "reset",
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
    "would", "could", "some", "any", "every", "each", "there", "their", "them",
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
    &["delete", "destroy", "remove", "rm", "purge", "erase"],
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
        "status", "state", "running", "stopped", "online", "offline", "health", "up", "down",
        "paused",
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
    ("guest", &["vm", "container"]),
    ("machine", &["vm"]),
    ("instance", &["vm", "container"]),
];

/// Words left as they are by the stemmer (it would merge them with words of
/// another meaning: "stopped" is a state, "stop" an action).
const NO_STEM: &[&str] = &[
    "stopped", "running", "status", "paused", "always", "ha", "os", "alias", "bus",
];

/// Plurals too short for the stemmer's rules.
const SHORT_PLURALS: &[(&str, &str)] = &[("vms", "vm"), ("cts", "ct"), ("ips", "ip")];

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
    /// The name's distinct words, in order.
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
}

impl Index {
    pub fn build<'a>(specs: impl IntoIterator<Item = &'a ToolSpec>) -> Self {
        let synonyms = synonym_table();
        let mut docs = Vec::new();
        let mut counts: Vec<[HashMap<String, f32>; 4]> = Vec::new();
        let mut lens: Vec<[f32; 4]> = Vec::new();
        for spec in specs {
            let params = spec.param_names().join(" ");
            let texts = [
                spec.name.as_str(),
                spec.summary.as_str(),
                params.as_str(),
                spec.description.as_str(),
            ];
            let mut fields: [HashMap<String, f32>; 4] = Default::default();
            let mut len = [0f32; 4];
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
            docs.push(Doc {
                name_terms,
                read_only: spec.hints.read_only,
            });
        }
        let n = docs.len().max(1) as f32;
        let mut avg = [0f32; 4];
        for len in &lens {
            for (a, l) in avg.iter_mut().zip(len) {
                *a += l / n;
            }
        }
        let mut tfs: HashMap<String, Vec<(u32, f32)>> = HashMap::new();
        for (d, fields) in counts.iter().enumerate() {
            let mut by_term: HashMap<&String, f32> = HashMap::new();
            for (f, w) in [W_NAME, W_SUMMARY, W_PARAMS, W_DESCRIPTION]
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
        let changes = CHANGE_VERBS.iter().any(|v| words.contains(&stem(v)));
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
                    score += NAME_COVERED_BONUS
                        + NAME_COVERED_PER_WORD * (doc.name_terms.len() - 1) as f32;
                }
                if changes && doc.read_only {
                    score *= READ_ONLY_WHEN_CHANGING;
                }
                Some((i, score))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored
    }
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
}
