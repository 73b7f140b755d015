//! The reference job's `source` operator ([`RefSource`]): the records of
//! the splits it owns, closed loop (W1, W4) or on the open-loop schedule
//! (W2, W3, with W3's bursts), its split positions as checkpointed state
//! (union list state, so a restore may rescale).

use super::records::{Payload, RefEvent};
use super::shared::Shared;
use crate::workload::{
    scheduled_offset_ns, split_owner, Generator, KeySpace, Workload, WorkloadError, SPLITS,
};
use lockgate::tuning::now_ns;
use lockgate::Checkpointed;
use lockgate::{BoxError, CheckpointId, Source, SourcePoll};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The records of some of a source's splits with one schedule: W3's
/// bursts belong to the records with odd `n` (`workloads.md`), so a W3
/// source that owns splits of both parities (at an odd parallelism) has
/// two lanes, merged by schedule time; every other source has one.
struct Lane {
    gen: Generator,
    burst: bool,
}

/// The lanes of a source owning `splits` (`(split, first n to emit)`).
fn lanes_of(workload: Workload, keys: &KeySpace, splits: &[(u16, u64)], total: u64) -> Vec<Lane> {
    if workload != Workload::W3 {
        return vec![Lane {
            gen: Generator::of_splits(keys, splits, total),
            burst: false,
        }];
    }
    [false, true]
        .into_iter()
        .filter_map(|odd| {
            let mine: Vec<(u16, u64)> = splits
                .iter()
                .copied()
                .filter(|(s, _)| (s % 2 == 1) == odd)
                .collect();
            (!mine.is_empty()).then(|| Lane {
                gen: Generator::of_splits(keys, &mine, total),
                burst: odd,
            })
        })
        .collect()
}

/// The generator source of one subtask.
pub(super) struct RefSource<P> {
    index: usize,
    lanes: Vec<Lane>,
    keys: KeySpace,
    shared: Arc<Shared>,
    /// The schedule's start (W2/W3), signed: a restored schedule may start
    /// before the clock's epoch.
    t0: Option<i128>,
    /// Restored: unless this process already ran the source (then the
    /// run's schedule goes on), its schedule starts at the position.
    shift: bool,
    /// W4, restored: the run time the checkpoint had used, ns (the run
    /// goes on for what was left).
    restored_elapsed: Option<u64>,
    _p: std::marker::PhantomData<fn() -> P>,
}

/// A source's checkpointed state: each owned split with the first record
/// it has still to emit (union list state: on a rescale every new source
/// sees every split and keeps its own), and for W4 the run time used, ns.
type SourceState = (Vec<(u16, u64)>, Option<u64>);

/// A source state from its bytes, or an error naming it.
fn decode_source_state(bytes: &[u8]) -> Result<SourceState, BoxError> {
    Ok(postcard::from_bytes(bytes)
        .map_err(|e| format!("source state does not decode ({e}; a checkpoint of another job?)"))?)
}

impl<P: Payload> RefSource<P> {
    pub(super) fn new(
        index: usize,
        shared: Arc<Shared>,
        keys: KeySpace,
    ) -> Result<Self, WorkloadError> {
        let cfg = &shared.cfg;
        let gen = Generator::new(&keys, index, cfg.parallelism, shared.total)?;
        let lanes = lanes_of(cfg.workload, &keys, &gen.split_positions(), shared.total);
        shared.sources[index].started.store(true, Relaxed);
        Ok(RefSource {
            index,
            lanes,
            keys,
            t0: None,
            shift: false,
            restored_elapsed: None,
            shared,
            _p: std::marker::PhantomData,
        })
    }

    #[inline]
    fn event(n: u64, key: u64, ts_ns: u64, sent_ns: u64, payload_bytes: usize) -> RefEvent<P> {
        RefEvent {
            key,
            value: n,
            ts_ns,
            sent_ns,
            payload: P::make(payload_bytes, n),
        }
    }

    fn account(&self, count: usize, now: u64, behind: u64) {
        let st = &self.shared.sources[self.index];
        st.emitted.fetch_add(count as u64, Relaxed);
        let _ = st
            .first_emit_ns
            .compare_exchange(0, now.max(1), Relaxed, Relaxed);
        st.last_emit_ns.store(now, Relaxed);
        st.max_behind_ns.fetch_max(behind, Relaxed);
    }

    /// The next record of the lanes as `(lane, n, schedule offset)`: the
    /// earliest scheduled (ties: the lower lane).
    fn earliest(&self, rate: u64) -> Option<(usize, u64, u64)> {
        self.lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                l.gen
                    .next_n()
                    .map(|n| (i, n, scheduled_offset_ns(n, rate, l.burst)))
            })
            .min_by_key(|&(i, _, at)| (at, i))
    }

    /// Whether every lane is exhausted.
    fn exhausted(&self) -> bool {
        self.lanes.iter().all(|l| l.gen.next_n().is_none())
    }

    /// The next record's `n` of a one-lane source (W1, W4), the total when
    /// none is left.
    fn position(&self) -> u64 {
        self.lanes
            .iter()
            .filter_map(|l| l.gen.next_n())
            .min()
            .unwrap_or(self.shared.total)
    }

    /// Rebuilds the lanes from restored split positions, keeping the
    /// splits this source owns; `true` when the state restored is W4's
    /// run time too.
    fn restore_splits(&mut self, state: SourceState) -> Result<(), BoxError> {
        let (splits, elapsed) = state;
        let w4 = self.shared.cfg.workload == Workload::W4;
        if elapsed.is_some() != w4 {
            return Err(format!(
                "the source state is not {}'s (a checkpoint of another workload?)",
                self.shared.cfg.workload
            )
            .into());
        }
        if w4 {
            self.restored_elapsed = elapsed;
        }
        let p = self.shared.cfg.parallelism;
        let mine: Vec<(u16, u64)> = splits
            .into_iter()
            .filter(|(s, _)| split_owner(*s, p) == self.index)
            .collect();
        self.shared
            .restored
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.lanes = lanes_of(
            self.shared.cfg.workload,
            &self.keys,
            &mine,
            self.shared.total,
        );
        self.shift = true;
        self.t0 = None;
        Ok(())
    }
}

impl<P: Payload> Source<RefEvent<P>> for RefSource<P> {
    fn poll(&mut self, out: &mut Vec<RefEvent<P>>, max: usize) -> Result<SourcePoll, BoxError> {
        if self.exhausted() {
            return Ok(SourcePoll::Finished);
        }
        let now = now_ns();
        let pb = self.shared.cfg.payload_bytes;
        if self.shared.cfg.workload == Workload::W4 && now >= self.w4_deadline(now) {
            // Its time is up: the records it emitted are the run's.
            self.shared.sources[self.index]
                .position
                .store(self.position(), Relaxed);
            return Ok(SourcePoll::Finished);
        }
        let cfg = &self.shared.cfg;
        if !cfg.workload.is_paced() {
            // One lane (only W3 has two).
            for (n, key) in self.lanes[0].gen.by_ref().take(max) {
                out.push(Self::event(n, key, now, now, pb));
            }
            self.account(out.len(), now, 0);
            let done = self.exhausted();
            self.shared.sources[self.index]
                .position
                .store(self.position(), Relaxed);
            return Ok(if done {
                SourcePoll::Finished
            } else {
                SourcePoll::Ready
            });
        }
        let rate = cfg.rate;
        let Some((_, _, first_at)) = self.earliest(rate) else {
            return Ok(SourcePoll::Finished);
        };
        let (shift, shared) = (self.shift, &self.shared);
        let t0 = *self.t0.get_or_insert_with(|| {
            *shared.sources[self.index].t0.get_or_init(|| {
                if shift {
                    now as i128 - first_at as i128
                } else {
                    *shared.t0.get_or_init(|| now) as i128
                }
            })
        });
        let offset_now = u64::try_from((now as i128 - t0).max(0)).unwrap_or(u64::MAX);
        let mut behind = 0;
        while out.len() < max {
            // The earliest scheduled record, if it is due.
            let Some((lane, _, at)) = self.earliest(rate) else {
                break;
            };
            if at > offset_now {
                break;
            }
            let Some((n, key)) = self.lanes[lane].gen.next() else {
                break;
            };
            let ts = (t0 + at as i128).max(0) as u64;
            if out.is_empty() {
                behind = now.saturating_sub(ts);
            }
            out.push(Self::event(n, key, ts, now, pb));
        }
        if !out.is_empty() {
            self.account(out.len(), now, behind);
        }
        let Some((_, _, next_at)) = self.earliest(rate) else {
            return Ok(SourcePoll::Finished);
        };
        if out.len() >= max {
            return Ok(SourcePoll::Ready);
        }
        let next_due = t0 + next_at as i128;
        let earliest = now as i128 + self.shared.cfg.tick.as_nanos() as i128;
        let wake = next_due.max(earliest).clamp(0, u64::MAX as i128) as u64;
        Ok(SourcePoll::Idle {
            wake_at_ns: Some(wake),
        })
    }
}

impl<P: Payload> RefSource<P> {
    /// W4: when this source's time is up, ns. The run's start is kept by
    /// an in-process restart; a restore in a new process starts it so that
    /// what the checkpoint had used is behind (`now - elapsed`).
    fn w4_deadline(&mut self, now: u64) -> u64 {
        let (restored, shared) = (self.restored_elapsed, &self.shared);
        let t0 = *self.t0.get_or_insert_with(|| {
            *shared.sources[self.index]
                .t0
                .get_or_init(|| match restored {
                    Some(e) => now as i128 - e as i128,
                    None => *shared.t0.get_or_init(|| now) as i128,
                })
        });
        let run = (shared.cfg.warmup + shared.cfg.duration).as_nanos() as i128;
        (t0 + run).clamp(0, u64::MAX as i128) as u64
    }
}

impl<P> Drop for RefSource<P> {
    /// Folds how far each of its splits was generated into the run's
    /// count (what a failed run never sent).
    fn drop(&mut self) {
        let mut generated = super::shared::lock(&self.shared.generated);
        for lane in &self.lanes {
            for (split, pos) in lane.gen.split_positions() {
                if let Some(g) = generated.get_mut(usize::from(split)) {
                    *g = (*g).max(pos);
                }
            }
        }
    }
}

impl<P: Payload> Checkpointed for RefSource<P> {
    /// Each owned split's next record ([`SourceState`], postcard); W4
    /// adds the run time used so far, ns.
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        let splits: Vec<(u16, u64)> = self
            .lanes
            .iter()
            .flat_map(|l| l.gen.split_positions())
            .collect();
        let elapsed = (self.shared.cfg.workload == Workload::W4).then(|| match self.t0 {
            Some(t0) => u64::try_from((now_ns() as i128 - t0).max(0)).unwrap_or(u64::MAX),
            None => self.restored_elapsed.unwrap_or(0),
        });
        let state: SourceState = (splits, elapsed);
        Ok(Some(postcard::to_allocvec(&state)?))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.restore_splits(decode_source_state(state)?)
    }

    /// Union list state: every split of every old source, each kept by
    /// the source that owns it now. W4 is refused: its expected records
    /// are each source's prefix of its splits, which a rescale breaks.
    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &lockgate::keys::Rescale,
    ) -> Result<(), BoxError> {
        if self.shared.cfg.workload == Workload::W4 {
            return Err(Box::new(lockgate::error::FatalError(format!(
                "W4 cannot be restored at another parallelism ({} to {}): its run is timed per source",
                rescale.old_parallelism, rescale.parallelism
            ))));
        }
        let mut splits = Vec::new();
        for last in chains.iter().filter_map(|c| c.last()) {
            let (s, elapsed) = decode_source_state(last)?;
            if elapsed.is_some() {
                return Err("the source state is W4's, not this workload's".into());
            }
            splits.extend(s);
        }
        let mut seen: Vec<u16> = splits.iter().map(|(s, _)| *s).collect();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != splits.len() || seen.len() != usize::from(SPLITS) {
            return Err(format!(
                "the old sources' states hold {} splits ({} distinct), not each of the {SPLITS} once",
                splits.len(),
                seen.len()
            )
            .into());
        }
        let _ = self.shared.rescaled_from.set(rescale.old_parallelism);
        self.restore_splits((splits, None))
    }
}
