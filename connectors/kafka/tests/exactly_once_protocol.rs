//! The exactly-once sink's protocol against the fake log: a proptest state
//! machine that runs a job's sink through checkpoints, crashes it at every
//! step (before and after each Kafka operation, and checkpoints that never
//! complete), restores it from the last completed checkpoint, lets the
//! crashed instance go on as a zombie, and checks that a `read_committed`
//! reader sees every record exactly once, in order.

use lockgate::{CheckpointId, Checkpointed, Sink, TwoPhaseCommitSink};
use lockgate_kafka::{
    Crash, FakeCluster, FakeProducer, LogFactory, OutputRecord, SinkRecord, WriteAheadOutput,
};
use proptest::prelude::*;
use std::sync::Arc;

type TestSink = TwoPhaseCommitSink<SinkRecord, WriteAheadOutput<FakeProducer>>;

fn sink_of(cluster: &FakeCluster) -> TestSink {
    let c = cluster.clone();
    let logs: LogFactory<FakeProducer> = Arc::new(move |j| Ok(c.producer(&format!("job-{j}"))));
    TwoPhaseCommitSink::new(WriteAheadOutput::new(logs, 0))
}

fn record(n: u64) -> SinkRecord {
    SinkRecord {
        partition: (n % 3) as u32,
        record: OutputRecord {
            key: n % 5,
            sum: 2 * n + 1,
            n,
        },
        ts_ns: n,
    }
}

/// The last completed checkpoint: its id, the sink's state in it, and the
/// first interval after it.
struct Completed {
    id: u64,
    state: Vec<u8>,
    next_interval: usize,
}

/// What the test driver plays: the job's intervals, checkpoints that
/// never complete, and whether crashed instances live on as zombies.
#[derive(Clone, Debug)]
struct Plan {
    intervals: Vec<Vec<u64>>,
    crashes: Vec<Crash>,
    lost_checkpoints: Vec<u64>,
    zombies: bool,
}

fn plans() -> impl Strategy<Value = Plan> {
    (
        prop::collection::vec(0usize..4, 1..6),
        prop::collection::vec((0u64..60, any::<bool>()), 0..5),
        prop::collection::vec(1u64..12, 0..3),
        any::<bool>(),
    )
        .prop_map(|(sizes, crashes, lost, zombies)| {
            let mut n = 0;
            let intervals = sizes
                .into_iter()
                .map(|k| {
                    let v: Vec<u64> = (n..n + k as u64).collect();
                    n += k as u64;
                    v
                })
                .collect();
            Plan {
                intervals,
                crashes: crashes
                    .into_iter()
                    .map(|(at, after)| Crash { at, after })
                    .collect(),
                lost_checkpoints: lost,
                zombies,
            }
        })
}

/// One attempt of the job: restore, then every interval after it with its
/// checkpoint; an error is a crash (the job then restarts).
fn attempt(
    sink: &mut TestSink,
    plan: &Plan,
    completed: &mut Option<Completed>,
    next_id: &mut u64,
    zombie: &mut Option<TestSink>,
) -> Result<(), lockgate::BoxError> {
    let from = match completed {
        Some(c) => {
            sink.restore_state(&c.state)?;
            c.next_interval
        }
        None => 0,
    };
    for (i, interval) in plan.intervals.iter().enumerate().skip(from) {
        sink.write(&mut interval.iter().map(|&n| record(n)).collect())?;
        if let Some(mut z) = zombie.take() {
            // The crashed instance tries to finish what it had: it was
            // fenced by this one's start, or has nothing left.
            let _ = z.notify_checkpoint_complete(CheckpointId(u64::MAX));
        }
        let id = *next_id;
        *next_id += 1;
        let state = sink
            .snapshot_state(CheckpointId(id))?
            .expect("the sink has state");
        if plan.lost_checkpoints.contains(&id) {
            return Err("the checkpoint did not complete (another task failed)".into());
        }
        *completed = Some(Completed {
            id,
            state,
            next_interval: i + 1,
        });
        sink.notify_checkpoint_complete(CheckpointId(id))?;
    }
    sink.end_of_input()?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_completed_record_is_read_once_in_order(plan in plans()) {
        let cluster = FakeCluster::new();
        for c in &plan.crashes {
            cluster.crash(*c);
        }
        let mut completed: Option<Completed> = None;
        let mut next_id = 1;
        let mut zombie = None;
        let mut attempts = 0;
        loop {
            attempts += 1;
            prop_assert!(attempts < 30, "the job never finished");
            let mut sink = sink_of(&cluster);
            match attempt(&mut sink, &plan, &mut completed, &mut next_id, &mut zombie) {
                Ok(()) => break,
                Err(_) if plan.zombies => zombie = Some(sink),
                Err(_) => {}
            }
        }
        if let Some(mut z) = zombie.take() {
            let _ = z.notify_checkpoint_complete(CheckpointId(u64::MAX));
        }
        let want: Vec<SinkRecord> = plan.intervals.iter().flatten().map(|&n| record(n)).collect();
        let got = cluster.committed();
        prop_assert_eq!(got, want, "completed ids up to {:?}", completed.map(|c| c.id));
    }
}

/// The failure the marker exists for: the commit reached Kafka but the
/// sink crashed before it heard so; the restore must not write it again.
#[test]
fn a_commit_that_landed_before_the_crash_is_not_written_twice() {
    let cluster = FakeCluster::new();
    let mut sink = sink_of(&cluster);
    sink.write(&mut vec![record(0), record(1)]).unwrap();
    let state = sink.snapshot_state(CheckpointId(1)).unwrap().unwrap();
    // Operations so far: init. Then begin, 2 sends, commit: crash after it.
    let ops = cluster.operations();
    cluster.crash(Crash {
        at: ops + 3,
        after: true,
    });
    assert!(sink.notify_checkpoint_complete(CheckpointId(1)).is_err());
    assert_eq!(cluster.committed().len(), 2);
    let mut restored = sink_of(&cluster);
    restored.restore_state(&state).unwrap();
    assert_eq!(cluster.committed(), [record(0), record(1)]);
}

/// Without a marker the same restore writes the pending output: a commit
/// that crashed before reaching Kafka is not lost.
#[test]
fn a_commit_that_crashed_before_landing_is_written_on_restore() {
    let cluster = FakeCluster::new();
    let mut sink = sink_of(&cluster);
    sink.write(&mut vec![record(0)]).unwrap();
    let state = sink.snapshot_state(CheckpointId(1)).unwrap().unwrap();
    let ops = cluster.operations();
    cluster.crash(Crash {
        at: ops + 2,
        after: false,
    });
    assert!(sink.notify_checkpoint_complete(CheckpointId(1)).is_err());
    assert!(cluster.committed().is_empty());
    let mut restored = sink_of(&cluster);
    restored.restore_state(&state).unwrap();
    assert_eq!(cluster.committed(), [record(0)]);
}

/// A fresh run ignores the marker an earlier run left on the same ids.
#[test]
fn a_fresh_run_is_not_mistaken_for_an_earlier_one() {
    let cluster = FakeCluster::new();
    for _ in 0..2 {
        let mut sink = sink_of(&cluster);
        sink.write(&mut vec![record(7)]).unwrap();
        sink.snapshot_state(CheckpointId(1)).unwrap();
        sink.notify_checkpoint_complete(CheckpointId(1)).unwrap();
    }
    assert_eq!(cluster.committed(), [record(7), record(7)]);
}

/// A rescaled restore (across processes: other transactional ids) finishes
/// the old subtasks' pending transactions once each, through their own
/// ids (fencing their zombies), and the new subtask's own output goes on
/// under its own id.
#[test]
fn a_rescaled_restore_finishes_old_transactions_through_their_ids() {
    let cluster = FakeCluster::new();
    let old_sink = |j: usize| {
        let c = cluster.clone();
        let logs: LogFactory<FakeProducer> = Arc::new(move |k| Ok(c.producer(&format!("old-{k}"))));
        TwoPhaseCommitSink::new(WriteAheadOutput::new(logs, j))
    };
    // Old subtask 0 committed checkpoint 1 and crashed before hearing so;
    // old subtask 1 never heard of its completion.
    let (mut a, mut b) = (old_sink(0), old_sink(1));
    a.write(&mut vec![record(0)]).unwrap();
    b.write(&mut vec![record(1)]).unwrap();
    let sa = a.snapshot_state(CheckpointId(1)).unwrap().unwrap();
    let sb = b.snapshot_state(CheckpointId(1)).unwrap().unwrap();
    a.notify_checkpoint_complete(CheckpointId(1)).unwrap();
    assert_eq!(cluster.committed(), [record(0)]);
    // The new job: one subtask takes over both, with its own ids.
    let c = cluster.clone();
    let own: LogFactory<FakeProducer> = Arc::new(move |k| Ok(c.producer(&format!("new-{k}"))));
    let c = cluster.clone();
    let adopted: LogFactory<FakeProducer> = Arc::new(move |k| Ok(c.producer(&format!("old-{k}"))));
    let mut new: TestSink =
        TwoPhaseCommitSink::new(WriteAheadOutput::new(own, 0).with_adopted_logs(adopted));
    let rescale = lockgate::keys::Rescale {
        subtask: 0,
        parallelism: 1,
        old_parallelism: 2,
        max_parallelism: 128,
    };
    new.restore_rescaled(&[vec![&sa[..]], vec![&sb[..]]], &rescale)
        .unwrap();
    assert_eq!(cluster.committed(), [record(0), record(1)]);
    // The zombie of old subtask 1 is fenced: its commit does not land.
    assert!(b.notify_checkpoint_complete(CheckpointId(1)).is_err());
    new.write(&mut vec![record(2)]).unwrap();
    new.snapshot_state(CheckpointId(5)).unwrap();
    new.notify_checkpoint_complete(CheckpointId(5)).unwrap();
    assert_eq!(cluster.committed(), [record(0), record(1), record(2)]);
}

/// The sink of `sink_of`, with `WriteAheadOutput::allow_missing_marker`.
fn sink_allowing_missing_marker(cluster: &FakeCluster) -> TestSink {
    let c = cluster.clone();
    let logs: LogFactory<FakeProducer> = Arc::new(move |j| Ok(c.producer(&format!("job-{j}"))));
    TwoPhaseCommitSink::new(WriteAheadOutput::new(logs, 0).allow_missing_marker(true))
}

/// Checkpoint 1 completes and commits; checkpoint 2's commit lands, and
/// the sink crashes before it hears so. Returns checkpoint 2's state.
fn second_commit_landed_then_crash(cluster: &FakeCluster) -> Vec<u8> {
    let mut sink = sink_of(cluster);
    sink.write(&mut vec![record(0)]).unwrap();
    sink.snapshot_state(CheckpointId(1)).unwrap();
    sink.notify_checkpoint_complete(CheckpointId(1)).unwrap();
    sink.write(&mut vec![record(1), record(2)]).unwrap();
    let state = sink.snapshot_state(CheckpointId(2)).unwrap().unwrap();
    // Then: begin, 2 sends, commit; crash after the commit took effect.
    let ops = cluster.operations();
    cluster.crash(Crash {
        at: ops + 3,
        after: true,
    });
    assert!(sink.notify_checkpoint_complete(CheckpointId(2)).is_err());
    assert_eq!(cluster.committed(), [record(0), record(1), record(2)]);
    state
}

/// A marker whose offset is there but whose metadata (the run) is absent
/// or unreadable is an error naming the group and partition, fatal (no
/// restart reads it better), and nothing is written again: taken for "no
/// marker", the restore wrote checkpoint 2's output a second time.
#[test]
fn an_unreadable_marker_is_an_error_naming_its_group_and_partition() {
    for metadata in ["", "not-a-run"] {
        let cluster = FakeCluster::new();
        let state = second_commit_landed_then_crash(&cluster);
        cluster.set_marker_metadata("job-0", metadata);
        let mut restored = sink_of(&cluster);
        let e = restored.restore_state(&state).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("group `job-0-marker`, partition 0 of `output`")
                && text.contains("has a committed offset (2)"),
            "{text}"
        );
        assert!(
            e.downcast_ref::<lockgate::error::FatalError>().is_some(),
            "{e:?}"
        );
        assert_eq!(cluster.committed(), [record(0), record(1), record(2)]);
    }
}

/// A marker group whose offset expired (or another cluster) after a
/// marker had been committed: the restore of a checkpoint with pending
/// transactions is refused, naming the cause and the override, instead of
/// writing checkpoint 2's output a second time; with the override it is
/// written again (the duplicates the refusal warns of).
#[test]
fn a_restore_whose_marker_expired_is_refused_unless_allowed() {
    let cluster = FakeCluster::new();
    let state = second_commit_landed_then_crash(&cluster);
    cluster.expire_marker("job-0");
    let mut restored = sink_of(&cluster);
    let e = restored.restore_state(&state).unwrap_err();
    let text = e.to_string();
    for part in [
        "group `job-0-marker`, partition 0 of `output`",
        "has no committed offset",
        "offsets.retention.minutes",
        "another cluster",
        "--allow-missing-marker",
        "checkpoints 2 to 2",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    assert!(
        e.downcast_ref::<lockgate::error::FatalError>().is_some(),
        "{e:?}"
    );
    assert_eq!(cluster.committed(), [record(0), record(1), record(2)]);
    let mut allowed = sink_allowing_missing_marker(&cluster);
    allowed.restore_state(&state).unwrap();
    assert_eq!(
        cluster.committed(),
        [record(0), record(1), record(2), record(1), record(2)]
    );
}

/// The same refusal for a rescaled restore, which finishes an old
/// subtask's pending transactions through its transactional id.
#[test]
fn a_rescaled_restore_whose_marker_expired_is_refused() {
    let cluster = FakeCluster::new();
    let state = second_commit_landed_then_crash(&cluster);
    cluster.expire_marker("job-0");
    let c = cluster.clone();
    let own: LogFactory<FakeProducer> = Arc::new(move |k| Ok(c.producer(&format!("new-{k}"))));
    let c = cluster.clone();
    let adopted: LogFactory<FakeProducer> = Arc::new(move |k| Ok(c.producer(&format!("job-{k}"))));
    let mut new: TestSink =
        TwoPhaseCommitSink::new(WriteAheadOutput::new(own, 0).with_adopted_logs(adopted));
    let rescale = lockgate::keys::Rescale {
        subtask: 0,
        parallelism: 1,
        old_parallelism: 2,
        max_parallelism: 128,
    };
    let e = new
        .restore_rescaled(&[vec![&state[..]], vec![]], &rescale)
        .unwrap_err();
    assert!(e.to_string().contains("group `job-0-marker`"), "{e}");
    assert_eq!(cluster.committed(), [record(0), record(1), record(2)]);
}
