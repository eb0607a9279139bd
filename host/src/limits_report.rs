//! `airlock limits report`: how close executions come to each limit,
//! read from the audit's `execution_end` lines, with a suggested value
//! per limit. Operators tune limits from this instead of guessing; it
//! reads and prints, and changes nothing.
//!
//! The suggestion is the 99th percentile of what executions used, plus
//! the headroom asked for (50 % unless `--headroom` says), rounded up to
//! two significant digits (of MiB for memory, KiB for results and
//! journals), never below the most any one execution used, nor below a
//! floor a quiet period must not talk an operator under (1 s, 32 MiB,
//! 10 calls, 16 KiB of result, 1 MiB of journal). A limit that stopped executions hides what they needed (the
//! distribution is cut at the limit), so it is suggested at least the
//! configured value plus the headroom, and the report says to look at
//! those executions first: a runaway script also hits limits.

use std::{
    io::Write,
    process::ExitCode,
    time::{Duration, SystemTime},
};

use airlock_gateway::audit::{AuditError, AuditStore, MAX_LINE_BYTES};
use airlock_sandbox::Limits;
use clap::Subcommand;
use serde::Serialize;
use serde_json::Value;

use crate::{admin::state, settings::ConfigFile};

#[derive(Subcommand)]
pub enum LimitsAction {
    /// Per limit (wall_time_ms, memory_bytes, tool_calls, result_bytes,
    /// journal_bytes): what executions used, read from the audit's end
    /// lines (p50, p90, p99, max), how many the limit stopped, and a
    /// suggested value with headroom. Changes nothing.
    Report {
        /// Only executions that ended this long ago or later (e.g. 7d,
        /// 12h); all the audit holds without it.
        #[arg(long, value_parser = humantime::parse_duration)]
        since: Option<Duration>,
        /// Headroom above the 99th percentile, in percent.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=1000))]
        headroom: u32,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `airlock limits ...`.
pub fn limits(file: &ConfigFile, action: LimitsAction) -> ExitCode {
    let LimitsAction::Report {
        since,
        headroom,
        json,
    } = action;
    let s = match state(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match report(&*s.audit, &file.limits, since, headroom) {
        Ok(r) if json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&r).expect("JSON serializes")
            );
            ExitCode::SUCCESS
        }
        Ok(r) => {
            print!("{r}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: reading the audit: {e}");
            ExitCode::from(2)
        }
    }
}

/// Fewer executions than this say too little about the 99th percentile:
/// no value is suggested.
pub const MIN_EXECUTIONS: usize = 20;

/// One limit the audit's end lines measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measured {
    WallTimeMs,
    MemoryBytes,
    ToolCalls,
    ResultBytes,
    JournalBytes,
}

impl Measured {
    pub const ALL: [Measured; 5] = [
        Measured::WallTimeMs,
        Measured::MemoryBytes,
        Measured::ToolCalls,
        Measured::ResultBytes,
        Measured::JournalBytes,
    ];

    /// The limit's name in the configuration (`[limits]`).
    pub fn name(self) -> &'static str {
        match self {
            Measured::WallTimeMs => "wall_time_ms",
            Measured::MemoryBytes => "memory_bytes",
            Measured::ToolCalls => "tool_calls",
            Measured::ResultBytes => "result_bytes",
            Measured::JournalBytes => "journal_bytes",
        }
    }

    /// The `execution_end` field holding what one execution used.
    fn field(self) -> &'static str {
        match self {
            Measured::WallTimeMs => "sandbox_ms",
            Measured::MemoryBytes => "peak_memory_bytes",
            Measured::ToolCalls => "tool_calls",
            Measured::ResultBytes => "result_bytes",
            Measured::JournalBytes => "journal_bytes",
        }
    }

    fn configured(self, limits: &Limits) -> u64 {
        match self {
            Measured::WallTimeMs => limits.wall_time_ms,
            Measured::MemoryBytes => limits.memory_bytes,
            Measured::ToolCalls => u64::from(limits.tool_calls),
            Measured::ResultBytes => limits.result_bytes,
            Measured::JournalBytes => limits.journal_bytes,
        }
    }

    /// The least ever suggested: data from quiet weeks would otherwise
    /// suggest a wall clock of 80 ms, and the first slow backend would
    /// fail every script. Above what any reasonable script needs to start.
    fn floor(self) -> u64 {
        match self {
            Measured::WallTimeMs => 1_000,
            Measured::MemoryBytes => 32 << 20,
            Measured::ToolCalls => 10,
            Measured::ResultBytes => 16 << 10,
            Measured::JournalBytes => 1 << 20,
        }
    }

    /// The unit suggestions are rounded in: whole MiB of memory, whole
    /// KiB of results and journals.
    fn unit(self) -> u64 {
        match self {
            Measured::MemoryBytes => 1 << 20,
            Measured::ResultBytes | Measured::JournalBytes => 1 << 10,
            Measured::WallTimeMs | Measured::ToolCalls => 1,
        }
    }

    /// The most the configuration accepts, where there is such a bound.
    fn ceiling(self) -> u64 {
        match self {
            Measured::MemoryBytes => airlock_sandbox::MAX_MEMORY_BYTES,
            Measured::JournalBytes => airlock_sandbox::MAX_JOURNAL_BYTES,
            Measured::ResultBytes => airlock_sandbox::MAX_HANDOVER_BYTES,
            Measured::WallTimeMs | Measured::ToolCalls => u64::MAX,
        }
    }
}

/// The use of one limit over the period.
#[derive(Clone, Debug, Serialize)]
pub struct LimitUse {
    pub limit: &'static str,
    pub configured: u64,
    /// Executions whose end line measured this limit.
    pub executions: usize,
    pub p50: Option<u64>,
    pub p90: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
    /// Executions this limit stopped (or, for `result_bytes`, whose
    /// value it cut).
    pub hits: usize,
    /// The identities those executions ran as (known from their start
    /// lines in the period): one identity's hits raise nothing.
    pub hit_identities: usize,
    /// `None` with fewer than [`MIN_EXECUTIONS`] executions measured.
    pub suggested: Option<u64>,
}

/// What `airlock limits report` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub audit: String,
    /// Lines read, and `execution_end` lines among them in the period.
    pub lines: u64,
    pub executions: usize,
    /// The start of the period (RFC 3339), when `--since` set one.
    pub since: Option<String>,
    pub headroom_percent: u32,
    pub limits: Vec<LimitUse>,
}

/// What one `execution_end` line says was used, per [`Measured::ALL`].
type Used = [Option<u64>; 5];

/// Collects end lines from an export, one line at a time: nothing the
/// size of the audit is held, only five numbers per execution.
#[derive(Default)]
struct EndLines {
    cutoff: Option<SystemTime>,
    partial: Vec<u8>,
    /// Inside a line longer than any line of a chain: dropped to its end.
    skipping: bool,
    lines: u64,
    ends: Vec<Used>,
    /// Running executions' identities, from their start lines.
    running: std::collections::HashMap<String, String>,
    /// For each end line: the limit that stopped it ([`Measured::ALL`]'s
    /// index; `None` for another or none) and its identity if known.
    stopped: Vec<(Option<usize>, Option<String>)>,
}

impl EndLines {
    fn new(cutoff: Option<SystemTime>) -> Self {
        Self {
            cutoff,
            ..Self::default()
        }
    }

    fn line(&mut self, bytes: &[u8]) {
        self.lines += 1;
        let Ok(Value::Object(line)) = serde_json::from_slice::<Value>(bytes) else {
            return;
        };
        let execution = line.get("execution").and_then(Value::as_str);
        match line.get("event").and_then(Value::as_str) {
            Some("execution_start") => {
                if let (Some(x), Some(who)) =
                    (execution, line.get("identity").and_then(Value::as_str))
                {
                    self.running.insert(x.to_string(), who.to_string());
                }
                return;
            }
            Some("execution_end") => {}
            _ => return,
        }
        let identity = execution.and_then(|x| self.running.remove(x));
        if let Some(cutoff) = self.cutoff {
            let at = line
                .get("ts")
                .and_then(Value::as_str)
                .and_then(|ts| humantime::parse_rfc3339(ts).ok());
            if at.is_none_or(|at| at < cutoff) {
                return;
            }
        }
        let mut used: Used = [None; 5];
        for (slot, m) in used.iter_mut().zip(Measured::ALL) {
            *slot = line.get(m.field()).and_then(Value::as_u64);
        }
        self.ends.push(used);
        let limit = line.get("limit").and_then(Value::as_str);
        let index = limit.and_then(|l| Measured::ALL.iter().position(|m| m.name() == l));
        self.stopped.push((index, identity));
    }
}

impl Write for EndLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(at) = rest.iter().position(|b| *b == b'\n') {
            if std::mem::take(&mut self.skipping) {
                // The end of an over-long line: not a line of its own.
            } else if self.partial.is_empty() {
                self.line(&rest[..at]);
            } else {
                self.partial.extend_from_slice(&rest[..at]);
                let whole = std::mem::take(&mut self.partial);
                self.line(&whole);
            }
            rest = &rest[at + 1..];
        }
        // A line is at most MAX_LINE_BYTES; anything longer is no line
        // of a chain and is not kept growing.
        if self.skipping {
        } else if self.partial.len() + rest.len() <= MAX_LINE_BYTES {
            self.partial.extend_from_slice(rest);
        } else {
            self.partial.clear();
            self.skipping = true;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads the audit's end lines since `since` ago (all, without it) and
/// sets them against `limits`.
pub fn report(
    store: &dyn AuditStore,
    limits: &Limits,
    since: Option<Duration>,
    headroom_percent: u32,
) -> Result<Report, AuditError> {
    let cutoff = since.map(|d| {
        SystemTime::now()
            .checked_sub(d)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    });
    let mut ends = EndLines::new(cutoff);
    store.export(&mut ends)?;
    if !ends.partial.is_empty() && !ends.skipping {
        let last = std::mem::take(&mut ends.partial);
        ends.line(&last);
    }
    let limits = Measured::ALL
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut values: Vec<u64> = ends.ends.iter().filter_map(|u| u[i]).collect();
            values.sort_unstable();
            let configured = m.configured(limits);
            // A value over the cap is cut, not an error: its end line
            // holds the size it would have had.
            let hit = |(used, (stopped, _)): &(&Used, &(Option<usize>, Option<String>))| match m {
                Measured::ResultBytes => used[i].is_some_and(|v| v > configured),
                _ => *stopped == Some(i),
            };
            let hits: Vec<_> = ends.ends.iter().zip(&ends.stopped).filter(hit).collect();
            let who: std::collections::HashSet<_> = hits
                .iter()
                .filter_map(|(_, (_, id))| id.as_deref())
                .collect();
            // Whoever used more than the limit (a wall clock or a result
            // measured past it, say): one identity's values above the
            // limit never raise the suggestion past it.
            let over: std::collections::HashSet<_> = ends
                .ends
                .iter()
                .zip(&ends.stopped)
                .filter(|(used, _)| used[i].is_some_and(|v| v > configured))
                .filter_map(|(_, (_, id))| id.as_deref())
                .collect();
            use_of(
                *m,
                configured,
                &values,
                hits.len(),
                Identities {
                    hit: who.len(),
                    over: over.len(),
                },
                headroom_percent,
            )
        })
        .collect();
    Ok(Report {
        audit: store.location(),
        lines: ends.lines,
        executions: ends.ends.len(),
        since: cutoff.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
        headroom_percent,
        limits,
    })
}

/// How many identities' executions a limit stopped (`hit`), and how many
/// identities' executions used more than it (`over`).
#[derive(Clone, Copy, Debug, Default)]
struct Identities {
    hit: usize,
    over: usize,
}

fn use_of(
    m: Measured,
    configured: u64,
    sorted: &[u64],
    hits: usize,
    who: Identities,
    headroom: u32,
) -> LimitUse {
    let hit_identities = who.hit;
    let pick = |q: f64| percentile(sorted, q);
    let p99 = pick(0.99);
    let max = sorted.last().copied();
    let suggested = match (p99, max) {
        (Some(p99), Some(max)) if sorted.len() >= MIN_EXECUTIONS => {
            let mut want = with_headroom(p99, headroom).max(max);
            // One identity's hits may be one runaway script, or one
            // script pushing the limit up on purpose: several raise it.
            if hit_identities >= 2 {
                want = want.max(with_headroom(configured, headroom));
            }
            let unit = m.unit();
            let rounded = round_up(want.div_ceil(unit)).saturating_mul(unit);
            let suggested = rounded.max(m.floor()).min(m.ceiling());
            // Past the limit only on the strength of two identities or
            // more, by what they used or where it stopped them: one
            // identity's 4 MiB result once suggested 6.3 MB of results.
            Some(match who.over.max(who.hit) >= 2 {
                true => suggested,
                false => suggested.min(configured.max(m.floor())),
            })
        }
        _ => None,
    };
    LimitUse {
        limit: m.name(),
        configured,
        executions: sorted.len(),
        p50: pick(0.50),
        p90: pick(0.90),
        p99,
        max,
        hits,
        hit_identities,
        suggested,
    }
}

/// The nearest-rank percentile: the smallest value at least `q` of the
/// values are at or below.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn with_headroom(v: u64, percent: u32) -> u64 {
    v.saturating_add(v.saturating_mul(u64::from(percent)) / 100)
}

/// Rounded up to two significant digits: 1234 → 1300, 96 → 96.
pub fn round_up(v: u64) -> u64 {
    if v < 100 {
        return v;
    }
    let mut step = 1u64;
    while v / step >= 100 {
        step *= 10;
    }
    v.div_ceil(step).saturating_mul(step)
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} executions ended{} in {} ({} lines read; the chain is not verified here: \
             `airlock audit verify` does that)",
            self.executions,
            match &self.since {
                Some(s) => format!(" since {s}"),
                None => String::new(),
            },
            self.audit,
            self.lines
        )?;
        writeln!(
            f,
            "{:<14} {:>12} {:>6} {:>12} {:>12} {:>12} {:>12} {:>5} {:>12}",
            "limit", "configured", "runs", "p50", "p90", "p99", "max", "hits", "suggested"
        )?;
        let show = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        for l in &self.limits {
            writeln!(
                f,
                "{:<14} {:>12} {:>6} {:>12} {:>12} {:>12} {:>12} {:>5} {:>12}",
                l.limit,
                l.configured,
                l.executions,
                show(l.p50),
                show(l.p90),
                show(l.p99),
                show(l.max),
                l.hits,
                show(l.suggested)
            )?;
        }
        writeln!(
            f,
            "suggested: p99 plus {} % headroom, rounded up to two digits, at least the max \
             and a floor (1 s, 32 MiB, 10 calls, 16 KiB, 1 MiB); none with fewer than \
             {MIN_EXECUTIONS} runs measured. Nothing was changed: set them under [limits].",
            self.headroom_percent
        )?;
        for l in self.limits.iter().filter(|l| l.hits > 0) {
            writeln!(
                f,
                "{}: {} execution(s) of {} identit{} hit it, and what they needed is not known; \
                 look at them in the audit before raising it: a runaway script hits limits too{}.",
                l.limit,
                l.hits,
                l.hit_identities,
                if l.hit_identities == 1 { "y" } else { "ies" },
                if l.hit_identities < 2 {
                    " (hits of fewer than two identities do not raise the suggestion)"
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(50));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    fn ids(n: usize) -> Identities {
        Identities { hit: n, over: n }
    }

    #[test]
    fn suggestions_round_up_and_keep_the_largest_use() {
        assert_eq!(round_up(96), 96);
        assert_eq!(round_up(1234), 1300);
        assert_eq!(round_up(1200), 1200);
        let v: Vec<u64> = (1..=100).map(|i| i * 10).collect();
        // p99 990 + 50 % = 1485 → 1500.
        let u = use_of(Measured::ToolCalls, 5000, &v, 0, ids(0), 50);
        assert_eq!(u.suggested, Some(1500));
        // Memory in whole MiB: 3.25 MiB + 50 % is 4.9, so 5 MiB; but
        // never under the floor.
        let mem = vec![3_407_872; 30];
        let u = use_of(Measured::MemoryBytes, 256 << 20, &mem, 0, ids(0), 50);
        assert_eq!(u.suggested, Some(32 << 20));
        let mem = vec![100 << 20; 30];
        let u = use_of(Measured::MemoryBytes, 256 << 20, &mem, 0, ids(0), 50);
        assert_eq!(u.suggested, Some(150 << 20));
        // A quiet period does not talk the wall clock down to nothing.
        let u = use_of(Measured::WallTimeMs, 60_000, &[5; 30], 0, ids(0), 50);
        assert_eq!(u.suggested, Some(1_000));
        // One outlier far above p99 still fits.
        let mut w = v.clone();
        w.push(9000);
        let u = use_of(Measured::ToolCalls, 10_000, &w, 0, ids(0), 50);
        assert_eq!(u.suggested, Some(9000));
        // A limit that stopped runs of several identities is raised past
        // itself; one identity's hits (a runaway script, or one pushing
        // the limit up) raise nothing.
        let u = use_of(Measured::ToolCalls, 2000, &v, 3, ids(2), 50);
        assert_eq!(u.suggested, Some(3000));
        let u = use_of(Measured::ToolCalls, 2000, &v, 3, ids(1), 50);
        assert_eq!(u.suggested, Some(1500));
        // A result size is suggested at most what the configuration takes,
        // whatever a guest claimed its cut value measured.
        let claimed = vec![u64::MAX / 2; 30];
        let u = use_of(Measured::ResultBytes, 1 << 20, &claimed, 30, ids(5), 50);
        assert_eq!(u.suggested, Some(airlock_sandbox::MAX_HANDOVER_BYTES));
        // Too few runs: no suggestion.
        assert_eq!(
            use_of(Measured::ToolCalls, 10, &v[..5], 0, ids(0), 50).suggested,
            None
        );
        // Never past what the configuration accepts.
        let huge = vec![airlock_sandbox::MAX_MEMORY_BYTES; 30];
        let u = use_of(Measured::MemoryBytes, 1 << 30, &huge, 0, ids(2), 50);
        assert_eq!(u.suggested, Some(airlock_sandbox::MAX_MEMORY_BYTES));
        // Found by trying it: one identity's 4 MiB result among small
        // ones suggested 6,348,800 bytes against 262,144 configured. One
        // identity's values past the limit never raise it past the limit.
        let mut results = vec![2_000u64; 40];
        results.push(4 << 20);
        let one = Identities { hit: 1, over: 1 };
        let u = use_of(Measured::ResultBytes, 262_144, &results, 1, one, 50);
        assert_eq!(u.suggested, Some(262_144));
        let two = Identities { hit: 2, over: 2 };
        let u = use_of(Measured::ResultBytes, 262_144, &results, 2, two, 50);
        assert!(u.suggested.unwrap() > 262_144, "{:?}", u.suggested);
    }

    #[test]
    fn end_lines_are_read_across_writes_and_others_skipped() {
        let mut ends = EndLines::new(None);
        let long = format!(
            r#"{{"event":"execution_end","tool_calls":7,"x":"{}"}}"#,
            "a".repeat(MAX_LINE_BYTES)
        );
        let text = [
            r#"{"event":"call","tool_calls":99}"#,
            r#"{"event":"execution_start","execution":"x2","identity":"olga"}"#,
            r#"{"event":"execution_end","tool_calls":3,"sandbox_ms":12,"peak_memory_bytes":2097152,"result_bytes":40}"#,
            // Longer than any line of a chain: dropped whole, its end too.
            &long,
            r#"{"event":"execution_end","execution":"x2","tool_calls":1,"limit":"wall_time_ms"}"#,
            "",
        ]
        .join("\n");
        for chunk in text.as_bytes().chunks(7) {
            ends.write_all(chunk).unwrap();
        }
        assert_eq!(ends.lines, 4);
        assert_eq!(
            ends.ends,
            [
                [Some(12), Some(2097152), Some(3), Some(40), None],
                [None, None, Some(1), None, None]
            ]
        );
        assert_eq!(
            ends.stopped,
            [(None, None), (Some(0), Some("olga".to_string()))]
        );
        assert!(ends.running.is_empty());
    }

    #[test]
    fn lines_before_the_period_or_without_a_time_are_left_out() {
        let mut ends = EndLines::new(Some(
            humantime::parse_rfc3339("2026-12-01T00:00:00Z").unwrap(),
        ));
        for ts in [
            "2026-11-30T23:59:59.999Z",
            "2026-12-01T00:00:00.000Z",
            "not a time",
        ] {
            let line = format!(r#"{{"event":"execution_end","ts":"{ts}","tool_calls":1}}"#);
            ends.write_all(format!("{line}\n").as_bytes()).unwrap();
        }
        ends.write_all(br#"{"event":"execution_end","tool_calls":2}"#)
            .unwrap();
        ends.write_all(b"\n").unwrap();
        assert_eq!(ends.lines, 4);
        assert_eq!(
            ends.ends.len(),
            1,
            "only the line at the cutoff: {:?}",
            ends.ends
        );
    }
}
