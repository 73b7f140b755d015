//! `lockgate report`: shows a saved run (`loadgen --json`) or compares
//! several side by side.

use crate::loadgen::pages;
use crate::loadgen::report::{fmt_ns, RunReport};
use std::path::{Path, PathBuf};

/// `lockgate report`: shows or compares saved runs. Exit codes: 0 done, 2
/// a file is missing or is not a saved run.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: ReportCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
enum ReportCommand {
    /// Prints a saved run as `loadgen` printed it.
    Show {
        /// The run (`loadgen --json` output).
        run: PathBuf,
        /// Also writes its latency by percentile as an SVG chart.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Also writes its latency timeline as an SVG chart (W2/W3).
        #[arg(long, value_name = "FILE")]
        timeline: Option<PathBuf>,
        /// Also writes one self-contained HTML page of the run.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// Prints runs side by side with the ratio of each figure to the
    /// first run's.
    Compare {
        /// Two or more runs.
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
        /// Also writes their latencies by percentile in one SVG chart.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Also writes one self-contained HTML page of the runs (their
        /// percentiles overlaid, then each run).
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
}

fn load(path: &Path) -> Result<RunReport, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let r: RunReport = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a saved loadgen run: {e}", path.display()))?;
    use crate::loadgen::report::{OLDEST_SCHEMA_VERSION, SCHEMA_VERSION};
    if !(OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&r.schema_version) {
        return Err(format!(
            "{} has schema version {}, this binary reads {OLDEST_SCHEMA_VERSION} to {SCHEMA_VERSION}",
            path.display(),
            r.schema_version,
        ));
    }
    Ok(r)
}

fn name_of(path: &Path) -> String {
    path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into(),
    )
}

/// [`pages::write_outputs`], its failures as one error.
fn write_outputs(outputs: &[pages::Output<'_>]) -> Result<(), String> {
    let failed: Vec<String> = pages::write_outputs(outputs)
        .into_iter()
        .map(|(path, e)| format!("writing {path}: {e}"))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// One row of the comparison: a label, the figure, whether it is in ns,
/// and whether higher is better.
type Figure = (&'static str, fn(&RunReport) -> f64, bool, bool);

fn figures() -> Vec<Figure> {
    vec![
        ("records/s", |r| r.records_per_s, false, true),
        ("achieved rate", |r| r.achieved_rate, false, true),
        ("latency p50", |r| r.latency_ns.p50 as f64, true, false),
        ("latency p90", |r| r.latency_ns.p90 as f64, true, false),
        ("latency p99", |r| r.latency_ns.p99 as f64, true, false),
        ("latency p99.9", |r| r.latency_ns.p999 as f64, true, false),
        ("latency p99.99", |r| r.latency_ns.p9999 as f64, true, false),
        ("latency max", |r| r.latency_ns.max as f64, true, false),
        (
            "uncorrected p99",
            |r| r.latency_uncorrected_ns.p99 as f64,
            true,
            false,
        ),
        (
            "checkpoints completed",
            |r| r.checkpoints.completed as f64,
            false,
            true,
        ),
        (
            "alignment p99",
            |r| r.checkpoints.alignment_ns.p99 as f64,
            true,
            false,
        ),
        (
            "checkpoint p99",
            |r| r.checkpoints.duration_ns.p99 as f64,
            true,
            false,
        ),
        (
            "peak RSS MiB",
            |r| r.peak_rss_bytes as f64 / 1048576.0,
            false,
            false,
        ),
    ]
}

/// A warning when the runs are not like for like (another workload or
/// checkpointing mode than the first run's), naming each.
fn mismatch_warning(runs: &[(String, RunReport)]) -> Option<String> {
    let (_, first) = runs.first()?;
    let odd: Vec<String> = runs
        .iter()
        .filter(|(_, r)| r.workload != first.workload || r.mode != first.mode)
        .map(|(n, r)| format!("{n} is {} {}", r.workload, r.mode))
        .collect();
    (!odd.is_empty()).then(|| {
        format!(
            "WARNING: the runs differ from the first ({} {}): {}; their figures are not like for like",
            first.workload,
            first.mode,
            odd.join(", ")
        )
    })
}

/// Refuses an output path that cannot be written, before anything is
/// printed.
fn check_output(path: &Path) -> Result<(), String> {
    crate::loadgen::args::writable(path)
}

fn compare(runs: &[(String, RunReport)]) -> String {
    const W: usize = 24;
    let mut out = format!("{:<26}", "");
    for (name, _) in runs {
        out += &format!("{:>W$}", truncate(name, W - 1));
    }
    out.push('\n');
    let mut line = |label: &str, cells: Vec<String>| {
        out += &format!("{label:<26}");
        for c in cells {
            out += &format!("{c:>W$}");
        }
        out.push('\n');
    };
    line(
        "workload / mode",
        runs.iter()
            .map(|(_, r)| format!("{} {}", r.workload, r.mode))
            .collect(),
    );
    line(
        "cores / pinning",
        runs.iter()
            .map(|(_, r)| format!("{} / {}", r.cores, r.pinning))
            .collect(),
    );
    let base = &runs[0].1;
    for (label, get, is_ns, higher_better) in figures() {
        let b = get(base);
        let arrow = if higher_better { "↑" } else { "↓" };
        line(
            &format!("{label} {arrow}"),
            runs.iter()
                .enumerate()
                .map(|(i, (_, r))| {
                    let v = get(r);
                    let shown = if is_ns {
                        fmt_ns(v as u64)
                    } else {
                        format!("{v:.0}")
                    };
                    if i == 0 {
                        shown
                    } else if b == 0.0 {
                        format!("{shown} (n/a)")
                    } else {
                        format!("{shown} ({:.2}x)", v / b)
                    }
                })
                .collect(),
        );
    }
    line(
        "result",
        runs.iter()
            .map(|(_, r)| {
                if r.ok {
                    "ok".into()
                } else if r.interrupted {
                    // As `report show` and the run's own last line say.
                    "interrupted".into()
                } else {
                    "FAILED".into()
                }
            })
            .collect(),
    );
    out += "(↑: higher is better, ↓: lower is better; ratios to the first run)\n";
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n.saturating_sub(1)).collect::<String>() + "…"
    }
}

/// Runs `lockgate report` and returns its exit code.
pub(crate) fn run(args: Args) -> u8 {
    let res = match args.command {
        ReportCommand::Show {
            run,
            svg,
            timeline,
            html,
        } => load(&run).and_then(|r| {
            for p in [&svg, &timeline, &html].into_iter().flatten() {
                check_output(p)?;
            }
            println!("{}", r.human());
            let runs = [(name_of(&run), r)];
            write_outputs(&[
                (&svg, &|| pages::percentile_svg(&runs)),
                (&timeline, &|| pages::timeline_svg(&runs[0].0, &runs[0].1)),
                (&html, &|| pages::html_page(&runs)),
            ])
        }),
        ReportCommand::Compare { runs, svg, html } => runs
            .iter()
            .map(|p| load(p).map(|r| (name_of(p), r)))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|loaded| {
                for p in [&svg, &html].into_iter().flatten() {
                    check_output(p)?;
                }
                if let Some(w) = mismatch_warning(&loaded) {
                    eprintln!("{w}");
                }
                print!("{}", compare(&loaded));
                write_outputs(&[
                    (&svg, &|| pages::percentile_svg(&loaded)),
                    (&html, &|| pages::html_page(&loaded)),
                ])
            }),
    };
    match res {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}
