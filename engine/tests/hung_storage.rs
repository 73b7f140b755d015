//! Checkpoint storage that hangs (a frozen file system): each checkpoint
//! timeout is reported as it happens, the job fails and ends without
//! waiting for the storage, and the calls still waiting are named.

mod common;

use common::*;
use lockgate::*;
use lockgate::{
    barrier::AbortReason,
    stats::CheckpointStatus,
    storage::{storage_calls_in_progress, MemoryStorage, StorageError, TaskStateKey},
};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Part writes and discards wait while it is closed, as on a frozen
/// file system.
#[derive(Default)]
struct Hanging {
    closed: Mutex<bool>,
    opened: Condvar,
}

impl Hanging {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    fn wait_open(&self) {
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
    }
}

impl StorageHooks for Hanging {
    fn before_write(&self, _id: CheckpointId, _key: &TaskStateKey) -> Result<(), StorageError> {
        self.wait_open();
        Ok(())
    }
    fn before_discard(&self, _id: CheckpointId) {
        self.wait_open();
    }
}

#[test]
fn a_hanging_storage_times_checkpoints_out_and_fails_the_job_without_waiting_for_it() {
    let storage = Arc::new(Hooked {
        inner: MemoryStorage::new(),
        hooks: Hanging::default(),
    });
    let mut config = JobConfig::default();
    config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(20), None);
    config.checkpoint.timeout = Duration::from_millis(300);
    config.checkpoint.tolerable_failures = 2;
    let job = JobBuilder::new("hanging", config).with_storage(Box::new(storage.clone()));
    let finals: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let f2 = finals.clone();
    // Far more numbers than the test takes: it never ends by itself.
    job.source("numbers", 2, |i| {
        Counter::paced(i.index, i.parallelism, u64::MAX / 4, 20, 1_000_000)
    })
    .key_by(|x| x % 100)
    .task("keyed_sum", 2)
    .process("keyed_sum", |_| keyed_sum(100))
    .rebalance()
    .task("sink", 1)
    .sink("sink", move |_| MaxSink(f2.clone()));
    let events = job.checkpoint_events();
    let handle = job.start().unwrap();
    // A checkpoint completes, then the storage hangs.
    loop {
        let e = events.recv().expect("the job runs");
        if e.is_completed() {
            break;
        }
    }
    storage.hooks.set_closed(true);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(handle.wait());
    });
    // Each timeout is reported as it happens (an aborted checkpoint's
    // statistics, as the log's warning), while the storage still hangs.
    let mut timeouts = 0;
    while timeouts < 3 {
        let e = events
            .recv_timeout(Duration::from_secs(30))
            .expect("a checkpoint ends while the storage hangs");
        match e.status {
            CheckpointStatus::Aborted(AbortReason::Timeout) => timeouts += 1,
            // Written whole before the storage closed: it may still
            // complete, before any times out.
            CheckpointStatus::Completed if timeouts == 0 => {}
            other => panic!("checkpoint {} ended {other:?} with the storage hung", e.id),
        }
    }
    // The job fails on its third timeout in a row, and its end does not
    // wait for the storage: it comes while the storage still hangs.
    let result = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the job ended while its storage hangs");
    match result {
        Err(JobError::Checkpoint(why)) => assert!(why.contains("timeout"), "{why}"),
        other => panic!("expected a checkpointing failure, got {other:?}"),
    }
    // What is still waiting is named: a snapshot thread's part write.
    let calls = storage_calls_in_progress();
    assert!(
        calls.iter().any(|c| c.thread.starts_with("lg-snap")
            && c.what.contains("writing the part of")
            && c.what.contains("chk-")),
        "{calls:?}"
    );
    // Thawed, the calls finish and the list empties.
    storage.hooks.set_closed(false);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !storage_calls_in_progress().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            storage_calls_in_progress()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
