//! The reference sink's checkpointed state: its parts ([`SinkState`]: a
//! full check, or the changes since a base checkpoint) in the layouts
//! written now and before (all still read), their encodings, the restore
//! of a chain of parts, and the snapshot thread's replica of the check
//! ([`SinkReplica`]), which writes each part off the sink's thread and
//! chooses a delta or a full part. The bytes are those of existing
//! checkpoints: layouts are only ever added.

use crate::workload::{CompactCheck, SinkChanges, SinkChangesV1, SinkCheck, WorkloadError};
use lockgate::{state::EncodedState, state::SnapshotRequest, BoxError, CheckpointId};
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// The check that a chain of parts restores (oldest first; it starts at
/// its last full part), for a job whose check has `sizes` (records,
/// keys).
pub(super) fn check_of_chain(
    parts: Vec<SinkState>,
    sizes: (u64, u64),
) -> Result<SinkCheck, BoxError> {
    // A rolling part names the oldest part the chain still needs (its
    // per-key arrays were rewritten piece by piece since); else the chain
    // starts at its last full part.
    let start = match parts.last().map(|p| &p.part) {
        Some(SinkPart::Rolling(r)) => {
            let from = r.from;
            parts.iter().rposition(|p| p.id == from).ok_or_else(|| {
                format!("the sink's checkpointed chain misses chk-{from}, which its newest part builds on")
            })?
        }
        _ => parts
            .iter()
            .rposition(|p| matches!(p.part, SinkPart::Full(_) | SinkPart::CompactFull(_)))
            .ok_or("the sink's checkpointed chain has no full snapshot")?,
    };
    let in_part =
        |id: CheckpointId| move |e: WorkloadError| format!("the sink's part of chk-{id}: {e}");
    let mut check = SinkCheck::new(sizes.0, sizes.1).map_err(in_part(CheckpointId(0)))?;
    for SinkState { id, part } in parts.into_iter().skip(start) {
        match part {
            SinkPart::Full(full) => {
                full.validate().map_err(in_part(id))?;
                check = full;
                Ok(())
            }
            SinkPart::CompactFull(compact) => {
                check = SinkCheck::from_compact(compact, sizes).map_err(in_part(id))?;
                Ok(())
            }
            SinkPart::Delta(v1) => check.apply_changes(&v1.into()),
            SinkPart::CompactDelta(changes) => check.apply_changes(&changes),
            SinkPart::Rolling(r) => check
                .apply_changes(&r.changes)
                .and_then(|()| check.apply_piece(r.lo, r.piece)),
        }
        .map_err(in_part(id))?;
    }
    Ok(check)
}

/// The sink's state in `bytes`, the `index`-th part of a chain of `len`:
/// an error names the part, and bytes after the state are refused (a
/// postcard decoding reads what it needs and ignores the rest).
pub(super) fn decode_sink_state(
    bytes: &[u8],
    index: usize,
    len: usize,
) -> Result<SinkState, BoxError> {
    let (state, rest) = postcard::take_from_bytes::<SinkState>(bytes).map_err(|e| {
        format!(
            "the sink's part {} of {len} in the restored chain: {e}",
            index + 1
        )
    })?;
    if !rest.is_empty() {
        return Err(format!(
            "the sink's part of chk-{}: {} bytes after its state",
            state.id,
            rest.len()
        )
        .into());
    }
    Ok(state)
}

/// The sink's checkpointed state: the checkpoint it belongs to (a restart
/// rolls the latency recordings back to it) and one part of the check.
#[derive(Serialize, serde::Deserialize)]
pub(super) struct SinkState {
    pub(super) id: CheckpointId,
    part: SinkPart,
}

/// One checkpointed part of the sink's check: all of it, or what changed
/// since the base checkpoint. Parts are written compact (the last two
/// variants); the first two are the layouts written before, still read
/// so that older checkpoints restore. New layouts go at the end: postcard
/// writes a variant as its index.
#[derive(Serialize, serde::Deserialize)]
enum SinkPart {
    /// The whole bitset, word by word.
    Full(SinkCheck),
    /// Changed words listed one by one.
    Delta(SinkChangesV1),
    /// [`SinkCheck::compact`]: the bitset's all-ones prefix as a count,
    /// its zero suffix left out (W1's full part at 40 M records: 5.1 MB
    /// before, 110-220 KB now, the last sums and the words between the
    /// sources' frontiers).
    CompactFull(CompactCheck<'static>),
    /// [`SinkChanges`]: runs of full blocks, the other words one by one.
    CompactDelta(SinkChanges),
    /// A rolling delta (checks of [`ROLLING_MIN_KEYS`] keys or more): the
    /// changes, and a piece of the check rewritten whole.
    Rolling(RollingPart),
}

/// The variant indices of [`SinkPart`]'s written layouts.
const COMPACT_FULL: u32 = 2;
const COMPACT_DELTA: u32 = 3;
const ROLLING: u32 = 4;

/// From this many keys on, the sink's deltas are rolling: the last sums
/// (8 bytes a key) are rewritten a piece at a time inside the deltas, so
/// that no checkpoint writes them all at once (W2 with 1,000,000 keys: 8
/// MB, which stalled the checkpoints behind it by ~100 ms at a 10 ms
/// interval). Below it a full part is small enough to write whole.
pub(super) const ROLLING_MIN_KEYS: u64 = 65_536;

/// Keys in one piece of a rolling part (a multiple of 64: whole words of
/// the seen-key bitset): 16 KB of last sums.
const PIECE_KEYS: u64 = 2048;

/// A rolling delta of the sink's check: what changed since the base
/// (applied first), then the counters and sequence bitset whole and the
/// last sums and seen flags of keys `lo..` (a piece of [`PIECE_KEYS`]
/// keys or a few, possibly none). A restore needs the chain's parts from
/// checkpoint `from` on: every piece was rewritten since.
#[derive(Serialize, serde::Deserialize)]
struct RollingPart {
    from: CheckpointId,
    changes: SinkChanges,
    lo: u64,
    piece: CompactCheck<'static>,
}

/// [`RollingPart`], borrowed, for encoding (the same bytes).
#[derive(Serialize)]
struct RollingPartRef<'a> {
    from: CheckpointId,
    changes: &'a SinkChanges,
    lo: u64,
    piece: CompactCheck<'a>,
}

/// [`SinkState`] with a borrowed part, for encoding a part without a copy
/// of the check or of a snapshot's changes: the bytes are [`SinkState`]'s
/// (postcard encodes neither names nor references; tested).
#[derive(Serialize)]
struct SinkStateRef<'a> {
    id: CheckpointId,
    part: SinkPartRef<'a>,
}

/// A written [`SinkPart`], borrowed.
enum SinkPartRef<'a> {
    CompactFull(CompactCheck<'a>),
    CompactDelta(&'a SinkChanges),
    Rolling(RollingPartRef<'a>),
}

impl Serialize for SinkPartRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SinkPartRef::CompactFull(c) => {
                s.serialize_newtype_variant("SinkPart", COMPACT_FULL, "CompactFull", c)
            }
            SinkPartRef::CompactDelta(c) => {
                s.serialize_newtype_variant("SinkPart", COMPACT_DELTA, "CompactDelta", c)
            }
            SinkPartRef::Rolling(r) => {
                s.serialize_newtype_variant("SinkPart", ROLLING, "Rolling", r)
            }
        }
    }
}

/// The encoding of a full part of `check` for checkpoint `id`, into a
/// buffer of the exact size (`compact_encoded_size` is exact, so the
/// buffer never grows), kept from an earlier part when the snapshot
/// thread has one ([`lockgate::tuning::snapshot_buffer`]).
pub(super) fn encode_full_part(id: CheckpointId, check: &SinkCheck) -> Result<Vec<u8>, BoxError> {
    let state = SinkStateRef {
        id,
        part: SinkPartRef::CompactFull(check.compact()),
    };
    let size = full_part_bytes(id, check)?;
    Ok(postcard::to_extend(
        &state,
        lockgate::tuning::snapshot_buffer(size),
    )?)
}

/// The exact size in bytes of a full part's encoding: the id, the
/// variant's tag (one byte), then the compact check (O(1) for a replica,
/// whose shape is kept: no encoding).
fn full_part_bytes(id: CheckpointId, check: &SinkCheck) -> Result<usize, BoxError> {
    Ok(postcard::to_allocvec(&id)?.len() + 1 + check.compact_encoded_size() as usize)
}

/// A replica of `check` for the sink's snapshot thread, with `check`
/// tracking its changes from now on. Made when an attempt starts or
/// restores, before any record: the copy is O(state) (the seen bitset,
/// 2.5 MB for W1's 20 M records), so the first checkpoint's synchronous
/// part, which made it before, stays O(changes) like every other (it took
/// 4.4 ms at W2's first checkpoint, measured with a temporary timer).
pub(super) fn seeded_replica(check: &mut SinkCheck) -> Arc<Mutex<SinkReplica>> {
    check.track_changes();
    Arc::new(Mutex::new(SinkReplica::new(check.replica())))
}

/// [`seeded_replica`] for an attempt's new check, which nothing has
/// changed yet: the replica starts empty instead of as a copy, so the
/// job's start does not copy the bitset into fresh memory (the job thread
/// builds the sink; copying W1's 5 MB there zeroed fresh huge pages
/// beside the first records, `perf record`, docs/benchmarks-history.md).
pub(super) fn fresh_replica(check: &mut SinkCheck) -> Arc<Mutex<SinkReplica>> {
    check.track_changes();
    Arc::new(Mutex::new(SinkReplica::new(check.empty_replica())))
}

/// The snapshot thread's copy of the sink's check, and the changes each
/// snapshot since the last completed checkpoint took.
pub(super) struct SinkReplica {
    check: SinkCheck,
    /// The changes of each snapshot after `first` and after the base of
    /// the last delta, by checkpoint.
    log: std::collections::BTreeMap<CheckpointId, SinkChanges>,
    /// The last full part's checkpoint: a delta's base must be at or
    /// after it (the log holds every snapshot's changes since).
    first: Option<CheckpointId>,
    /// Rolling deltas: for each part written from the newest possible
    /// base on, per piece of keys, the checkpoint whose part last
    /// rewrote it in that part's chain (a full part rewrites all).
    rewrites: std::collections::BTreeMap<CheckpointId, Vec<CheckpointId>>,
    /// Pieces earned and not yet rewritten (1/spread of them a part).
    credit: f64,
}

impl SinkReplica {
    fn new(check: SinkCheck) -> Self {
        SinkReplica {
            check,
            log: Default::default(),
            first: None,
            rewrites: Default::default(),
            credit: 0.0,
        }
    }

    /// Pieces of keys in the check.
    fn pieces(&self) -> usize {
        self.check.sizes().1.div_ceil(PIECE_KEYS) as usize
    }

    /// The rolling delta of checkpoint `req.id` on `base` with `changes`
    /// (those since the base): the pieces whose turn it is are rewritten;
    /// `None` when it would not be smaller than a full part.
    fn rolling_delta(
        &mut self,
        req: &SnapshotRequest,
        base: CheckpointId,
        changes: &SinkChanges,
        full_bytes: u64,
    ) -> Result<Option<EncodedState>, BoxError> {
        let Some(mut at) = self.rewrites.get(&base).cloned() else {
            return Ok(None);
        };
        let pieces = at.len();
        let spread = u64::from(req.spread.max(1));
        self.credit = (self.credit + pieces as f64 / spread as f64).min(pieces as f64);
        // A contiguous run from the piece rewritten longest ago: as many
        // as earned, at least one once that one waited twice the spread.
        let oldest = (0..pieces).min_by_key(|&i| at[i]).unwrap_or(0);
        let overdue = at
            .get(oldest)
            .is_some_and(|a| a.get().saturating_add(2 * spread) <= req.id.get());
        let mut n = (self.credit.floor() as usize).min(pieces - oldest);
        if overdue {
            n = n.max(1);
        }
        self.credit = (self.credit - n as f64).max(0.0);
        for a in &mut at[oldest..oldest + n] {
            *a = req.id;
        }
        let keys = self.check.sizes().1;
        let lo = oldest as u64 * PIECE_KEYS;
        let hi = (lo + n as u64 * PIECE_KEYS).min(keys);
        let lo = lo.min(hi);
        let from = at.iter().copied().min().unwrap_or(req.id);
        let state = SinkStateRef {
            id: req.id,
            part: SinkPartRef::Rolling(RollingPartRef {
                from,
                changes,
                lo,
                piece: self.check.compact_piece(lo, hi),
            }),
        };
        let size = postcard::experimental::serialized_size(&state)?;
        if size as u64 >= full_bytes {
            return Ok(None);
        }
        let bytes = postcard::to_extend(&state, lockgate::tuning::snapshot_buffer(size))?;
        self.rewrites.insert(req.id, at);
        Ok(Some(EncodedState::rolling(bytes, full_bytes, from)))
    }

    /// The part of checkpoint `req.id`, after applying `changes` (taken by
    /// the sink's synchronous part; `None` for the attempt's first
    /// snapshot). A delta when `req.base` is a checkpoint of this attempt
    /// and the delta is smaller than a full part; when `req.base` is the
    /// snapshot just before this one (checkpoints complete within their
    /// interval), the delta is `changes` itself, encoded in place (no
    /// merge, sort or copy of the changed words).
    ///
    /// Returns the encoding and a `SinkChanges` this replica no longer
    /// needs (an earlier snapshot's, before the base), to be reused.
    pub(super) fn snapshot(
        &mut self,
        req: &SnapshotRequest,
        changes: Option<SinkChanges>,
    ) -> Result<(EncodedState, Option<SinkChanges>), BoxError> {
        if let Some(c) = &changes {
            self.check.apply_changes(c)?;
        }
        // Between the pieces of this work, a snapshot thread gives its
        // core back to a task that waits for it (`lockgate::tuning::yield_point`).
        lockgate::tuning::yield_point();
        self.log.insert(req.id, changes.unwrap_or_default());
        let full_bytes = full_part_bytes(req.id, &self.check)? as u64;
        let mut done = None;
        let rolling = self.check.sizes().1 >= ROLLING_MIN_KEYS;
        let base = req.base.filter(|b| {
            self.first.is_some_and(|f| f <= *b) && (!rolling || self.rewrites.contains_key(b))
        });
        if let Some(base) = base {
            let kept = self.log.split_off(&base.next());
            if rolling {
                self.rewrites = self.rewrites.split_off(&base);
            }
            let before = std::mem::replace(&mut self.log, kept);
            done = before.into_values().max_by_key(|c| c.word_count());
            let only = (self.log.len() == 1)
                .then(|| self.log.get(&req.id))
                .flatten();
            if let (true, Some(only)) = (rolling, only) {
                // The log keeps its entry, a later delta's changes too.
                let only = only.clone();
                let part = self.rolling_delta(req, base, &only, full_bytes)?;
                return match part {
                    Some(part) => Ok((part, done)),
                    None => self.full(req, done),
                };
            }
            let delta = if let Some(only) = only {
                // This snapshot's changes: the replica's values of them.
                encode_delta(req.id, only, full_bytes)?
            } else {
                let mut words: Vec<u64> =
                    self.log.values().flat_map(|c| c.word_indices()).collect();
                let mut keys: Vec<u64> = self.log.values().flat_map(|c| c.keys_iter()).collect();
                lockgate::tuning::yield_point();
                words.sort_unstable();
                words.dedup();
                lockgate::tuning::yield_point();
                keys.sort_unstable();
                keys.dedup();
                lockgate::tuning::yield_point();
                let merged = self.check.changes_of(&words, &keys);
                lockgate::tuning::yield_point();
                if rolling {
                    if let Some(part) = self.rolling_delta(req, base, &merged, full_bytes)? {
                        return Ok((part, done));
                    }
                    None
                } else {
                    encode_delta(req.id, &merged, full_bytes)?
                }
            };
            if let Some(bytes) = delta {
                let encoded = EncodedState::delta(bytes, full_bytes);
                return Ok((encoded, done));
            }
        }
        self.full(req, done)
    }

    /// A full part of checkpoint `req.id` (and the spare changes).
    fn full(
        &mut self,
        req: &SnapshotRequest,
        mut done: Option<SinkChanges>,
    ) -> Result<(EncodedState, Option<SinkChanges>), BoxError> {
        let rolling = self.check.sizes().1 >= ROLLING_MIN_KEYS;
        // A full part: the log restarts here. A later delta needs a base
        // at or after this snapshot (`first`), else that part is full
        // too; without this, every part full (`--incremental false`) let
        // the log grow by a snapshot's changes at every checkpoint.
        let logged = std::mem::take(&mut self.log).into_values();
        done = done
            .into_iter()
            .chain(logged)
            .max_by_key(|c| c.word_count());
        self.first = Some(req.id);
        self.rewrites.clear();
        self.credit = 0.0;
        if rolling {
            let pieces = self.pieces();
            self.rewrites.insert(req.id, vec![req.id; pieces]);
        }
        lockgate::tuning::yield_point();
        let full = EncodedState::full(encode_full_part(req.id, &self.check)?);
        Ok((full, done))
    }
}

/// The encoding of a delta part of checkpoint `id`, `None` when it would
/// not be smaller than a full part of `full_bytes` bytes (then a full
/// part is written instead).
fn encode_delta(
    id: CheckpointId,
    changes: &SinkChanges,
    full_bytes: u64,
) -> Result<Option<Vec<u8>>, BoxError> {
    let state = SinkStateRef {
        id,
        part: SinkPartRef::CompactDelta(changes),
    };
    let size = postcard::experimental::serialized_size(&state)?;
    if size as u64 >= full_bytes {
        return Ok(None);
    }
    Ok(Some(postcard::to_extend(
        &state,
        lockgate::tuning::snapshot_buffer(size),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check that took every third record of `0..records` below
    /// `frontier` (and the others below `frontier / 2`), over 500 keys.
    fn check_up_to(records: u64, frontier: u64) -> SinkCheck {
        let mut check = SinkCheck::new(records, 500).unwrap();
        for n in (0..frontier).filter(|n| n % 3 == 0 || *n < frontier / 2) {
            check.observe(&crate::workload::SumRecord {
                key: n % 500,
                sum: n * 7,
                n,
                ts_ns: 0,
            });
        }
        check
    }

    #[test]
    fn a_full_part_encoded_by_reference_is_the_owned_encoding_and_decodes() {
        let check = check_up_to(100_000, 60_000);
        let id = CheckpointId(300);
        let by_ref = encode_full_part(id, &check).unwrap();
        assert_eq!(
            by_ref.capacity(),
            by_ref.len(),
            "the buffer was sized exactly"
        );
        assert_eq!(by_ref.len(), full_part_bytes(id, &check).unwrap());
        let back: SinkState = postcard::from_bytes(&by_ref).unwrap();
        assert_eq!(back.id, id);
        // The owned layout's variant index is the one written by
        // reference: the owned state encodes to the same bytes.
        assert_eq!(postcard::to_allocvec(&back).unwrap(), by_ref);
        let SinkPart::CompactFull(compact) = back.part else {
            panic!("a compact full part")
        };
        let decoded = SinkCheck::from_compact(compact, check.sizes()).unwrap();
        assert_eq!(decoded, check);
        assert_eq!(decoded.distinct(), check.distinct());
        // The bitset's first 30,000 bits are all ones and its last 40,000
        // zeros (1,093 of its 1,563 words): the prefix is a count and the
        // suffix is left out.
        let raw = postcard::to_allocvec(&check).unwrap().len();
        assert!(
            by_ref.len() <= raw - 1_090 * 8,
            "compact {} bytes, raw {raw}",
            by_ref.len()
        );
    }

    #[test]
    fn a_compact_full_part_of_other_sizes_or_too_many_words_is_refused() {
        let check = check_up_to(10_000, 6_000);
        let bytes = encode_full_part(CheckpointId(1), &check).unwrap();
        let compact = || match postcard::from_bytes::<SinkState>(&bytes).unwrap().part {
            SinkPart::CompactFull(c) => c,
            _ => panic!("a compact full part"),
        };
        let err = SinkCheck::from_compact(compact(), (1 << 33, 500)).unwrap_err();
        assert!(
            err.to_string().contains("for 10000 records over 500 keys"),
            "{err}"
        );
        // A prefix longer than the bitset (a corrupt count whose CRC was
        // fixed up): refused, not a panic or a huge allocation.
        let mut crafted = postcard::to_allocvec(&CheckpointId(1)).unwrap();
        crafted.push(COMPACT_FULL as u8);
        crafted.extend(
            postcard::to_allocvec(&(10_000u64, 500u64, 1u64 << 40, Vec::<u8>::new())).unwrap(),
        );
        let tail = &bytes[bytes.len() - (check.compact_encoded_size() as usize)..];
        let (_, rest) = postcard::take_from_bytes::<(u64, u64, u64, Vec<u8>)>(tail).unwrap();
        crafted.extend_from_slice(rest);
        let part = match postcard::from_bytes::<SinkState>(&crafted).unwrap().part {
            SinkPart::CompactFull(c) => c,
            _ => panic!("a compact full part"),
        };
        let err = SinkCheck::from_compact(part, check.sizes()).unwrap_err();
        assert!(err.to_string().contains("more than 157"), "{err}");
    }

    #[test]
    fn parts_in_the_older_layouts_still_restore() {
        // Written before the compact layouts: a full part word by word,
        // then deltas that list every changed word.
        let mut check = SinkCheck::new(30_000, 40).unwrap();
        check.track_changes();
        let mut next = 0;
        let mut parts = Vec::new();
        let mut observe = |check: &mut SinkCheck, count: u64| {
            for n in next..next + count {
                check.observe(&crate::workload::SumRecord {
                    key: n % 40,
                    sum: n,
                    n,
                    ts_ns: 0,
                });
            }
            next += count;
        };
        observe(&mut check, 1_000);
        let mut changes = SinkChanges::default();
        check.take_changes_into(&mut changes);
        let old = |part: SinkPart| {
            postcard::to_allocvec(&SinkState {
                id: CheckpointId(1),
                part,
            })
            .unwrap()
        };
        parts.push(old(SinkPart::Full(check.clone())));
        for count in [9_000, 500] {
            observe(&mut check, count);
            check.take_changes_into(&mut changes);
            assert!(changes.word_indices().next().is_some());
            parts.push(old(SinkPart::Delta(SinkChangesV1::from(&changes))));
        }
        let decoded: Vec<SinkState> = parts
            .iter()
            .enumerate()
            .map(|(i, b)| decode_sink_state(b, i, parts.len()).unwrap())
            .collect();
        assert_eq!(check_of_chain(decoded, check.sizes()).unwrap(), check);
        // A delta that does not fit (a word past the end) is refused,
        // naming its checkpoint; so are bytes after a part's state.
        let mut bad = SinkChanges::default();
        check.take_changes_into(&mut bad);
        let mut v1 = SinkChangesV1::from(&bad);
        v1.words_mut().push((1 << 40, 1));
        let mut chain: Vec<SinkState> = parts
            .iter()
            .map(|b| postcard::from_bytes::<SinkState>(b).unwrap())
            .collect();
        chain.push(SinkState {
            id: CheckpointId(4),
            part: SinkPart::Delta(v1),
        });
        let err = check_of_chain(chain, check.sizes()).unwrap_err();
        assert!(
            err.to_string().starts_with("the sink's part of chk-4: "),
            "{err}"
        );
        let mut long = parts[1].clone();
        long.extend_from_slice(&[0; 70]);
        let err = decode_sink_state(&long, 1, 3)
            .err()
            .expect("trailing bytes");
        assert!(
            err.to_string().contains("70 bytes after its state"),
            "{err}"
        );
        let err = decode_sink_state(&long[..5], 1, 3)
            .err()
            .expect("cut short");
        assert!(
            err.to_string().starts_with("the sink's part 2 of 3"),
            "{err}"
        );
    }

    /// The check that `parts` (a full part, then deltas) restore.
    fn restored(parts: &[&EncodedState]) -> SinkCheck {
        let decoded: Vec<SinkState> = parts
            .iter()
            .map(|p| postcard::from_bytes::<SinkState>(&p.bytes).unwrap())
            .collect();
        let sizes = match &decoded[0].part {
            SinkPart::CompactFull(c) => {
                postcard::from_bytes::<(u64, u64)>(&postcard::to_allocvec(c).unwrap()).unwrap()
            }
            _ => panic!("the chain starts at a compact full part"),
        };
        check_of_chain(decoded, sizes).unwrap()
    }

    #[test]
    fn replica_parts_restore_the_check_whether_the_base_is_the_last_snapshot_or_older() {
        // Two sources far apart: the even records run ahead of the odd
        // ones, so a full part holds the words between them (the compact
        // layout leaves out only the all-ones prefix and the zero
        // suffix) and a delta the words near the two frontiers.
        let mut check = SinkCheck::new(24_000, 30).unwrap();
        let take = |check: &mut SinkCheck, ns: &mut dyn Iterator<Item = u64>| {
            for n in ns {
                check.observe(&crate::workload::SumRecord {
                    key: n * 7 % 30,
                    sum: n,
                    n,
                    ts_ns: 0,
                });
            }
        };
        take(&mut check, &mut (0..16_000).step_by(2));
        take(&mut check, &mut (1..2_000).step_by(2));
        let replica = seeded_replica(&mut check);
        let (even, odd) = (std::cell::Cell::new(16_000), std::cell::Cell::new(2_001));
        // `count` records: four even ones for each odd one.
        let observe = |check: &mut SinkCheck, count: u64| {
            for i in 0..count {
                let next = if i % 5 == 4 { &odd } else { &even };
                take(check, &mut std::iter::once(next.get()));
                next.set(next.get() + 2);
            }
        };
        let snap = |check: &mut SinkCheck, id: u64, base: Option<u64>, first: bool| {
            let changes = (!first).then(|| {
                let mut c = SinkChanges::default();
                check.take_changes_into(&mut c);
                c
            });
            let req = SnapshotRequest {
                id: CheckpointId(id),
                base: base.map(CheckpointId),
                spread: SnapshotRequest::DEFAULT_SPREAD,
            };
            replica.lock().unwrap().snapshot(&req, changes).unwrap()
        };
        let (p1, done) = snap(&mut check, 1, None, true);
        assert!(!p1.delta);
        assert!(done.is_some(), "a full part hands its own changes back");
        observe(&mut check, 500);
        let at2 = check.clone();
        // Base 1 is the snapshot just before: the delta is 2's changes.
        let (p2, done) = snap(&mut check, 2, Some(1), false);
        assert!(p2.delta, "500 records change less than the whole check");
        assert!(done.is_none(), "nothing was logged before 2");
        assert_eq!(restored(&[&p1, &p2]), at2);
        observe(&mut check, 700);
        // 2 did not complete: 3's delta merges the changes of 2 and 3.
        let (p3, _) = snap(&mut check, 3, Some(1), false);
        assert!(p3.delta);
        assert_eq!(restored(&[&p1, &p3]), check);
        observe(&mut check, 300);
        let (p4, done) = snap(&mut check, 4, Some(3), false);
        assert!(p4.delta);
        let done = done.expect("2's and 3's entries are handed back");
        assert!(done.word_count() > 0, "the larger one, with its words");
        assert_eq!(restored(&[&p1, &p3, &p4]), check);
        assert_eq!(
            p4.full_bytes,
            encode_full_part(CheckpointId(4), &check).unwrap().len() as u64
        );
        // A delta as large as a full part is written full: a quarter of
        // the records between the frontiers change every word there, and
        // none is full.
        take(
            &mut check,
            &mut (odd.get() + 2..even.get()).filter(|n| n % 4 == 1),
        );
        let (p5, _) = snap(&mut check, 5, Some(4), false);
        assert!(!p5.delta, "every word changed: a full part is smaller");
        assert_eq!(restored(&[&p5]), check);
        assert!(
            replica.lock().unwrap().log.is_empty(),
            "a full part restarts the log"
        );
        // 5 did not complete and its log is gone: a delta on 4 would miss
        // 5's changes, so 6 is full; 7 on 6 is a delta again.
        observe(&mut check, 100);
        let (p6, _) = snap(&mut check, 6, Some(4), false);
        assert!(!p6.delta);
        assert_eq!(restored(&[&p6]), check);
        observe(&mut check, 100);
        let (p7, _) = snap(&mut check, 7, Some(6), false);
        assert!(p7.delta);
        assert_eq!(restored(&[&p6, &p7]), check);
        // Every part full (no base): the log stays empty.
        for id in 8..12 {
            observe(&mut check, 50);
            let (p, _) = snap(&mut check, id, None, false);
            assert!(!p.delta);
            assert!(replica.lock().unwrap().log.is_empty());
        }
    }

    /// With many keys the sink's deltas are rolling: each rewrites a few
    /// pieces of the last sums (a part stays far below the full size), a
    /// part's chain trimmed to the checkpoint it names restores exactly the
    /// check at that part (so does the whole chain back to the full part),
    /// whatever checkpoints completed (bases of later parts) or not, and
    /// the trimmed chain stays within twice the spread.
    #[test]
    fn rolling_parts_restore_the_check_from_the_checkpoint_they_name() {
        let keys = ROLLING_MIN_KEYS * 2;
        let mut check = SinkCheck::new(2_000_000, keys).unwrap();
        let replica = seeded_replica(&mut check);
        let spread = 8u32;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = 0u64;
        // Per checkpoint: (trimmed chain, whole chain) of parts.
        type Chain = Vec<Vec<u8>>;
        let mut chains: std::collections::HashMap<u64, (Chain, Chain)> = Default::default();
        let mut completed: Option<u64> = None;
        let mut saw_rolling = 0;
        for id in 1..=60u64 {
            for _ in 0..300 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                check.observe(&crate::workload::SumRecord {
                    key: rng % keys,
                    sum: rng >> 20,
                    n: next,
                    ts_ns: 0,
                });
                next += 1;
            }
            let mut changes = SinkChanges::default();
            check.take_changes_into(&mut changes);
            let changes = Some(changes);
            let req = SnapshotRequest {
                id: CheckpointId(id),
                base: completed.map(CheckpointId),
                spread,
            };
            let (part, _) = replica.lock().unwrap().snapshot(&req, changes).unwrap();
            let decoded: SinkState = postcard::from_bytes(&part.bytes).unwrap();
            assert_eq!(decoded.id, CheckpointId(id));
            let (trimmed, whole) = if part.delta {
                let from = part
                    .chain_from
                    .expect("a rolling part names its chain's start");
                assert!(matches!(decoded.part, SinkPart::Rolling(_)));
                assert!(
                    part.bytes.len() * 4 < part.full_bytes as usize,
                    "{} of {}",
                    part.bytes.len(),
                    part.full_bytes
                );
                saw_rolling += 1;
                let (mut t, mut w) = chains[&completed.unwrap()].clone();
                t.push(part.bytes.clone());
                w.push(part.bytes.clone());
                let ids: Vec<u64> = t
                    .iter()
                    .map(|b| postcard::from_bytes::<SinkState>(b).unwrap().id.get())
                    .collect();
                let keep = ids
                    .iter()
                    .position(|i| *i == from.get())
                    .expect("from is in the chain");
                t.drain(..keep);
                assert!(t.len() <= 2 * spread as usize + 1, "{} parts", t.len());
                (t, w)
            } else {
                (vec![part.bytes.clone()], vec![part.bytes.clone()])
            };
            for chain in [&trimmed, &whole] {
                let parts: Vec<SinkState> = chain
                    .iter()
                    .map(|b| postcard::from_bytes(b).unwrap())
                    .collect();
                let back = check_of_chain(parts, (2_000_000, keys)).unwrap();
                assert!(back == check, "checkpoint {id}, {} parts", chain.len());
            }
            chains.insert(id, (trimmed, whole));
            // Two in three complete.
            if id % 3 != 0 {
                completed = Some(id);
            }
        }
        assert!(saw_rolling > 30, "{saw_rolling} rolling parts");
    }
}
