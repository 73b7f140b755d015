//! What a person looks at: the charts of saved runs (latency by
//! percentile, the latency timeline) and the self-contained HTML page
//! (`--html`) that holds them with the checkpoint table, the
//! configuration and the environment. Used by `loadgen` and by `lockgate
//! report show|compare`, from the saved form of a run ([`RunReport`]).

use super::report::{fmt_ns, RunReport};
use lockgate_workloads::charts::{
    percentile_chart_svg, timeline_chart_svg, Band, BandKind, ChartText, PercentileSeries,
};
use lockgate_workloads::latency::histogram_from_base64;
use std::fmt::Write as _;

/// What ran, in one line: workload, rate, parallelism, duration, mode,
/// commit and date.
fn subtitle(r: &RunReport) -> String {
    let c = &r.config;
    let mut parts = vec![r.workload.clone()];
    match (
        c.get("rate").and_then(|v| v.as_u64()),
        c.get("records").and_then(|v| v.as_u64()),
    ) {
        (Some(rate), _) => parts.push(format!("{rate} records/s")),
        (None, Some(n)) => parts.push(format!("{n} records")),
        _ => {}
    }
    if let Some(p) = c.get("parallelism").and_then(|v| v.as_u64()) {
        parts.push(format!("parallelism {p}"));
    }
    if let Some(d) = c.get("duration").and_then(|v| v.as_f64()) {
        let w = c.get("warmup").and_then(|v| v.as_f64()).unwrap_or(0.0);
        parts.push(format!("{d} s after a {w} s warm-up"));
    }
    parts.push(
        match c.get("checkpoint_interval_ms").and_then(|v| v.as_u64()) {
            Some(ms) if r.mode != "none" => format!("{} every {ms} ms", r.mode),
            _ => r.mode.replace("none", "no checkpoints"),
        },
    );
    parts.push(format!("commit {}", r.environment.git_commit));
    if let Some(date) = r.started_at.get(..10) {
        parts.push(date.to_string());
    }
    parts.join(" · ")
}

/// The note a chart of `r` carries: closed loop, interrupted, or none.
fn note(r: &RunReport) -> Option<String> {
    let mut n = Vec::new();
    if r.latency_note.is_some() {
        n.push(if r.workload == "W4" {
            "W4 is overloaded by design: not a latency test"
        } else {
            "W1 is a closed loop: not a latency test"
        });
    }
    if r.interrupted {
        n.push("interrupted (Ctrl-C)");
    }
    (!n.is_empty()).then(|| n.join("; "))
}

/// A run's legend name: its name, its mode, and "interrupted" if so.
fn legend(name: &str, r: &RunReport) -> String {
    let mut s = format!("{name} {}", r.mode);
    if r.interrupted {
        s += " (interrupted)";
    }
    s
}

/// Latency by percentile of `runs`, one line each, as SVG.
///
/// # Errors
/// A run's histogram does not decode, or no run recorded a latency.
pub(crate) fn percentile_svg(runs: &[(String, RunReport)]) -> Result<String, String> {
    let mut hists = Vec::new();
    for (name, r) in runs {
        let h = histogram_from_base64(&r.latency_histogram)
            .map_err(|e| format!("the latency histogram of {name}: {e}"))?;
        hists.push((legend(name, r), h));
        if let Some(c) = &r.committed_latency_histogram {
            let h = histogram_from_base64(c)
                .map_err(|e| format!("the committed latency histogram of {name}: {e}"))?;
            hists.push((format!("{} (committed)", legend(name, r)), h));
        }
    }
    let series: Vec<PercentileSeries<'_>> = hists
        .iter()
        .map(|(name, h)| PercentileSeries { name, histogram: h })
        .collect();
    let (first_name, first) = &runs[0];
    let text = ChartText {
        title: if runs.len() == 1 {
            format!(
                "lockgate {} {}: latency by percentile",
                first.workload, first.mode
            )
        } else {
            format!("lockgate: latency by percentile, {} runs", runs.len())
        },
        subtitle: if runs.len() == 1 {
            subtitle(first)
        } else {
            format!("first run ({first_name}): {}", subtitle(first))
        },
        note: runs.iter().find_map(|(_, r)| note(r)),
    };
    percentile_chart_svg(&text, &series).map_err(|e| e.to_string())
}

/// The latency timeline of `r` (p50, p99 and max per interval, with its
/// checkpoints and recoveries as bands), as SVG.
///
/// # Errors
/// The run has no timeline (W1, or nothing recorded).
pub(crate) fn timeline_svg(name: &str, r: &RunReport) -> Result<String, String> {
    let t = &r.timeline;
    if t.interval_ns == 0 && !t.points.is_empty() {
        return Err("the run's timeline has intervals of 0 ns (a damaged file?)".into());
    }
    let start = t.start_ns;
    let rel = |ns: u64| ns.saturating_sub(start);
    let mut bands: Vec<Band> = match &t.checkpoint_bands {
        Some(b) => {
            let of = |spans: &[(u64, u64)], kind: BandKind| -> Vec<Band> {
                spans
                    .iter()
                    .filter(|(s, _)| *s >= start)
                    .map(|&(s, e)| Band {
                        start_ns: rel(s),
                        end_ns: rel(e),
                        kind,
                    })
                    .collect()
            };
            let mut v = of(&b.completed, BandKind::Checkpoint);
            v.extend(of(&b.aborted, BandKind::AbortedCheckpoint));
            v
        }
        // A file of an older build: every checkpoint is in the list.
        None => r
            .checkpoints
            .list
            .iter()
            .filter(|c| c.status != "pending" && c.trigger_ns >= start)
            .map(|c| Band {
                start_ns: rel(c.trigger_ns),
                end_ns: rel(c.trigger_ns).saturating_add(c.duration_ns),
                kind: if c.status == "completed" {
                    BandKind::Checkpoint
                } else {
                    BandKind::AbortedCheckpoint
                },
            })
            .collect(),
    };
    bands.extend(
        r.failures
            .iter()
            .filter(|f| f.at_ns >= start)
            .map(|f| Band {
                start_ns: rel(f.at_ns),
                end_ns: rel(f.at_ns).saturating_add(f.recovery_ns.unwrap_or(0)),
                kind: BandKind::Recovery,
            }),
    );
    // The warm-up of a fresh run (a restored one had its warm-up before).
    let warmup_ns = r
        .config
        .get("warmup")
        .and_then(|v| v.as_f64())
        .filter(|w| *w > 0.0 && r.config.get("restore").is_none_or(|v| v.is_null()))
        .map(|w| (w * 1e9) as u64);
    if let Some(w) = warmup_ns {
        bands.push(Band {
            start_ns: 0,
            end_ns: w,
            kind: BandKind::WarmUp,
        });
    }
    let text = ChartText {
        title: format!(
            "lockgate {} {}: latency over time ({name})",
            r.workload, r.mode
        ),
        subtitle: format!(
            "{} · p50, p99 and max every {} ms",
            subtitle(r),
            t.interval_ns as f64 / 1e6
        ),
        note: note(r),
    };
    timeline_chart_svg(&text, &t.points, &t.committed_points, t.interval_ns, &bands).map_err(|e| {
        match e {
            lockgate_workloads::latency::LatencyError::NothingToPlot => {
                "no timeline: W1 is a closed loop, or nothing was recorded".to_string()
            }
            other => other.to_string(),
        }
    })
}

/// An output file a command was asked for, and how to make its text.
pub(crate) type Output<'a> = (
    &'a Option<std::path::PathBuf>,
    &'a dyn Fn() -> Result<String, String>,
);

/// The text of every asked-for output (a `None` path is not asked for),
/// or why it could not be made, each with its path.
pub(crate) fn render(outputs: &[Output<'_>]) -> Vec<(std::path::PathBuf, Result<String, String>)> {
    outputs
        .iter()
        .filter_map(|(path, make)| Some(((*path).clone()?, make())))
        .collect()
}

/// `s` with `&`, `<`, `>` and `"` escaped for HTML text and attributes.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The checkpoint history of a run, as Flink's web UI shows it: id,
/// status, end-to-end duration, alignment, bytes buffered in alignment,
/// state size, bytes written, the synchronous and asynchronous parts, and
/// whether it was incremental.
fn checkpoint_table(r: &RunReport) -> String {
    let mut s = String::from(
        "<table class=\"checkpoints\">\n<thead><tr><th>id</th><th>status</th><th>kind</th><th>end to end</th><th>alignment (max)</th><th>buffered (max)</th><th>state</th><th>written</th><th>sync part (max)</th><th>async part (max)</th><th>incremental</th></tr></thead>\n<tbody>\n",
    );
    for c in &r.checkpoints.list {
        let subs = &c.subtasks;
        let max = |f: fn(&lockgate::stats::SubtaskCheckpointStats) -> u64| {
            subs.iter().map(f).max().unwrap_or(0)
        };
        let status = match &c.reason {
            Some(why) => format!("{} ({why})", c.status),
            None => c.status.clone(),
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} B</td><td>{} B</td><td>{} B</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.id,
            esc(&status),
            esc(&c.kind),
            fmt_ns(c.duration_ns),
            fmt_ns(max(|t| t.alignment_ns)),
            max(|t| t.buffered_bytes),
            c.state_bytes,
            c.checkpointed_bytes,
            fmt_ns(max(|t| t.sync_ns)),
            fmt_ns(max(|t| t.async_ns)),
            if c.incremental { "yes" } else { "no" }
        );
    }
    s += "</tbody>\n</table>\n";
    s
}

/// A two-column table of a JSON object's keys and values (a nested
/// object's as `outer.inner`).
fn key_values(class: &str, v: &serde_json::Value) -> String {
    fn rows(prefix: &str, v: &serde_json::Value, s: &mut String) {
        if let Some(m) = v.as_object() {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                let shown = match v {
                    serde_json::Value::Object(_) => {
                        rows(&key, v, s);
                        continue;
                    }
                    serde_json::Value::String(x) => x.clone(),
                    serde_json::Value::Null => "–".into(),
                    other => other.to_string(),
                };
                let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(&key), esc(&shown));
            }
        }
    }
    let mut s = format!("<table class=\"{class}\">\n<tbody>\n");
    rows("", v, &mut s);
    s += "</tbody>\n</table>\n";
    s
}

/// A self-contained HTML page of `runs` (no script, no network: the
/// charts are inline SVG): `comparison` (the text of `report compare`,
/// when given), the percentile chart of every run, then per run its
/// summary as `loadgen` prints it, its timeline, its checkpoint table, its
/// configuration and its environment.
///
/// # Errors
/// A run's histogram does not decode, or no run recorded a latency.
pub(crate) fn html_page(
    runs: &[(String, RunReport)],
    comparison: Option<&str>,
) -> Result<String, String> {
    let title = if runs.len() == 1 {
        format!(
            "lockgate {} {} ({})",
            runs[0].1.workload, runs[0].1.mode, runs[0].0
        )
    } else {
        format!("lockgate: {} runs compared", runs.len())
    };
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 2em; color: #111; max-width: 1100px; }}\n\
         h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.25em; margin-top: 2em; }}\n\
         table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }}\n\
         td {{ font-variant-numeric: tabular-nums; white-space: nowrap; }}\n\
         pre {{ background: #f6f6f6; padding: 1em; white-space: pre-wrap; }}\n\
         .chart svg {{ max-width: 100%; height: auto; }}\n\
         </style>\n</head>\n<body>\n<h1>{}</h1>\n",
        esc(&title),
        esc(&title)
    );
    if let Some(table) = comparison {
        let _ = writeln!(
            s,
            "<h2>Side by side</h2>\n<pre class=\"comparison\">{}</pre>",
            esc(table)
        );
    }
    s += "<h2>Latency by percentile</h2>\n<div class=\"chart\">\n";
    s += &percentile_svg(runs)?;
    s += "</div>\n";
    for (name, r) in runs {
        let _ = writeln!(s, "<section class=\"run\">\n<h2>Run: {}</h2>", esc(name));
        let _ = writeln!(s, "<pre class=\"summary\">{}</pre>", esc(&r.human()));
        match timeline_svg(name, r) {
            Ok(svg) => {
                s += "<h3>Latency over time</h3>\n<div class=\"chart\">\n";
                s += &svg;
                s += "</div>\n";
            }
            Err(why) => {
                let _ = writeln!(s, "<p class=\"no-timeline\">{}</p>", esc(&why));
            }
        }
        let _ = writeln!(
            s,
            "<h3>Checkpoints ({} completed, {} aborted)</h3>",
            r.checkpoints.completed, r.checkpoints.aborted
        );
        s += &checkpoint_table(r);
        s += "<h3>Configuration</h3>\n";
        s += &key_values("config", &r.config);
        s += "<h3>Environment</h3>\n";
        let env = serde_json::to_value(&r.environment).unwrap_or_default();
        s += &key_values("environment", &env);
        s += "</section>\n";
    }
    s += "</body>\n</html>\n";
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_what_it_shows() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
        let v =
            serde_json::json!({"pin": "<script>", "n": 3, "none": null, "inc": {"full_every": 10}});
        let t = key_values("config", &v);
        assert!(t.contains("<th>inc.full_every</th><td>10</td>"), "{t}");
        assert!(t.contains("<th>pin</th><td>&lt;script&gt;</td>"), "{t}");
        assert!(t.contains("<th>none</th><td>–</td>"), "{t}");
        assert!(!t.contains("<script>"));
    }
}
