//! Committed output (`--output committed`): the reference sink as a
//! two-phase-commit sink, and what was committed.
//!
//! The records the sink takes between two barriers form a transaction
//! ([`OpenTxn`]). At the barrier of checkpoint `k` it is pre-committed:
//! made compact on the snapshot thread ([`Txn`]: its sequence numbers as
//! runs, its latencies to the pre-commit) and kept in the sink's
//! checkpointed state until it is committed. When a checkpoint completes,
//! every pre-committed transaction up to it is committed: its records
//! become visible in [`CommittedOutput`], which lives outside the job's
//! state (a restore does not roll it back), and its committed latencies
//! are recorded. A record's committed time is that commit's: for the
//! first completed checkpoint whose barrier followed it at the sink
//! (records of an aborted or subsumed checkpoint wait for the next one).
//!
//! A restore commits the transactions its checkpoint lists, unless they
//! were committed before (a commit is idempotent), and retracts what was
//! committed for newer checkpoints (a restore that fell back past them,
//! e.g. from a damaged newest checkpoint): their records are replayed and
//! committed again, so the committed output holds each once. The report
//! says how many records were retracted.
//!
//! Across processes (`--restore`), what was committed is kept in an
//! append-only log beside the checkpoints (`committed.log`), read back
//! first: written, not `fsync`ed, so it survives a killed process, not a
//! machine crash.

use super::recorded::Recorded;
use hdrhistogram::Histogram;
use lockgate::{BoxError, CheckpointId};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, VecDeque};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

/// The records the sink took since its last barrier: `(n, intended send
/// time)`.
#[derive(Debug, Default)]
pub(super) struct OpenTxn {
    pub(super) records: Vec<(u64, u64)>,
}

/// A pre-committed transaction, compact: what its commit needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Txn {
    /// The checkpoint whose barrier pre-committed it.
    pub(super) checkpoint: u64,
    /// When it was pre-committed, ns on the engine's clock.
    pub(super) precommit_ns: u64,
    /// Its sequence numbers, ascending, as runs `(first, count)`.
    pub(super) runs: Vec<(u64, u64)>,
    /// Per interval of intended send time, the HdrHistogram (V2 deflate)
    /// of `precommit - intended send time` of its recorded records.
    pub(super) latency: Vec<(u64, ByteBuf)>,
}

/// The maximum value an interval histogram tracks (its unit is ns).
fn interval_histogram() -> Histogram<u64> {
    crate::latency::new_interval_histogram()
}

impl Txn {
    /// The compact form of `open`, pre-committed at `precommit_ns` for
    /// `checkpoint`; `interval(n, ts)` is the interval whose latency a
    /// record counts in (`None`: not recorded, e.g. before the warm-up).
    pub(super) fn compact(
        checkpoint: CheckpointId,
        precommit_ns: u64,
        mut open: OpenTxn,
        interval: impl Fn(u64, u64) -> Option<u64>,
    ) -> Result<Txn, BoxError> {
        let mut latency: BTreeMap<u64, Histogram<u64>> = BTreeMap::new();
        for &(n, ts) in &open.records {
            if let Some(i) = interval(n, ts) {
                latency
                    .entry(i)
                    .or_insert_with(interval_histogram)
                    .saturating_record(precommit_ns.saturating_sub(ts));
            }
        }
        open.records.sort_unstable_by_key(|r| r.0);
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &(n, _) in &open.records {
            match runs.last_mut() {
                Some((first, count)) if *first + *count == n => *count += 1,
                _ => runs.push((n, 1)),
            }
        }
        let mut encoded = Vec::with_capacity(latency.len());
        for (i, h) in latency {
            encoded.push((i, ByteBuf::from(compress(&h)?)));
        }
        Ok(Txn {
            checkpoint: checkpoint.get(),
            precommit_ns,
            runs,
            latency: encoded,
        })
    }
}

fn compress(h: &Histogram<u64>) -> Result<Vec<u8>, BoxError> {
    use hdrhistogram::serialization::Serializer as _;
    let mut out = Vec::new();
    hdrhistogram::serialization::V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .map_err(|e| format!("compressing a transaction's latencies: {e:?}"))?;
    Ok(out)
}

fn decompress(bytes: &[u8]) -> Result<Histogram<u64>, BoxError> {
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| format!("a transaction's latencies: {e:?}").into())
}

/// An entry of the append-only log of what was committed.
#[derive(Debug, Serialize, Deserialize)]
enum LogEntry {
    /// Checkpoint `checkpoint`'s transaction of these runs was committed.
    Commit {
        checkpoint: u64,
        runs: Vec<(u64, u64)>,
    },
    /// Everything committed for checkpoints after `after` was retracted.
    Retract { after: u64 },
}

/// The commits kept for a retraction (a restore falls back at most a few
/// checkpoints); older ones can no longer be retracted.
const RETRACTABLE: usize = 4096;

/// What the sink committed over the run, outside the job's state.
#[derive(Debug)]
pub(super) struct CommittedOutput {
    /// Committed sequence numbers.
    bits: Vec<u64>,
    total: u64,
    /// Records committed (each counted once).
    pub(super) committed: u64,
    /// Records committed again while committed (never with exactly-once).
    pub(super) duplicated: u64,
    /// Records whose commit a restore retracted (then committed again).
    pub(super) retracted: u64,
    /// The newest checkpoint committed: a commit of it or an older one
    /// again does nothing.
    pub(super) through: Option<u64>,
    /// The last commits, newest last, for a retraction.
    history: VecDeque<(u64, Vec<(u64, u64)>)>,
    /// Committed latencies (intended send time to commit), and per
    /// interval of intended send time.
    pub(super) recorded: Recorded,
    /// The append-only log, with a checkpoint folder.
    log: Option<(PathBuf, std::fs::File)>,
}

impl CommittedOutput {
    /// Nothing committed, for a run of `total` records; with a checkpoint
    /// folder `dir`, what an earlier process committed is read from its
    /// log there, and every commit is appended to it.
    pub(super) fn open(total: u64, dir: Option<&Path>) -> Result<Self, BoxError> {
        let words = usize::try_from(total.div_ceil(64)).map_err(|_| "too many records")?;
        let mut out = CommittedOutput {
            bits: vec![0; words],
            total,
            committed: 0,
            duplicated: 0,
            retracted: 0,
            through: None,
            history: VecDeque::new(),
            recorded: Recorded::new(),
            log: None,
        };
        if let Some(dir) = dir {
            let path = dir.join("committed.log");
            if path.exists() {
                out.replay(&path)?;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            out.log = Some((path, file));
        }
        Ok(out)
    }

    /// Applies the log of an earlier process (its entries counted as
    /// committed, their latencies not: they were that process's).
    fn replay(&mut self, path: &Path) -> Result<(), BoxError> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut rest = &bytes[..];
        while rest.len() >= 4 {
            let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
            if rest.len() < 4 + len {
                // A torn last entry (a process killed while appending): its
                // commit did not return, so it did not happen.
                break;
            }
            let entry: LogEntry = postcard::from_bytes(&rest[4..4 + len])
                .map_err(|e| format!("{}: a damaged entry: {e}", path.display()))?;
            rest = &rest[4 + len..];
            match entry {
                LogEntry::Commit { checkpoint, runs } => self.apply(checkpoint, runs)?,
                LogEntry::Retract { after } => self.retract_after(after),
            }
        }
        Ok(())
    }

    fn append(&mut self, entry: &LogEntry) -> Result<(), BoxError> {
        if let Some((path, file)) = &mut self.log {
            let bytes = postcard::to_allocvec(entry)?;
            let mut framed = Vec::with_capacity(4 + bytes.len());
            framed.extend_from_slice(&u32::try_from(bytes.len())?.to_le_bytes());
            framed.extend_from_slice(&bytes);
            file.write_all(&framed)
                .map_err(|e| format!("cannot append to {}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Sets the bits of `runs`, counting those set before as duplicated.
    fn apply(&mut self, checkpoint: u64, runs: Vec<(u64, u64)>) -> Result<(), BoxError> {
        for &(first, count) in &runs {
            if first.saturating_add(count) > self.total {
                return Err(format!(
                    "checkpoint {checkpoint} commits records up to {}, beyond the run's {}",
                    first + count,
                    self.total
                )
                .into());
            }
            for n in first..first + count {
                let (w, b) = ((n / 64) as usize, n % 64);
                if self.bits[w] & (1 << b) != 0 {
                    self.duplicated += 1;
                } else {
                    self.bits[w] |= 1 << b;
                    self.committed += 1;
                }
            }
        }
        self.through = Some(self.through.map_or(checkpoint, |t| t.max(checkpoint)));
        self.history.push_back((checkpoint, runs));
        if self.history.len() > RETRACTABLE {
            self.history.pop_front();
        }
        Ok(())
    }

    /// Commits `txn` at `now_ns`, unless its checkpoint was committed
    /// before; `record`: its latencies count (false for a commit made by
    /// a restore in another process than the one that took the records).
    /// Returns the largest committed latency of its records, ns (`None`:
    /// nothing committed or recorded): how far the committed output lags.
    pub(super) fn commit(
        &mut self,
        txn: &Txn,
        now_ns: u64,
        record: bool,
    ) -> Result<Option<u64>, BoxError> {
        if self.through.is_some_and(|t| txn.checkpoint <= t) {
            return Ok(None);
        }
        self.append(&LogEntry::Commit {
            checkpoint: txn.checkpoint,
            runs: txn.runs.clone(),
        })?;
        self.apply(txn.checkpoint, txn.runs.clone())?;
        let mut lag = None;
        if record {
            let shift = now_ns.saturating_sub(txn.precommit_ns);
            for (interval, bytes) in &txn.latency {
                let h = decompress(bytes)?;
                let target = self
                    .recorded
                    .intervals
                    .entry(*interval as usize)
                    .or_insert_with(interval_histogram);
                for v in h.iter_recorded() {
                    let lat = v.value_iterated_to().saturating_add(shift);
                    let n = v.count_at_value();
                    target.saturating_record_n(lat, n);
                    self.recorded.latency.record_latency_n(lat, n);
                    lag = lag.max(Some(lat));
                }
            }
        }
        Ok(lag)
    }

    /// Retracts every commit of a checkpoint after `after` (a restore of
    /// `after` fell back past them): their records are no longer
    /// committed, and are counted as retracted.
    pub(super) fn retract_after(&mut self, after: u64) {
        if self.through.is_none_or(|t| t <= after) {
            return;
        }
        let _ = self.append(&LogEntry::Retract { after });
        while let Some((c, runs)) = self.history.back() {
            if *c <= after {
                break;
            }
            for &(first, count) in runs {
                for n in first..first + count {
                    let (w, b) = ((n / 64) as usize, n % 64);
                    if self.bits[w] & (1 << b) != 0 {
                        self.bits[w] &= !(1 << b);
                        self.committed -= 1;
                        self.retracted += 1;
                    }
                }
            }
            self.history.pop_back();
        }
        self.through = self.history.back().map(|(c, _)| *c).or(Some(after));
    }

    /// True when record `n` was committed.
    pub(super) fn contains(&self, n: u64) -> bool {
        self.bits
            .get((n / 64) as usize)
            .is_some_and(|w| w & (1 << (n % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(checkpoint: u64, ns: &[u64]) -> Txn {
        let open = OpenTxn {
            records: ns.iter().map(|&n| (n, 1_000)).collect(),
        };
        Txn::compact(CheckpointId(checkpoint), 2_000, open, |_, _| Some(0)).unwrap()
    }

    #[test]
    fn commits_count_once_and_a_retraction_takes_them_back() {
        let mut c = CommittedOutput::open(100, None).unwrap();
        c.commit(&txn(1, &[3, 1, 2, 10]), 5_000, true).unwrap();
        assert_eq!(txn(1, &[3, 1, 2, 10]).runs, [(1, 3), (10, 1)]);
        // A commit of the same checkpoint again (a restore) does nothing.
        c.commit(&txn(1, &[3, 1, 2, 10]), 6_000, true).unwrap();
        assert_eq!((c.committed, c.duplicated), (4, 0));
        // Latency: commit at 5,000 of records sent at 1,000.
        assert_eq!(c.recorded.latency.count(), 4);
        assert!(
            c.recorded
                .latency
                .histogram()
                .value_at_quantile(0.5)
                .abs_diff(4_000)
                < 40
        );
        c.commit(&txn(2, &[4, 5]), 7_000, true).unwrap();
        // A restore of checkpoint 1: 2's records are retracted, then
        // replayed into a newer transaction.
        c.retract_after(1);
        assert_eq!((c.committed, c.retracted, c.through), (4, 2, Some(1)));
        c.commit(&txn(3, &[4, 5]), 8_000, true).unwrap();
        assert_eq!((c.committed, c.duplicated), (6, 0));
        // A record committed twice (at-least-once) is a duplicate.
        c.commit(&txn(4, &[5]), 9_000, true).unwrap();
        assert_eq!(c.duplicated, 1);
        assert!(c.contains(10) && !c.contains(0));
    }

    #[test]
    fn the_log_restores_what_another_process_committed() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut c = CommittedOutput::open(100, Some(dir.path())).unwrap();
            c.commit(&txn(1, &[1, 2]), 5_000, true).unwrap();
            c.commit(&txn(2, &[3]), 6_000, true).unwrap();
            c.retract_after(1);
        }
        // A torn entry at the end (killed while appending) is not a commit.
        let log = dir.path().join("committed.log");
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(&[200, 0, 0, 0, 1]).unwrap();
        let c = CommittedOutput::open(100, Some(dir.path())).unwrap();
        assert_eq!((c.committed, c.retracted, c.through), (2, 1, Some(1)));
        assert!(c.contains(2) && !c.contains(3));
        // Latencies are this process's only.
        assert_eq!(c.recorded.latency.count(), 0);
    }
}
