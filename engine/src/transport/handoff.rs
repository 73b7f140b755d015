//! The application's ends of a job: [`Ingest`] pushes records in (through
//! an [`ingest_channel`], read by a source as an [`IngestReceiver`]),
//! [`Output`] reads what [`crate::Stream::collect`] sends out. lockgate's
//! own types, so that no channel library's type is part of the API.

use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The application's end of an ingest source (see [`JobBuilder::ingest`](crate::JobBuilder::ingest)).
///
/// # Examples
/// ```
/// use lockgate::{JobBuilder, JobConfig, ingest::PushError};
/// let job = JobBuilder::new("ingest", JobConfig::default());
/// let (input, ingest) = job.ingest::<u32>("input", 1); // room for 1 record
/// let out = input.collect();
/// // before the job runs nothing reads: the second push finds it full
/// ingest.try_push(1).unwrap();
/// assert_eq!(ingest.try_push(2), Err(PushError::Full(2)));
/// let handle = job.start().unwrap();
/// ingest.push(2).unwrap(); // blocks until there is room
/// ingest.close();
/// handle.wait().unwrap();
/// assert_eq!(out.try_iter().collect::<Vec<_>>(), [1, 2]);
/// ```
pub struct Ingest<T> {
    tx: Sender<T>,
    pub(crate) restored: Arc<AtomicU64>,
}

impl<T> std::fmt::Debug for Ingest<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingest").finish_non_exhaustive()
    }
}

impl<T> Clone for Ingest<T> {
    fn clone(&self) -> Self {
        Ingest {
            tx: self.tx.clone(),
            restored: self.restored.clone(),
        }
    }
}

/// A channel of `capacity` records (at least 1) into a source: the
/// application (or another thread) pushes through the [`Ingest`], the
/// source reads the [`IngestReceiver`] and returns it from
/// [`crate::Source::wake_on`], so that its task wakes when records arrive.
/// [`crate::JobBuilder::ingest`] builds its source on one.
///
/// # Examples
/// ```
/// use lockgate::{ingest::ingest_channel, ingest::TryRecvError};
/// let (ingest, rx) = ingest_channel::<u8>(2);
/// ingest.try_push(7).unwrap();
/// assert_eq!(rx.try_recv(), Ok(7));
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
/// ingest.close();
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Ended));
/// ```
pub fn ingest_channel<T>(capacity: usize) -> (Ingest<T>, IngestReceiver<T>) {
    let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
    (
        Ingest {
            tx,
            restored: Arc::new(AtomicU64::new(0)),
        },
        IngestReceiver { rx },
    )
}

/// The source's end of an [`ingest_channel`].
pub struct IngestReceiver<T> {
    rx: Receiver<T>,
}

impl<T> std::fmt::Debug for IngestReceiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestReceiver")
            .field("queued", &self.rx.len())
            .finish()
    }
}

impl<T> Clone for IngestReceiver<T> {
    fn clone(&self) -> Self {
        IngestReceiver {
            rx: self.rx.clone(),
        }
    }
}

impl<T> IngestReceiver<T> {
    /// The next record, without blocking.
    ///
    /// # Errors
    /// [`TryRecvError::Empty`] when none is queued, [`TryRecvError::Ended`]
    /// when none is queued and every [`Ingest`] was closed or dropped.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.rx.try_recv().map_err(TryRecvError::from)
    }

    /// Records queued now.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// True when no record is queued now.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// The channel the task's wait selects on.
    pub(crate) fn raw(&self) -> &Receiver<T> {
        &self.rx
    }
}

/// Why [`IngestReceiver::try_recv`] or [`Output::try_recv`] returned no
/// record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryRecvError {
    /// Nothing is queued now.
    Empty,
    /// Nothing is queued and nothing will come: the other end is gone.
    Ended,
}

impl From<crossbeam_channel::TryRecvError> for TryRecvError {
    fn from(e: crossbeam_channel::TryRecvError) -> Self {
        match e {
            crossbeam_channel::TryRecvError::Empty => TryRecvError::Empty,
            crossbeam_channel::TryRecvError::Disconnected => TryRecvError::Ended,
        }
    }
}

/// Why [`Output::recv_timeout`] returned no record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvTimeoutError {
    /// Nothing came within the time.
    Timeout,
    /// Nothing is queued and nothing will come: the job ended.
    Ended,
}

/// The application's end of [`crate::Stream::collect`]: what the job's
/// sink sends, unbounded, in the order the sink task saw it.
pub struct Output<T> {
    rx: Receiver<T>,
}

/// The job's end of an [`Output`].
pub(crate) struct OutputSender<T> {
    tx: crossbeam_channel::Sender<T>,
}

impl<T> OutputSender<T> {
    /// Sends a record; a dropped [`Output`] only makes it vanish.
    pub(crate) fn send(&self, record: T) -> Result<(), T> {
        self.tx.send(record).map_err(|e| e.0)
    }
}

/// An unbounded channel to the application.
pub(crate) fn output_channel<T>() -> (OutputSender<T>, Output<T>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (OutputSender { tx }, Output { rx })
}

impl<T> std::fmt::Debug for Output<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("queued", &self.rx.len())
            .finish()
    }
}

impl<T> Output<T> {
    /// The next record, without blocking.
    ///
    /// # Errors
    /// [`TryRecvError::Empty`] when none is queued, [`TryRecvError::Ended`]
    /// when none is queued and the job ended.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.rx.try_recv().map_err(TryRecvError::from)
    }

    /// The next record, waiting for it; `None` once the job ended and
    /// everything was read.
    pub fn recv(&self) -> Option<T> {
        self.rx.recv().ok()
    }

    /// The next record, waiting at most `timeout`.
    ///
    /// # Errors
    /// [`RecvTimeoutError::Timeout`] when nothing came in time,
    /// [`RecvTimeoutError::Ended`] when the job ended and everything was
    /// read.
    pub fn recv_timeout(&self, timeout: std::time::Duration) -> Result<T, RecvTimeoutError> {
        self.rx.recv_timeout(timeout).map_err(|e| match e {
            crossbeam_channel::RecvTimeoutError::Timeout => RecvTimeoutError::Timeout,
            crossbeam_channel::RecvTimeoutError::Disconnected => RecvTimeoutError::Ended,
        })
    }

    /// Every record queued now, without blocking.
    pub fn try_iter(&self) -> impl Iterator<Item = T> + '_ {
        self.rx.try_iter()
    }

    /// Every record, waiting for each, until the job ended.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.rx.iter()
    }

    /// Records queued now.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// True when no record is queued now.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

/// Why [`Ingest::try_push`] did not take a record; the record comes back.
#[derive(Debug, PartialEq, Eq)]
pub enum PushError<T> {
    /// The ingest channel is full: the job is backpressured. Retry later.
    Full(T),
    /// The job ended; nothing will be read any more.
    Closed(T),
}

impl<T> Ingest<T> {
    /// Pushes a record without blocking.
    ///
    /// # Errors
    /// [`PushError::Full`] under backpressure, [`PushError::Closed`] when
    /// the job ended.
    pub fn try_push(&self, record: T) -> Result<(), PushError<T>> {
        self.tx.try_send(record).map_err(|e| match e {
            crossbeam_channel::TrySendError::Full(r) => PushError::Full(r),
            crossbeam_channel::TrySendError::Disconnected(r) => PushError::Closed(r),
        })
    }

    /// Pushes a record, blocking while the channel is full.
    ///
    /// # Errors
    /// Gives the record back when the job ended.
    pub fn push(&self, record: T) -> Result<(), T> {
        self.tx.send(record).map_err(|e| e.0)
    }

    /// Records the source had consumed at the checkpoint the job last
    /// restored from (0 before any restore). A job started from a
    /// checkpoint folder sets it before [`crate::JobBuilder::start`]
    /// returns: push again from there.
    pub fn restored_position(&self) -> u64 {
        self.restored.load(Ordering::Acquire)
    }

    /// Ends the input (when every clone is closed or dropped).
    pub fn close(self) {}
}
