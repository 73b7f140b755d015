//! A small exactly-once job for crash tests (see
//! `lockgate_examples::demo`), with checkpoints in a folder.
//!
//! `lockgate-txn-demo --out DIR --checkpoint-dir DIR --records N [--restore]`
//!
//! Killed at any moment and restarted with `--restore`, its committed
//! output is the same as that of a run that was never killed.

use lockgate::{CheckpointMode, JobConfig};
use lockgate_examples::demo::{self, Pace};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let mut out = None;
    let mut chk = None;
    let mut records = 100_000u64;
    let mut restore = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = args.next().map(PathBuf::from),
            "--checkpoint-dir" => chk = args.next().map(PathBuf::from),
            "--records" => match args.next().and_then(|v| v.parse().ok()) {
                Some(n) => records = n,
                None => {
                    eprintln!("error: --records needs a number");
                    return ExitCode::from(2);
                }
            },
            "--restore" => restore = true,
            other => {
                eprintln!("error: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let (Some(out), Some(chk)) = (out, chk) else {
        eprintln!(
            "usage: lockgate-txn-demo --out DIR --checkpoint-dir DIR [--records N] [--restore]"
        );
        return ExitCode::from(2);
    };
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!(
            "error: --out {}: cannot create the folder: {e}",
            out.display()
        );
        return ExitCode::from(2);
    }
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(20));
    config.checkpoint.dir = Some(chk);
    config.checkpoint.restore_mode = restore.into();
    match demo::job(config, out, records, Pace::Paced)
        .start()
        .and_then(|h| h.wait())
    {
        Ok(m) => {
            println!("done: {} checkpoints completed", m.completed_checkpoints());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
