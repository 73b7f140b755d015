//! How long a restore takes to read a checkpoint folder: the time of
//! `load_restorable` (pick the newest checkpoint whose whole chain loads,
//! read and check every part of every chain), the median of `--rounds`
//! runs, and the chains it read: per subtask, how many parts (its full
//! part and the deltas after it) and how many bytes. The page cache is
//! warm after the first round, as for an in-process restart; the first
//! round is reported apart (a cold restore reads from the disk).
//!
//! Usage: `restore_time DIR [--rounds N]` (a folder written by e.g.
//! `lockgate loadgen --checkpoint-dir DIR --checkpoint-interval-ms 1`).

use lockgate::{
    storage::load_restorable, storage::CheckpointStorage, storage::LocalDirStorage, CheckpointId,
};
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut dir = None;
    let mut rounds = 5usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => {
                rounds = args
                    .next()
                    .ok_or("--rounds needs a number")?
                    .parse()
                    .map_err(|e| format!("--rounds: {e}"))?;
                if rounds == 0 {
                    return Err("--rounds must be at least 1".into());
                }
            }
            _ if dir.is_none() => dir = Some(a),
            other => return Err(format!("unexpected argument {other:?}").into()),
        }
    }
    let dir = dir.ok_or("usage: restore_time DIR [--rounds N]")?;
    let storage = LocalDirStorage::open(&dir)?;
    let ids = storage.list()?;
    println!("{dir}: {} checkpoints", ids.len());
    let mut times = Vec::with_capacity(rounds);
    let mut restored = None;
    for _ in 0..rounds {
        let t = Instant::now();
        let r = load_restorable(&storage)?.ok_or("no checkpoint restores")?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        restored = Some(r.checkpoint);
    }
    let id = restored.expect("at least one round");
    let first = times[0];
    times.sort_by(f64::total_cmp);
    println!(
        "restored chk-{}: first round {first:.2} ms, median of {rounds} {:.2} ms",
        id.get(),
        times[rounds / 2]
    );
    let loaded = storage.load(id)?;
    let mut longest = 0;
    for (key, bytes) in &loaded.states {
        let chain = loaded.bases.get(key).map_or(0, Vec::len);
        let chain_bytes: usize = loaded
            .bases
            .get(key)
            .map_or(0, |c| c.iter().map(Vec::len).sum());
        longest = longest.max(chain + 1);
        println!(
            "  {}[{}]: {} parts, {} bytes (the newest {} bytes)",
            key.task,
            key.subtask,
            chain + 1,
            chain_bytes + bytes.len(),
            bytes.len()
        );
    }
    let oldest_base = ids.first().copied().unwrap_or(CheckpointId(0));
    println!(
        "longest chain: {longest} parts (oldest checkpoint kept: chk-{})",
        oldest_base.get()
    );
    Ok(())
}
