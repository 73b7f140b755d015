//! A replayable CSV file source (plain or gzip) with bounded-out-of-orderness
//! watermarks.
//!
//! It reads records `R` with [`crate::csv::CsvRecordReader`] (columns
//! found by header name; `csv` crate; gzip told apart by its magic bytes).
//! Its checkpointed state is the reader position (data rows consumed, good
//! or bad) and the largest event time seen; a restore reopens the file at
//! that position ([`CsvRecordReader::open_at`]), so the records after the
//! checkpoint are read again and none before it. It is a
//! [`lockgate::source::Replayable`] source ([`CsvFile`], one split): the
//! reader of an earlier attempt is closed before the file is reopened.
//!
//! Watermark: `max event time seen - max out-of-orderness - 1 ms` (Flink's
//! `BoundedOutOfOrdernessWatermarks`: the `- 1` lets records with the
//! largest time seen so far still arrive on time), and `i64::MAX` once the
//! file is read to the end.
//!
//! Input errors (a missing file, a bad header, a malformed row with
//! [`BadRows::Fail`]) fail the task with the reader's message (file, line,
//! reason); the message is also kept in [`CsvSourceProbe::error`] so that
//! the application can tell an input error from other failures.

use crate::csv::{BadRows, CsvError, CsvRecord, CsvRecordReader};
use lockgate::source::{Replayable, SplitOutput, SplitReader, SplitSource};
use lockgate::Checkpointed;
use lockgate::{error::FatalError, BoxError, CheckpointId, Source, SourcePoll, Watermark};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What a [`CsvSource`] reports to the application while and after it
/// runs. Its counts come from the checkpointed position, so they are exact
/// after restarts (the last run's values, not a sum over runs).
///
/// # Examples
/// ```
/// use lockgate::example;
/// use lockgate_operators::csv::BadRows;
/// use lockgate_operators::csv_source::{CsvSource, CsvSourceProbe};
/// // `Reading { time_ms: i64, value: i64 }`: the record of `CsvSource`'s example
/// # use lockgate_operators::csv::{CsvRecord, Fields};
/// #
/// # /// A reading: its event time (ms) and value.
/// # #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, lockgate::RecordSize)]
/// # struct Reading {
/// #     time_ms: i64,
/// #     value: i64,
/// # }
/// #
/// # impl CsvRecord for Reading {
/// #     const COLUMNS: &'static [&'static str] = &["time_ms", "value"];
/// #     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
/// #         let number = |i| fields.get(i)?.parse::<i64>().map_err(|e| format!("{}: {e}", fields.name(i)));
/// #         Ok(Reading { time_ms: number(0)?, value: number(1)? })
/// #     }
/// # }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("readings.csv");
/// std::fs::write(&path, "time_ms,value\n10,1\n20,oops\n30,3\n")?;
///
/// let probe = CsvSourceProbe::new();
/// let (file, shared) = (path.clone(), probe.clone());
/// let values = example::run_source(
///     1,
///     move |_| CsvSource::new(file.clone(), BadRows::Skip, |r: &Reading| r.time_ms, 0, shared.clone()),
///     |readings| readings.map(|r| r.value),
/// );
/// assert_eq!(values, [1, 3]);
/// assert!(probe.finished());
/// assert_eq!((probe.rows(), probe.skipped(), probe.records()), (3, 1, 2));
/// assert_eq!(probe.error(), None);
///
/// // an input error fails the source's task; the probe keeps the message
/// use lockgate::{Source, SourcePoll};
/// let probe = CsvSourceProbe::new();
/// let missing = dir.path().join("missing.csv");
/// let mut source = CsvSource::new(missing, BadRows::Fail, |r: &Reading| r.time_ms, 0, probe.clone());
/// assert!(source.poll(&mut Vec::new(), 10).is_err());
/// assert!(probe.error().unwrap().contains("missing.csv: cannot open"));
/// # Ok::<(), lockgate::BoxError>(())
/// ```
#[derive(Debug, Default)]
pub struct CsvSourceProbe {
    rows: AtomicU64,
    skipped: AtomicU64,
    finished: AtomicBool,
    error: Mutex<Option<String>>,
}

impl CsvSourceProbe {
    /// A new probe, to share between the application and the source.
    pub fn new() -> Arc<Self> {
        Arc::new(CsvSourceProbe::default())
    }

    /// Data rows consumed (good and bad).
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }

    /// Bad rows skipped ([`BadRows::Skip`]).
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Records emitted: rows minus skipped rows.
    pub fn records(&self) -> u64 {
        self.rows().saturating_sub(self.skipped())
    }

    /// True once the file was read to its end.
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Relaxed)
    }

    /// The first input error the source met, as the reader reported it.
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }

    fn set_error(&self, msg: &str) {
        if let Ok(mut e) = self.error.lock() {
            e.get_or_insert_with(|| msg.to_string());
        }
    }
}

/// Where a [`CsvSource`] reads its file from: data rows consumed (good or
/// bad) and the largest event time seen (its watermark's state). Its
/// checkpointed form is the JSON of every earlier build.
///
/// # Examples
/// A [`CsvSource`]'s snapshot is its position; a new source restored from
/// it reads on from there:
/// ```
/// use lockgate::{CheckpointId, Checkpointed, Source, SourcePoll};
/// use lockgate_operators::csv::BadRows;
/// use lockgate_operators::csv_source::{CsvPosition, CsvSource, CsvSourceProbe};
/// // `Reading { time_ms: i64, value: i64 }`: the record of `CsvSource`'s example
/// # use lockgate_operators::csv::{CsvRecord, Fields};
/// #
/// # /// A reading: its event time (ms) and value.
/// # #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, lockgate::RecordSize)]
/// # struct Reading {
/// #     time_ms: i64,
/// #     value: i64,
/// # }
/// #
/// # impl CsvRecord for Reading {
/// #     const COLUMNS: &'static [&'static str] = &["time_ms", "value"];
/// #     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
/// #         let number = |i| fields.get(i)?.parse::<i64>().map_err(|e| format!("{}: {e}", fields.name(i)));
/// #         Ok(Reading { time_ms: number(0)?, value: number(1)? })
/// #     }
/// # }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("readings.csv");
/// std::fs::write(&path, "time_ms,value\n10,1\n20,2\n30,3\n")?;
/// let source = || CsvSource::new(path.clone(), BadRows::Fail, |r: &Reading| r.time_ms, 0, CsvSourceProbe::new());
///
/// let mut first = source();
/// let mut out = Vec::new();
/// first.poll(&mut out, 2)?; // two rows
/// let snapshot = first.snapshot_state(CheckpointId(1))?.unwrap();
/// let position: CsvPosition = serde_json::from_slice(&snapshot)?;
/// assert_eq!(position, serde_json::from_str(r#"{"rows":2,"max_time":20}"#)?);
///
/// let mut restored = source();
/// restored.restore_state(&snapshot)?;
/// out.clear();
/// assert_eq!(restored.poll(&mut out, 10)?, SourcePoll::Finished);
/// assert_eq!(out, [Reading { time_ms: 30, value: 3 }]);
/// # Ok::<(), lockgate::BoxError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsvPosition {
    rows: u64,
    max_time: Option<i64>,
}

/// The file of a [`CsvSource`] as a [`SplitSource`]: one split (the
/// file), its position a [`CsvPosition`].
///
/// # Examples
/// Its positions are stored as the JSON of one [`CsvPosition`], split 0:
/// ```
/// use lockgate::source::SplitSource;
/// use lockgate_operators::csv_source::CsvFile;
/// // `Reading { time_ms: i64, value: i64 }`: the record of `CsvSource`'s example
/// # use lockgate_operators::csv::{CsvRecord, Fields};
/// #
/// # /// A reading: its event time (ms) and value.
/// # #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, lockgate::RecordSize)]
/// # struct Reading {
/// #     time_ms: i64,
/// #     value: i64,
/// # }
/// #
/// # impl CsvRecord for Reading {
/// #     const COLUMNS: &'static [&'static str] = &["time_ms", "value"];
/// #     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
/// #         let number = |i| fields.get(i)?.parse::<i64>().map_err(|e| format!("{}: {e}", fields.name(i)));
/// #         Ok(Reading { time_ms: number(0)?, value: number(1)? })
/// #     }
/// # }
///
/// let stored = br#"{"rows":3,"max_time":42}"#;
/// let positions = <CsvFile<Reading> as SplitSource>::decode_positions(stored)?;
/// assert_eq!(positions.len(), 1);
/// assert_eq!(positions[0].0, 0); // the file is split 0
/// assert_eq!(<CsvFile<Reading> as SplitSource>::encode_positions(&positions)?, stored);
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub struct CsvFile<R: CsvRecord> {
    path: PathBuf,
    bad_rows: BadRows,
    time_of: fn(&R) -> i64,
    out_of_orderness_ms: i64,
    probe: Arc<CsvSourceProbe>,
}

impl<R: CsvRecord> std::fmt::Debug for CsvFile<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsvFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl<R: CsvRecord> CsvFile<R> {
    /// Input errors (a missing file, a bad header or row) are fatal: a
    /// restart would read the same input again.
    fn fail(&self, e: CsvError) -> BoxError {
        let msg = e.to_string();
        self.probe.set_error(&msg);
        Box::new(FatalError(msg))
    }

    fn watermark_of(&self, p: &CsvPosition) -> Option<Watermark> {
        p.max_time
            .map(|m| Watermark(m.saturating_sub(self.out_of_orderness_ms).saturating_sub(1)))
    }
}

/// The reader of an open [`CsvFile`].
///
/// # Examples
/// A [`CsvSource`] reads through it; its watermark is the largest event
/// time read minus the out-of-orderness minus 1 ms, `i64::MAX` at the end
/// of the file:
/// ```
/// use lockgate::{Source, SourcePoll, Watermark};
/// use lockgate_operators::csv::BadRows;
/// use lockgate_operators::csv_source::{CsvSource, CsvSourceProbe};
/// // `Reading { time_ms: i64, value: i64 }`: the record of `CsvSource`'s example
/// # use lockgate_operators::csv::{CsvRecord, Fields};
/// #
/// # /// A reading: its event time (ms) and value.
/// # #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, lockgate::RecordSize)]
/// # struct Reading {
/// #     time_ms: i64,
/// #     value: i64,
/// # }
/// #
/// # impl CsvRecord for Reading {
/// #     const COLUMNS: &'static [&'static str] = &["time_ms", "value"];
/// #     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
/// #         let number = |i| fields.get(i)?.parse::<i64>().map_err(|e| format!("{}: {e}", fields.name(i)));
/// #         Ok(Reading { time_ms: number(0)?, value: number(1)? })
/// #     }
/// # }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("readings.csv");
/// std::fs::write(&path, "time_ms,value\n100,1\n90,2\n\n150,3\n")?;
/// let mut source = CsvSource::new(path, BadRows::Fail, |r: &Reading| r.time_ms, 10, CsvSourceProbe::new());
///
/// let mut out = Vec::new();
/// assert_eq!(source.current_watermark(), None); // nothing read yet
/// source.poll(&mut out, 2)?;
/// assert_eq!(source.current_watermark(), Some(Watermark(89))); // 100 - 10 - 1
/// assert_eq!(source.poll(&mut out, 10)?, SourcePoll::Finished);
/// assert_eq!(source.current_watermark(), Some(Watermark(i64::MAX)));
/// assert_eq!(out.len(), 3); // a blank line is no row
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub struct CsvFileReader<R: CsvRecord> {
    reader: CsvRecordReader<R>,
    at: CsvPosition,
    watermark: Option<Watermark>,
    time_of: fn(&R) -> i64,
    out_of_orderness_ms: i64,
    finished: bool,
    probe: Arc<CsvSourceProbe>,
}

impl<R: CsvRecord> std::fmt::Debug for CsvFileReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsvFileReader")
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl<R: CsvRecord + Send + 'static> SplitSource for CsvFile<R> {
    type Record = R;
    type Split = u32;
    type Position = CsvPosition;
    type Reader = CsvFileReader<R>;

    fn splits(&self) -> Vec<u32> {
        vec![0]
    }

    fn open(&mut self, splits: &[(u32, Option<CsvPosition>)]) -> Result<Self::Reader, BoxError> {
        let at = splits
            .first()
            .and_then(|(_, p)| p.clone())
            .unwrap_or_default();
        let reader = CsvRecordReader::open_at(&self.path, self.bad_rows, at.rows)
            .map_err(|e| self.fail(e))?;
        Ok(CsvFileReader {
            reader,
            watermark: self.watermark_of(&at),
            at,
            time_of: self.time_of,
            out_of_orderness_ms: self.out_of_orderness_ms,
            finished: false,
            probe: self.probe.clone(),
        })
    }

    /// The JSON of earlier builds: `{"rows":..,"max_time":..}`.
    fn encode_positions(positions: &[(u32, CsvPosition)]) -> Result<Vec<u8>, BoxError> {
        let p = positions
            .first()
            .map(|(_, p)| p.clone())
            .unwrap_or_default();
        Ok(serde_json::to_vec(&p)?)
    }

    fn decode_positions(bytes: &[u8]) -> Result<Vec<(u32, CsvPosition)>, BoxError> {
        let p: CsvPosition = serde_json::from_slice(bytes)
            .map_err(|e| format!("CSV source position does not decode: {e}"))?;
        Ok(vec![(0, p)])
    }
}

impl<R: CsvRecord + Send + 'static> SplitReader<CsvFile<R>> for CsvFileReader<R> {
    fn read(&mut self, out: &mut SplitOutput<'_, CsvFile<R>>) -> Result<SourcePoll, BoxError> {
        let mut result = Ok(SourcePoll::Ready);
        while !out.is_full() {
            match self.reader.next_record() {
                Ok(Some(r)) => {
                    let t = (self.time_of)(&r);
                    self.at.max_time = Some(self.at.max_time.map_or(t, |m| m.max(t)));
                    self.at.rows = self.reader.position();
                    out.emit(r, &0, self.at.clone());
                }
                Ok(None) => {
                    self.finished = true;
                    result = Ok(SourcePoll::Finished);
                    break;
                }
                Err(e) => {
                    let msg = e.to_string();
                    self.probe.set_error(&msg);
                    result = Err(Box::new(FatalError(msg)) as BoxError);
                    break;
                }
            }
        }
        // Bad rows skipped after the last record count too.
        self.at.rows = self.reader.position();
        out.advance(&0, self.at.clone());
        self.watermark = self
            .at
            .max_time
            .map(|m| Watermark(m.saturating_sub(self.out_of_orderness_ms).saturating_sub(1)));
        self.probe.rows.store(self.at.rows, Ordering::Relaxed);
        self.probe
            .skipped
            .store(self.reader.skipped(), Ordering::Relaxed);
        if self.finished {
            self.probe.finished.store(true, Ordering::Relaxed);
        }
        result
    }

    fn current_watermark(&self) -> Option<Watermark> {
        if self.finished {
            return Some(Watermark(i64::MAX));
        }
        self.watermark
    }
}

/// A [`Source`] of the records of one CSV file (see the module docs): a
/// [`Replayable`] [`CsvFile`], its state the position of the file (the
/// JSON of earlier builds). Run it with parallelism 1 (a file, a gzip
/// stream above all, is read by one task).
///
/// # Examples
/// Readings per tumbling window of 100 ms, in a job (with lockgate's
/// example helper); the source's watermarks fire the windows as it reads:
/// ```
/// use lockgate::example;
/// use lockgate_operators::csv::BadRows;
/// use lockgate_operators::csv_source::{CsvSource, CsvSourceProbe};
/// use lockgate_operators::window::{Sum, WindowAssigner, WindowOperator};
/// use lockgate_operators::csv::{CsvRecord, Fields};
///
/// /// A reading: its event time (ms) and value.
/// #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, lockgate::RecordSize)]
/// struct Reading {
///     time_ms: i64,
///     value: i64,
/// }
///
/// impl CsvRecord for Reading {
///     const COLUMNS: &'static [&'static str] = &["time_ms", "value"];
///     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
///         let number = |i| fields.get(i)?.parse::<i64>().map_err(|e| format!("{}: {e}", fields.name(i)));
///         Ok(Reading { time_ms: number(0)?, value: number(1)? })
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("readings.csv");
/// std::fs::write(&path, "time_ms,value\n10,1\n60,2\n130,4\n110,8\n250,16\n")?;
///
/// let file = path.clone();
/// let sums = example::run_source(
///     1,
///     // event time: `time_ms`, records up to 50 ms out of order
///     move |_| CsvSource::new(file.clone(), BadRows::Fail, |r: &Reading| r.time_ms, 50, CsvSourceProbe::new()),
///     |readings| {
///         readings
///             .process("sum", |_| {
///                 let tumbling = WindowAssigner::tumbling(100).unwrap();
///                 WindowOperator::new(tumbling, Sum(|r: &Reading| r.value), |_: &Reading| 0u8, |r: &Reading| r.time_ms)
///             })
///             .flat_map(|out| out.fired().map(|w| (w.window.start, w.value as i64)))
///     },
/// );
/// assert_eq!(sums, [(0, 3), (100, 12), (200, 16)]);
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub struct CsvSource<R: CsvRecord + Send + 'static>(Replayable<CsvFile<R>>);

impl<R: CsvRecord + Send + 'static> std::fmt::Debug for CsvSource<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsvSource").finish_non_exhaustive()
    }
}

impl<R: CsvRecord + Send + 'static> CsvSource<R> {
    /// Reads `path` from its first row; `time_of` gives a record's event
    /// time (ms), `out_of_orderness_ms` the watermark's bound (negative:
    /// 0). The file is opened on the first poll.
    pub fn new(
        path: impl Into<PathBuf>,
        bad_rows: BadRows,
        time_of: fn(&R) -> i64,
        out_of_orderness_ms: i64,
        probe: Arc<CsvSourceProbe>,
    ) -> Self {
        CsvSource(Replayable::new(CsvFile {
            path: path.into(),
            bad_rows,
            time_of,
            out_of_orderness_ms: out_of_orderness_ms.max(0),
            probe,
        }))
    }
}

impl<R: CsvRecord + Send + 'static> Source<R> for CsvSource<R> {
    fn poll(&mut self, out: &mut Vec<R>, max: usize) -> Result<SourcePoll, BoxError> {
        self.0.poll(out, max)
    }

    /// The reader's, or before it opens (after a restore) the restored
    /// position's.
    fn current_watermark(&self) -> Option<Watermark> {
        match self.0.reader() {
            Some(r) => r.current_watermark(),
            None => self
                .0
                .positions()
                .first()
                .and_then(|(_, p)| self.0.source().watermark_of(p)),
        }
    }
}

impl<R: CsvRecord + Send + 'static> Checkpointed for CsvSource<R> {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        self.0.snapshot_state(id)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.0.restore_state(state)
    }

    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &lockgate::keys::Rescale,
    ) -> Result<(), BoxError> {
        self.0.restore_rescaled(chains, rescale)
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.0.notify_checkpoint_complete(id)
    }

    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.0.notify_checkpoint_aborted(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csv::Fields;

    /// A test record: an event time in ms and an optional delay.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Row {
        time_ms: i64,
        delay: Option<i64>,
    }

    impl CsvRecord for Row {
        const COLUMNS: &'static [&'static str] = &["time_ms", "delay"];
        fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
            let time_ms = fields
                .get(0)?
                .parse()
                .map_err(|e| format!("time_ms: {e}"))?;
            let delay = match fields.get(1)? {
                "NA" => None,
                d => Some(d.parse().map_err(|e| format!("delay: {e}"))?),
            };
            Ok(Row { time_ms, delay })
        }
    }

    const HEADER: &str = "time_ms,delay,origin\n";

    fn write(dir: &std::path::Path, rows: &[&str]) -> PathBuf {
        let p = dir.join("f.csv");
        let mut text = HEADER.to_string();
        for r in rows {
            text.push_str(r);
            text.push('\n');
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    fn source(path: &std::path::Path, bad: BadRows, probe: Arc<CsvSourceProbe>) -> CsvSource<Row> {
        CsvSource::new(path, bad, |r: &Row| r.time_ms, 60_000, probe)
    }

    const ROWS: [&str; 5] = [
        "36000000,1,EWR",
        "39600000,NA,JFK",
        "36000000,3,LGA",
        "43200000,4,EWR",
        "46800000,5,EWR",
    ];

    #[test]
    fn reads_in_batches_with_watermarks_and_restores_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &ROWS);
        let probe = CsvSourceProbe::new();
        let mut s = source(&path, BadRows::Fail, probe.clone());
        assert_eq!(s.current_watermark(), None);
        let mut out = Vec::new();
        assert_eq!(s.poll(&mut out, 2).unwrap(), SourcePoll::Ready);
        let t11 = out[1].time_ms;
        assert_eq!(s.current_watermark(), Some(Watermark(t11 - 60_000 - 1)));
        let snap = s.snapshot_state(CheckpointId(1)).unwrap().unwrap();
        let mut all = out.clone();
        out.clear();
        assert_eq!(s.poll(&mut out, 100).unwrap(), SourcePoll::Finished);
        all.extend(out.iter().copied());
        assert_eq!(all.len(), 5);
        assert_eq!(s.current_watermark(), Some(Watermark(i64::MAX)));
        assert!(probe.finished());
        assert_eq!(probe.records(), 5);

        // a restored source goes on from row 2, with the watermark it had
        let probe2 = CsvSourceProbe::new();
        let mut r = source(&path, BadRows::Fail, probe2.clone());
        r.restore_state(&snap).unwrap();
        assert_eq!(r.current_watermark(), Some(Watermark(t11 - 60_000 - 1)));
        let mut rest = Vec::new();
        while r.poll(&mut rest, 1).unwrap() != SourcePoll::Finished {}
        assert_eq!(rest, all[2..]);
        assert_eq!(probe2.rows(), 5);
        assert!(r.restore_state(b"?").is_err());
    }

    #[test]
    fn bad_rows_fail_with_the_line_or_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = ROWS.to_vec();
        rows[2] = "36000000";
        let path = write(dir.path(), &rows);
        let probe = CsvSourceProbe::new();
        let mut s = source(&path, BadRows::Fail, probe.clone());
        let mut out = Vec::new();
        let err = s.poll(&mut out, 100).unwrap_err().to_string();
        assert!(err.contains("line 4"), "{err}");
        assert!(err.contains("f.csv"), "{err}");
        assert_eq!(probe.error().as_deref(), Some(err.as_str()));

        let probe = CsvSourceProbe::new();
        let mut s = source(&path, BadRows::Skip, probe.clone());
        out.clear();
        while s.poll(&mut out, 100).unwrap() != SourcePoll::Finished {}
        assert_eq!(out.len(), 4);
        assert_eq!((probe.rows(), probe.skipped(), probe.records()), (5, 1, 4));
        assert_eq!(probe.error(), None);
    }

    #[test]
    fn a_byte_order_mark_before_the_header_is_skipped() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let mut text = format!("\u{feff}{HEADER}");
        for r in ROWS {
            text.push_str(r);
            text.push('\n');
        }
        let plain = dir.path().join("bom.csv");
        std::fs::write(&plain, &text).unwrap();
        let gz = dir.path().join("bom.csv.gz");
        let mut enc = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        enc.write_all(text.as_bytes()).unwrap();
        enc.finish().unwrap();
        for path in [plain, gz] {
            let probe = CsvSourceProbe::new();
            let mut s = source(&path, BadRows::Fail, probe.clone());
            let mut out = Vec::new();
            while s.poll(&mut out, 100).unwrap() != SourcePoll::Finished {}
            assert_eq!(out.len(), 5, "{}", path.display());
            assert_eq!(out[0].time_ms, 36_000_000);
        }
    }

    #[test]
    fn a_missing_file_is_an_input_error() {
        let probe = CsvSourceProbe::new();
        let mut s = source(
            std::path::Path::new("/nonexistent/f.csv"),
            BadRows::Fail,
            probe.clone(),
        );
        let err = s.poll(&mut Vec::new(), 10).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/f.csv"), "{err}");
        assert!(probe.error().is_some());
    }
}
