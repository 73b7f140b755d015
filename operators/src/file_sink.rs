//! A transactional file sink: exactly-once files through two-phase commit
//! (as Flink's `FileSink` with its in-progress / pending / finished part
//! files).
//!
//! Each sink subtask writes lines into an in-progress part file
//! (`.part-<subtask>-<seq>.inprogress`). On a checkpoint's barrier the part
//! is flushed, fsynced and renamed to
//! `.part-<subtask>-c<checkpoint>.pending` (pre-commit); when the checkpoint
//! completes it is renamed to `part-<checkpoint:020>-<subtask:04>` (commit),
//! a name that sorts in checkpoint order. Only committed parts are output;
//! [`committed_parts`] lists them in order.
//!
//! Recovery from checkpoint k commits the parts k pre-committed and removes
//! this subtask's in-progress parts and every part (pending or committed)
//! of a checkpoint newer than k, so that a restore from an older checkpoint
//! (after the newest was found corrupt) commits nothing twice.

use lockgate::TwoPhaseCommit;
use lockgate::{BoxError, CheckpointId};
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Formats one record into bytes (usually one line with its `\n`).
///
/// # Examples
/// ```
/// use lockgate_operators::file_sink::Formatter;
/// use std::io::Write;
///
/// let csv: Formatter<(u32, f64)> = Box::new(|r, out| writeln!(out, "{},{}", r.0, r.1).unwrap());
/// let mut bytes = Vec::new();
/// csv(&(7, 2.5), &mut bytes);
/// csv(&(8, 0.25), &mut bytes);
/// assert_eq!(bytes, b"7,2.5\n8,0.25\n");
/// ```
pub type Formatter<T> = Box<dyn Fn(&T, &mut Vec<u8>) + Send>;

/// A transaction of the file sink: one part file.
///
/// # Examples
/// A transaction's life, driven by hand through [`TwoPhaseCommit`] (in a
/// job, [`lockgate::TwoPhaseCommitSink`] makes these calls):
/// ```
/// use lockgate::{CheckpointId, TwoPhaseCommit};
/// use lockgate_operators::file_sink::{committed_parts, FileTxn, TransactionalFileSink};
/// use std::io::Write;
///
/// let dir = tempfile::tempdir()?;
/// let mut sink = TransactionalFileSink::new(dir.path(), 0, Box::new(|x: &u32, out: &mut Vec<u8>| writeln!(out, "{x}").unwrap()))?;
/// let mut txn = sink.begin(0)?;
/// sink.write(&mut txn, &mut vec![1, 2, 3])?;
/// assert_eq!(txn, FileTxn { seq: 0, checkpoint: None, records: 3 });
///
/// sink.pre_commit(&mut txn, CheckpointId(4))?; // at checkpoint 4's barrier
/// assert_eq!(txn.checkpoint, Some(4));
/// assert!(committed_parts(dir.path())?.is_empty()); // durable, not visible yet
/// sink.commit(txn)?; // checkpoint 4 completed
/// assert_eq!(committed_parts(dir.path())?.len(), 1);
/// # Ok::<(), lockgate::BoxError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileTxn {
    /// The transaction's sequence number within the subtask's run.
    pub seq: u64,
    /// The checkpoint it was pre-committed for (`None` while in progress).
    pub checkpoint: Option<u64>,
    /// Records written into it.
    pub records: u64,
}

/// The [`TwoPhaseCommit`] output of the file sink (wrap it in
/// [`lockgate::TwoPhaseCommitSink`]). One folder per sink
/// operator; subtasks share it.
///
/// # Examples
/// Lines written exactly once by a sink of 2 subtasks, in a job (with
/// lockgate's example helper; without checkpoints each subtask commits its
/// one part at the end of the input):
/// ```
/// use lockgate::{example, TwoPhaseCommitSink};
/// use lockgate_operators::file_sink::{committed_parts, read_committed, TransactionalFileSink};
/// use std::io::Write;
///
/// let dir = tempfile::tempdir()?;
/// let folder = dir.path().to_path_buf();
/// example::run(1..=6u32, move |numbers| {
///     numbers.key_by(|x| u64::from(*x)).task("files", 2).sink("files", move |info| {
///         let line = Box::new(|x: &u32, out: &mut Vec<u8>| writeln!(out, "{x}").unwrap());
///         TwoPhaseCommitSink::new(TransactionalFileSink::new(folder.clone(), info.index, line).unwrap())
///     })
/// });
///
/// let names: Vec<String> = committed_parts(dir.path())?
///     .iter()
///     .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
///     .collect();
/// assert_eq!(names, ["part-18446744073709551615-0000", "part-18446744073709551615-0001"]);
/// let text = String::from_utf8(read_committed(dir.path())?)?;
/// let mut lines: Vec<u32> = text.lines().map(|l| l.parse().unwrap()).collect();
/// lines.sort_unstable();
/// assert_eq!(lines, [1, 2, 3, 4, 5, 6]);
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub struct TransactionalFileSink<T> {
    dir: PathBuf,
    subtask: usize,
    format: Formatter<T>,
    writer: Option<BufWriter<File>>,
    buf: Vec<u8>,
}

impl<T> std::fmt::Debug for TransactionalFileSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionalFileSink")
            .finish_non_exhaustive()
    }
}

impl<T> TransactionalFileSink<T> {
    /// A sink subtask writing into `dir` (created if missing).
    ///
    /// # Errors
    /// When `dir` cannot be created.
    pub fn new(
        dir: impl Into<PathBuf>,
        subtask: usize,
        format: Formatter<T>,
    ) -> std::io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(TransactionalFileSink {
            dir,
            subtask,
            format,
            writer: None,
            buf: Vec::new(),
        })
    }

    fn inprogress(&self, seq: u64) -> PathBuf {
        self.dir
            .join(format!(".part-{}-{seq}.inprogress", self.subtask))
    }

    fn pending(&self, checkpoint: u64) -> PathBuf {
        self.dir
            .join(format!(".part-{}-c{checkpoint}.pending", self.subtask))
    }

    fn committed(&self, checkpoint: u64) -> PathBuf {
        self.dir
            .join(format!("part-{checkpoint:020}-{:04}", self.subtask))
    }

    /// Removes this subtask's in-progress parts and its parts (pending or
    /// committed) of checkpoints newer than `after`. With `after = None` (a
    /// fresh start) every in-progress and pending part of the subtask goes
    /// (none belongs to a completed checkpoint of this run) and committed
    /// parts stay.
    fn remove_leftovers(&self, after: Option<u64>) -> Result<(), BoxError> {
        let inprog_prefix = format!(".part-{}-", self.subtask);
        let pending_prefix = format!(".part-{}-c", self.subtask);
        let committed_suffix = format!("-{:04}", self.subtask);
        for entry in fs::read_dir(&self.dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let stale = if name.starts_with(&inprog_prefix) && name.ends_with(".inprogress") {
                true
            } else if let Some(rest) = name.strip_prefix(&pending_prefix) {
                let cp = rest
                    .strip_suffix(".pending")
                    .and_then(|c| c.parse::<u64>().ok());
                match (cp, after) {
                    (Some(c), Some(a)) => c > a,
                    (Some(_), None) => true,
                    (None, _) => false,
                }
            } else if let Some(rest) = name.strip_prefix("part-") {
                let cp = rest
                    .strip_suffix(&committed_suffix)
                    .and_then(|c| c.parse::<u64>().ok());
                matches!((cp, after), (Some(c), Some(a)) if c > a)
            } else {
                false
            };
            if stale {
                fs::remove_file(self.dir.join(&name))?;
            }
        }
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl<T: Send> TwoPhaseCommit<T> for TransactionalFileSink<T> {
    type Txn = FileTxn;

    fn begin(&mut self, seq: u64) -> Result<FileTxn, BoxError> {
        let f = File::create(self.inprogress(seq))?;
        self.writer = Some(BufWriter::with_capacity(1 << 16, f));
        Ok(FileTxn {
            seq,
            checkpoint: None,
            records: 0,
        })
    }

    fn write(&mut self, txn: &mut FileTxn, records: &mut Vec<T>) -> Result<(), BoxError> {
        let w = self.writer.as_mut().ok_or("write outside a transaction")?;
        for r in records.drain(..) {
            self.buf.clear();
            (self.format)(&r, &mut self.buf);
            w.write_all(&self.buf)?;
            txn.records += 1;
        }
        Ok(())
    }

    fn pre_commit(&mut self, txn: &mut FileTxn, checkpoint: CheckpointId) -> Result<(), BoxError> {
        if let Some(mut w) = self.writer.take() {
            w.flush()?;
            w.get_ref().sync_all()?;
        }
        fs::rename(self.inprogress(txn.seq), self.pending(checkpoint.get()))?;
        sync_dir(&self.dir)?;
        txn.checkpoint = Some(checkpoint.get());
        Ok(())
    }

    fn commit(&mut self, txn: FileTxn) -> Result<(), BoxError> {
        let cp = txn
            .checkpoint
            .ok_or("commit of a transaction never pre-committed")?;
        let (pending, done) = (self.pending(cp), self.committed(cp));
        if pending.exists() {
            fs::rename(&pending, &done)?;
            sync_dir(&self.dir)?;
        } else if !done.exists() {
            return Err(format!(
                "part {} of checkpoint {cp} is neither pending nor committed",
                pending.display()
            )
            .into());
        }
        Ok(())
    }

    fn abort(&mut self, txn: FileTxn) -> Result<(), BoxError> {
        self.writer = None;
        let path = match txn.checkpoint {
            Some(cp) => self.pending(cp),
            None => self.inprogress(txn.seq),
        };
        if path.exists() {
            fs::remove_file(path)?;
        }
        Ok(())
    }

    fn recover(&mut self, restored: CheckpointId, _pending: &[FileTxn]) -> Result<(), BoxError> {
        self.writer = None;
        self.remove_leftovers(Some(restored.get()))
    }

    fn start_fresh(&mut self) -> Result<(), BoxError> {
        self.remove_leftovers(None)
    }

    /// Finishes old subtask `old`'s output as it would have on its own
    /// restore: its files after `restored` removed, its pending parts
    /// committed (under its own name, so the parts of every subtask stay
    /// apart).
    fn adopt(
        &mut self,
        old: usize,
        restored: CheckpointId,
        pending: Vec<FileTxn>,
    ) -> Result<(), BoxError> {
        let mut as_old = TransactionalFileSink::<T> {
            dir: self.dir.clone(),
            subtask: old,
            format: Box::new(|_, _| {}),
            writer: None,
            buf: Vec::new(),
        };
        as_old.recover(restored, &pending)?;
        for txn in pending {
            as_old.commit(txn)?;
        }
        Ok(())
    }

    fn is_empty(&self, txn: &FileTxn) -> bool {
        txn.records == 0
    }
}

/// The committed parts in `dir`, in commit order (checkpoint, then
/// subtask).
///
/// # Errors
/// When `dir` cannot be read.
///
/// # Examples
/// Two subtasks commit a part each for checkpoints 9 and 10 (driven by
/// hand, in another order):
/// ```
/// use lockgate::{CheckpointId, TwoPhaseCommit};
/// use lockgate_operators::file_sink::{committed_parts, TransactionalFileSink};
///
/// let dir = tempfile::tempdir()?;
/// for (subtask, checkpoint) in [(1, 10), (0, 10), (1, 9), (0, 9)] {
///     let line = Box::new(|x: &u8, out: &mut Vec<u8>| out.push(*x));
///     let mut sink = TransactionalFileSink::new(dir.path(), subtask, line)?;
///     let mut txn = sink.begin(0)?;
///     sink.write(&mut txn, &mut vec![b'x'])?;
///     sink.pre_commit(&mut txn, CheckpointId(checkpoint))?;
///     sink.commit(txn)?;
/// }
/// let names: Vec<String> = committed_parts(dir.path())?
///     .iter()
///     .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
///     .collect();
/// assert_eq!(names, [
///     "part-00000000000000000009-0000",
///     "part-00000000000000000009-0001",
///     "part-00000000000000000010-0000",
///     "part-00000000000000000010-0001",
/// ]);
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub fn committed_parts(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut parts: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("part-"))
        })
        .collect();
    parts.sort();
    Ok(parts)
}

/// The bytes of every committed part, concatenated in commit order.
///
/// # Errors
/// When `dir` or a part cannot be read.
///
/// # Examples
/// Only what a completed checkpoint committed is read (driven by hand):
/// ```
/// use lockgate::{CheckpointId, TwoPhaseCommit};
/// use lockgate_operators::file_sink::{read_committed, TransactionalFileSink};
/// use std::io::Write;
///
/// let dir = tempfile::tempdir()?;
/// let line = Box::new(|s: &&str, out: &mut Vec<u8>| writeln!(out, "{s}").unwrap());
/// let mut sink = TransactionalFileSink::new(dir.path(), 0, line)?;
///
/// let mut first = sink.begin(0)?;
/// sink.write(&mut first, &mut vec!["a", "b"])?;
/// sink.pre_commit(&mut first, CheckpointId(1))?;
/// sink.commit(first)?; // checkpoint 1 completed
///
/// let mut second = sink.begin(1)?;
/// sink.write(&mut second, &mut vec!["c"])?;
/// sink.pre_commit(&mut second, CheckpointId(2))?; // checkpoint 2 has not completed
///
/// assert_eq!(read_committed(dir.path())?, b"a\nb\n");
/// sink.commit(second)?;
/// assert_eq!(read_committed(dir.path())?, b"a\nb\nc\n");
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub fn read_committed(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    for p in committed_parts(dir)? {
        out.extend(fs::read(p)?);
    }
    Ok(out)
}
