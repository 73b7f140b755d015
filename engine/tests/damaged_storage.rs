//! A part file of a completed checkpoint deleted, or a byte of one
//! flipped, while the job runs: after every later completed checkpoint the
//! folder still holds one that restores, in-process restarts and a final
//! restore in a new job give exact sums (nothing lost or applied twice).
//! (The storage's rules: `engine/src/checkpoint/retention.rs`.)

mod common;

use common::*;
use lockgate::*;
use lockgate::{
    storage::{load_restorable, CheckpointStorage, LocalDirStorage},
    testing::{FailurePlan, FailurePoint},
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Finals = Arc<Mutex<HashMap<u64, u64>>>;

const KEYS: u64 = 50_000;

/// Counts the publisher's retention passes (one per completed
/// checkpoint), so that the test looks at the folder once retention
/// applied: then nothing changes it until the next trigger.
#[derive(Default)]
struct Retained(AtomicUsize);

impl StorageHooks for Retained {
    fn after_remove_many(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// source(2) → keyed_sum(2) → max sink into `finals`; checkpoints on
/// demand only, keyed_sum's parts deltas that rewrite its key groups a
/// few at a time (every group within 10 to 20 parts); the sources emit
/// `per_poll` numbers a millisecond each.
fn sum_job(dir: &Path, n: u64, restore: bool, per_poll: usize, finals: &Finals) -> JobBuilder {
    let mut config = JobConfig::default();
    config.checkpoint = CheckpointConfig::exactly_once(Duration::from_secs(3600), Some(dir.into()));
    config.checkpoint.interval = None;
    config.checkpoint.full_every = 20;
    config.checkpoint.restore_mode = restore.into();
    config.restart.delay = Duration::ZERO;
    config.restart.max_attempts = 5;
    let job = JobBuilder::new("damaged", config);
    let f2 = finals.clone();
    job.source("numbers", 2, move |i| {
        Counter::paced(i.index, i.parallelism, n, per_poll, 1_000_000)
    })
    .key_by(|x| x % KEYS)
    .task("keyed_sum", 2)
    .process("keyed_sum", |_| keyed_sum(KEYS))
    .rebalance()
    .task("sink", 1)
    .sink("sink", move |_| MaxSink(f2.clone()));
    job
}

/// The newest checkpoint in `dir` that a newer one's part builds on (so
/// the publisher has read it back: it publishes and reads back one
/// checkpoint at a time).
fn newest_base(dir: &Path) -> Option<CheckpointId> {
    let storage = LocalDirStorage::open(dir).unwrap();
    let ids = storage.list().unwrap();
    ids.iter()
        .filter_map(|id| storage.part_bases(*id).ok())
        .flat_map(|links| links.into_iter().filter_map(|(_, l)| l.base))
        .max()
}

/// Where the first part of checkpoint `id` in `dir` lies: its file (the
/// checkpoint's, or its own in a folder of an earlier build) and its bytes.
fn a_part(dir: &Path, id: CheckpointId) -> (PathBuf, std::ops::Range<u64>) {
    let storage = LocalDirStorage::open(dir).unwrap();
    let mut keys: Vec<_> = storage
        .part_bases(id)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    keys.sort();
    let key = keys.first().expect("a checkpoint has parts");
    storage.part_location(id, key).unwrap()
}

/// The checkpoint of `dir` that a restore would take: the newest that
/// restores whole.
fn restorable(dir: &Path) -> Option<CheckpointId> {
    let storage = LocalDirStorage::open(dir).unwrap();
    load_restorable(&storage).unwrap().map(|r| r.checkpoint)
}

/// Triggers a checkpoint and waits for it, retrying while the job
/// restarts after an injected failure.
fn checkpoint(handle: &JobHandle) -> CheckpointId {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match handle.trigger_checkpoint() {
            Ok(id) => return id,
            Err(why) => assert!(Instant::now() < deadline, "no checkpoint completes: {why}"),
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `newest_restores`: every checkpoint that completes after the damage
/// restores itself (a deleted base is seen by the next snapshot, which
/// writes a full part), not only an older fallback.
fn damaged_mid_run(damage: fn(&Path, std::ops::Range<u64>), what: &str, newest_restores: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("chk");
    let n = 1_000_000;
    let finals: Finals = Arc::default();
    // 20 numbers a millisecond over 50,000 keys: few keys change between
    // two checkpoints, so keyed_sum's parts are deltas between full ones;
    // the run is far from its end when it stops.
    let job = sum_job(&dir, n, false, 10, &finals);
    let storage = Arc::new(Hooked {
        inner: LocalDirStorage::open(&dir).unwrap(),
        hooks: Retained::default(),
    });
    // keyed_sum[0] (task 2) fails once: an in-process restart.
    let job = job
        .with_storage(Box::new(storage.clone()))
        .with_failures(FailurePlan::none().with(2, FailurePoint::AfterRecords(1_000)));
    let handle = job.start().unwrap();
    let mut damaged = None;
    let mut completed = 0;
    for k in 1..=14 {
        let id = checkpoint(&handle);
        completed += 1;
        // Retention applied after it: the folder is as it stays until the
        // next trigger.
        assert!(wait_for(60, || storage.hooks.0.load(Ordering::SeqCst) >= completed));
        // The newest base of a delta, once older checkpoints exist
        // (whose chains a fallback can take).
        let before = damaged.is_some();
        if damaged.is_none() {
            if let Some(base) = newest_base(&dir).filter(|b| b.get() >= 6) {
                let (file, range) = a_part(&dir, base);
                damage(&file, range);
                damaged = Some(file);
            }
        }
        let restores = restorable(&dir);
        assert!(
            restores.is_some(),
            "{what}: nothing restores after checkpoint {id} (k = {k}, damaged: {damaged:?})"
        );
        if before && newest_restores {
            assert_eq!(
                restores,
                Some(id),
                "{what}: the newest checkpoint does not restore"
            );
        }
    }
    assert!(damaged.is_some(), "{what}: no base was damaged");
    // The injected failure strikes (if it did not yet): the restart reads
    // back the newest completed checkpoint, past damaged chains.
    assert!(
        wait_for(60, || handle.metrics().restarts >= 1),
        "{what}: the injected failure did not strike"
    );
    checkpoint(&handle);
    completed += 1;
    assert!(wait_for(60, || storage.hooks.0.load(Ordering::SeqCst) >= completed));
    assert!(
        restorable(&dir).is_some(),
        "{what}: nothing restores after the restart"
    );
    handle.stop();
    handle.wait().unwrap();
    // A new job restores the folder (falling back past damaged chains) and
    // runs the rest, fast: every sum exact.
    let m = sum_job(&dir, n, true, 100_000, &finals)
        .start()
        .unwrap()
        .wait()
        .unwrap();
    assert!(m.restored.is_some(), "{what}: the new job restored");
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, KEYS), "{what}");
}

#[test]
fn a_deleted_base_file_leaves_a_restorable_checkpoint() {
    // The whole checkpoint file: every subtask's base is gone.
    damaged_mid_run(
        |f, _| std::fs::remove_file(f).unwrap(),
        "a deleted checkpoint file",
        true,
    );
}

#[test]
fn a_flipped_byte_in_a_base_leaves_a_restorable_checkpoint() {
    damaged_mid_run(
        |f, part| {
            let mut bytes = std::fs::read(f).unwrap();
            let i = (part.end - 1) as usize;
            bytes[i] ^= 0x40;
            std::fs::write(f, bytes).unwrap();
        },
        "a flipped byte",
        false,
    );
}
