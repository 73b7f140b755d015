//! The transactional file sink restored at another parallelism: every old
//! subtask's pre-committed parts are committed by its new owner, and what
//! an old subtask wrote after the restored checkpoint is removed.

use lockgate::{keys::Rescale, CheckpointId, Checkpointed, Sink, TwoPhaseCommitSink};
use lockgate_operators::file_sink::{read_committed, Formatter, TransactionalFileSink};

fn sink(
    dir: &std::path::Path,
    subtask: usize,
) -> TwoPhaseCommitSink<u64, TransactionalFileSink<u64>> {
    let fmt: Formatter<u64> = Box::new(|x, b| b.extend_from_slice(format!("{x}\n").as_bytes()));
    TwoPhaseCommitSink::new(TransactionalFileSink::new(dir, subtask, fmt).unwrap())
}

#[test]
fn three_old_subtasks_pending_parts_are_committed_by_two_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    // Old parallelism 3: each writes a record, pre-commits it for
    // checkpoint 1 (the checkpoint completes, but no subtask heard of it
    // before the crash), then writes into checkpoint 2's transaction,
    // which the restore of 1 must drop.
    let mut states = Vec::new();
    for j in 0..3u64 {
        let mut s = sink(dir.path(), j as usize);
        s.write(&mut vec![10 + j]).unwrap();
        states.push(s.snapshot_state(CheckpointId(1)).unwrap().unwrap());
        s.write(&mut vec![20 + j]).unwrap();
        s.snapshot_state(CheckpointId(2)).unwrap();
    }
    assert!(read_committed(dir.path()).unwrap().is_empty());
    let chains: Vec<Vec<&[u8]>> = states.iter().map(|b| vec![&b[..]]).collect();
    for i in 0..2 {
        let mut s = sink(dir.path(), i);
        let r = Rescale {
            subtask: i,
            parallelism: 2,
            old_parallelism: 3,
            max_parallelism: 128,
        };
        s.restore_rescaled(&chains, &r).unwrap();
    }
    let text = String::from_utf8(read_committed(dir.path()).unwrap()).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["10", "11", "12"], "checkpoint 1's parts, each once");
    // Nothing of checkpoint 2 is left, pending or in progress.
    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
