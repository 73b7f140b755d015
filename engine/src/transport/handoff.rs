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
    tx: Sender<Pushed<T>>,
    pub(crate) restored: Arc<AtomicU64>,
}

/// What travels from an [`Ingest`] to its source: a record, a record with
/// its event timestamp, or an explicit watermark.
#[derive(Debug)]
pub(crate) enum Pushed<T> {
    Record(T),
    Timed(T, i64),
    Watermark(i64),
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
    rx: Receiver<Pushed<T>>,
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
    ///
    /// Timestamps given with [`Ingest::push_at`] are dropped and
    /// watermarks ([`Ingest::push_watermark`]) skipped: only the ingest
    /// source of [`crate::JobBuilder::ingest_event_time`] reads them.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        loop {
            match self.rx.try_recv().map_err(TryRecvError::from)? {
                Pushed::Record(r) | Pushed::Timed(r, _) => return Ok(r),
                Pushed::Watermark(_) => {}
            }
        }
    }

    /// The next record, timestamped record or watermark, without blocking.
    pub(crate) fn try_recv_pushed(&self) -> Result<Pushed<T>, TryRecvError> {
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
///
/// # Examples
/// ```
/// use lockgate::{JobBuilder, JobConfig};
///
/// let job = JobBuilder::new("lengths", JobConfig::default());
/// let (words, ingest) = job.ingest::<String>("words", 16);
/// let lengths = words.map(|w| w.len()).collect();
/// let handle = job.start()?;
/// ingest.push("hello".to_string()).expect("the job runs");
/// assert_eq!(lengths.recv(), Some(5)); // waits for the record to come through
/// ingest.push("hi".to_string()).expect("the job runs");
/// drop(ingest);
/// handle.wait()?;
/// assert_eq!(lengths.try_iter().collect::<Vec<_>>(), [2]);
/// assert_eq!(lengths.recv(), None); // the job ended: nothing more comes
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
        self.try_send(Pushed::Record(record))
    }

    /// Pushes a record, blocking while the channel is full.
    ///
    /// # Errors
    /// Gives the record back when the job ended.
    pub fn push(&self, record: T) -> Result<(), T> {
        self.send(Pushed::Record(record))
    }

    /// Pushes a record with its event timestamp (for the watermarks of an
    /// [`crate::JobBuilder::ingest_event_time`] source, in the unit of its
    /// [`WatermarkStrategy`](crate::source::WatermarkStrategy); it takes
    /// the place of the strategy's timestamp function for this record),
    /// blocking while the channel is full. The record itself travels on
    /// as it is: an event-time operator reads its time from the record.
    ///
    /// # Errors
    /// Gives the record back when the job ended.
    pub fn push_at(&self, record: T, timestamp: i64) -> Result<(), T> {
        self.send(Pushed::Timed(record, timestamp))
    }

    /// As [`Ingest::push_at`], without blocking.
    ///
    /// # Errors
    /// As [`Ingest::try_push`].
    pub fn try_push_at(&self, record: T, timestamp: i64) -> Result<(), PushError<T>> {
        self.try_send(Pushed::Timed(record, timestamp))
    }

    /// Pushes an explicit watermark: no record with a timestamp at or
    /// below `watermark` follows (Flink's `WatermarkOutput.emitWatermark`).
    /// An [`crate::JobBuilder::ingest_event_time`] source emits it after
    /// the records pushed before it (when it advances the source's
    /// watermark; an older one changes nothing); it is kept in the replay
    /// log with them, so a restart emits it at the same place. Blocks
    /// while the channel is full.
    ///
    /// # Errors
    /// Gives the watermark back when the job ended.
    pub fn push_watermark(&self, watermark: crate::Watermark) -> Result<(), crate::Watermark> {
        self.tx
            .send(Pushed::Watermark(watermark.0))
            .map_err(|_| watermark)
    }

    fn send(&self, p: Pushed<T>) -> Result<(), T> {
        self.tx.send(p).map_err(|e| match e.0 {
            Pushed::Record(r) | Pushed::Timed(r, _) => r,
            Pushed::Watermark(_) => unreachable!("records only"),
        })
    }

    fn try_send(&self, p: Pushed<T>) -> Result<(), PushError<T>> {
        let back = |p: Pushed<T>| match p {
            Pushed::Record(r) | Pushed::Timed(r, _) => r,
            Pushed::Watermark(_) => unreachable!("records only"),
        };
        self.tx.try_send(p).map_err(|e| match e {
            crossbeam_channel::TrySendError::Full(p) => PushError::Full(back(p)),
            crossbeam_channel::TrySendError::Disconnected(p) => PushError::Closed(back(p)),
        })
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

/// A wake-up for a waiting source that carries no record: the source keeps
/// the `Wakeup` and names it in [`crate::Source::wake_on`]; whoever has
/// news for it (a reader thread, the application) calls
/// [`Waker::wake`] on one of its [`Waker`]s. Wake-ups do not pile up: one
/// pending is enough, and the task takes it before it polls the source.
///
/// # Examples
/// ```
/// use lockgate::source::Wakeup;
/// let wakeup = Wakeup::new();
/// let waker = wakeup.waker();
/// assert!(!wakeup.take());
/// waker.wake();
/// waker.wake(); // one is pending
/// assert!(wakeup.take());
/// assert!(!wakeup.take());
/// ```
pub struct Wakeup {
    rx: Receiver<()>,
    tx: Sender<()>,
}

/// The sending end of a [`Wakeup`]: cloneable, for any thread.
#[derive(Clone)]
pub struct Waker {
    tx: Sender<()>,
}

impl std::fmt::Debug for Wakeup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wakeup")
            .field("pending", &!self.rx.is_empty())
            .finish()
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker").finish_non_exhaustive()
    }
}

impl Default for Wakeup {
    fn default() -> Self {
        Self::new()
    }
}

impl Wakeup {
    /// A new wake-up, none pending.
    pub fn new() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(1);
        Wakeup { rx, tx }
    }

    /// A handle that wakes this one.
    pub fn waker(&self) -> Waker {
        Waker {
            tx: self.tx.clone(),
        }
    }

    /// Takes the pending wake-up, if any (true when there was one).
    pub fn take(&self) -> bool {
        self.rx.try_recv().is_ok()
    }
}

impl Waker {
    /// Wakes the source (a no-op when a wake-up is pending already).
    pub fn wake(&self) {
        let _ = self.tx.try_send(());
    }
}

/// One thing a waiting source wakes on (see [`WakeOn`]).
pub(crate) trait WakeEntry {
    /// Adds it to a wait.
    fn register<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>);
    /// True when it is ready now; a [`Wakeup`] is taken.
    fn ready(&self) -> bool;
}

impl<T> WakeEntry for IngestReceiver<T> {
    fn register<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) {
        sel.recv(&self.rx);
    }
    fn ready(&self) -> bool {
        let mut sel = crossbeam_channel::Select::new();
        sel.recv(&self.rx);
        sel.try_ready().is_ok()
    }
}

impl WakeEntry for Wakeup {
    fn register<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) {
        sel.recv(&self.rx);
    }
    fn ready(&self) -> bool {
        self.take()
    }
}

/// What a waiting source wakes on besides its deadline, filled by
/// [`crate::Source::wake_on`]: ingest channels of any record type (a
/// channel of control messages as well as one of records) and
/// [`Wakeup`]s. Independent of the source's output type.
///
/// # Examples
/// ```
/// use lockgate::source::{WakeOn, Wakeup};
/// use lockgate::{ingest::ingest_channel, BoxError, Checkpointed, Source, SourcePoll};
///
/// /// Trades (here: numbers) from one channel, commands from another.
/// struct Feed {
///     trades: lockgate::ingest::IngestReceiver<u64>,
///     commands: lockgate::ingest::IngestReceiver<&'static str>,
///     reconnected: Wakeup,
/// }
/// impl Source<u64> for Feed {
///     fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourcePoll, BoxError> {
///         if self.commands.try_recv() == Ok("end") {
///             return Ok(SourcePoll::Finished);
///         }
///         while out.len() < max {
///             match self.trades.try_recv() {
///                 Ok(t) => out.push(t),
///                 Err(_) => return Ok(SourcePoll::Idle { wake_at_ns: None }),
///             }
///         }
///         Ok(SourcePoll::Ready)
///     }
///     fn wake_on<'a>(&'a self, on: &mut WakeOn<'a>) {
///         on.channel(&self.trades);
///         on.channel(&self.commands); // another record type
///         on.wakeup(&self.reconnected);
///     }
/// }
/// impl Checkpointed for Feed {}
/// # let (_a, trades) = ingest_channel(1);
/// # let (_b, commands) = ingest_channel(1);
/// # let _ = Feed { trades, commands, reconnected: Wakeup::new() };
/// ```
#[derive(Default)]
pub struct WakeOn<'a> {
    entries: Vec<&'a dyn WakeEntry>,
}

impl std::fmt::Debug for WakeOn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeOn")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl<'a> WakeOn<'a> {
    /// Wakes when `rx` has something (or its last [`Ingest`] is gone).
    pub fn channel<X>(&mut self, rx: &'a IngestReceiver<X>) {
        self.entries.push(rx);
    }

    /// Wakes when `wakeup` is woken.
    pub fn wakeup(&mut self, wakeup: &'a Wakeup) {
        self.entries.push(wakeup);
    }

    /// True when nothing was named.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds every entry to a wait.
    pub(crate) fn register(&self, sel: &mut crossbeam_channel::Select<'a>) {
        for &e in &self.entries {
            e.register(sel);
        }
    }

    /// True when an entry is ready (every ready [`Wakeup`] is taken).
    pub(crate) fn any_ready(&self) -> bool {
        // Every entry is asked (no short cut), so every Wakeup is taken.
        let mut ready = false;
        for e in &self.entries {
            ready |= e.ready();
        }
        ready
    }
}
