//! The trade aggregator (`lockgate_examples::trades`) as a service: it
//! resumes from its checkpoint folder when that holds a checkpoint
//! (restore mode if-present), pushes the feed from the restored position,
//! and appends each committed checkpoint's bars to a file, as one block
//! ending `end <checkpoint>` (a block torn by a kill is dropped at the next
//! start, and its bars come again).
//!
//! `lockgate-trades --checkpoint-dir DIR --out FILE --trades N [--pace-us U]`

use lockgate::{CheckpointId, JobConfig};
use lockgate_examples::trades;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The newest checkpoint whose bars `out` holds whole; cuts a torn block.
fn recover(out: &Path) -> std::io::Result<Option<CheckpointId>> {
    let Ok(text) = std::fs::read_to_string(out) else {
        return Ok(None);
    };
    let (mut whole, mut newest) = (0, None);
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        at += line.len();
        if let Some(id) = line
            .strip_prefix("end ")
            .and_then(|s| s.trim().parse().ok())
        {
            if line.ends_with('\n') {
                (whole, newest) = (at, Some(CheckpointId(id)));
            }
        }
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(out)?
        .set_len(whole as u64)?;
    Ok(newest)
}

fn main() -> ExitCode {
    let (mut chk, mut out, mut n, mut pace_us) = (None, None, 100_000u64, 0u64);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next();
        match (a.as_str(), v) {
            ("--checkpoint-dir", Some(v)) => chk = Some(PathBuf::from(v)),
            ("--out", Some(v)) => out = Some(PathBuf::from(v)),
            ("--trades", Some(v)) if v.parse::<u64>().is_ok() => n = v.parse().unwrap_or(n),
            ("--pace-us", Some(v)) if v.parse::<u64>().is_ok() => pace_us = v.parse().unwrap_or(0),
            _ => {
                eprintln!("usage: lockgate-trades --checkpoint-dir DIR --out FILE [--trades N] [--pace-us U]");
                return ExitCode::from(2);
            }
        }
    }
    let (Some(chk), Some(out)) = (chk, out) else {
        eprintln!("error: --checkpoint-dir and --out are needed");
        return ExitCode::from(2);
    };
    let after = match recover(&out) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: --out {}: {e}", out.display());
            return ExitCode::from(1);
        }
    };
    let (job, feed, bars) = trades::job(JobConfig::default(), chk, 2, after);
    let handle = match job.start() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)?;
        for batch in bars.iter() {
            let mut block = String::new();
            for b in &batch.records {
                block += &format!("{} {} {} {}\n", b.symbol, b.start_ms, b.volume, b.notional);
            }
            block += &format!("end {}\n", batch.checkpoint.0);
            file.write_all(block.as_bytes())?;
            file.sync_data()?;
        }
        Ok(())
    });
    // The feed from where the restored checkpoint left it.
    for seq in feed.restored_position()..n {
        if feed.push(trades::trade(seq)).is_err() {
            break;
        }
        if pace_us > 0 && seq % 100 == 0 {
            std::thread::sleep(Duration::from_micros(pace_us * 100));
        }
    }
    drop(feed);
    let result = handle.wait();
    let written = writer.join();
    match (result, written) {
        (Ok(_), Ok(Ok(()))) => ExitCode::SUCCESS,
        (Err(e), _) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
        (_, Ok(Err(e))) => {
            eprintln!("error: writing the bars: {e}");
            ExitCode::from(1)
        }
        (_, Err(_)) => ExitCode::from(1),
    }
}
