//! The reference job's `sink` operator ([`RefSink`]): it checks every
//! record against the closed form (with a checkpointed `SinkCheck`) and
//! records latencies into its slot of the shared results; its state's
//! parts are `sink_state`'s.

use super::committed::Txn;
use super::recorded::Recorded;
use super::records::{Payload, RefSum};
use super::shared::{lock, Shared, SinkSlot, MAX_SETTLED};
use super::sink_state::{
    check_of_chain, decode_sink_state, encode_full_part, seeded_replica, SinkReplica,
};
use crate::latency::new_interval_histogram;
use crate::workload::{SinkCheck, SumRecord};
use lockgate::tuning::now_ns;
use lockgate::Checkpointed;
use lockgate::{state::StateSnapshot, BoxError, CheckpointId, Sink};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};

/// The checking, latency-recording sink.
pub(super) struct RefSink {
    pub(super) slot: usize,
    pub(super) shared: Arc<Shared>,
    /// The snapshot thread's copy of the check, from the first snapshot of
    /// the run attempt on.
    pub(super) replica: Option<Arc<Mutex<SinkReplica>>>,
    /// A later attempt's sink before its restore or first record: the
    /// slot's recordings are rolled back to the restored checkpoint (or,
    /// with none restored, to nothing) before it records.
    pub(super) roll_back: bool,
    /// No record received yet in this attempt.
    pub(super) first_write: bool,
    /// This attempt's number ([`SinkSlot::attempts`] when it was made): a
    /// snapshot of a failed attempt may still finish on its snapshot
    /// thread after a new attempt began.
    pub(super) attempt: u32,
}

/// Sink `slot`'s slot, rolled back first when `roll_back` (this attempt
/// restored nothing).
fn open_slot<'a>(
    shared: &'a Shared,
    slot: usize,
    roll_back: &mut bool,
) -> Result<MutexGuard<'a, SinkSlot>, BoxError> {
    let mut s = lock(&shared.slots[slot]);
    if std::mem::take(roll_back) {
        s.roll_back(None)?;
    }
    Ok(s)
}

impl<P: Payload> Sink<RefSum<P>> for RefSink {
    fn write(&mut self, input: &mut Vec<RefSum<P>>) -> Result<(), BoxError> {
        let now = now_ns();
        let first_rec = self.shared.first_recorded_n;
        let start = *self.shared.intervals_start.get_or_init(|| {
            self.shared.t0.get().copied().unwrap_or_else(|| {
                self.shared
                    .sources
                    .iter()
                    .map(|s| s.first_emit_ns.load(Relaxed))
                    .filter(|t| *t > 0)
                    .min()
                    .unwrap_or(now)
            })
        });
        let paced = self.shared.cfg.workload.is_paced();
        let interval_ns = self.shared.cfg.interval_ns.max(1);
        let first_write = std::mem::take(&mut self.first_write);
        let work_ns = self.shared.cfg.workload.sink_work_ns();
        if work_ns > 0 {
            // W4: the sink is slower than the sources (workloads.md), by
            // `work_ns` a record, spent before the slot's lock is taken:
            // the merge of settled intervals takes that lock too
            // (`merge_settled`),
            // and std's mutex is not fair, so a lock held through the
            // batch's work and taken again at once starved it for seconds
            // (measured: the sink's asynchronous part 0.1-2.2 s under W4).
            let began = now_ns();
            let batch_ns = work_ns.saturating_mul(input.len() as u64);
            while now_ns().saturating_sub(began) < batch_ns {
                std::hint::spin_loop();
            }
        }
        let mut s = open_slot(&self.shared, self.slot, &mut self.roll_back)?;
        if first_write && s.attempts > 1 {
            s.attempt_starts.push(now);
        }
        let s = &mut *s;
        let mut recorded = false;
        // W4's warm-up is a time: records sent before it are not recorded
        // (none after a restore in a new process: its warm-up was spent; an
        // in-process restart keeps the run's).
        let record_from = if work_ns > 0 {
            *self.shared.record_from.get_or_init(|| {
                if self.shared.process_restore.get().is_some() {
                    0
                } else {
                    start.saturating_add(self.shared.cfg.warmup.as_nanos() as u64)
                }
            })
        } else {
            0
        };
        s.deliveries += input.len() as u64;
        // One target a batch: the open interval with checkpoints, else the
        // run's histograms (a branch a record costs W1 a few percent).
        let (check, target) = match &mut s.open_interval {
            Some(open) => (&mut s.check, open),
            None => (&mut s.check, &mut s.recorded),
        };
        let committed = self.shared.committed.is_some().then_some(&mut s.open_txn);
        let observe = |check: &mut SinkCheck, r: &RefSum<P>| {
            check.observe(&SumRecord {
                key: r.key,
                sum: r.sum,
                n: r.n,
                ts_ns: r.ts_ns,
            })
        };
        if let Some(txn) = committed {
            // Committed output: the records go into the open transaction
            // too (its latencies are counted at the commit).
            txn.records.extend(input.iter().map(|r| (r.n, r.ts_ns)));
        }
        if work_ns == 0 {
            let Recorded {
                latency,
                uncorrected,
                intervals,
                ..
            } = target;
            // W2/W3: a record counts in the interval of its intended send
            // time (as the committed latencies do), the histogram looked
            // up again only when that changes.
            let mut current: Option<(usize, &mut hdrhistogram::Histogram<u64>)> = None;
            // By reference, then one clear: no 40-byte move a record.
            for r in input.iter() {
                observe(check, r);
                if r.n >= first_rec {
                    let lat = now.saturating_sub(r.ts_ns);
                    latency.record_latency(lat);
                    // W1 is not a latency test: one histogram, as the raw
                    // baseline keeps; no intervals.
                    if paced {
                        let i = (r.ts_ns.saturating_sub(start) / interval_ns) as usize;
                        if current.as_ref().is_none_or(|(c, _)| *c != i) {
                            current = Some((
                                i,
                                intervals.entry(i).or_insert_with(new_interval_histogram),
                            ));
                        }
                        if let Some((_, h)) = &mut current {
                            h.saturating_record(lat);
                        }
                        uncorrected.record(now, r.sent_ns);
                    }
                    recorded = true;
                }
            }
            input.clear();
        } else {
            for r in input.drain(..) {
                observe(check, &r);
                if r.ts_ns >= record_from {
                    target.latency.record_latency(now.saturating_sub(r.ts_ns));
                    recorded = true;
                }
            }
        }
        if recorded && s.first_recorded_ns == 0 {
            s.first_recorded_ns = now;
        }
        s.last_delivery_ns = now;
        Ok(())
    }
}

impl Checkpointed for RefSink {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        let mut s = open_slot(&self.shared, self.slot, &mut self.roll_back)?;
        s.close_interval(id);
        let bytes = encode_full_part(id, &s.check)?;
        if self.shared.committed.is_none() {
            return Ok(Some(bytes));
        }
        let txn = std::mem::take(&mut s.open_txn);
        let txn = Txn::compact(id, now_ns(), txn, interval_of(&self.shared))?;
        s.pending.insert(id.get(), txn);
        Ok(Some(wrap_committed(&s.pending, bytes)?))
    }

    /// The check is state like any other, checkpointed incrementally: the
    /// synchronous part takes the words and keys changed since the last
    /// snapshot (O(changes), the first one too: the snapshot thread's
    /// replica is seeded when the attempt starts or restores).
    fn snapshot_state_async(
        &mut self,
        id: CheckpointId,
    ) -> Result<Option<StateSnapshot>, BoxError> {
        let shared = self.shared.clone();
        let mut slot = open_slot(&shared, self.slot, &mut self.roll_back)?;
        slot.close_interval(id);
        let (replica, changes) = match &self.replica {
            Some(r) => {
                let mut changes = slot.spare_changes.take().unwrap_or_default();
                slot.check.take_changes_into(&mut changes);
                (r.clone(), Some(changes))
            }
            // Not seeded at the start (checkpoints were off then): seed now.
            None => {
                let r = seeded_replica(&mut slot.check);
                self.replica = Some(r.clone());
                (r, None)
            }
        };
        // Committed output: the open transaction is pre-committed here (in
        // no time: moved), made compact on the snapshot thread.
        let txn = self
            .shared
            .committed
            .is_some()
            .then(|| (std::mem::take(&mut slot.open_txn), now_ns()));
        drop(slot);
        let (index, attempt) = (self.slot, self.attempt);
        Ok(Some(StateSnapshot::incremental(move |req| {
            if let Some((txn, precommit_ns)) = txn {
                let txn = Txn::compact(id, precommit_ns, txn, interval_of(&shared))?;
                let mut slot = lock(&shared.slots[index]);
                // A failed attempt's transaction is not pending: its
                // records come again, and the new attempt rolled `pending`
                // back to the restored checkpoint (committing it as well
                // counted each of its records twice).
                if slot.attempts == attempt {
                    slot.pending.insert(id.get(), txn);
                }
            }
            // The completed checkpoints' intervals are merged in idle
            // time (`Shared::merge_all_settled`), here only when too many
            // wait; one of them, emptied, becomes a later interval's
            // recordings. With no spare left a new one is allocated here,
            // off the sink's synchronous part (a fresh one there each
            // checkpoint cost 0.5 MB of page faults, `perf record`,
            // docs/benchmarks-history.md); the slot keeps two, so that
            // with idle time (W2) none is allocated. Leaving spares to
            // the idle merge alone helped W2 at 100 ms (excess over 500
            // µs 0.48 against 0.75 %, 3 rounds) but cost W1 (records/s on
            // / off 0.81 against 0.85, 6 rounds): not done.
            if let Some(e) = lock(&shared.settle_error).take() {
                return Err(format!("merging the sink's settled latency intervals: {e}").into());
            }
            let behind = lock(&shared.slots[index]).settled.len() > MAX_SETTLED;
            let recycled = if behind {
                SinkSlot::merge_settled(&shared.slots[index])?
            } else {
                None
            };
            lockgate::tuning::yield_point();
            SinkSlot::offer_spare(&shared.slots[index], recycled);
            // One snapshot at a time takes the lock (the task's snapshot
            // thread runs them in order); a panic in one leaves the
            // replica as good as the changes it had applied.
            let (encoded, done) = replica
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .snapshot(req, changes)?;
            // Refilled (emptied first) by the next `take_changes_into`.
            if let Some(done) = done {
                lock(&shared.slots[index]).spare_changes.get_or_insert(done);
            }
            if shared.committed.is_none() {
                return Ok(encoded);
            }
            // Every transaction pre-committed up to this checkpoint and not
            // committed yet goes with the check: a restore commits them.
            let slot = lock(&shared.slots[index]);
            let pending: std::collections::BTreeMap<u64, Txn> = slot
                .pending
                .range(..=id.get())
                .map(|(c, t)| (*c, t.clone()))
                .collect();
            drop(slot);
            let inner = encoded.bytes.len() as u64;
            let bytes = wrap_committed(&pending, encoded.bytes)?;
            Ok(lockgate::state::EncodedState {
                full_bytes: encoded.full_bytes + (bytes.len() as u64 - inner),
                delta: encoded.delta,
                chain_from: encoded.chain_from,
                bytes,
            })
        })))
    }

    fn restore_state_chain(&mut self, chain: &[&[u8]]) -> Result<(), BoxError> {
        let mut parts = Vec::with_capacity(chain.len());
        let mut pending = Vec::new();
        for (i, bytes) in chain.iter().enumerate() {
            if self.shared.committed.is_some() {
                let part = unwrap_committed(bytes, i)?;
                parts.push(decode_sink_state(&part.check, i, chain.len())?);
                // The last part's transactions are the pending ones.
                pending = part.pending;
            } else {
                parts.push(decode_sink_state(bytes, i, chain.len())?);
            }
        }
        let restored = parts.last().map(|p| p.id);
        let sizes = lock(&self.shared.slots[self.slot]).check.sizes();
        let check = check_of_chain(parts, sizes)?;
        let mut slot = lock(&self.shared.slots[self.slot]);
        if check.sizes() != slot.check.sizes() {
            let ((r, k), (jr, jk)) = (check.sizes(), slot.check.sizes());
            return Err(format!(
                "the checkpointed sink check is for {r} records over {k} keys, this job's for {jr} over {jk}"
            )
            .into());
        }
        if let (1, Some(id)) = (slot.attempts, restored) {
            let _ = self.shared.process_restore.set((id, check.distinct()));
        }
        slot.check = check;
        if std::mem::take(&mut self.roll_back) {
            slot.roll_back(restored)?;
        }
        if let (Some(committed), Some(id)) = (&self.shared.committed, restored) {
            // What was committed for a newer checkpoint than the restored
            // one is retracted (its records come again), then the restored
            // checkpoint's pending transactions are committed (those it
            // committed before are not, again). A commit made by a restore
            // in another process counts in the check, not in the latency.
            let mut c = lock(committed);
            c.retract_after(id.get());
            let record = slot.attempts > 1;
            let now = now_ns();
            for txn in pending {
                c.commit(&txn, now, record)?;
            }
        }
        // A new replica from the restored check, before any record (the
        // first snapshot after a restore is full: the replica's log starts
        // here).
        self.replica = Some(seeded_replica(&mut slot.check));
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        // A restart restores `id` or a later checkpoint: what was recorded
        // before its snapshot stays.
        let mut slot = lock(&self.shared.slots[self.slot]);
        slot.settle(id);
        if let Some(committed) = &self.shared.committed {
            // Every transaction pre-committed up to `id` is committed now
            // (those of aborted checkpoints too).
            let later = slot.pending.split_off(&(id.get() + 1));
            let done = std::mem::replace(&mut slot.pending, later);
            drop(slot);
            let mut c = lock(committed);
            let now = now_ns();
            let mut lag = None;
            for txn in done.values() {
                lag = lag.max(c.commit(txn, now, true)?);
            }
            drop(c);
            if let Some(lag) = lag {
                // The oldest record just committed: how far committed
                // output is behind the records' intended send times.
                lockgate::telemetry::set_committed_output_lag(
                    super::config::JOB_NAME,
                    "sink",
                    self.slot,
                    lag as f64 / 1e9,
                );
            }
        }
        Ok(())
    }
}

/// Committed output: the sink's part is its check's part with the pending
/// transactions up to the checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
struct CommittedPart {
    pending: Vec<Txn>,
    check: serde_bytes::ByteBuf,
}

fn wrap_committed(
    pending: &std::collections::BTreeMap<u64, Txn>,
    check: Vec<u8>,
) -> Result<Vec<u8>, BoxError> {
    Ok(postcard::to_allocvec(&CommittedPart {
        pending: pending.values().cloned().collect(),
        check: serde_bytes::ByteBuf::from(check),
    })?)
}

fn unwrap_committed(bytes: &[u8], index: usize) -> Result<CommittedPart, BoxError> {
    postcard::from_bytes(bytes).map_err(|e| {
        format!("the sink's part {index} of its chain (committed output) does not decode: {e}")
            .into()
    })
}

/// The interval a record's committed latency counts in: that of its
/// intended send time, after the warm-up only (W2/W3; W1 has none).
fn interval_of(shared: &Shared) -> impl Fn(u64, u64) -> Option<u64> + '_ {
    let first = shared.first_recorded_n;
    let start = shared.intervals_start.get().copied().unwrap_or(0);
    let paced = shared.cfg.workload.is_paced();
    let interval_ns = shared.cfg.interval_ns.max(1);
    move |n, ts| {
        (n >= first).then(|| {
            if paced {
                ts.saturating_sub(start) / interval_ns
            } else {
                0
            }
        })
    }
}
