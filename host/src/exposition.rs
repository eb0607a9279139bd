//! The two formats `/metrics` answers in. prometheus-client writes
//! OpenMetrics 1.0, which Prometheus prefers and asks for first; the
//! older Prometheus text format (0.0.4) is what scrapers that ask only
//! for `text/plain` read, and what `promtool check metrics` checks.
//!
//! The two differ, for what Airlock exposes, only in how a counter is
//! named in its `# HELP` and `# TYPE` lines (OpenMetrics names the
//! family, `airlock_executions`; the text format names the sample,
//! `airlock_executions_total`), in the type `unknown` (`untyped`), in
//! and in `# UNIT` lines and the closing `# EOF` (neither in the text
//! format). Samples are the same lines. Help texts are Airlock's own
//! and hold no `"` or newline, which the two formats escape differently.

/// The content type of each format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a scrape's `Accept` header asks for the text format rather
/// than OpenMetrics: it names `text/plain` and not OpenMetrics. Without
/// the header, or with `*/*`, the answer is OpenMetrics, as before.
pub fn wants_text(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    let types: Vec<String> = accept
        .split(',')
        .map(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    types.iter().any(|t| t == "text/plain")
        && !types.iter().any(|t| t == "application/openmetrics-text")
}

/// The OpenMetrics exposition `openmetrics`, in the text format.
pub fn to_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            format!("# HELP {} {help}", sample_name(name, &counters))
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let kind = match kind {
                "counter" | "gauge" | "histogram" | "summary" => kind,
                "info" | "stateset" => "gauge",
                _ => "untyped",
            };
            format!("# TYPE {} {kind}", sample_name(name, &counters))
        } else {
            line.to_string()
        };
        out.push_str(&rewritten);
        out.push('\n');
    }
    out
}

fn sample_name(family: &str, counters: &std::collections::HashSet<&str>) -> String {
    if counters.contains(family) {
        format!("{family}_total")
    } else {
        family.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_by_their_sample_and_the_rest_kept() {
        let om = concat!(
            "# HELP airlock_executions Executions ended.\n",
            "# TYPE airlock_executions counter\n",
            "airlock_executions_total{outcome=\"ok\"} 2\n",
            "# HELP airlock_up Up.\n",
            "# TYPE airlock_up gauge\n",
            "# UNIT airlock_up seconds\n",
            "airlock_up 1\n",
            "# TYPE airlock_other unknown\n",
            "# EOF\n",
        );
        assert_eq!(
            to_text(om),
            concat!(
                "# HELP airlock_executions_total Executions ended.\n",
                "# TYPE airlock_executions_total counter\n",
                "airlock_executions_total{outcome=\"ok\"} 2\n",
                "# HELP airlock_up Up.\n",
                "# TYPE airlock_up gauge\n",
                "airlock_up 1\n",
                "# TYPE airlock_other untyped\n",
            )
        );
    }

    #[test]
    fn openmetrics_unless_only_text_is_asked_for() {
        assert!(!wants_text(None));
        assert!(!wants_text(Some("*/*")));
        // What Prometheus sends: OpenMetrics first.
        assert!(!wants_text(Some(
            "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
        )));
        assert!(wants_text(Some("text/plain; version=0.0.4")));
        assert!(wants_text(Some("Text/Plain")));
    }
}
