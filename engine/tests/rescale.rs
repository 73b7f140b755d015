//! Restoring a checkpoint at another parallelism: keyed state moves by key
//! group, a source's splits move with their positions, and nothing is lost
//! or applied twice across rescales and failures.

mod common;

use common::{wait_for, MaxSink};
use lockgate::storage::CheckpointStorage;
use lockgate::*;
use lockgate::{
    keys::Rescale,
    state::UnionListState,
    storage::{LocalDirStorage, TaskStateKey},
    testing::{FailurePlan, FailurePoint},
    tuning::now_ns,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The number of splits of [`SplitSource`]: split `s` holds the numbers
/// `x` with `x % SPLITS == s`.
const SPLITS: u16 = 8;
const KEYS: u64 = 10_000;

/// Emits the numbers below `end` of the splits it owns (`s % p == i`),
/// a few a poll; its state is a (split, next number) pair per split, as
/// union list state, so every subtask sees all splits on a rescale and
/// keeps its own.
struct SplitSource {
    index: usize,
    parallelism: usize,
    end: u64,
    per_poll: usize,
    splits: Vec<(u16, u64)>,
}

impl SplitSource {
    fn new(index: usize, parallelism: usize, end: u64, per_poll: usize) -> Self {
        let splits = (0..SPLITS)
            .filter(|s| usize::from(*s) % parallelism == index)
            .map(|s| (s, u64::from(s)))
            .collect();
        SplitSource {
            index,
            parallelism,
            end,
            per_poll,
            splits,
        }
    }
}

impl Source<u64> for SplitSource {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourcePoll, BoxError> {
        let max = max.min(self.per_poll);
        'fill: while out.len() < max {
            let mut any = false;
            for (_, next) in &mut self.splits {
                if *next < self.end {
                    out.push(*next);
                    *next += u64::from(SPLITS);
                    any = true;
                    if out.len() >= max {
                        break 'fill;
                    }
                }
            }
            if !any {
                break;
            }
        }
        Ok(if self.splits.iter().all(|(_, n)| *n >= self.end) {
            SourcePoll::Finished
        } else {
            SourcePoll::Idle {
                wake_at_ns: Some(now_ns() + 100_000),
            }
        })
    }
}

impl Checkpointed for SplitSource {
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(UnionListState(self.splits.clone()).snapshot()?))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.splits = UnionListState::restore(state)?.0;
        Ok(())
    }

    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        assert_eq!(
            (rescale.subtask, rescale.parallelism),
            (self.index, self.parallelism)
        );
        let all = UnionListState::<(u16, u64)>::restore_rescaled(chains, rescale)?.0;
        assert_eq!(all.len(), usize::from(SPLITS), "every split once: {all:?}");
        self.splits = all
            .into_iter()
            .filter(|(s, _)| usize::from(*s) % self.parallelism == self.index)
            .collect();
        Ok(())
    }
}

/// `keyed_sum` in managed keyed state: no snapshot or restore code, so
/// its rescale is the runtime's.
struct Sum;

impl StatefulOperator<u64, (u64, u64)> for Sum {
    type State = KeyedState<u64, u64>;
    fn process(
        &mut self,
        sums: &mut Self::State,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, (u64, u64)>,
    ) -> Result<(), BoxError> {
        for x in input.drain(..) {
            let s = sums.get_or_default(x % KEYS);
            *s += x;
            ctx.emit((x % KEYS, *s));
        }
        Ok(())
    }
}

fn config(dir: &std::path::Path, restore: bool) -> JobConfig {
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(2));
    config.checkpoint.dir = Some(dir.to_path_buf());
    config.checkpoint.restore_mode = restore.into();
    config.restart = RestartStrategy {
        max_attempts: 3,
        delay: Duration::ZERO,
    };
    config
}

fn job(
    config: JobConfig,
    parallelism: usize,
    end: u64,
    per_poll: usize,
    sums: Arc<Mutex<HashMap<u64, u64>>>,
) -> JobBuilder {
    let job = JobBuilder::new("rescale", config);
    job.source("numbers", parallelism, move |i| {
        SplitSource::new(i.index, i.parallelism, end, per_poll)
    })
    .key_by(|x| x % KEYS)
    .task("keyed_sum", parallelism)
    .process("keyed_sum", |_| {
        Managed::<Sum, KeyedState<u64, u64>>::new(Sum)
    })
    .rebalance()
    .task("sink", 1)
    .sink("sink", move |_| MaxSink(sums.clone()));
    job
}

#[test]
fn keyed_state_and_source_splits_follow_their_keys_across_rescales() {
    let dir = tempfile::tempdir().unwrap();
    let end = 2_000_000;
    let sums = Arc::new(Mutex::new(HashMap::new()));
    // Parallelism 2, slow sources (8 records a poll: a few hundred of the
    // 10,000 keys change between two checkpoints, so checkpoints are
    // deltas), stopped once some were.
    let h = job(config(dir.path(), false), 2, end, 8, sums.clone())
        .start()
        .unwrap();
    assert!(wait_for(60, || {
        let m = h.metrics();
        m.completed_checkpoints() >= 5 && m.checkpoints.iter().any(|c| c.incremental)
    }));
    h.stop();
    h.wait().unwrap();
    // Parallelism 3, with a failure of a keyed_sum subtask after the
    // rescale (it restarts from the rescaled checkpoint, or a newer one).
    let h = job(config(dir.path(), true), 3, end, 256, sums.clone())
        .with_failures(FailurePlan::none().with(4, FailurePoint::AfterRecords(5_000)))
        .start()
        .unwrap();
    // Stopped once the failure struck and checkpoints completed (a
    // condition, not a time).
    assert!(wait_for(60, || {
        let m = h.metrics();
        m.restarts >= 1 && m.completed_checkpoints() >= 3
    }));
    h.stop();
    let m = h.wait().unwrap();
    assert_eq!(m.restarts, 1, "the planned failure struck once");
    let restored = m.restored.expect("restored at start");
    assert_eq!(
        restored.rescaled,
        [
            ("numbers".to_string(), 2, 3),
            ("keyed_sum".to_string(), 2, 3)
        ]
    );
    // Parallelism 1, to the end.
    let h = job(config(dir.path(), true), 1, end, 256, sums.clone())
        .start()
        .unwrap();
    h.wait().unwrap();
    let got = sums.lock().unwrap().clone();
    let mut want: HashMap<u64, u64> = HashMap::new();
    for x in 0..end {
        *want.entry(x % KEYS).or_default() += x;
    }
    let wrong: Vec<_> = want
        .iter()
        .filter(|(k, s)| got.get(k) != Some(s))
        .take(5)
        .collect();
    assert!(wrong.is_empty(), "keys with a wrong final sum: {wrong:?}");
}

#[test]
fn an_operator_without_a_redistribution_rule_fails_the_restore_by_name() {
    /// Keeps a count in plain operator state, with no rescale rule.
    struct Plain(u64);
    impl Operator<u64, (u64, u64)> for Plain {
        fn process(
            &mut self,
            input: &mut Vec<u64>,
            ctx: &mut Context<'_, (u64, u64)>,
        ) -> Result<(), BoxError> {
            for x in input.drain(..) {
                self.0 += 1;
                ctx.emit((x % KEYS, self.0));
            }
            Ok(())
        }
    }
    impl Checkpointed for Plain {
        fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
            Ok(Some(self.0.to_le_bytes().to_vec()))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let make = |restore: bool, p: usize| {
        let job = JobBuilder::new("plain", config(dir.path(), restore));
        job.source("numbers", p, move |i| {
            SplitSource::new(i.index, i.parallelism, u64::MAX, 64)
        })
        .key_by(|x| x % KEYS)
        .task("count", p)
        .process("count", |_| Plain(0))
        .rebalance()
        .task("sink", 1)
        .sink("sink", |_| MaxSink(Arc::default()));
        job
    };
    let h = make(false, 2).start().unwrap();
    assert!(wait_for(30, || h.metrics().completed_checkpoints() >= 1));
    h.stop();
    h.wait().unwrap();
    let err = make(true, 3)
        .start()
        .unwrap()
        .wait()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("count") && err.contains("redistribute"),
        "{err}"
    );
    // The same parallelism still restores.
    let h = make(true, 2).start().unwrap();
    assert!(wait_for(30, || h.metrics().completed_checkpoints() >= 1));
    h.stop();
    h.wait().unwrap();
}

#[test]
fn a_parallelism_above_max_parallelism_and_a_changed_max_parallelism_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), false);
    c.max_parallelism = 2;
    let err = job(c, 3, 10, 64, Arc::default())
        .start()
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_parallelism of 2"), "{err}");
    let h = job(config(dir.path(), false), 2, 100_000, 256, Arc::default())
        .start()
        .unwrap();
    h.wait().unwrap();
    let mut c = config(dir.path(), true);
    c.max_parallelism = 64;
    let err = job(c, 2, 100_000, 256, Arc::default())
        .start()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_parallelism 128") && err.contains("64 now"),
        "{err}"
    );
}

#[test]
fn state_beyond_a_checkpoints_recorded_parallelism_makes_it_unusable() {
    // An edited _metadata that records fewer keyed_sum subtasks than it
    // has state files would drop their keys in silence: such a checkpoint
    // is skipped like a corrupt one, naming why, and the older one used.
    let dir = tempfile::tempdir().unwrap();
    let end = 200_000;
    let sums = Arc::new(Mutex::new(HashMap::new()));
    let h = job(config(dir.path(), false), 2, end, 8, sums.clone())
        .start()
        .unwrap();
    assert!(wait_for(60, || h.metrics().completed_checkpoints() >= 1));
    h.stop_with_savepoint();
    h.wait().unwrap();
    let store = LocalDirStorage::open(dir.path()).unwrap();
    let newest = *store.list().unwrap().last().unwrap();
    let loaded = store.load(newest).unwrap();
    let mut meta = loaded.metadata.clone();
    meta.id = newest.next();
    meta.job.parallelism.insert("keyed_sum".into(), 1);
    let states: Vec<(TaskStateKey, Vec<u8>)> = loaded.states.into_iter().collect();
    store.write_checkpoint(&meta, &states).unwrap();
    drop(store);
    let m = job(config(dir.path(), true), 3, end, 256, sums.clone())
        .start()
        .unwrap()
        .wait()
        .unwrap();
    let skipped = &m.restore_skipped;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].reason.contains("keyed_sum[1]") && skipped[0].reason.contains("parallelism 1"),
        "{skipped:?}"
    );
    let got = sums.lock().unwrap().clone();
    let mut want: HashMap<u64, u64> = HashMap::new();
    for x in 0..end {
        *want.entry(x % KEYS).or_default() += x;
    }
    assert_eq!(got, want);
}
