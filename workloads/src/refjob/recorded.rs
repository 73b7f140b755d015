//! The latencies recorded over a span of deliveries ([`Recorded`]), kept
//! apart from what the tasks share so that the committed output's
//! transactions (`committed`) and the sink's slot (`shared`) can both hold
//! them.

use crate::latency::{new_interval_histogram, LatencyRecorder};
use hdrhistogram::Histogram;
use lockgate::BoxError;

/// Latencies recorded over a span of deliveries: the run's, or one
/// checkpoint interval's (kept apart until it is settled, dropped if a
/// restart rolls the sink back before it). Two full histograms (about 210 KiB each) and
/// one [`new_interval_histogram`] (about 27 KiB) per interval touched,
/// zeroed lazily by the allocator.
#[derive(Debug)]
pub(super) struct Recorded {
    /// From the intended send time.
    pub(super) latency: LatencyRecorder,
    /// From the actual send time (W2/W3).
    pub(super) uncorrected: LatencyRecorder,
    /// From the intended send time, per interval (`RefJobConfig::interval_ns`) since the job's
    /// start (W2/W3).
    pub(super) intervals: std::collections::BTreeMap<usize, Histogram<u64>>,
    /// Older intervals of `intervals`, compressed (HdrHistogram V2 with
    /// deflate, a few hundred bytes each instead of ~27 KiB): a run of
    /// any length keeps them all for its timeline and `.hlog` in bounded
    /// memory ([`Recorded::compact_before`]).
    pub(super) compacted: std::collections::BTreeMap<usize, Vec<u8>>,
}

impl Recorded {
    pub(super) fn new() -> Self {
        Recorded {
            latency: LatencyRecorder::new(),
            uncorrected: LatencyRecorder::new(),
            intervals: Default::default(),
            compacted: Default::default(),
        }
    }

    /// Empties it for reuse, keeping the memory of its two main
    /// histograms (no allocation, no page fault on the fresh memory).
    pub(super) fn reset(&mut self) {
        self.latency.reset();
        self.uncorrected.reset();
        self.intervals.clear();
        self.compacted.clear();
    }

    /// Compresses the intervals before `index` (a histogram's V2 deflate
    /// encoding): the merged recordings of a long run keep only the last
    /// few intervals whole.
    pub(super) fn compact_before(&mut self, index: usize) -> Result<(), BoxError> {
        let later = self.intervals.split_off(&index);
        let older = std::mem::replace(&mut self.intervals, later);
        for (i, h) in older {
            let h = match self.compacted.remove(&i) {
                Some(bytes) => {
                    let mut old = decompress(&bytes)?;
                    old.add(&h).map_err(|e| format!("{e:?}"))?;
                    old
                }
                None => h,
            };
            self.compacted.insert(i, compress(&h)?);
        }
        Ok(())
    }

    /// Every interval whole again (the compressed ones decompressed), for
    /// the report.
    pub(super) fn expand(&mut self) -> Result<(), BoxError> {
        for (i, bytes) in std::mem::take(&mut self.compacted) {
            let h = decompress(&bytes)?;
            self.intervals
                .entry(i)
                .or_insert_with(new_interval_histogram)
                .add(&h)
                .map_err(|e| format!("{e:?}"))?;
        }
        Ok(())
    }

    /// Adds `other` in (O(histogram size): ~26 K slots each, tens of µs).
    pub(super) fn add(&mut self, other: &Recorded) -> Result<(), BoxError> {
        let e = |e: hdrhistogram::AdditionError| format!("the sink's latency intervals: {e:?}");
        self.latency
            .merge_from(&other.latency)
            .map_err(|x| x.to_string())?;
        self.uncorrected
            .merge_from(&other.uncorrected)
            .map_err(|x| x.to_string())?;
        for (interval, bytes) in &other.compacted {
            match self.compacted.get_mut(interval) {
                Some(mine) => {
                    let mut h = decompress(mine)?;
                    h.add(decompress(bytes)?).map_err(|e| format!("{e:?}"))?;
                    *mine = compress(&h)?;
                }
                None => {
                    self.compacted.insert(*interval, bytes.clone());
                }
            }
        }
        for (interval, h) in &other.intervals {
            self.intervals
                .entry(*interval)
                .or_insert_with(new_interval_histogram)
                .add(h)
                .map_err(e)?;
        }
        Ok(())
    }
}

fn compress(h: &Histogram<u64>) -> Result<Vec<u8>, BoxError> {
    use hdrhistogram::serialization::Serializer as _;
    let mut out = Vec::new();
    hdrhistogram::serialization::V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .map_err(|e| format!("compressing a latency interval: {e:?}"))?;
    Ok(out)
}

fn decompress(bytes: &[u8]) -> Result<Histogram<u64>, BoxError> {
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| format!("a compressed latency interval: {e:?}").into())
}
