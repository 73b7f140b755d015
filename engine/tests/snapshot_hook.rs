//! The after-snapshot hook (`set_after_snapshot_hook`) gets the bytes of
//! encoding buffers a snapshot thread freed: 0 while its buffers are kept
//! for the next checkpoints, the buffer's size once an encoding is too
//! large to keep (8 MiB). Its own test binary: the hook is set once per
//! process.

mod common;

use common::*;
use lockgate::*;
use lockgate::{
    state::StateSnapshot,
    tuning::{set_after_snapshot_hook, snapshot_buffer},
};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

static CALLS: AtomicU64 = AtomicU64::new(0);
static MAX_FREED: AtomicU64 = AtomicU64::new(0);

fn record(freed: u64) {
    CALLS.fetch_add(1, Relaxed);
    MAX_FREED.fetch_max(freed, Relaxed);
}

/// Passes numbers on as `(x % 10, x)`; its snapshot is `bytes` bytes.
struct Ballast {
    bytes: usize,
}

impl Operator<u64, (u64, u64)> for Ballast {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, (u64, u64)>,
    ) -> Result<(), BoxError> {
        for x in input.drain(..) {
            ctx.emit((x % 10, x));
        }
        Ok(())
    }
}

impl Checkpointed for Ballast {
    fn snapshot_state_async(
        &mut self,
        _id: CheckpointId,
    ) -> Result<Option<StateSnapshot>, BoxError> {
        let n = self.bytes;
        Ok(Some(StateSnapshot::deferred(move || {
            let mut b = snapshot_buffer(n);
            b.resize(n, 7);
            Ok(b)
        })))
    }

    fn restore_state(&mut self, _: &[u8]) -> Result<(), BoxError> {
        Ok(())
    }
}

/// Runs source → ballast → sink with a `bytes`-byte state until `n`
/// hook calls more have happened, checkpointing to a folder every 5 ms.
fn run(bytes: usize, calls: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.checkpoint.dir = Some(dir.path().to_path_buf());
    let job = JobBuilder::new("ballast", config);
    job.source("numbers", 1, |i| {
        Counter::paced(i.index, i.parallelism, u64::MAX, 10, 1_000_000)
    })
    .process("ballast", move |_| Ballast { bytes })
    .sink("sink", |_| MaxSink(Arc::default()));
    let before = CALLS.load(Relaxed);
    let h = job.start().unwrap();
    assert!(
        wait_for(30, || CALLS.load(Relaxed) >= before + calls),
        "{} snapshot jobs, want {calls}",
        CALLS.load(Relaxed) - before
    );
    h.stop_with_savepoint();
    h.wait().unwrap();
}

#[test]
fn the_hook_gets_the_bytes_freed_not_those_kept() {
    assert!(set_after_snapshot_hook(record));
    // 1 MiB a checkpoint: the buffer is kept from job to job and never
    // freed (a collection after each job would make every page fault
    // again); only the source's few bytes a checkpoint are.
    run(1 << 20, 10);
    let freed = MAX_FREED.load(Relaxed);
    assert!(freed < 1 << 10, "a kept buffer is not freed: {freed} bytes");
    // 9 MiB: above what a snapshot thread keeps; each job frees it.
    run(9 << 20, 3);
    assert!(
        MAX_FREED.load(Relaxed) >= 9 << 20,
        "freed {} bytes",
        MAX_FREED.load(Relaxed)
    );
}
