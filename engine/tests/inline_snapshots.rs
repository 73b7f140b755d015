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

/// When each `write` ran, and when each checkpoint's asynchronous part
/// began and ended, ns (`now_ns`), with the thread's name.
#[derive(Default)]
struct Seen {
    writes: Vec<(String, u64)>,
    parts: Vec<(String, u64, u64)>,
}

/// A sink whose asynchronous part takes ~5 ms in five pieces, a yield
/// point after each.
struct SlowPartSink(Arc<std::sync::Mutex<Seen>>);

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

impl Sink<(u64, u64)> for SlowPartSink {
    fn write(&mut self, input: &mut Vec<(u64, u64)>) -> Result<(), BoxError> {
        input.clear();
        let now = lockgate::tuning::now_ns();
        self.0.lock().unwrap().writes.push((thread_name(), now));
        Ok(())
    }
}

impl Checkpointed for SlowPartSink {
    fn snapshot_state_async(
        &mut self,
        _id: CheckpointId,
    ) -> Result<Option<lockgate::state::StateSnapshot>, BoxError> {
        let seen = self.0.clone();
        Ok(Some(lockgate::state::StateSnapshot::deferred(move || {
            let began = lockgate::tuning::now_ns();
            for _ in 0..5 {
                std::thread::sleep(Duration::from_millis(1));
                lockgate::tuning::yield_point();
            }
            let ended = lockgate::tuning::now_ns();
            seen.lock().unwrap().parts.push((thread_name(), began, ended));
            Ok(Vec::new())
        })))
    }
}

#[test]
fn a_task_thread_takes_records_between_the_slices_of_its_checkpoint_work() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(20));
    config.checkpoint.dir = Some(dir.path().to_path_buf());
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let job = JobBuilder::new("slices", config);
    // Twice as many tasks as cores: the task threads run their own
    // checkpoint work (above).
    let sink = seen.clone();
    job.source("numbers", cores, |i| {
        Counter::paced(i.index, i.parallelism, u64::MAX, 10, 200_000)
    })
    .map(|x: u64| (x % 10, x))
    .rebalance()
    .task("sink", cores)
    .sink("sink", move |_| SlowPartSink(sink.clone()));
    let h = job.start().unwrap();
    // A part during which its own thread wrote records: the work was not
    // run whole.
    let interleaved = |s: &Seen| {
        s.parts.iter().any(|(t, began, ended)| {
            s.writes
                .iter()
                .any(|(w, at)| w == t && began < at && at < ended)
        })
    };
    let ok = wait_for(60, || {
        let s = seen.lock().unwrap();
        s.parts.len() >= 5 && interleaved(&s)
    });
    h.stop();
    h.wait().unwrap();
    let s = seen.lock().unwrap();
    assert!(
        s.parts.iter().all(|(t, _, _)| t.contains("sink")),
        "the asynchronous parts ran on the sink's threads: {:?}",
        s.parts.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    assert!(
        ok,
        "{} asynchronous parts, none with a record written by its thread meanwhile",
        s.parts.len()
    );
}
