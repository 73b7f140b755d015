//! `lockgate report`: shows a saved run (`loadgen --json`) or compares
//! several side by side.

use crate::loadgen::pages;
use crate::loadgen::report::{RunReport, Unit};
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

/// The text of every asked-for output, made before anything is printed
/// or written (a run whose histogram does not decode, or that has no
/// timeline, is refused whole).
fn render(outputs: &[pages::Output<'_>]) -> Result<Vec<(PathBuf, String)>, String> {
    pages::render(outputs)
        .into_iter()
        .map(|(p, made)| {
            made.map_err(|e| format!("{}: {e}", p.display()))
                .map(|t| (p, t))
        })
        .collect()
}

/// Writes what [`render`] made.
fn write_rendered(files: Vec<(PathBuf, String)>) -> Result<(), String> {
    for (p, text) in files {
        std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    Ok(())
}

/// One row of the comparison: a label, the figure (`None`: it does not
/// apply to that run), whether it is in ns, and whether higher is better.
type Figure = (&'static str, fn(&RunReport) -> Option<f64>, bool, bool);

/// A latency figure, which a run that recorded nothing does not have.
fn latency(r: &RunReport, v: u64) -> Option<f64> {
    (r.latency_ns.count > 0).then_some(v as f64)
}

/// A checkpoint figure, which a run without a completed checkpoint does
/// not have.
fn checkpointed(r: &RunReport, v: u64) -> Option<f64> {
    (r.checkpoints.completed > 0).then_some(v as f64)
}

fn figures() -> Vec<Figure> {
    vec![
        ("records/s", |r| Some(r.records_per_s), false, true),
        ("achieved rate", |r| Some(r.achieved_rate), false, true),
        ("latency p50", |r| latency(r, r.latency_ns.p50), true, false),
        ("latency p90", |r| latency(r, r.latency_ns.p90), true, false),
        ("latency p99", |r| latency(r, r.latency_ns.p99), true, false),
        (
            "latency p99.9",
            |r| latency(r, r.latency_ns.p999),
            true,
            false,
        ),
        (
            "latency p99.99",
            |r| latency(r, r.latency_ns.p9999),
            true,
            false,
        ),
        ("latency max", |r| latency(r, r.latency_ns.max), true, false),
        (
            "uncorrected p99",
            |r| latency(r, r.latency_uncorrected_ns.p99),
            true,
            false,
        ),
        (
            "checkpoints completed",
            |r| Some(r.checkpoints.completed as f64),
            false,
            true,
        ),
        (
            "alignment p99",
            // At-least-once aligns nothing (Flink's BarrierTracker).
            |r| {
                if r.mode == "at-least-once" {
                    None
                } else {
                    checkpointed(r, r.checkpoints.alignment_ns.p99)
                }
            },
            true,
            false,
        ),
        (
            "checkpoint p99",
            |r| checkpointed(r, r.checkpoints.duration_ns.p99),
            true,
            false,
        ),
        (
            "peak RSS MiB",
            |r| Some(r.peak_rss_bytes as f64 / 1048576.0),
            false,
            false,
        ),
    ]
}

/// The warnings of a comparison: runs not like for like (another
/// workload or checkpointing mode than the first run's), and runs whose
/// figures are partial (interrupted, or a restore that had nothing left to
/// run), naming each.
fn comparison_warnings(runs: &[(String, RunReport)]) -> Vec<String> {
    let Some((_, first)) = runs.first() else {
        return Vec::new();
    };
    let odd: Vec<String> = runs
        .iter()
        .filter(|(_, r)| r.workload != first.workload || r.mode != first.mode)
        .map(|(n, r)| format!("{n} is {} {}", r.workload, r.mode))
        .collect();
    let mut out = Vec::new();
    if !odd.is_empty() {
        out.push(format!(
            "WARNING: the runs differ from the first ({} {}): {}; their figures are not like for like",
            first.workload,
            first.mode,
            odd.join(", ")
        ));
    }
    for (n, r) in runs {
        if r.interrupted {
            out.push(format!(
                "WARNING: {n} was interrupted: its figures cover part of its run"
            ));
        } else if r.nothing_left_after_restore() {
            out.push(format!(
                "WARNING: {n} restored a run that had finished: it recorded nothing"
            ));
        }
    }
    out
}

/// Refuses, before anything is printed, an output that cannot be written
/// or that names the same file as another output or an input (it would
/// overwrite a saved run).
fn check_outputs(
    inputs: &[(&PathBuf, &str)],
    outputs: &[(&str, &Option<PathBuf>)],
) -> Result<(), String> {
    let mut named: Vec<(&str, &Path)> = Vec::new();
    for (flag, p) in outputs {
        if let Some(p) = p {
            crate::loadgen::args::writable(p)?;
            named.push((flag, p));
        }
    }
    crate::loadgen::args::distinct_files(&named)?;
    // The same run twice in a comparison is fine; an output on a run is not.
    for (input, what) in inputs {
        for (flag, output) in &named {
            crate::loadgen::args::distinct_files(&[(what, input.as_path()), (flag, output)])?;
        }
    }
    Ok(())
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
        "threads",
        runs.iter()
            .map(|(_, r)| crate::loadgen::report::threading(&r.config))
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
        // One unit per row, the same in every comparison: latencies in µs,
        // checkpoint durations in ms.
        let unit = if label.starts_with("latency") || label.starts_with("uncorrected") {
            Unit::Us
        } else {
            Unit::Ms
        };
        let arrow = if higher_better { "↑" } else { "↓" };
        let label = if is_ns {
            format!("{label} ({}) {arrow}", unit.name())
        } else {
            format!("{label} {arrow}")
        };
        line(
            &label,
            runs.iter()
                .enumerate()
                .map(|(i, (_, r))| {
                    let Some(v) = get(r) else {
                        return "n/a".into();
                    };
                    let shown = if is_ns {
                        unit.show(v as u64)
                    } else {
                        format!("{v:.0}")
                    };
                    match b {
                        _ if i == 0 => shown,
                        Some(b) if b > 0.0 => format!("{shown} ({:.2}x)", v / b),
                        _ => format!("{shown} (n/a)"),
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
            check_outputs(
                &[(&run, "the run")],
                &[
                    ("--svg", &svg),
                    ("--timeline", &timeline),
                    ("--html", &html),
                ],
            )?;
            let runs = [(name_of(&run), r)];
            let files = render(&[
                (&svg, &|| pages::percentile_svg(&runs)),
                (&timeline, &|| pages::timeline_svg(&runs[0].0, &runs[0].1)),
                (&html, &|| pages::html_page(&runs, None)),
            ])?;
            println!("{}", runs[0].1.human());
            write_rendered(files)
        }),
        ReportCommand::Compare { runs, svg, html } => runs
            .iter()
            .map(|p| load(p).map(|r| (name_of(p), r)))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|loaded| {
                let inputs: Vec<(&PathBuf, &str)> = runs.iter().map(|p| (p, "a run")).collect();
                check_outputs(&inputs, &[("--svg", &svg), ("--html", &html)])?;
                let warnings = comparison_warnings(&loaded);
                for w in &warnings {
                    eprintln!("{w}");
                }
                let table = compare(&loaded);
                let comparison = format!(
                    "{}{table}",
                    warnings
                        .iter()
                        .map(|w| format!("{w}\n"))
                        .collect::<String>()
                );
                let files = render(&[
                    (&svg, &|| pages::percentile_svg(&loaded)),
                    (&html, &|| pages::html_page(&loaded, Some(&comparison))),
                ])?;
                print!("{table}");
                write_rendered(files)
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
