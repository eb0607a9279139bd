//! What a measurement is: samples in microseconds summarised as count,
//! p50, p95, p99 and max (nearest-rank percentiles), or a rate, or a size.

use std::time::Duration;

use serde::Serialize;

/// A latency distribution.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub count: usize,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
    /// In `reuse` mode, the share of executions that found an instance
    /// ready for them (the rest started a fresh one): what reuse's numbers
    /// are numbers of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_share: Option<f64>,
}

/// One timed execution.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub took: Duration,
    /// It ran on a reused instance.
    pub warm: bool,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        us.sort_by(f64::total_cmp);
        let rank = |p: f64| -> f64 {
            if us.is_empty() {
                return 0.0;
            }
            let i = ((p * us.len() as f64).ceil() as usize).clamp(1, us.len()) - 1;
            us[i]
        };
        Summary {
            count: us.len(),
            p50_us: rank(0.50),
            p95_us: rank(0.95),
            p99_us: rank(0.99),
            max_us: us.last().copied().unwrap_or(0.0),
            mean_us: if us.is_empty() {
                0.0
            } else {
                us.iter().sum::<f64>() / us.len() as f64
            },
            warm_share: None,
        }
    }

    /// The summary of `runs`, with their warm share when `reuse` says the
    /// sandbox reuses instances.
    pub fn of_runs(runs: &[Run], reuse: bool) -> Summary {
        let took: Vec<Duration> = runs.iter().map(|r| r.took).collect();
        let warm = runs.iter().filter(|r| r.warm).count();
        Summary {
            warm_share: (reuse && !runs.is_empty()).then(|| warm as f64 / runs.len() as f64),
            ..Summary::of(&took)
        }
    }
}

/// One row of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// What ran, e.g. `one_call`.
    pub workload: String,
    /// `fresh`, `reuse` or `-`.
    pub mode: String,
    /// What answered the tool calls: `in-process echo`, `simulated cluster`.
    pub host: String,
    #[serde(flatten)]
    pub value: Value,
}

#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Value {
    Latency(Summary),
    Throughput {
        concurrency: usize,
        executions: usize,
        per_second: f64,
    },
    Memory {
        sandboxes: usize,
        rss_before_bytes: u64,
        rss_during_bytes: u64,
        per_sandbox_bytes: u64,
    },
}

/// The process's resident set size, from /proc (Linux).
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let s = Summary::of(&samples);
        assert_eq!(
            (s.p50_us, s.p95_us, s.p99_us, s.max_us),
            (50.0, 95.0, 99.0, 100.0)
        );
        assert_eq!(s.mean_us, 50.5);
        let one = Summary::of(&[Duration::from_micros(7)]);
        assert_eq!((one.p50_us, one.p99_us), (7.0, 7.0));
        assert_eq!(Summary::of(&[]).count, 0);
        let run = |us, warm| Run {
            took: Duration::from_micros(us),
            warm,
        };
        let runs = [run(10, true), run(20, false), run(30, false), run(40, true)];
        assert_eq!(Summary::of_runs(&runs, true).warm_share, Some(0.5));
        assert_eq!(Summary::of_runs(&runs, false).warm_share, None);
        assert_eq!(Summary::of_runs(&runs, true).p50_us, 20.0);
    }

    #[test]
    fn rss_is_read() {
        assert!(rss_bytes().unwrap() > 1 << 20);
    }
}
