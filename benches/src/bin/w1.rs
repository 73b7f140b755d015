//! One W1 run (`docs/workloads.md`) of one pipeline, in its own process so
//! that its peak memory is its own; prints one JSON line.
//!
//! `w1 --pipeline raw|lockgate [--records N] [--checkpoint none|exactly-once|at-least-once]
//!     [--interval-ms N] [--batch-size N] [--channel-capacity N] [--workers N]
//!     [--storage disk|memory]`
//!
//! `--storage`: where checkpoints go. `disk` (the default, as `lockgate
//! loadgen`'s): a temporary folder, every part written and `fsync`ed,
//! incremental parts after the first; `memory`: kept by the job, every
//! snapshot full (what this binary did before 2026-12-03).
//!
//! `--workers N`: lockgate's tasks on N cooperative worker threads
//! (`JobConfig::workers`) instead of one thread per task.
//!
//! `perf-scripts/w1-compare.sh` runs it alternately and prints medians.

use lockgate::{CheckpointMode, FailurePlan, JobConfig};
use lockgate_workloads::refjob::{run_reference_job, RefJobConfig};
use std::process::ExitCode;
use std::time::Duration;

// The same allocator as the `lockgate` binary, for both pipelines.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: w1 --pipeline raw|lockgate [--records N] [--checkpoint none|exactly-once|at-least-once] [--interval-ms N] [--batch-size N] [--channel-capacity N] [--workers N] [--storage disk|memory]";

fn main() -> ExitCode {
    let mut pipeline = String::from("lockgate");
    let mut records: u64 = 20_000_000;
    let mut mode = String::from("none");
    let mut interval_ms: u64 = 100;
    let mut batch: usize = 1024;
    let mut capacity: usize = 64;
    let mut workers: Option<usize> = None;
    let mut on_disk = true;
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
    let (rps, secs, exact, completed) = match pipeline.as_str() {
        "raw" => {
            let r = lockgate_benches::raw::run_w1(records, 10_000, 2, batch, capacity);
            (r.records_per_s, r.seconds, r.exact, 0)
        }
        "lockgate" => {
            let mut config = JobConfig::default();
            config.batch_size = batch;
            config.channel_capacity = capacity;
            config.workers = workers;
            config.checkpoint.mode = match mode.as_str() {
                "none" => CheckpointMode::None,
                "exactly-once" => CheckpointMode::ExactlyOnce,
                "at-least-once" => CheckpointMode::AtLeastOnce,
                other => {
                    eprintln!("error: unknown checkpoint mode {other}");
                    return ExitCode::from(2);
                }
            };
            // Removed with its files when the run ends.
            let mut _folder = None;
            if config.checkpoint.mode != CheckpointMode::None {
                config.checkpoint.interval = Some(Duration::from_millis(interval_ms));
                if on_disk {
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
            }
            let report =
                match run_reference_job(&RefJobConfig::w1(records), config, FailurePlan::none()) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(1);
                    }
                };
            (
                report.records_per_s(),
                report.recorded_seconds,
                report.ok(),
                report.metrics.completed_checkpoints(),
            )
        }
        other => {
            eprintln!("error: unknown pipeline {other} (raw or lockgate)");
            return ExitCode::from(2);
        }
    };
    println!(
        "{{\"workload\":\"W1\",\"pipeline\":\"{pipeline}\",\"checkpoint\":\"{}\",\"records\":{records},\"seconds\":{secs:.4},\"records_per_s\":{rps:.0},\"exact\":{exact},\"checkpoints_completed\":{completed},\"batch_size\":{batch},\"workers\":{},\"storage\":\"{}\",\"peak_rss_bytes\":{}}}",
        if pipeline == "raw" { "none" } else { mode.as_str() },
        workers.map_or("null".to_string(), |n| n.to_string()),
        if on_disk { "disk" } else { "memory" },
        lockgate::peak_rss_bytes()
    );
    if exact {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: the result does not match the closed form");
        ExitCode::from(1)
    }
}
