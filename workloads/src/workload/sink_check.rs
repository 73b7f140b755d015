//! The sink's side of the correctness check ([`SinkCheck`]: every record
//! by sequence number, the last sum per key) and what makes it cheap to
//! checkpoint: the changes since the last snapshot ([`SinkChanges`], and
//! the older layout [`SinkChangesV1`] still read on restore), the compact
//! layout of a full part ([`CompactCheck`]) and the word vectors as byte
//! strings. The reference sink (`refjob`) writes these into its
//! checkpoints, so their encodings must not change.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::check::{fingerprint, CheckReport, ExpectedResult, KeyMismatch};
use super::error::WorkloadError;
use super::params::{MAX_CHECKED_RECORDS, MAX_KEYS};
use super::pipeline::SumRecord;

/// The sink's side of the correctness check: counts records, keeps the last
/// `sum` per key, and counts lost and duplicated records by sequence number
/// (a bitset over `n` in `0..total_records`, 1 bit a record).
///
/// Keeping the *last* sum per key is sound although the sink merges two
/// inputs: all records of a key go to the same `keyed_sum` subtask (routing
/// is by key), which emits them in its processing order on one channel, and
/// a channel keeps order; so the last record of a key the sink sees carries
/// that key's final running sum. (The *order* of the keys' records is not
/// `n` order — two sources interleave — but the final sum is the same.)
///
/// Serde-serializable so that an exactly-once sink can checkpoint it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkCheck {
    total_records: u64,
    keys: u64,
    #[serde(with = "words_as_bytes")]
    seen: Vec<u64>,
    received: u64,
    distinct: u64,
    duplicates: u64,
    out_of_range: u64,
    #[serde(with = "words_as_bytes")]
    last_sum: Vec<u64>,
    #[serde(with = "words_as_bytes")]
    key_seen: Vec<u64>,
    /// What changed since the changes were last taken, once
    /// [`SinkCheck::track_changes`] was called (not serialized, not
    /// compared).
    #[serde(skip)]
    marks: Marks,
    /// The all-ones prefix and zero suffix of `seen`, kept by
    /// [`SinkCheck::apply_changes`] once [`SinkCheck::track_shape`] was
    /// called (not serialized, not compared).
    #[serde(skip)]
    shape: ShapeCache,
}

/// Where the sequence bitset's words stop being all ones and where they
/// start being all zeros: `seen[..ones]` are all ones, `seen[end..]` all
/// zeros, `ones <= end`. A compact full part ([`SinkCheck::compact`])
/// writes only `seen[ones..end]`: records arrive at the sink in about
/// their sequence order, so that is the stretch between the slowest and
/// the fastest source plus what is in flight (W1 mid-run: a few KB of a
/// 5 MB bitset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Shape {
    ones: u64,
    end: u64,
}

/// A kept [`Shape`] (a replica's), or none (it is then found by a scan).
#[derive(Clone, Debug, Default)]
struct ShapeCache(Option<Shape>);

impl PartialEq for ShapeCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ShapeCache {}

/// The words of `seen` and the keys of `last_sum` changed since the last
/// [`SinkCheck::take_changes`]: a mark bit per word (a mark word per block
/// of 64 words, each block listed once) and per key.
#[derive(Clone, Debug, Default)]
struct Marks(Option<Box<ChangeMarks>>);

#[derive(Clone, Debug)]
struct ChangeMarks {
    /// The blocks whose mark word is not zero, in the order they were
    /// first marked.
    blocks: Vec<u64>,
    /// Mark word `b` holds a bit per word of block `b` (words `64 b ..
    /// 64 b + 64`).
    word_marks: Vec<u64>,
    /// The word marked last (`u64::MAX`: none since the last take): the
    /// records of a batch run through a few words in order (a 1,000-record
    /// batch of W1 covers about 31), so one compare skips most bit tests.
    last_word: u64,
    /// Whether changed keys are marked (the last sums are larger than
    /// [`SUMS_TAKEN_WHOLE_BYTES`]); if not, every key seen counts as
    /// changed and `key_marks` is empty.
    keys_marked: bool,
    /// The changed keys when `keys_marked`; otherwise a list kept for its
    /// capacity, filled with every seen key at each take.
    keys: Vec<u64>,
    key_marks: Vec<u64>,
}

/// 128 KiB of last sums (16,384 keys): up to this size a snapshot's
/// changes take every seen key's sum instead of marking the keys that
/// changed. Marking costs the sink a bit test, a store and a branch for
/// every record, most of the 10.6 instructions a record that tracking
/// changes added to W1's sink (callgrind: `RefSink::write` 50.0 → 71.3 M
/// instructions for 2 M records, docs/benchmarks-history.md), several ms of the sink
/// thread's CPU per 100 ms checkpoint interval at W1's rate; listing
/// 16,384 sums from the seen-key bitset costs the synchronous part tens of
/// µs once per checkpoint. With W1's and W2's 10,000 keys nearly every
/// key changes within a 100 ms interval anyway (86 % at W2's 200,000
/// records/s, all of them at W1's rate), so the delta is hardly larger;
/// past this size (W2 with 1,000,000 keys: 8 MB of sums) keys are marked
/// and the synchronous part stays O(changes).
pub const SUMS_TAKEN_WHOLE_BYTES: usize = 128 << 10;

impl PartialEq for Marks {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Marks {}

/// What changed in a [`SinkCheck`] over some time: the new values of the
/// changed words of the sequence bitset and the new last sums of the
/// changed keys, with the counters (O(changes) to take and to encode).
///
/// The changed words come in blocks of 64 words (4,096 sequence numbers,
/// one word of the change marks): a block whose words are now all ones is
/// a run (`ones`, merged with its neighbours), the words of any other
/// block are listed one by one (`words`). The sequence numbers of a run
/// all arrive sooner or later, so most changed blocks end full: a 100 ms
/// interval of W1 changes about 85,000 words, which took 1.1 MB as
/// `(index, word)` varint pairs, and takes a few runs and the few hundred
/// words at the sources' frontiers this way (docs/benchmarks-history.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkChanges {
    received: u64,
    distinct: u64,
    duplicates: u64,
    out_of_range: u64,
    /// `(first word, words)` of the sequence bitset, each word now all
    /// ones; ascending, not adjacent to each other.
    ones: Vec<(u64, u64)>,
    /// (word index, word) of the sequence bitset, ascending, outside the
    /// runs.
    words: Vec<(u64, u64)>,
    /// (key, last sum); the key has been seen.
    sums: Vec<(u64, u64)>,
}

/// [`SinkChanges`] as checkpoints wrote them before runs of full blocks
/// (`words` only): read to restore such a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkChangesV1 {
    received: u64,
    distinct: u64,
    duplicates: u64,
    out_of_range: u64,
    words: Vec<(u64, u64)>,
    sums: Vec<(u64, u64)>,
}

impl SinkChangesV1 {
    /// The changed words, to craft a part in this layout.
    #[cfg(test)]
    pub(crate) fn words_mut(&mut self) -> &mut Vec<(u64, u64)> {
        &mut self.words
    }
}

impl From<SinkChangesV1> for SinkChanges {
    fn from(v1: SinkChangesV1) -> Self {
        SinkChanges {
            received: v1.received,
            distinct: v1.distinct,
            duplicates: v1.duplicates,
            out_of_range: v1.out_of_range,
            ones: Vec::new(),
            words: v1.words,
            sums: v1.sums,
        }
    }
}

impl From<&SinkChanges> for SinkChangesV1 {
    /// The older layout of the same changes (the runs listed word by
    /// word), for tests of restores across versions.
    fn from(c: &SinkChanges) -> Self {
        let mut words: Vec<(u64, u64)> = c
            .ones
            .iter()
            .flat_map(|&(first, n)| (first..first + n).map(|w| (w, u64::MAX)))
            .chain(c.words.iter().copied())
            .collect();
        words.sort_unstable();
        SinkChangesV1 {
            received: c.received,
            distinct: c.distinct,
            duplicates: c.duplicates,
            out_of_range: c.out_of_range,
            words,
            sums: c.sums.clone(),
        }
    }
}

impl SinkChanges {
    /// Changed words of the sequence bitset (those of the runs included).
    pub fn word_count(&self) -> usize {
        self.ones.iter().map(|&(_, n)| n as usize).sum::<usize>() + self.words.len()
    }

    /// Changed keys.
    pub fn key_count(&self) -> usize {
        self.sums.len()
    }

    /// The changed words' indices: the runs' words, then the others.
    pub fn word_indices(&self) -> impl Iterator<Item = u64> + '_ {
        self.ones
            .iter()
            .flat_map(|&(first, n)| first..first + n)
            .chain(self.words.iter().map(|(w, _)| *w))
    }

    /// The changed keys, in the order they were taken.
    pub fn keys_iter(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.sums.iter().map(|(k, _)| *k)
    }
}

/// The bytes of `v` as a postcard varint (7 bits a byte).
fn varint_len(v: u64) -> u64 {
    u64::from(64 - v.max(1).leading_zeros()).div_ceil(7)
}

/// The bytes of `n` words serialized by `words_as_bytes`: the byte
/// string's length as a varint, then 8 bytes a word.
fn words_len(n: u64) -> u64 {
    varint_len(8 * n) + 8 * n
}

/// A [`SinkCheck`] in the compact layout of full parts: the sequence
/// bitset as the count of its leading all-ones words and the words after
/// them up to its zero suffix. Borrowed from a check to serialize
/// ([`SinkCheck::compact`]), owned when deserialized, then made a check
/// by [`SinkCheck::from_compact`].
#[derive(Debug, Serialize, Deserialize)]
pub struct CompactCheck<'a> {
    total_records: u64,
    keys: u64,
    ones: u64,
    #[serde(with = "words_as_bytes::cow")]
    middle: Cow<'a, [u64]>,
    received: u64,
    distinct: u64,
    duplicates: u64,
    out_of_range: u64,
    #[serde(with = "words_as_bytes::cow")]
    last_sum: Cow<'a, [u64]>,
    #[serde(with = "words_as_bytes::cow")]
    key_seen: Cow<'a, [u64]>,
}

/// Serializes a word vector as one byte string (little-endian words):
/// a memory copy, where the default encoding (one varint per word, ~10
/// bytes for a random bitset word) costs several ms per MB on the sink's
/// thread at every checkpoint.
mod words_as_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Little-endian words as one byte string. On a little-endian
    /// machine that is the words' own memory, passed without a copy (the
    /// full part of W1's sink state is a 2.5 MB bitset: the copy cost the
    /// snapshot thread a fresh 2.5 MB buffer and its page faults at every
    /// full checkpoint, `perf record`, docs/benchmarks-history.md).
    pub(super) fn serialize<S: Serializer>(words: &[u64], s: S) -> Result<S::Ok, S::Error> {
        if cfg!(target_endian = "little") {
            return s.serialize_bytes(bytemuck::cast_slice(words));
        }
        let mut bytes = Vec::with_capacity(words.len() * 8);
        for w in words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        s.serialize_bytes(&bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        let bytes: Vec<u8> = serde::de::Deserialize::deserialize(d).map(|b: ByteBuf| b.0)?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom(format!(
                "a word vector needs a multiple of 8 bytes, got {}",
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// The same for a word slice that is borrowed to serialize and owned
    /// once deserialized.
    pub(super) mod cow {
        use std::borrow::Cow;

        use serde::Deserializer;

        pub(in super::super) use super::serialize;

        pub(in super::super) fn deserialize<'de, 'a, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Cow<'a, [u64]>, D::Error> {
            super::deserialize(d).map(Cow::Owned)
        }
    }

    /// A byte string read as serde bytes (what `serialize_bytes` wrote).
    struct ByteBuf(Vec<u8>);

    impl<'de> Deserialize<'de> for ByteBuf {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = ByteBuf;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a byte string")
                }
                fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
                    Ok(ByteBuf(v.to_vec()))
                }
                fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
                    Ok(ByteBuf(v))
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> Result<ByteBuf, A::Error> {
                    let mut out = Vec::new();
                    while let Some(b) = seq.next_element::<u8>()? {
                        out.push(b);
                    }
                    Ok(ByteBuf(out))
                }
            }
            d.deserialize_bytes(V)
        }
    }
}

#[inline]
fn bit_test_and_set(bits: &mut [u64], i: u64) -> bool {
    let (word, mask) = ((i / 64) as usize, 1u64 << (i % 64));
    let was = bits[word] & mask != 0;
    bits[word] |= mask;
    was
}

#[inline]
fn bit_test(bits: &[u64], i: u64) -> bool {
    bits[(i / 64) as usize] & (1u64 << (i % 64)) != 0
}

impl SinkCheck {
    /// A check for a run of `total_records` records over `keys` keys.
    ///
    /// Errors: [`WorkloadError::TooManyRecords`] above
    /// [`MAX_CHECKED_RECORDS`], [`WorkloadError::NoKeys`],
    /// [`WorkloadError::TooManyKeys`].
    pub fn new(total_records: u64, keys: u64) -> Result<Self, WorkloadError> {
        if total_records > MAX_CHECKED_RECORDS {
            return Err(WorkloadError::TooManyRecords(total_records));
        }
        if keys == 0 {
            return Err(WorkloadError::NoKeys);
        }
        if keys > MAX_KEYS {
            return Err(WorkloadError::TooManyKeys(keys));
        }
        Ok(SinkCheck {
            total_records,
            keys,
            seen: vec![0; total_records.div_ceil(64) as usize],
            received: 0,
            distinct: 0,
            duplicates: 0,
            out_of_range: 0,
            last_sum: vec![0; keys as usize],
            key_seen: vec![0; keys.div_ceil(64) as usize],
            marks: Marks::default(),
            shape: ShapeCache::default(),
        })
    }

    /// Checks that a check read from a checkpoint is whole: its bitsets
    /// and sums have the lengths its record and key counts give, within
    /// [`MAX_CHECKED_RECORDS`] and [`MAX_KEYS`]. A decoded check is
    /// otherwise taken as it is, and a short bitset made the sink panic on
    /// its first record out of it (a crafted part whose CRC was fixed up).
    ///
    /// # Errors
    /// [`WorkloadError::BadState`] naming the first length that is wrong.
    ///
    /// ```
    /// use lockgate_workloads::workload::SinkCheck;
    /// let check = SinkCheck::new(1_000, 10).unwrap();
    /// assert!(check.validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |what: &str, len: usize, want: u64| {
            Err(WorkloadError::BadState(format!(
                "sink check of {} records over {} keys: {what} holds {len} words, not {want}",
                self.total_records, self.keys
            )))
        };
        if self.total_records > MAX_CHECKED_RECORDS || self.keys == 0 || self.keys > MAX_KEYS {
            return Err(WorkloadError::BadState(format!(
                "sink check of {} records over {} keys: out of range",
                self.total_records, self.keys
            )));
        }
        if self.seen.len() as u64 != self.total_records.div_ceil(64) {
            return bad(
                "the sequence bitset",
                self.seen.len(),
                self.total_records.div_ceil(64),
            );
        }
        if self.last_sum.len() as u64 != self.keys {
            return bad("the last sums", self.last_sum.len(), self.keys);
        }
        if self.key_seen.len() as u64 != self.keys.div_ceil(64) {
            return bad(
                "the seen-key bitset",
                self.key_seen.len(),
                self.keys.div_ceil(64),
            );
        }
        Ok(())
    }

    /// The number of records and of keys this check is sized for.
    pub fn sizes(&self) -> (u64, u64) {
        (self.total_records, self.keys)
    }

    /// From now on, record which words and keys change, for
    /// [`SinkCheck::take_changes`] (costs a compare per record, a bit test
    /// when a record's word is not the last one's, and 1 bit per word of
    /// memory; with more than [`SUMS_TAKEN_WHOLE_BYTES`] of last sums, a
    /// bit test per record and 1 bit per key as well, and with fewer every
    /// seen key counts as changed).
    pub fn track_changes(&mut self) {
        let keys_marked = self.last_sum.len() * 8 > SUMS_TAKEN_WHOLE_BYTES;
        self.marks = Marks(Some(Box::new(ChangeMarks {
            blocks: Vec::new(),
            word_marks: vec![0; self.seen.len().div_ceil(64)],
            last_word: u64::MAX,
            keys_marked,
            keys: Vec::new(),
            key_marks: if keys_marked {
                vec![0; self.last_sum.len().div_ceil(64)]
            } else {
                Vec::new()
            },
        })));
    }

    /// What changed since changes were tracked or last taken (O(changes),
    /// and with at most [`SUMS_TAKEN_WHOLE_BYTES`] of last sums, every
    /// seen key's). Without [`SinkCheck::track_changes`]: everything.
    pub fn take_changes(&mut self) -> SinkChanges {
        let mut out = SinkChanges::default();
        self.take_changes_into(&mut out);
        out
    }

    /// [`SinkCheck::take_changes`] into `out`, whose lists are emptied and
    /// refilled: a `SinkChanges` handed back after an earlier snapshot
    /// lends its capacity, so the sink's synchronous snapshot part
    /// allocates nothing (a fresh list of W1's ~60,000 changed words a
    /// checkpoint, about 1 MB, came from fresh pages that the kernel
    /// zeroed on the sink's thread: `perf record`, docs/benchmarks-history.md).
    ///
    /// ```
    /// use lockgate_workloads::workload::{SinkChanges, SinkCheck, SumRecord};
    /// let mut check = SinkCheck::new(1_000, 10).unwrap();
    /// check.track_changes();
    /// check.observe(&SumRecord { key: 3, sum: 7, n: 130, ts_ns: 0 });
    /// let mut changes = SinkChanges::default();
    /// check.take_changes_into(&mut changes);
    /// assert_eq!((changes.word_count(), changes.key_count()), (1, 1));
    /// // No word changed since; with few keys every seen key is taken.
    /// check.take_changes_into(&mut changes);
    /// assert_eq!((changes.word_count(), changes.key_count()), (0, 1));
    /// ```
    pub fn take_changes_into(&mut self, out: &mut SinkChanges) {
        let Some(mut m) = self.marks.0.take() else {
            let mut keys = Vec::new();
            self.seen_keys_into(&mut keys);
            let blocks = self.seen.len().div_ceil(64) as u64;
            self.changes_into((0..blocks).map(|b| (b, self.block_mask(b))), &keys, out);
            return;
        };
        if !m.keys_marked {
            self.seen_keys_into(&mut m.keys);
        }
        // Ascending, so that full blocks next to each other make one run
        // (a few thousand blocks at most a W1 interval: the sort is tens
        // of µs).
        m.blocks.sort_unstable();
        let marks = &mut m.word_marks;
        self.changes_into(
            m.blocks
                .iter()
                .map(|&b| (b, std::mem::take(&mut marks[b as usize]))),
            &m.keys,
            out,
        );
        m.last_word = u64::MAX;
        if m.keys_marked {
            for &k in &m.keys {
                m.key_marks[(k / 64) as usize] &= !(1u64 << (k % 64));
            }
        }
        // Emptied, not replaced: the lists keep their capacity for the
        // next interval, which changes about as many words and keys (a
        // fresh list grew by doubling into fresh pages at every
        // checkpoint, on the sink's thread: 2 % of W1's samples).
        m.blocks.clear();
        m.keys.clear();
        self.marks.0 = Some(m);
    }

    /// The mark word of every word of block `b` (64 words, fewer in the
    /// last block).
    fn block_mask(&self, b: u64) -> u64 {
        let words = (self.seen.len() as u64 - b * 64).min(64);
        if words == 64 {
            u64::MAX
        } else {
            (1u64 << words) - 1
        }
    }

    /// The current values of words `words` and keys `keys`, with the
    /// counters (`words` in any order, repeats allowed).
    pub fn changes_of(&self, words: &[u64], keys: &[u64]) -> SinkChanges {
        let mut sorted = words.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        for w in sorted {
            match blocks.last_mut() {
                Some((b, marks)) if *b == w / 64 => *marks |= 1u64 << (w % 64),
                _ => blocks.push((w / 64, 1u64 << (w % 64))),
            }
        }
        let mut out = SinkChanges::default();
        self.changes_into(blocks.into_iter(), keys, &mut out);
        out
    }

    /// Every key seen, in order, into `keys` (emptied first): O(keys / 64)
    /// words scanned, a push per seen key.
    fn seen_keys_into(&self, keys: &mut Vec<u64>) {
        keys.clear();
        for (i, &bits) in self.key_seen.iter().enumerate() {
            let mut rest = bits;
            while rest != 0 {
                keys.push(i as u64 * 64 + u64::from(rest.trailing_zeros()));
                rest &= rest - 1;
            }
        }
    }

    /// The changes of `blocks` (ascending `(block, mark word)`: the marked
    /// words of each block) and of keys `keys` into `out` (its lists
    /// emptied first, their capacity kept): a block now all ones joins a
    /// run, whatever its marks; another gives its marked words.
    fn changes_into(
        &self,
        blocks: impl Iterator<Item = (u64, u64)>,
        keys: &[u64],
        out: &mut SinkChanges,
    ) {
        out.received = self.received;
        out.distinct = self.distinct;
        out.duplicates = self.duplicates;
        out.out_of_range = self.out_of_range;
        out.ones.clear();
        out.words.clear();
        let len = self.seen.len() as u64;
        for (b, marks) in blocks {
            if marks == 0 {
                continue;
            }
            let (lo, hi) = (b * 64, (b * 64 + 64).min(len));
            if self.seen[lo as usize..hi as usize]
                .iter()
                .all(|&w| w == u64::MAX)
            {
                match out.ones.last_mut() {
                    Some((first, n)) if *first + *n == lo => *n += hi - lo,
                    _ => out.ones.push((lo, hi - lo)),
                }
                continue;
            }
            let mut rest = marks;
            while rest != 0 {
                let w = lo + u64::from(rest.trailing_zeros());
                out.words.push((w, self.seen[w as usize]));
                rest &= rest - 1;
            }
        }
        out.sums.clear();
        out.sums
            .extend(keys.iter().map(|&k| (k, self.last_sum[k as usize])));
    }

    /// Applies `changes` taken from a check of the same size.
    ///
    /// # Errors
    /// A word or key out of range (changes of another check).
    pub fn apply_changes(&mut self, changes: &SinkChanges) -> Result<(), WorkloadError> {
        let bad = || WorkloadError::BadState("sink check changes out of range".into());
        let len = self.seen.len() as u64;
        for &(first, n) in &changes.ones {
            let end = first.checked_add(n).filter(|e| *e <= len).ok_or_else(bad)?;
            self.seen[first as usize..end as usize].fill(u64::MAX);
        }
        for &(w, bits) in &changes.words {
            *self.seen.get_mut(w as usize).ok_or_else(bad)? = bits;
        }
        for &(k, sum) in &changes.sums {
            *self.last_sum.get_mut(k as usize).ok_or_else(bad)? = sum;
            bit_test_and_set(&mut self.key_seen, k);
        }
        self.received = changes.received;
        self.distinct = changes.distinct;
        self.duplicates = changes.duplicates;
        self.out_of_range = changes.out_of_range;
        if let Some(shape) = self.shape.0 {
            self.shape.0 = Some(self.shape_after(shape, changes));
        }
        Ok(())
    }

    /// The shape after `changes` were applied to a check of shape `old`:
    /// O(changes), and the distance the all-ones prefix moves (amortized
    /// O(changes) too: words only gain bits in a run).
    fn shape_after(&self, old: Shape, changes: &SinkChanges) -> Shape {
        let len = self.seen.len() as u64;
        let (mut ones, mut end) = (old.ones, old.end);
        let mut end_cleared = false;
        for &(first, n) in &changes.ones {
            end = end.max(first + n);
        }
        for &(w, _) in &changes.words {
            let v = self.seen[w as usize];
            if v != u64::MAX {
                ones = ones.min(w);
            }
            if v != 0 {
                end = end.max(w + 1);
            } else if w + 1 == end {
                end_cleared = true;
            }
        }
        while ones < len && self.seen[ones as usize] == u64::MAX {
            ones += 1;
        }
        if end_cleared {
            while end > 0 && self.seen[end as usize - 1] == 0 {
                end -= 1;
            }
        }
        Shape {
            ones,
            end: end.max(ones),
        }
    }

    /// The shape found by a scan of the whole bitset (O(records / 64)).
    fn scan_shape(&self) -> Shape {
        let len = self.seen.len();
        let ones = self.seen.iter().position(|&w| w != u64::MAX).unwrap_or(len);
        let end = self.seen.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
        Shape {
            ones: ones as u64,
            end: end.max(ones) as u64,
        }
    }

    /// From now on, keep the bitset's all-ones prefix and zero suffix as
    /// [`SinkCheck::apply_changes`] changes them, so that
    /// [`SinkCheck::compact_encoded_size`] is O(1) (one scan now). For a
    /// replica that changes only through `apply_changes`: records taken
    /// with [`SinkCheck::observe`] are not followed (a debug build
    /// panics).
    pub fn track_shape(&mut self) {
        self.shape.0 = Some(self.scan_shape());
    }

    /// A copy of this check whose shape is kept, for a replica: its
    /// bitset's zero suffix is left as the allocator's zeroed memory, not
    /// copied (a restored check early in a run of 2^33 records is 1 GiB
    /// of bitset, nearly all of it that suffix). Changes are not tracked
    /// in the copy.
    pub fn replica(&self) -> Self {
        let shape = self.scan_shape();
        let mut seen = vec![0u64; self.seen.len()];
        let end = shape.end as usize;
        seen[..end].copy_from_slice(&self.seen[..end]);
        SinkCheck {
            seen,
            last_sum: self.last_sum.clone(),
            key_seen: self.key_seen.clone(),
            marks: Marks::default(),
            shape: ShapeCache(Some(shape)),
            ..*self
        }
    }

    /// An empty check of `self`'s sizes whose shape is kept (as
    /// [`SinkCheck::track_shape`] would, without the scan): the replica of
    /// a check that nothing has changed yet, made without a copy. Its
    /// zeroed memory is touched only as changes fill it.
    pub fn empty_replica(&self) -> Self {
        let mut check =
            SinkCheck::new(self.total_records, self.keys).expect("the sizes of a check are valid");
        check.shape.0 = Some(Shape::default());
        check
    }

    fn shape(&self) -> Shape {
        self.shape.0.unwrap_or_else(|| self.scan_shape())
    }

    /// This check in the compact layout of full parts (the bitset's
    /// all-ones prefix as a count, its zero suffix left out), to
    /// serialize; [`SinkCheck::from_compact`] reads it back.
    pub fn compact(&self) -> CompactCheck<'_> {
        let shape = self.shape();
        CompactCheck {
            total_records: self.total_records,
            keys: self.keys,
            ones: shape.ones,
            middle: Cow::Borrowed(&self.seen[shape.ones as usize..shape.end as usize]),
            received: self.received,
            distinct: self.distinct,
            duplicates: self.duplicates,
            out_of_range: self.out_of_range,
            last_sum: Cow::Borrowed(&self.last_sum),
            key_seen: Cow::Borrowed(&self.key_seen),
        }
    }

    /// The exact size in bytes of [`SinkCheck::compact`]'s postcard
    /// encoding: O(1) after [`SinkCheck::track_shape`], else a scan.
    pub fn compact_encoded_size(&self) -> u64 {
        let shape = self.shape();
        varint_len(self.total_records)
            + varint_len(self.keys)
            + varint_len(shape.ones)
            + words_len(shape.end - shape.ones)
            + varint_len(self.received)
            + varint_len(self.distinct)
            + varint_len(self.duplicates)
            + varint_len(self.out_of_range)
            + words_len(self.last_sum.len() as u64)
            + words_len(self.key_seen.len() as u64)
    }

    /// The check that `compact` describes, if its sizes are `sizes`
    /// (records, keys): those are compared before the bitset is rebuilt,
    /// so a corrupt record count cannot make it allocate gigabytes.
    ///
    /// # Errors
    /// [`WorkloadError::BadState`] for other sizes or a bitset longer than
    /// its record count gives, and [`SinkCheck::validate`]'s errors.
    pub fn from_compact(
        compact: CompactCheck<'_>,
        sizes: (u64, u64),
    ) -> Result<Self, WorkloadError> {
        let (records, keys) = sizes;
        if (compact.total_records, compact.keys) != sizes {
            return Err(WorkloadError::BadState(format!(
                "the checkpointed sink check is for {} records over {} keys, this job's for {records} over {keys}",
                compact.total_records, compact.keys
            )));
        }
        let len = records.div_ceil(64);
        let stored = compact.ones.saturating_add(compact.middle.len() as u64);
        if stored > len {
            return Err(WorkloadError::BadState(format!(
                "sink check of {records} records: its bitset holds {stored} words, more than {len}"
            )));
        }
        // Zeroed by the allocator (fresh memory is not written), then the
        // prefix and the middle: the zero suffix, most of a large check
        // early in its run, costs no writes.
        let mut seen = vec![0u64; len as usize];
        let ones = compact.ones as usize;
        seen[..ones].fill(u64::MAX);
        seen[ones..ones + compact.middle.len()].copy_from_slice(&compact.middle);
        let check = SinkCheck {
            total_records: records,
            keys,
            seen,
            received: compact.received,
            distinct: compact.distinct,
            duplicates: compact.duplicates,
            out_of_range: compact.out_of_range,
            last_sum: compact.last_sum.into_owned(),
            key_seen: compact.key_seen.into_owned(),
            marks: Marks::default(),
            shape: ShapeCache::default(),
        };
        check.validate()?;
        Ok(check)
    }

    /// [`SinkCheck::compact`] with the per-key arrays cut to keys
    /// `lo..hi` (`lo` a multiple of 64, `hi` at most the key count): the
    /// piece a rolling part rewrites, with the counters and the sequence
    /// bitset whole. [`SinkCheck::apply_piece`] reads it back.
    pub fn compact_piece(&self, lo: u64, hi: u64) -> CompactCheck<'_> {
        debug_assert!(lo % 64 == 0 && lo <= hi && hi <= self.keys);
        let mut c = self.compact();
        c.last_sum = Cow::Borrowed(&self.last_sum[lo as usize..hi as usize]);
        c.key_seen = Cow::Borrowed(&self.key_seen[(lo / 64) as usize..hi.div_ceil(64) as usize]);
        c
    }

    /// Applies a piece of [`SinkCheck::compact_piece`] taken at keys from
    /// `lo`: its counters and sequence bitset replace this check's, its
    /// keys' last sums and seen flags replace those of the same keys.
    ///
    /// # Errors
    /// [`WorkloadError::BadState`] for a piece of another check's sizes,
    /// or keys or words out of range.
    pub fn apply_piece(&mut self, lo: u64, piece: CompactCheck<'_>) -> Result<(), WorkloadError> {
        let bad = |what: String| Err(WorkloadError::BadState(format!("sink check piece: {what}")));
        if (piece.total_records, piece.keys) != (self.total_records, self.keys) {
            return bad(format!(
                "for {} records over {} keys, this check's {} over {}",
                piece.total_records, piece.keys, self.total_records, self.keys
            ));
        }
        let n = piece.last_sum.len() as u64;
        let hi = lo
            .checked_add(n)
            .filter(|h| lo % 64 == 0 && *h <= self.keys);
        let Some(hi) = hi else {
            return bad(format!("keys {lo}.. ({n} of them) out of {}", self.keys));
        };
        let words = (lo / 64) as usize..hi.div_ceil(64) as usize;
        if piece.key_seen.len() != words.len() {
            return bad(format!(
                "{} seen-key words for {} keys",
                piece.key_seen.len(),
                n
            ));
        }
        let len = self.seen.len();
        let ones = piece.ones as usize;
        let Some(end) = ones.checked_add(piece.middle.len()).filter(|e| *e <= len) else {
            return bad(format!("a sequence bitset longer than {len} words"));
        };
        self.seen[..ones].fill(u64::MAX);
        self.seen[ones..end].copy_from_slice(&piece.middle);
        self.seen[end..].fill(0);
        self.received = piece.received;
        self.distinct = piece.distinct;
        self.duplicates = piece.duplicates;
        self.out_of_range = piece.out_of_range;
        self.last_sum[lo as usize..hi as usize].copy_from_slice(&piece.last_sum);
        // The last word may hold keys past `hi` (the next piece's): only
        // this piece's bits are replaced.
        for (i, w) in words.clone().zip(piece.key_seen.iter()) {
            let first = i as u64 * 64;
            let mask = (first..first + 64)
                .map(|k| u64::from(k >= lo && k < hi) << (k - first))
                .fold(0, |a, b| a | b);
            self.key_seen[i] = (self.key_seen[i] & !mask) | (w & mask);
        }
        self.shape.0 = None;
        Ok(())
    }

    /// The exact size of this check's postcard encoding, bytes, computed
    /// in O(1) (the encoding itself copies every word).
    pub fn encoded_size(&self) -> u64 {
        varint_len(self.total_records)
            + varint_len(self.keys)
            + words_len(self.seen.len() as u64)
            + varint_len(self.received)
            + varint_len(self.distinct)
            + varint_len(self.duplicates)
            + varint_len(self.out_of_range)
            + words_len(self.last_sum.len() as u64)
            + words_len(self.key_seen.len() as u64)
    }

    /// Takes one record the sink received. A record whose `n` or key is out
    /// of range counts in [`SinkCheck::received`] and
    /// [`SinkCheck::out_of_range`] only.
    ///
    /// Always inlined: the reference sink calls it for every record, and
    /// as a call (register saves, the record copied into an argument) it
    /// cost lockgate's W1 sink 10 instructions a record more than the raw
    /// pipeline, where it was inlined (callgrind, docs/benchmarks-history.md).
    #[inline(always)]
    pub fn observe(&mut self, record: &SumRecord) {
        debug_assert!(
            self.shape.0.is_none(),
            "a replica's shape does not follow observe"
        );
        self.received += 1;
        if record.n >= self.total_records || record.key >= self.keys {
            self.out_of_range += 1;
            return;
        }
        if bit_test_and_set(&mut self.seen, record.n) {
            self.duplicates += 1;
        } else {
            self.distinct += 1;
        }
        bit_test_and_set(&mut self.key_seen, record.key);
        self.last_sum[record.key as usize] = record.sum;
        if let Some(m) = self.marks.0.as_deref_mut() {
            let w = record.n / 64;
            if w != m.last_word {
                m.last_word = w;
                let marks = &mut m.word_marks[(w / 64) as usize];
                if *marks == 0 {
                    m.blocks.push(w / 64);
                }
                *marks |= 1u64 << (w % 64);
            }
            if m.keys_marked && !bit_test_and_set(&mut m.key_marks, record.key) {
                m.keys.push(record.key);
            }
        }
    }

    /// True when record `n` was received.
    pub fn contains(&self, n: u64) -> bool {
        n < self.total_records && bit_test(&self.seen, n)
    }

    /// Records received (all of them).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Distinct in-range sequence numbers received.
    pub fn distinct(&self) -> u64 {
        self.distinct
    }

    /// Records whose sequence number had already been received.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Sequence numbers in `0..total_records` never received.
    pub fn lost(&self) -> u64 {
        self.total_records - self.distinct
    }

    /// Records with `n >= total_records` or `key >= keys`.
    pub fn out_of_range(&self) -> u64 {
        self.out_of_range
    }

    /// The first sequence number never received, if any (O(total / 64)).
    pub fn first_lost(&self) -> Option<u64> {
        self.seen.iter().enumerate().find_map(|(w, &bits)| {
            let n = w as u64 * 64 + u64::from((!bits).trailing_zeros());
            ((!bits) != 0 && n < self.total_records).then_some(n)
        })
    }

    /// The last sum received for `key`, `None` before any.
    pub fn last_sum(&self, key: u64) -> Option<u64> {
        (key < self.keys && bit_test(&self.key_seen, key)).then(|| self.last_sum[key as usize])
    }

    /// The fingerprint of the last sums received ([`fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        fingerprint((0..self.keys).filter_map(|k| self.last_sum(k).map(|s| (k, s))))
    }

    /// Compares what was received with the closed form (O(keys + total /
    /// 64)).
    pub fn verify(&self, expected: &ExpectedResult) -> CheckReport {
        let mut setup_mismatch = None;
        if expected.capacity() != self.total_records || expected.keys() != self.keys {
            setup_mismatch = Some(format!(
                "the sink checked {} records over {} keys but the expectation is for {} records over {} keys",
                self.total_records,
                self.keys,
                expected.capacity(),
                expected.keys()
            ));
        }
        // The first record of the run's that never arrived.
        let first_lost = self.seen.iter().enumerate().find_map(|(w, &bits)| {
            let missing = !bits;
            (missing != 0).then(|| {
                (0..64)
                    .filter(|b| missing & (1 << b) != 0)
                    .map(|b| w as u64 * 64 + b)
                    .find(|n| *n < self.total_records && expected.is_emitted(*n))
            })?
        });
        let mut wrong_keys = 0;
        let mut first_wrong_key = None;
        for key in 0..self.keys.max(expected.keys()) {
            let (want, got) = (expected.final_sum(key), self.last_sum(key));
            if want != got {
                wrong_keys += 1;
                first_wrong_key.get_or_insert(KeyMismatch {
                    key,
                    expected: want,
                    actual: got,
                });
            }
        }
        CheckReport {
            expected_records: expected.total_records(),
            received: self.received,
            distinct: self.distinct,
            lost: expected.total_records().saturating_sub(self.distinct),
            first_lost,
            duplicates: self.duplicates,
            out_of_range: self.out_of_range,
            wrong_keys,
            first_wrong_key,
            expected_fingerprint: expected.fingerprint(),
            fingerprint: self.fingerprint(),
            setup_mismatch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testing::simulate;
    use crate::workload::KeySpace;

    #[test]
    fn sink_check_detects_loss_duplicates_and_wrong_sums() {
        let keys = KeySpace::uniform(11).unwrap();
        let total = 300;
        let expected = ExpectedResult::compute(total, &keys);
        let (_, all) = simulate(total, &keys, 2, 2);

        // Lost: drop record n = 17.
        let mut lost = SinkCheck::new(total, 11).unwrap();
        all.iter()
            .filter(|r| r.n != 17)
            .for_each(|r| lost.observe(r));
        let report = lost.verify(&expected);
        assert!(!report.is_exact());
        assert_eq!((report.lost, report.duplicates), (1, 0));
        assert_eq!(report.first_lost, Some(17));
        assert!(
            report.to_string().contains("first lost record n=17"),
            "{report}"
        );
        assert!(report.clone().into_result().is_err());

        // Duplicated: record 5 twice (before the last records, so sums are
        // still right at the end).
        let mut dup = SinkCheck::new(total, 11).unwrap();
        let five = *all.iter().find(|r| r.n == 5).unwrap();
        dup.observe(&five);
        all.iter().for_each(|r| dup.observe(r));
        let report = dup.verify(&expected);
        assert_eq!(
            (report.lost, report.duplicates, report.wrong_keys),
            (0, 1, 0)
        );
        assert_eq!(report.received, total + 1);
        assert!(!report.is_exact());

        // A wrong sum: the last record of some key carries sum + 1.
        let mut wrong = SinkCheck::new(total, 11).unwrap();
        let last = *all.last().unwrap();
        for r in &all[..all.len() - 1] {
            wrong.observe(r);
        }
        wrong.observe(&SumRecord {
            sum: last.sum + 1,
            ..last
        });
        let report = wrong.verify(&expected);
        assert_eq!(
            (report.lost, report.duplicates, report.wrong_keys),
            (0, 0, 1)
        );
        let m = report.first_wrong_key.unwrap();
        assert_eq!(m.key, last.key);
        assert_eq!(m.actual, Some(last.sum + 1));
        assert_eq!(m.expected, expected.final_sum(last.key));
        assert_ne!(report.fingerprint, report.expected_fingerprint);
        let text = report.to_string();
        assert!(text.contains(&format!("first key {}", last.key)), "{text}");

        // Out of range and mismatched setup.
        let mut odd = SinkCheck::new(total, 11).unwrap();
        odd.observe(&SumRecord {
            key: 11,
            sum: 0,
            n: 0,
            ts_ns: 0,
        });
        odd.observe(&SumRecord {
            key: 0,
            sum: 0,
            n: total,
            ts_ns: 0,
        });
        assert_eq!(odd.out_of_range(), 2);
        let other = SinkCheck::new(total + 1, 11).unwrap();
        assert!(other.verify(&expected).setup_mismatch.is_some());
        assert!(SinkCheck::new(MAX_CHECKED_RECORDS + 1, 11).is_err());
    }

    #[test]
    fn a_decoded_check_of_the_wrong_shape_is_refused_not_used() {
        let good = SinkCheck::new(1_000, 100).unwrap();
        let decoded = |c: &SinkCheck| -> SinkCheck {
            postcard::from_bytes(&postcard::to_allocvec(c).unwrap()).unwrap()
        };
        assert!(decoded(&good).validate().is_ok());
        let mut short = good.clone();
        short.seen.truncate(8);
        let err = decoded(&short).validate().unwrap_err().to_string();
        assert!(
            err.contains("sequence bitset holds 8 words, not 16"),
            "{err}"
        );
        let mut sums = good.clone();
        sums.last_sum.push(0);
        assert!(decoded(&sums).validate().is_err());
        let mut keys = good.clone();
        keys.key_seen.clear();
        assert!(decoded(&keys).validate().is_err());
        let mut none = good.clone();
        none.keys = 0;
        assert!(decoded(&none).validate().is_err());
    }

    #[test]
    fn with_few_keys_every_seen_key_is_taken_and_the_replica_still_matches() {
        let rec = |n: u64, key: u64| SumRecord {
            key,
            sum: n * 3,
            n,
            ts_ns: 0,
        };
        let mut check = SinkCheck::new(10_000, 1_000).unwrap();
        const { assert!(1_000 * 8 <= SUMS_TAKEN_WHOLE_BYTES) };
        check.track_changes();
        let mut replica = check.clone();
        for n in 0..300 {
            check.observe(&rec(n, n % 7 + 200));
        }
        let mut changes = SinkChanges::default();
        check.take_changes_into(&mut changes);
        assert_eq!((changes.word_count(), changes.key_count()), (5, 7));
        replica.apply_changes(&changes).unwrap();
        assert_eq!(replica, check);
        // One record changes one word and one key; every seen key (in
        // order) is taken with its sum, changed or not.
        check.observe(&rec(9_000, 999));
        check.take_changes_into(&mut changes);
        assert_eq!(changes.word_count(), 1);
        let keys: Vec<u64> = changes.keys_iter().collect();
        assert_eq!(keys, [200, 201, 202, 203, 204, 205, 206, 999]);
        replica.apply_changes(&changes).unwrap();
        assert_eq!(replica, check);
        assert_eq!(replica.last_sum(999), Some(27_000));
        // Nothing observed: no word, the same keys.
        check.take_changes_into(&mut changes);
        assert_eq!((changes.word_count(), changes.key_count()), (0, 8));
    }

    #[test]
    fn sink_check_changes_rebuild_the_check_and_its_size_is_exact() {
        let rec = |n: u64, key: u64, sum: u64| SumRecord {
            key,
            sum,
            n,
            ts_ns: 0,
        };
        // More sums than `SUMS_TAKEN_WHOLE_BYTES`: changed keys are marked.
        let mut check = SinkCheck::new(10_000, 20_000).unwrap();
        const { assert!(20_000 * 8 > SUMS_TAKEN_WHOLE_BYTES) };
        assert_eq!(
            check.encoded_size(),
            postcard::to_allocvec(&check).unwrap().len() as u64
        );
        check.track_changes();
        let mut replica = check.clone();
        for n in 0..300 {
            check.observe(&rec(n, n % 7, n));
        }
        let c1 = check.take_changes();
        assert_eq!(c1.sums.len(), 7, "each key once");
        assert_eq!(c1.words.len(), 5, "300 records span 5 words");
        replica.apply_changes(&c1).unwrap();
        assert_eq!(replica, check);
        check.observe(&rec(5, 5, 99)); // a duplicate
        check.observe(&rec(9_999, 999, 1));
        let c2 = check.take_changes();
        assert_eq!((c2.words.len(), c2.sums.len()), (2, 2));
        replica.apply_changes(&c2).unwrap();
        assert_eq!(replica, check);
        assert_eq!(replica.duplicates(), 1);
        // The word of the last record before a take is marked again after
        // it; words that alternate are listed once each.
        check.observe(&rec(9_998, 998, 2));
        let c3 = check.take_changes();
        assert_eq!(c3.words, [(9_998 / 64, check.seen[9_998 / 64])]);
        for n in [1_000, 1_064, 1_001, 1_065, 1_002] {
            check.observe(&rec(n, 3, n));
        }
        let c4 = check.take_changes();
        let words: Vec<u64> = c4.words.iter().map(|&(w, _)| w).collect();
        assert_eq!(words, [1_000 / 64, 1_064 / 64]);
        for c in [&c3, &c4] {
            replica.apply_changes(c).unwrap();
        }
        assert_eq!(replica, check);
        assert_eq!(
            check.encoded_size(),
            postcard::to_allocvec(&check).unwrap().len() as u64
        );
        // Changes of a bigger check do not fit.
        let mut big = SinkCheck::new(1 << 20, 1 << 20).unwrap();
        big.track_changes();
        big.observe(&rec(1 << 19, 1 << 19, 1));
        assert!(replica.apply_changes(&big.take_changes()).is_err());
    }

    #[test]
    fn full_blocks_are_taken_as_runs_and_the_rest_word_by_word() {
        let rec = |n: u64| SumRecord {
            key: n % 5,
            sum: n,
            n,
            ts_ns: 0,
        };
        // 3 blocks of 64 words (4,096 records each) and a last, short one.
        let mut check = SinkCheck::new(3 * 4_096 + 100, 5).unwrap();
        check.track_changes();
        let mut replica = check.clone();
        replica.track_shape();
        // Blocks 0 and 1 whole, block 2 but one record, block 3 whole.
        for n in (0..3 * 4_096 + 100).filter(|n| *n != 2 * 4_096 + 7) {
            check.observe(&rec(n));
        }
        let c = check.take_changes();
        assert_eq!(c.ones, [(0, 128)], "blocks 0 and 1: one run");
        assert_eq!(c.words.len(), 64 + 2, "block 2's words, then block 3's");
        assert_eq!(c.word_count(), 128 + 66);
        replica.apply_changes(&c).unwrap();
        assert_eq!(replica, check);
        assert_eq!(replica.shape(), replica.scan_shape());
        assert_eq!(
            replica.shape(),
            Shape {
                ones: 128,
                end: 194
            }
        );
        let copy = check.replica();
        assert_eq!((copy == check, copy.shape()), (true, replica.shape()));
        // The missing record fills block 2: a run of its 64 words.
        check.observe(&rec(2 * 4_096 + 7));
        let c = check.take_changes();
        assert_eq!(
            (c.ones.as_slice(), c.words.len()),
            ([(128, 64)].as_slice(), 0)
        );
        replica.apply_changes(&c).unwrap();
        assert_eq!(replica, check);
        assert_eq!(
            replica.shape(),
            Shape {
                ones: 193,
                end: 194
            },
            "word 193 is short"
        );
        assert_eq!(
            replica.compact_encoded_size(),
            postcard::to_allocvec(&replica.compact()).unwrap().len() as u64
        );
    }

    proptest::proptest! {
        /// A replica's kept shape is the one a scan finds, and the compact
        /// encoding's size is exact, after any changes, applied as taken
        /// or merged ([`SinkCheck::changes_of`]), with bits cleared too.
        #[test]
        fn a_kept_shape_and_the_compact_size_stay_exact(
            steps in proptest::collection::vec(
                (proptest::collection::vec(0u64..3_000, 0..300), proptest::bool::ANY),
                1..8,
            ),
            cleared in proptest::collection::vec(0u64..47, 0..4),
        ) {
            let mut check = SinkCheck::new(3_000, 7).unwrap();
            check.track_changes();
            let mut replica = check.clone();
            replica.track_shape();
            for (ns, merged) in steps {
                for n in ns {
                    check.observe(&SumRecord { key: n % 7, sum: n, n, ts_ns: 0 });
                }
                let mut c = check.take_changes();
                if merged {
                    let words: Vec<u64> = c.word_indices().collect();
                    let keys: Vec<u64> = c.keys_iter().collect();
                    c = check.changes_of(&words, &keys);
                }
                replica.apply_changes(&c).unwrap();
                proptest::prop_assert_eq!(&replica, &check);
                proptest::prop_assert_eq!(replica.shape(), replica.scan_shape());
            }
            // Changes that clear words (from a crafted delta): the shape
            // moves back.
            let words: Vec<(u64, u64)> = cleared.iter().map(|&w| (w, 0)).collect();
            let c = SinkChanges { words, ..check.changes_of(&[], &[]) };
            replica.apply_changes(&c).unwrap();
            proptest::prop_assert_eq!(replica.shape(), replica.scan_shape());
            let size = postcard::to_allocvec(&replica.compact()).unwrap().len() as u64;
            proptest::prop_assert_eq!(replica.compact_encoded_size(), size);
            let back: CompactCheck<'_> =
                postcard::from_bytes(&postcard::to_allocvec(&replica.compact()).unwrap()).unwrap();
            proptest::prop_assert_eq!(SinkCheck::from_compact(back, replica.sizes()).unwrap(), replica);
        }
    }

    #[test]
    fn sink_check_survives_serde() {
        let keys = KeySpace::uniform(7).unwrap();
        let (sink, _) = simulate(100, &keys, 2, 2);
        let bytes = serde_json::to_vec(&sink).unwrap();
        let back: SinkCheck = serde_json::from_slice(&bytes).unwrap();
        let compact = postcard::to_allocvec(&sink).unwrap();
        let back2: SinkCheck = postcard::from_bytes(&compact).unwrap();
        assert_eq!(back2, sink);
        // the bitset travels as bytes, not one varint per word
        assert!(
            compact.len() < 8 * (sink.seen.len() + sink.last_sum.len() + sink.key_seen.len()) + 64
        );
        assert_eq!(back, sink);
    }
}
