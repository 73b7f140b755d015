//! `lockgate loadgen`: runs a reference workload on the engine
//! (`lockgate_workloads::refjob`), shows progress, handles Ctrl-C, and
//! reports (human summary, JSON, .hgrm, .hlog, SVG).
//!
//! Exit codes: 0 the run passed its correctness check, 1 it did not, 2 bad
//! input (nothing ran), 130 interrupted by Ctrl-C.

pub(crate) mod ab;
pub(crate) mod args;
pub(crate) mod pages;
pub(crate) mod report;
pub(crate) mod restore;

pub(crate) use args::Args;

use lockgate::JobError;
use lockgate_cli::metrics_http::MetricsServer;
use lockgate_workloads::latency::{write_hgrm, HlogWriter, NS_PER_MS};
use lockgate_workloads::refjob::{
    seeded_failures, start_reference_job, wait_reference_job, RefJobError, RefJobReport,
};
use report::{fmt_ns, RunReport};
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Exit code: the correctness check failed.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit code: bad input, nothing ran.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code: interrupted by Ctrl-C (128 + SIGINT, as shells report it).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// Runs `lockgate loadgen` and returns its exit code; with
/// `--metrics-addr`, serves metrics from before the job starts and, after
/// the report, for `--metrics-linger` more.
pub(crate) fn run(args: Args) -> u8 {
    let mut server = None;
    let code = run_load(args, &mut server);
    if let Some(s) = &server {
        s.finish();
    }
    code
}

fn run_load(args: Args, server: &mut Option<MetricsServer>) -> u8 {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut args = args;
    match crate::restore_args::resolve(
        args.restore_mode,
        args.restore.is_some(),
        args.checkpoint_dir.as_deref(),
    ) {
        Ok(Some(dir)) => args.restore = Some(dir),
        Ok(None) => {}
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_USAGE;
        }
    }
    let args = match restore::resolve(args, &argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_USAGE;
        }
    };
    let plan = match args.plan() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_USAGE;
        }
    };
    *server = match args.metrics.start() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_USAGE;
        }
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    for w in &plan.warnings {
        eprintln!("{w}");
    }
    let failures = seeded_failures(&plan.refjob, plan.seed, plan.failures);
    let planned = failures.failures.len();
    let wall_start = SystemTime::now();
    let (handle, results) = match start_reference_job(
        &plan.refjob,
        plan.job.clone(),
        failures,
        restore::recorded_flags(&plan.config_json),
    ) {
        Ok(x) => x,
        Err(e) => {
            let msg = match &e {
                RefJobError::Job(JobError::Restore(m)) => format!("--restore: {m}"),
                RefJobError::Job(JobError::Storage(m)) => format!("checkpoint folder: {m}"),
                RefJobError::Job(e @ JobError::FolderInUse(_)) => e.to_string(),
                other => other.to_string(),
            };
            eprintln!("error: {msg}");
            return EXIT_USAGE;
        }
    };
    // On stderr even with --quiet: a restore went past the newest
    // checkpoints, and the user should know which and why.
    restore::warn_skipped(&handle.metrics().restore_skipped);
    {
        let flag = interrupted.clone();
        let results = results.clone();
        // Only a temporary folder is ours to remove; exit skips its drop.
        let temp = match &plan.checkpoint_dir {
            args::CheckpointDir::Temp(t) => Some(t.path().to_path_buf()),
            _ => None,
        };
        // A second Ctrl-C ends the process at once, with a one-line
        // summary, removing the temporary checkpoint folder.
        if let Err(e) = ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::SeqCst) {
                if let Some(t) = &temp {
                    // Snapshot threads may still add a file while it goes:
                    // a few tries, then say so.
                    let mut left = Ok(());
                    for _ in 0..10 {
                        left = std::fs::remove_dir_all(t);
                        if left.is_ok() || !t.exists() {
                            left = Ok(());
                            break;
                        }
                    }
                    if let Err(e) = left {
                        eprintln!(
                            "cannot remove the temporary checkpoint folder {}: {e}",
                            t.display()
                        );
                    }
                }
                let p = results.progress();
                eprintln!(
                    "interrupted twice: quit at once, {} of {} records delivered, no report",
                    p.delivered,
                    results.config().total_records()
                );
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
        }) {
            tracing::warn!(error = %e, "cannot install the Ctrl-C handler");
        }
    }
    tracing::info!(
        workload = %plan.refjob.workload,
        mode = plan.mode.as_str(),
        checkpoint_dir = ?plan.checkpoint_dir.path(),
        "run started"
    );
    let started = Instant::now();
    let mut next_progress = started + Duration::from_secs(1);
    let mut last_delivered = 0u64;
    let mut next_interval = plan.interval_report.map(|d| (started + d, d));
    // --ab: segments from the end of the warm-up on.
    let mut ab = plan.ab.map(|(segment, blocks)| {
        let warmup = if plan.refjob.workload.is_timed() {
            plan.refjob.warmup.as_nanos() as u64
        } else {
            0
        };
        ab::AbDriver::new(
            segment.as_nanos() as u64,
            lockgate::tuning::now_ns() + warmup,
            blocks,
            plan.seed,
            if plan.refjob.workload.is_timed() {
                plan.refjob.rate
            } else {
                0
            },
        )
    });
    let mut interval_delivered = 0u64;
    let mut stopping = false;
    while !handle.is_finished() {
        if !stopping && interrupted.load(Ordering::SeqCst) {
            stopping = true;
            eprintln!("interrupted: stopping the job (Ctrl-C again to quit at once)");
            handle.stop();
        }
        // The job has no completion channel: poll it, 20 ms being far below
        // a progress line's second (5 ms with --ab: its switches and
        // their settling are counted in 100 ms intervals).
        if let Some(d) = &mut ab {
            d.step(&handle, &results);
            std::thread::sleep(Duration::from_millis(5));
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
        if plan.progress && Instant::now() >= next_progress {
            next_progress += Duration::from_secs(1);
            let p = results.progress();
            let m = handle.metrics();
            let p99 = if p.recorded == 0 {
                "warming up".to_string()
            } else {
                format!("p99 {} so far", fmt_ns(p.p99_ns))
            };
            eprintln!(
                "[{:6.1} s] {:>9} records/s at the sink, {} delivered, {p99}, {} checkpoints completed",
                started.elapsed().as_secs_f64(),
                p.delivered - last_delivered,
                p.delivered,
                m.completed_checkpoints()
            );
            last_delivered = p.delivered;
        }
        if let Some((at, every)) = next_interval {
            if Instant::now() >= at {
                next_interval = Some((at + every, every));
                let p = results.progress();
                let c = results.take_checkpoint_interval();
                let secs = every.as_secs_f64();
                eprintln!(
                    "interval at {:.0} s: {:.0} records/s, {:.1} checkpoints/s ({} aborted), end-to-end p50 {} p99 {}, RSS {:.1} MiB",
                    started.elapsed().as_secs_f64(),
                    (p.delivered - interval_delivered) as f64 / secs,
                    c.completed as f64 / secs,
                    c.aborted,
                    fmt_ns(c.duration_ns.quantile(0.5)),
                    fmt_ns(c.duration_ns.quantile(0.99)),
                    resident_bytes() as f64 / (1 << 20) as f64,
                );
                interval_delivered = p.delivered;
            }
        }
    }
    let was_interrupted = stopping;
    let report = match wait_reference_job(handle, &results, was_interrupted, planned) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let ab = ab.map(|d| {
        ab::AbReport::new(
            plan.ab.map_or(0, |(s, _)| s.as_nanos() as u64),
            d.done,
            &report.intervals,
            report.committed.as_ref().map(|c| c.intervals.as_slice()),
            report.intervals_start_ns,
            report.config.interval_ns,
        )
    });
    let code = finish(&plan, &args, &report, wall_start, ab);
    if let Some(blocked) = blocked_storage() {
        // Removing the temporary checkpoint folder would wait on the same
        // file system: it is left in place.
        if let args::CheckpointDir::Temp(t) = &plan.checkpoint_dir {
            eprintln!(
                "the temporary checkpoint folder {} is left in place",
                t.path().display()
            );
        }
        std::mem::forget(plan);
        eprintln!("{blocked}");
    } else {
        // Removes a temporary checkpoint folder.
        drop(plan);
    }
    if was_interrupted {
        EXIT_INTERRUPTED
    } else {
        code
    }
}

/// The process's last line when a checkpoint storage does not answer (a
/// frozen or dead file system): which threads it still holds, what each
/// waits on and for how long; the process cannot exit before the kernel
/// lets them go. `None` when no storage call has run for a second.
pub(crate) fn blocked_storage() -> Option<String> {
    let blocked: Vec<String> = lockgate::storage::storage_calls_in_progress()
        .into_iter()
        .filter(|c| c.running_for >= Duration::from_secs(1))
        .map(|c| c.to_string())
        .collect();
    (!blocked.is_empty()).then(|| {
        format!(
            "the checkpoint storage does not answer; the process exits once the file system lets these threads go: {}",
            blocked.join("; ")
        )
    })
}

/// `DIR/run.committed.EXT` for `DIR/run.EXT`: a latency file's committed
/// companion.
fn committed_path(p: &std::path::Path) -> std::path::PathBuf {
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match p.extension() {
        Some(e) => format!("{stem}.committed.{}", e.to_string_lossy()),
        None => format!("{stem}.committed"),
    };
    p.with_file_name(name)
}

/// The process's resident memory now (Linux `VmRSS`; 0 elsewhere).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The run's name in charts: the `--json` file's stem, else `lockgate`.
fn run_name(args: &Args) -> String {
    args.json
        .as_ref()
        .and_then(|p| p.file_stem())
        .map_or_else(|| "lockgate".into(), |s| s.to_string_lossy().into_owned())
}

/// Prints and writes the report; returns 0 or [`EXIT_FAILED`].
fn finish(
    plan: &args::Plan,
    args: &Args,
    r: &RefJobReport,
    wall_start: SystemTime,
    ab: Option<ab::AbReport>,
) -> u8 {
    let mut saved = match RunReport::new(
        r,
        plan.config_json.clone(),
        plan.mode.as_str(),
        &plan.pinning,
        wall_start,
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: building the report: {e}");
            return EXIT_FAILED;
        }
    };
    saved.ab = ab;
    let mut write_failed = false;
    let mut fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("error: writing {what}: {e}");
        write_failed = true;
    };
    if let Some(p) = &args.json {
        match serde_json::to_string_pretty(&saved) {
            Ok(text) => {
                if let Err(e) = std::fs::write(p, text + "\n") {
                    fail(&p.display().to_string(), &e);
                }
            }
            Err(e) => fail("the JSON report", &e),
        }
    }
    // With committed output, each latency file has a committed companion
    // beside it: `run.hgrm` and `run.committed.hgrm`.
    let committed = r.committed.as_ref();
    if let Some(p) = &args.hgrm {
        let mut files = vec![(p.clone(), &r.latency)];
        files.extend(committed.map(|c| (committed_path(p), &c.latency)));
        for (p, h) in files {
            let res = std::fs::File::create(&p).and_then(|f| {
                let mut w = std::io::BufWriter::new(f);
                write_hgrm(&mut w, h, NS_PER_MS)?;
                w.flush()
            });
            if let Err(e) = res {
                fail(&p.display().to_string(), &e);
            }
        }
    }
    if let Some(p) = &args.hlog {
        let paced = r.config.workload.is_paced();
        let mut files = vec![(p.clone(), &r.latency, &r.intervals)];
        files.extend(committed.map(|c| (committed_path(p), &c.latency, &c.intervals)));
        for (p, whole, intervals) in files {
            let res = (|| -> anyhow::Result<()> {
                let f = std::io::BufWriter::new(std::fs::File::create(&p)?);
                let mut w = HlogWriter::new(f, wall_start)?;
                if !paced && !whole.is_empty() {
                    // W1 and W4 (closed loop) keep no intervals: the whole
                    // run is one.
                    w.write_interval(
                        whole,
                        Duration::ZERO,
                        Duration::from_secs_f64(r.recorded_seconds.max(0.0)),
                        None,
                    )?;
                } else {
                    for (i, h) in intervals.iter().enumerate() {
                        w.write_interval(
                            h,
                            Duration::from_nanos(i as u64 * r.config.interval_ns),
                            Duration::from_nanos(r.config.interval_ns),
                            None,
                        )?;
                    }
                }
                w.finish()?;
                Ok(())
            })();
            if let Err(e) = res {
                fail(&p.display().to_string(), &e);
            }
        }
    }
    let runs = [(run_name(args), saved.clone())];
    let nothing_left = saved.ok && saved.nothing_left_after_restore();
    if nothing_left {
        // Nothing was recorded: no chart to draw, and no failure either.
        for p in [&args.svg, &args.timeline, &args.html]
            .into_iter()
            .flatten()
        {
            eprintln!(
                "{}: not written: the restored run had finished, nothing was recorded",
                p.display()
            );
        }
    } else {
        // Each output on its own: one that fails leaves the others.
        for (path, made) in pages::render(&[
            (&args.svg, &|| pages::percentile_svg(&runs)),
            (&args.timeline, &|| {
                pages::timeline_svg(&runs[0].0, &runs[0].1)
            }),
            (&args.html, &|| pages::html_page(&runs, None)),
        ]) {
            if let Err(e) = made.and_then(|text| {
                std::fs::write(&path, text).map_err(|e| format!("cannot write: {e}"))
            }) {
                fail(&path.display().to_string(), &e);
            }
        }
    }
    // The report shows the warnings; with --quiet (one line on stdout)
    // they go to stderr instead.
    if plan.quiet {
        let warnings = [
            saved.rate_warning(),
            saved.behind_warning(),
            saved.pinning_warning(),
        ];
        for w in warnings.into_iter().flatten() {
            eprintln!("{w}");
        }
    }
    if nothing_left {
        // The restored checkpoint is the final one of a run that ended.
        println!(
            "nothing left to do: the run had finished ({})",
            saved.restored_checkpoint.map_or_else(
                || "its final checkpoint".to_string(),
                |id| format!("chk-{id}")
            )
        );
    } else if plan.quiet {
        println!("{}", saved.result_line());
    } else {
        println!("{}", saved.human());
    }
    if saved.ok && write_failed {
        // Exit 1 says "not ok": say which part was not.
        eprintln!("the check passed, but an output could not be written (exit 1)");
    }
    if saved.ok && !write_failed {
        0
    } else {
        EXIT_FAILED
    }
}
