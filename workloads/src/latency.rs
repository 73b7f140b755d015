//! Latency recording and reports on HdrHistogram.
//!
//! Latency is `now - intended emission time` of each record (workloads.md:
//! measured from the schedule time, so a stall shows up in every record it
//! delayed and no coordinated-omission correction is needed or applied:
//! this module never calls `record_correct`). Histograms track 1 ns .. 60 s
//! with 3 significant digits (workloads.md).
//!
//! - [`LatencyRecorder`]: one per recording thread; [`merge`] adds them up
//!   (histograms are merged, never averaged).
//! - [`Percentiles`]: the figures the reports print.
//! - [`write_hgrm`] / [`parse_hgrm`]: the percentile distribution text of
//!   HdrHistogram's `outputPercentileDistribution` (what the HdrHistogram
//!   plotter reads).
//! - [`HlogWriter`] / [`read_hlog`]: interval logs (`.hlog`), V2 compressed.
//! - [`histogram_to_base64`] / [`histogram_from_base64`]: a histogram in
//!   JSON.
//! - [`new_interval_histogram`]: the smaller histogram of one interval of
//!   a timeline or interval log.
//!
//! The charts are in [`crate::charts`].

use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The lowest discernible latency, ns (workloads.md).
pub const LOWEST_NS: u64 = 1;
/// The highest trackable latency, ns: 60 s (workloads.md). Larger values
/// are recorded as this value.
pub const HIGHEST_NS: u64 = 60_000_000_000;
/// Significant decimal digits kept (workloads.md).
pub const SIGNIFICANT_DIGITS: u8 = 3;
/// Nanoseconds per millisecond: the value unit scaling ratio for reports in
/// ms.
pub const NS_PER_MS: f64 = 1_000_000.0;
/// Percentile ticks per half distance to 100% in `.hgrm` output (5, as
/// HdrHistogram's own tools use by default).
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Errors of the report helpers.
#[derive(Debug, thiserror::Error)]
pub enum LatencyError {
    /// Reading or writing failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// A histogram could not be serialized.
    #[error("cannot serialize a histogram: {0}")]
    Serialize(String),
    /// Bytes that are not a V2 (compressed) histogram.
    #[error("cannot decode a histogram: {0}")]
    Deserialize(String),
    /// Text that is not base64.
    #[error("invalid base64 histogram: {0}")]
    Base64(#[from] base64::DecodeError),
    /// Two histograms could not be added.
    #[error("cannot merge histograms: {0}")]
    Merge(String),
    /// An interval log tag with a forbidden character (`,`, space, CR, LF).
    #[error("invalid interval log tag `{0}`: it may not contain ',', ' ', '\\r' or '\\n'")]
    BadTag(String),
    /// An interval log that does not parse.
    #[error("malformed interval log at byte {0}")]
    BadLog(usize),
    /// A `.hgrm` line that does not parse.
    #[error("malformed .hgrm line {line}: `{text}`")]
    BadHgrm {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A plot with no series or only empty histograms.
    #[error("nothing to plot: no series has any recorded value")]
    NothingToPlot,
    /// The plotting library failed.
    #[error("cannot draw the plot: {0}")]
    Plot(String),
}

/// An empty histogram for one interval of a run (its timeline and `.hlog`
/// line): [`LOWEST_NS`] .. [`HIGHEST_NS`] with 2 significant digits (1 %
/// of a value), about 27 KiB against about 210 KiB for
/// [`new_histogram`]'s 3 digits, since a run keeps one every 100 ms.
pub fn new_interval_histogram() -> Histogram<u64> {
    // Constant, valid bounds: this cannot fail.
    Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, 2)
        .expect("constant histogram bounds are valid")
}

/// An empty latency histogram: [`LOWEST_NS`] .. [`HIGHEST_NS`],
/// [`SIGNIFICANT_DIGITS`] digits, u64 counts, no auto-resize.
pub fn new_histogram() -> Histogram<u64> {
    // Constant, valid bounds (1 <= low, high >= 2 * low, digits <= 5): this
    // cannot fail.
    Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// A per-thread latency histogram.
#[derive(Clone, Debug)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    /// An empty recorder ([`new_histogram`]).
    pub fn new() -> Self {
        LatencyRecorder {
            hist: new_histogram(),
        }
    }

    /// Empties the recorder, keeping its memory (O(histogram size): a
    /// zeroing of its counts, no allocation).
    pub fn reset(&mut self) {
        self.hist.reset();
    }

    /// Records `now_ns - intended_ns` (0 when `now_ns < intended_ns`;
    /// clamped to [`HIGHEST_NS`]). Both on the same monotonic clock.
    #[inline]
    pub fn record(&mut self, now_ns: u64, intended_ns: u64) {
        self.record_latency(now_ns.saturating_sub(intended_ns));
    }

    /// Records one latency in ns, clamped to [`HIGHEST_NS`].
    #[inline]
    pub fn record_latency(&mut self, latency_ns: u64) {
        self.hist.saturating_record(latency_ns);
    }

    /// Records `count` latencies of `latency_ns`, clamped as
    /// [`LatencyRecorder::record_latency`].
    pub fn record_latency_n(&mut self, latency_ns: u64, count: u64) {
        self.hist.saturating_record_n(latency_ns, count);
    }

    /// The values recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The histogram.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// Returns the histogram so far and starts an empty one (for one
    /// interval of an interval log).
    pub fn take_interval(&mut self) -> Histogram<u64> {
        std::mem::replace(&mut self.hist, new_histogram())
    }

    /// Adds another recorder's values to this one.
    ///
    /// Errors: [`LatencyError::Merge`] (cannot happen between recorders of
    /// this module, which share their bounds).
    pub fn merge_from(&mut self, other: &LatencyRecorder) -> Result<(), LatencyError> {
        self.hist
            .add(&other.hist)
            .map_err(|e| LatencyError::Merge(format!("{e:?}")))
    }

    /// The recorder's histogram.
    pub fn into_histogram(self) -> Histogram<u64> {
        self.hist
    }
}

/// The sum of several histograms (counts added bucket by bucket, never
/// averaged), in a histogram with this module's bounds.
///
/// Errors: [`LatencyError::Merge`] when a histogram holds values beyond
/// [`HIGHEST_NS`].
pub fn merge<'a, I>(histograms: I) -> Result<Histogram<u64>, LatencyError>
where
    I: IntoIterator<Item = &'a Histogram<u64>>,
{
    let mut total = new_histogram();
    for h in histograms {
        total
            .add(h)
            .map_err(|e| LatencyError::Merge(format!("{e:?}")))?;
    }
    Ok(total)
}

/// The latency figures of a report, in ns (each the highest value
/// equivalent to the quantile's bucket, as HdrHistogram reports them; all
/// 0 for an empty histogram).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Values recorded.
    pub count: u64,
    /// Median, ns.
    pub p50: u64,
    /// 90th percentile, ns.
    pub p90: u64,
    /// 99th percentile, ns.
    pub p99: u64,
    /// 99.9th percentile, ns.
    pub p999: u64,
    /// 99.99th percentile, ns.
    pub p9999: u64,
    /// Maximum, ns.
    pub max: u64,
}

impl Percentiles {
    /// The figures of `h`.
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles {
                count: 0,
                p50: 0,
                p90: 0,
                p99: 0,
                p999: 0,
                p9999: 0,
                max: 0,
            };
        }
        Percentiles {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
        }
    }
}

// ---------------------------------------------------------------------------
// .hgrm
// ---------------------------------------------------------------------------

/// The sub-buckets per bucket of a histogram with `sigfig` digits, as
/// HdrHistogram defines it: `2^ceil(log2(2 * 10^sigfig))`.
fn sub_bucket_count(sigfig: u8) -> u64 {
    (2 * 10u64.pow(u32::from(sigfig))).next_power_of_two()
}

/// Writes `h`'s percentile distribution in the text format of
/// HdrHistogram's `outputPercentileDistribution` (Java; the format the
/// HdrHistogram plotter reads), with [`TICKS_PER_HALF_DISTANCE`] ticks per
/// half distance and values divided by `value_unit_scaling_ratio`
/// ([`NS_PER_MS`] for milliseconds):
///
/// ```text
///        Value     Percentile TotalCount 1/(1-Percentile)
///
///        0.012 0.000000000000          1           1.00
/// …
///        1.234 1.000000000000       1000
/// #[Mean    =        0.345, StdDeviation   =        0.123]
/// #[Max     =        1.234, Total count    =         1000]
/// #[Buckets =           27, SubBuckets     =         2048]
/// ```
///
/// Value columns have as many decimals as the histogram has significant
/// digits (as the Java original does). Errors: the writer's.
pub fn write_hgrm<W: Write>(
    out: &mut W,
    h: &Histogram<u64>,
    value_unit_scaling_ratio: f64,
) -> io::Result<()> {
    let prec = usize::from(h.sigfig());
    let scale = value_unit_scaling_ratio;
    writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    )?;
    if !h.is_empty() {
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            let q = v.quantile_iterated_to();
            let value = v.value_iterated_to() as f64 / scale;
            let total = h.count_between(0, v.value_iterated_to());
            if q < 1.0 {
                writeln!(
                    out,
                    "{value:12.prec$} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                )?;
            } else {
                writeln!(out, "{value:12.prec$} {q:2.12} {total:10}")?;
            }
        }
    }
    writeln!(
        out,
        "#[Mean    = {:12.prec$}, StdDeviation   = {:12.prec$}]",
        h.mean() / scale,
        h.stdev() / scale
    )?;
    let max = if h.is_empty() { 0 } else { h.max() };
    writeln!(
        out,
        "#[Max     = {:12.prec$}, Total count    = {:12}]",
        max as f64 / scale,
        h.len()
    )?;
    writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        sub_bucket_count(h.sigfig())
    )
}

/// [`write_hgrm`] into a string.
pub fn hgrm_string(h: &Histogram<u64>, value_unit_scaling_ratio: f64) -> String {
    let mut buf = Vec::new();
    // Writing to a Vec cannot fail.
    write_hgrm(&mut buf, h, value_unit_scaling_ratio).expect("writing to a Vec cannot fail");
    String::from_utf8(buf).expect("the .hgrm text is ASCII")
}

/// One data line of a `.hgrm` file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HgrmLine {
    /// The value, in the file's unit.
    pub value: f64,
    /// The percentile as a fraction (0.0 ..= 1.0).
    pub percentile: f64,
    /// The count of values up to this one.
    pub total_count: u64,
}

/// Parses the data lines of a `.hgrm` text (as [`write_hgrm`] or
/// HdrHistogram writes it), skipping the header, blank lines and `#`
/// lines.
///
/// Errors: [`LatencyError::BadHgrm`] naming the first malformed line.
pub fn parse_hgrm(text: &str) -> Result<Vec<HgrmLine>, LatencyError> {
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with("Value") {
            continue;
        }
        let bad = || LatencyError::BadHgrm {
            line: i + 1,
            text: line.to_string(),
        };
        let fields: Vec<&str> = t.split_whitespace().collect();
        if !(3..=4).contains(&fields.len()) {
            return Err(bad());
        }
        let value = fields[0].parse::<f64>().map_err(|_| bad())?;
        let percentile = fields[1].parse::<f64>().map_err(|_| bad())?;
        let total_count = fields[2].parse::<u64>().map_err(|_| bad())?;
        lines.push(HgrmLine {
            value,
            percentile,
            total_count,
        });
    }
    Ok(lines)
}

// ---------------------------------------------------------------------------
// base64
// ---------------------------------------------------------------------------

/// `h` serialized in HdrHistogram's V2 compressed (deflate) encoding, as
/// standard base64 (the encoding interval logs use; for JSON reports).
///
/// Errors: [`LatencyError::Serialize`].
pub fn histogram_to_base64(h: &Histogram<u64>) -> Result<String, LatencyError> {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .map_err(|e| LatencyError::Serialize(format!("{e:?}")))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Decodes [`histogram_to_base64`]'s output (or any base64 V2 /
/// V2-compressed histogram, e.g. from an interval log).
///
/// Errors: [`LatencyError::Base64`], [`LatencyError::Deserialize`].
pub fn histogram_from_base64(text: &str) -> Result<Histogram<u64>, LatencyError> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(text.trim())?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| LatencyError::Deserialize(format!("{e:?}")))
}

// ---------------------------------------------------------------------------
// Interval logs
// ---------------------------------------------------------------------------

/// Writes an interval log (`.hlog`, as HdrHistogram's `HistogramLogWriter`):
/// a format-version comment, `StartTime` and `BaseTime` headers (both the
/// start), the max column's divisor, the legend line, then one line per
/// interval with its start offset from the start (s), its length (s), its
/// max (ms) and the histogram in V2 compressed encoding, base64. The
/// intervals are kept until [`HlogWriter::finish`] writes the log (one
/// writer for the whole log, so every header appears once).
pub struct HlogWriter<W: Write> {
    out: W,
    start: SystemTime,
    intervals: Vec<(Histogram<u64>, Duration, Duration, Option<String>)>,
}

impl<W: Write> std::fmt::Debug for HlogWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HlogWriter").finish_non_exhaustive()
    }
}

impl<W: Write> HlogWriter<W> {
    /// A log whose intervals are offsets from `start` (wall-clock time),
    /// written to `out` by [`HlogWriter::finish`].
    ///
    /// Errors: none yet (the signature keeps the writer's).
    pub fn new(out: W, start: SystemTime) -> Result<Self, LatencyError> {
        Ok(HlogWriter {
            out,
            start,
            intervals: Vec::new(),
        })
    }

    /// Adds one interval: `h`, recorded from `start_offset` after the
    /// log's start for `length`, with an optional tag.
    ///
    /// Errors: [`LatencyError::BadTag`] (checked now, so a bad tag writes
    /// nothing).
    pub fn write_interval(
        &mut self,
        h: &Histogram<u64>,
        start_offset: Duration,
        length: Duration,
        tag: Option<&str>,
    ) -> Result<(), LatencyError> {
        if let Some(t) = tag {
            Tag::new(t).ok_or_else(|| LatencyError::BadTag(t.to_string()))?;
        }
        self.intervals
            .push((h.clone(), start_offset, length, tag.map(str::to_string)));
        Ok(())
    }

    /// Writes the log, flushes and returns the output.
    ///
    /// Errors: [`LatencyError::Serialize`], the writer's.
    pub fn finish(mut self) -> Result<W, LatencyError> {
        let mut serializer = V2DeflateSerializer::new();
        let mut log = Vec::new();
        {
            let mut writer = IntervalLogWriterBuilder::new()
                .add_comment("[Histogram log format version 1.3]")
                .add_comment("[Latency in ns; interval max in ms]")
                .with_start_time(self.start)
                .with_base_time(self.start)
                // The max column in ms, as Java's HistogramLogWriter's
                // default (its maxValueUnitRatio is 1e6).
                .with_max_value_divisor(NS_PER_MS)
                .begin_log_with(&mut log, &mut serializer)?;
            for (h, offset, length, tag) in &self.intervals {
                let tag = tag.as_deref().and_then(Tag::new);
                writer
                    .write_histogram(h, *offset, *length, tag)
                    .map_err(|e| match e {
                        hdrhistogram::serialization::interval_log::IntervalLogWriterError::IoError(e) => {
                            LatencyError::Io(e)
                        }
                        other => LatencyError::Serialize(format!("{other:?}")),
                    })?;
            }
        }
        // The legend line of Java's writer goes after the headers (this
        // crate's writer has none).
        let headers = log
            .split_inclusive(|b| *b == b'\n')
            .take_while(|l| l.starts_with(b"#"))
            .map(<[u8]>::len)
            .sum::<usize>();
        self.out.write_all(&log[..headers])?;
        writeln!(
            self.out,
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        )?;
        self.out.write_all(&log[headers..])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// One interval read back from an interval log.
#[derive(Clone, Debug)]
pub struct LoggedInterval {
    /// Its tag.
    pub tag: Option<String>,
    /// Its start, as written (an offset from `BaseTime` when present).
    pub start: Duration,
    /// Its length.
    pub length: Duration,
    /// Its max column as written (ms for [`HlogWriter`]'s logs).
    pub max: f64,
    /// Its histogram.
    pub histogram: Histogram<u64>,
}

/// Reads every interval of an interval log (with hdrhistogram's
/// `IntervalLogIterator`), decoding the histograms.
///
/// Errors: [`LatencyError::BadLog`] with the byte offset of a malformed
/// line, [`LatencyError::Base64`], [`LatencyError::Deserialize`].
pub fn read_hlog(bytes: &[u8]) -> Result<Vec<LoggedInterval>, LatencyError> {
    let mut intervals = Vec::new();
    for entry in IntervalLogIterator::new(bytes) {
        let entry = entry.map_err(|e| match e {
            hdrhistogram::serialization::interval_log::LogIteratorError::ParseError { offset } => {
                LatencyError::BadLog(offset)
            }
        })?;
        if let LogEntry::Interval(i) = entry {
            intervals.push(LoggedInterval {
                tag: i.tag().map(|t| t.as_str().to_string()),
                start: i.start_timestamp(),
                length: i.duration(),
                max: i.max(),
                histogram: histogram_from_base64(i.encoded_histogram())?,
            });
        }
    }
    Ok(intervals)
}

/// The most "nines" a percentile chart's x axis shows: 7 (99.99999%).
pub(crate) const MAX_NINES: u32 = 7;

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seed: u64, n: u64) -> LatencyRecorder {
        let mut r = LatencyRecorder::new();
        let mut x = seed | 1;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly 10..100 µs, a tail up to ~50 ms.
            let base = 10_000 + x % 90_000;
            let lat = if i % 1000 == 0 { base * 500 } else { base };
            r.record(1_000_000_000 + lat, 1_000_000_000);
        }
        r
    }

    #[test]
    fn recorder_saturates_and_merges() {
        let mut r = LatencyRecorder::new();
        r.record(5, 10); // clock went backwards: 0
        r.record(10 + 2 * HIGHEST_NS, 10); // beyond the range: clamped
        r.record(1_500, 500);
        assert_eq!(r.count(), 3);
        assert_eq!(r.histogram().min(), 0);
        assert!(r.histogram().equivalent(r.histogram().max(), HIGHEST_NS));
        let a = sample(1, 10_000);
        let b = sample(2, 5_000);
        let m = merge([a.histogram(), b.histogram()]).unwrap();
        assert_eq!(m.len(), 15_000);
        assert_eq!(m.max(), a.histogram().max().max(b.histogram().max()));
        let mut c = a.clone();
        c.merge_from(&b).unwrap();
        assert_eq!(c.histogram(), &m);
        let taken = c.take_interval();
        assert_eq!((taken.len(), c.count()), (15_000, 0));
    }

    #[test]
    fn percentiles_are_ordered() {
        let r = sample(3, 20_000);
        let p = Percentiles::from_histogram(r.histogram());
        assert_eq!(p.count, 20_000);
        assert!(p.p50 <= p.p90 && p.p90 <= p.p99 && p.p99 <= p.p999);
        assert!(p.p999 <= p.p9999 && p.p9999 <= p.max);
        assert!(p.p50 >= 10_000 && p.p50 <= 100_100);
        assert_eq!(Percentiles::from_histogram(&new_histogram()).count, 0);
    }

    #[test]
    fn hgrm_parses_back() {
        let r = sample(4, 10_000);
        let text = hgrm_string(r.histogram(), NS_PER_MS);
        assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)\n\n"));
        assert!(text.contains("#[Mean    = "));
        assert!(text.contains(&format!(
            "#[Max     = {:12.3}, Total count    = {:12}]",
            r.histogram().max() as f64 / 1e6,
            10_000
        )));
        assert!(text.contains("SubBuckets     =         2048]"));
        let lines = parse_hgrm(&text).unwrap();
        assert!(lines.len() > 20);
        assert!(lines.windows(2).all(|w| w[0].value <= w[1].value
            && w[0].percentile < w[1].percentile
            && w[0].total_count <= w[1].total_count));
        let last = lines.last().unwrap();
        assert_eq!(last.percentile, 1.0);
        assert_eq!(last.total_count, 10_000);
        // The last line has 3 columns, the others 4.
        let data: Vec<&str> = text
            .lines()
            .filter(|l| {
                !l.is_empty() && !l.starts_with('#') && !l.trim_start().starts_with("Value")
            })
            .collect();
        assert_eq!(data.last().unwrap().split_whitespace().count(), 3);
        assert_eq!(data[0].split_whitespace().count(), 4);
        // 5 ticks per half distance: the first lines step by 10%.
        assert!((lines[1].percentile - 0.1).abs() < 1e-12);
        assert!(parse_hgrm("  1.0 0.5\n").is_err());
        // An empty histogram still has its header and footer.
        let empty = hgrm_string(&new_histogram(), NS_PER_MS);
        assert!(parse_hgrm(&empty).unwrap().is_empty());
        assert!(empty.contains("Total count    =            0]"));
    }

    #[test]
    fn base64_round_trip() {
        let r = sample(5, 3_000);
        let text = histogram_to_base64(r.histogram()).unwrap();
        let back = histogram_from_base64(&text).unwrap();
        assert_eq!(&back, r.histogram());
        assert!(histogram_from_base64("not base64!").is_err());
        assert!(histogram_from_base64("AAAA").is_err());
    }

    #[test]
    fn interval_log_reads_back() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut w = HlogWriter::new(Vec::new(), start).unwrap();
        let hs = [sample(6, 1_000), sample(7, 2_000), sample(8, 500)];
        for (i, r) in hs.iter().enumerate() {
            w.write_interval(
                r.histogram(),
                Duration::from_secs(i as u64),
                Duration::from_secs(1),
                (i == 1).then_some("sink"),
            )
            .unwrap();
        }
        assert!(matches!(
            w.write_interval(
                hs[0].histogram(),
                Duration::ZERO,
                Duration::ZERO,
                Some("a b")
            ),
            Err(LatencyError::BadTag(_))
        ));
        let bytes = w.finish().unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains("#[BaseTime: 1700000000.000"));
        // Every header once, however many intervals.
        assert_eq!(text.matches("#[MaxValueDivisor").count(), 1, "{text}");
        assert_eq!(text.matches("#[StartTime").count(), 1, "{text}");
        // The legend line follows the headers.
        let legend = text
            .lines()
            .position(|l| l.starts_with("\"StartTimestamp\""))
            .unwrap();
        assert!(
            text.lines().take(legend).all(|l| l.starts_with('#')),
            "{text}"
        );
        assert!(
            !text.lines().nth(legend + 1).unwrap().starts_with('#'),
            "{text}"
        );
        let read = read_hlog(&bytes).unwrap();
        assert_eq!(read.len(), 3);
        for (i, (got, want)) in read.iter().zip(&hs).enumerate() {
            assert_eq!(&got.histogram, want.histogram());
            assert_eq!(got.start, Duration::from_secs(i as u64));
            assert_eq!(got.length, Duration::from_secs(1));
            // The max column is in ms, as the header says.
            let want_ms = want.histogram().max() as f64 / NS_PER_MS;
            assert!((got.max - want_ms).abs() < 1e-3, "{} vs {want_ms}", got.max);
        }
        assert_eq!(read[1].tag.as_deref(), Some("sink"));
        assert!(read_hlog(b"garbage line\n").is_err());
    }
}
