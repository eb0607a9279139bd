//! An SVG chart of the latency rows: per workload, one bar per mode from
//! p50, a thin line on to p99, on a log scale (the workloads span three
//! orders of magnitude). Plain SVG, so it renders on GitHub and in any
//! browser.

use std::fmt::Write;

use super::measure::{Row, Value};

const WIDTH: f64 = 900.0;
const LABEL: f64 = 230.0;
const BAR: f64 = 14.0;
const GAP: f64 = 10.0;

fn colour(mode: &str) -> &'static str {
    match mode {
        "fresh" => "#2b6cb0",
        "reuse" => "#c05621",
        "reuse-paced" => "#d69e2e",
        _ => "#4a5568",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub fn latency_svg(rows: &[Row]) -> String {
    let bars: Vec<(&Row, f64, f64)> = rows
        .iter()
        .filter_map(|r| match &r.value {
            Value::Latency(s) if s.count > 0 => Some((r, s.p50_us, s.p99_us)),
            _ => None,
        })
        .collect();
    let lo = bars
        .iter()
        .map(|b| b.1)
        .fold(f64::INFINITY, f64::min)
        .max(1.0);
    let hi = bars.iter().map(|b| b.2).fold(lo * 10.0, f64::max);
    let (l0, l1) = (lo.log10().floor(), hi.log10().ceil());
    let plot = WIDTH - LABEL - 20.0;
    let x = |us: f64| LABEL + (us.max(1.0).log10() - l0) / (l1 - l0) * plot;
    let height = 60.0 + bars.len() as f64 * (BAR + GAP) + 40.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        svg,
        r##"<text x="10" y="20" font-size="14">Latency per execution: bar to p50, line to p99 (log scale, ms)</text>"##
    );
    for (i, mode) in ["fresh", "reuse", "reuse-paced"].iter().enumerate() {
        let lx = 10.0 + i as f64 * 90.0;
        let _ = write!(
            svg,
            r#"<rect x="{lx}" y="30" width="12" height="12" fill="{}"/><text x="{}" y="40">{mode}</text>"#,
            colour(mode),
            lx + 16.0
        );
    }
    let top = 60.0;
    let bottom = top + bars.len() as f64 * (BAR + GAP);
    let mut decade = l0;
    while decade <= l1 {
        let us = 10f64.powf(decade);
        let gx = x(us);
        let _ = write!(
            svg,
            r##"<line x1="{gx:.1}" y1="{top}" x2="{gx:.1}" y2="{bottom}" stroke="#e2e8f0"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            bottom + 16.0,
            format_ms(us)
        );
        decade += 1.0;
    }
    for (i, (row, p50, p99)) in bars.iter().enumerate() {
        let y = top + i as f64 * (BAR + GAP);
        let label = format!("{} ({}, {})", row.workload, row.mode, short(&row.host));
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LABEL - 6.0,
            y + BAR - 3.0,
            escape(&label)
        );
        let _ = write!(
            svg,
            r#"<rect x="{LABEL}" y="{y:.1}" width="{:.1}" height="{BAR}" fill="{}"/>"#,
            (x(*p50) - LABEL).max(1.0),
            colour(&row.mode)
        );
        let _ = write!(
            svg,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2"/>"#,
            x(*p50),
            y + BAR / 2.0,
            x(*p99),
            y + BAR / 2.0,
            colour(&row.mode)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn short(host: &str) -> &str {
    if host.starts_with("in-process") {
        "echo"
    } else if host.starts_with("simulated") {
        "cluster"
    } else if host.starts_with("airlock serve") {
        "serve"
    } else {
        // "curated catalog (136 tools)" → "curated"
        host.split_whitespace().next().unwrap_or(host)
    }
}

fn format_ms(us: f64) -> String {
    let ms = us / 1000.0;
    if ms >= 1.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::measure::Summary;
    use std::time::Duration;

    #[test]
    fn one_bar_per_latency_row_and_nothing_else() {
        let lat = |us: u64| Value::Latency(Summary::of(&[Duration::from_micros(us)]));
        let rows = vec![
            Row {
                workload: "one_plus_one".into(),
                mode: "fresh".into(),
                host: "in-process echo".into(),
                value: lat(50),
            },
            Row {
                workload: "a<b".into(),
                mode: "reuse".into(),
                host: "simulated cluster".into(),
                value: lat(3000),
            },
            Row {
                workload: "throughput_c1".into(),
                mode: "fresh".into(),
                host: "in-process echo".into(),
                value: Value::Throughput {
                    concurrency: 1,
                    executions: 1,
                    per_second: 1.0,
                },
            },
        ];
        let svg = latency_svg(&rows);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches(r#"height="14""#).count(), 2, "{svg}");
        assert!(svg.contains("a&lt;b (reuse, cluster)"));
        assert!(!svg.contains("throughput"));
    }
}
