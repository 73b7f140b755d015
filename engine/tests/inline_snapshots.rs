//! With a thread per task, where a task's checkpoint work (the
//! asynchronous phase) runs: on a snapshot thread while the machine has a
//! core to spare for one, else on the task's own thread, right after the
//! synchronous part. Its own test binary: it counts the process's
//! threads by name.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use lockgate::*;
use std::sync::Arc;
use std::time::Duration;

/// Threads of this process named `lg-snap-*`.
fn snapshot_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("lg-snap-"))
        .count()
}

/// Runs `numbers` (parallelism `p`) into a sink, as one task each
/// (`split`) or chained into `p` tasks, checkpointing to a folder every
/// 5 ms until 20 checkpoints completed; returns the most snapshot threads
/// seen meanwhile.
fn run(p: usize, split: bool) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.checkpoint.dir = Some(dir.path().to_path_buf());
    let job = JobBuilder::new("inline", config);
    let numbers = job
        .source("numbers", p, |i| {
            Counter::paced(i.index, i.parallelism, u64::MAX, 10, 1_000_000)
        })
        .map(|x: u64| (x % 10, x));
    let numbers = if split {
        numbers.rebalance().task("sink", p)
    } else {
        numbers
    };
    numbers.sink("sink", |_| MaxSink(Arc::default()));
    let h = job.start().unwrap();
    let mut most = 0;
    assert!(
        wait_for(60, || {
            most = most.max(snapshot_threads());
            h.checkpoint_counts().completed >= 20
        }),
        "{} checkpoints completed",
        h.checkpoint_counts().completed
    );
    h.stop();
    h.wait().unwrap();
    most
}

#[test]
fn task_threads_run_their_checkpoint_work_when_no_core_is_spare() {
    let cores = std::thread::available_parallelism().unwrap().get();
    // One task: a core is spare on a machine of two or more.
    let one = run(1, false);
    if cores > 1 {
        assert_eq!(one, 1, "one task on {cores} cores: its snapshot thread");
    } else {
        assert_eq!(one, 0, "one task on one core: no snapshot thread");
    }
    // Twice as many tasks as cores: none is spare, and the checkpoints
    // still complete without a snapshot thread.
    assert_eq!(run(cores, true), 0, "{} tasks on {cores} cores", 2 * cores);
}
