//! The collector's own error texts, without the internals they tend to
//! carry: addresses (`10.20.30.40:22`, `db.internal:5432`, `[fd00::1]`),
//! URLs and file paths (`/opt/quox/...`). A collector reports what went
//! wrong on the machines it manages in its own words; a script, the agent
//! reading its result and the agent's transcript have no use for the
//! network's layout, and Airlock promises the collector's address never
//! reaches them. What is left still says what failed.

use std::sync::LazyLock;

use regex::Regex;

/// In the order they are applied: a URL first, so its host and path are
/// replaced once, as a URL.
static PATTERNS: LazyLock<[(Regex, &str); 5]> = LazyLock::new(|| {
    let re = |p: &str| Regex::new(p).expect("a valid pattern");
    [
        (re(r#"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'"<>]+"#), "[url]"),
        (
            re(r"\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\](?::\d{1,5})?"),
            "[address]",
        ),
        (re(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b"), "[address]"),
        (
            re(r"\b[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+:\d{1,5}\b"),
            "[address]",
        ),
        // Two segments or more, after a space, quote, bracket, `=` or the
        // start: `/opt/quox/x`, not `a/b` or a lone `/api`.
        (
            re(r#"(^|[\s'"(=,])/[^\s/'"(),]+(?:/[^\s/'"(),]*)+"#),
            "${1}[path]",
        ),
    ]
});

/// `text` with addresses, URLs and paths replaced by `[address]`, `[url]`
/// and `[path]`.
pub fn sanitize(text: &str) -> String {
    let mut out = text.to_string();
    for (pattern, with) in PATTERNS.iter() {
        if pattern.is_match(&out) {
            out = pattern.replace_all(&out, *with).into_owned();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn internals_are_replaced_and_the_failure_still_reads() {
        assert_eq!(
            sanitize("ssh to 10.20.30.40:22 failed: /opt/quox/keys/id_ed25519 missing; see http://192.168.88.126:9848/api/v1"),
            "ssh to [address] failed: [path] missing; see [url]"
        );
        assert_eq!(
            sanitize("cannot reach db.internal:5432 or [fd00::1]:8006 (from 10.0.0.7)"),
            "cannot reach [address] or [address] (from [address])"
        );
        assert_eq!(
            sanitize("open '/var/lib/quox/state.db': permission denied"),
            "open '[path]': permission denied"
        );
    }

    #[test]
    fn ordinary_words_stay() {
        for text in [
            "vm 100 is stopped",
            "unknown host web-1",
            "3/4 checks passed",
            "use /api or --help",
            "time 12:30 exceeded",
            "agent_id is required",
        ] {
            assert_eq!(sanitize(text), text);
        }
    }
}
