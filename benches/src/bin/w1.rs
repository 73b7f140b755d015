//! One W1 run (`docs/workloads.md`) of one pipeline, in its own process so
//! that its peak memory is its own; prints one JSON line.
//!
//! `w1 --pipeline raw|lockgate [--records N] [--checkpoint none|exactly-once|at-least-once]
//!     [--interval-ms N] [--batch-size N] [--channel-capacity N] [--workers N]
//!     [--storage disk|memory] [--metrics none|prometheus]`
//!
//! `--storage`: where checkpoints go. `disk` (the default, as `lockgate
//! loadgen`'s): a temporary folder, every part written and `fsync`ed,
//! incremental parts after the first; `memory`: kept by the job, every
//! snapshot full (what this binary did before 2026-12-03).
//!
//! `--workers N`: lockgate's tasks on N cooperative worker threads
//! (`JobConfig::workers`) instead of one thread per task.
//!
//! `--metrics prometheus`: installs `metrics-exporter-prometheus`'s
//! recorder (as `lockgate loadgen --metrics-addr` does, without the HTTP
//! listener) before the lockgate pipeline starts, and renders it once at
//! the end: the job's sampler then copies its tasks' counters into it
//! every 100 ms and each checkpoint records its histograms
//! (`perf-scripts/w1-instructions.sh -- --metrics prometheus` counts what
//! that costs; the record path itself does no more work).
//!
//! `perf-scripts/w1-compare.sh` runs it alternately and prints medians.

use lockgate::telemetry::SECONDS_BUCKETS;
use lockgate::{testing::FailurePlan, CheckpointMode, JobConfig};
use lockgate_workloads::refjob::{run_reference_job, RefJobConfig};
use lockgate_workloads::workload::{WorkloadError, MAX_CHECKED_RECORDS};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use std::process::ExitCode;
use std::time::Duration;

// The same allocator as the `lockgate` binary, for both pipelines.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: w1 --pipeline raw|lockgate [--records N] [--checkpoint none|exactly-once|at-least-once] [--interval-ms N] [--batch-size N] [--channel-capacity N] [--workers N] [--storage disk|memory] [--metrics none|prometheus]";

fn main() -> ExitCode {
    let mut pipeline = String::from("lockgate");
    let mut records: u64 = 20_000_000;
    let mut mode = String::from("none");
    let mut interval_ms: u64 = 100;
    let mut batch: usize = 1024;
    let mut capacity: usize = 64;
    let mut workers: Option<usize> = None;
    let mut on_disk = true;
    let mut prometheus = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next();
        let bad = || {
            eprintln!("error: {a} needs a valid value");
            ExitCode::from(2)
        };
        match (a.as_str(), v) {
            ("--pipeline", Some(v)) => pipeline = v,
            ("--records", Some(v)) => match v.parse() {
                Ok(n) => records = n,
                Err(_) => return bad(),
            },
            ("--checkpoint", Some(v)) => mode = v,
            ("--interval-ms", Some(v)) => match v.parse() {
                Ok(n) => interval_ms = n,
                Err(_) => return bad(),
            },
            ("--batch-size", Some(v)) => match v.parse() {
                Ok(n) if n > 0 => batch = n,
                _ => return bad(),
            },
            ("--channel-capacity", Some(v)) => match v.parse() {
                Ok(n) if n > 0 => capacity = n,
                _ => return bad(),
            },
            ("--workers", Some(v)) => match v.parse() {
                Ok(n) if n > 0 => workers = Some(n),
                _ => return bad(),
            },
            ("--help" | "-h", _) => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            ("--storage", Some(v)) => match v.as_str() {
                "disk" => on_disk = true,
                "memory" => on_disk = false,
                _ => return bad(),
            },
            ("--metrics", Some(v)) => match v.as_str() {
                "none" => prometheus = false,
                "prometheus" => prometheus = true,
                _ => return bad(),
            },
            (other, v) => {
                if v.is_none() && other.starts_with("--") {
                    eprintln!("error: {other} needs a value (or is not an option of w1)");
                } else {
                    eprintln!("error: unexpected argument '{other}'");
                }
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    // Everything is checked before a run, for both pipelines alike: a bad
    // setting is an error of exit status 2, never a panic of the raw
    // pipeline nor a setting the JSON line reports but the run ignored.
    let bad_input = |msg: String| {
        eprintln!("error: {msg}");
        ExitCode::from(2)
    };
    if pipeline != "raw" && pipeline != "lockgate" {
        return bad_input(format!("unknown pipeline {pipeline} (raw or lockgate)"));
    }
    let checkpoint_mode = match mode.as_str() {
        "none" => CheckpointMode::None,
        "exactly-once" => CheckpointMode::ExactlyOnce,
        "at-least-once" => CheckpointMode::AtLeastOnce,
        other => {
            return bad_input(format!(
                "unknown checkpoint mode {other} (none, exactly-once or at-least-once)"
            ))
        }
    };
    if pipeline == "raw"
        && (checkpoint_mode != CheckpointMode::None || workers.is_some() || prometheus)
    {
        return bad_input(
            "--checkpoint, --workers and --metrics are lockgate's settings; the raw pipeline has none"
                .into(),
        );
    }
    if records == 0 {
        return bad_input("--records must be at least 1".into());
    }
    // The sink's check bounds a run (its bitset has a bit a record); the
    // bound, not a check built only to be dropped.
    if records > MAX_CHECKED_RECORDS {
        return bad_input(format!(
            "--records {records}: {}",
            WorkloadError::TooManyRecords(records)
        ));
    }
    let mut config = JobConfig::default();
    config.batch_size = batch;
    config.channel_capacity = capacity;
    config.workers = workers;
    config.checkpoint.mode = checkpoint_mode;
    if checkpoint_mode != CheckpointMode::None {
        config.checkpoint.interval = Some(Duration::from_millis(interval_ms));
    }
    // The raw pipeline takes the same batch size and channel capacity, so
    // the same limits hold for it.
    if let Err(e) = config.validate() {
        return bad_input(format!(
            "{e} (--batch-size, --channel-capacity, --workers, --interval-ms)"
        ));
    }
    let checkpoints = checkpoint_mode != CheckpointMode::None;
    let (rps, secs, exact, completed) = if pipeline == "raw" {
        let r = lockgate_benches::raw::run_w1(records, 10_000, 2, batch, capacity);
        (r.records_per_s, r.seconds, r.exact, 0)
    } else {
        // Removed with its files when the run ends (not when the process
        // is killed).
        let mut _folder = None;
        if checkpoints && on_disk {
            match tempfile::Builder::new()
                .prefix("lockgate-w1-checkpoints-")
                .tempdir()
            {
                Ok(t) => {
                    config.checkpoint.dir = Some(t.path().to_path_buf());
                    _folder = Some(t);
                }
                Err(e) => {
                    eprintln!("error: cannot create a temporary checkpoint folder: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        let recorder = if prometheus {
            match PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .and_then(PrometheusBuilder::install_recorder)
            {
                Ok(h) => Some(h),
                Err(e) => {
                    eprintln!("error: cannot install the Prometheus recorder: {e}");
                    return ExitCode::from(1);
                }
            }
        } else {
            None
        };
        let report =
            match run_reference_job(&RefJobConfig::w1(records), config, FailurePlan::none()) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(1);
                }
            };
        // One scrape's work, after the run.
        if let Some(h) = &recorder {
            let text = h.render();
            if !text.contains(lockgate::telemetry::RECORDS_IN) {
                eprintln!(
                    "error: the recorder holds no {}",
                    lockgate::telemetry::RECORDS_IN
                );
                return ExitCode::from(1);
            }
        }
        (
            report.records_per_s(),
            report.recorded_seconds,
            report.ok(),
            report.metrics.completed_checkpoints(),
        )
    };
    println!(
        "{{\"workload\":\"W1\",\"pipeline\":\"{pipeline}\",\"checkpoint\":\"{}\",\"records\":{records},\"seconds\":{secs:.4},\"records_per_s\":{rps:.0},\"exact\":{exact},\"checkpoints_completed\":{completed},\"batch_size\":{batch},\"workers\":{},\"storage\":{},\"metrics\":\"{}\",\"peak_rss_bytes\":{}}}",
        mode,
        workers.map_or("null".to_string(), |n| n.to_string()),
        match (checkpoints, on_disk) {
            (false, _) => "null",
            (true, true) => "\"disk\"",
            (true, false) => "\"memory\"",
        },
        if prometheus { "prometheus" } else { "none" },
        lockgate::stats::peak_rss_bytes()
    );
    if exact {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: the result does not match the closed form");
        ExitCode::from(1)
    }
}
