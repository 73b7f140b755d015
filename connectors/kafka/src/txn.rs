//! Exactly-once output to Kafka: a write-ahead two-phase commit.
//!
//! # The protocol, and why this one
//! librdkafka cannot resume another producer's transaction: its
//! `init_transactions` on a `transactional.id` aborts whatever that id left
//! open, and there is no API to continue a transaction from a saved
//! producer id and epoch (Flink's `KafkaSink` does that by reaching into the
//! Java client). A fresh `transactional.id` per checkpoint would cost a
//! producer initialisation per checkpoint and fence nothing. So lockgate
//! keeps a checkpoint's output in the checkpoint instead (write-ahead), and
//! writes it to Kafka only after the checkpoint completed:
//!
//! 1. **Write** (between barriers): records are appended to the open
//!    write-ahead transaction, in memory. Nothing reaches Kafka.
//! 2. **Pre-commit** (the barrier of checkpoint `c`): the transaction is
//!    closed and stored, records included, in the sink's part of `c`
//!    ([`lockgate::TwoPhaseCommitSink`] does this). Durable once `c` is.
//! 3. **Commit** (`c` completed): in one Kafka transaction of the subtask's
//!    stable transactional id, the records are produced and a *marker*
//!    `(run, c)` is committed with them, as the committed offset of a
//!    marker consumer group (`send_offsets_to_transaction`). Records and
//!    marker become visible together or not at all.
//! 4. **Restore** from checkpoint `k`: the producer is initialised on the
//!    same id, which fences any older producer of that id (a zombie) and
//!    aborts its open transaction; the marker then says which of `k`'s
//!    pending transactions already landed: those with checkpoint at most
//!    the marker's (same run) are skipped, the others are written again.
//!
//! The marker must be readable for this: a committed offset whose metadata
//! (the run) is absent or unreadable is an error naming the group and
//! partition ([`KafkaError::BadMarker`]), never taken for "no marker". And
//! a marker group with no committed offset at all, where one had been
//! committed before the restored checkpoint was taken (each pending
//! transaction records whether, [`WriteAheadTxn::marker_committed`]),
//! means the offset expired (the broker's `offsets.retention.minutes`, 7
//! days by default, counted from the group's last commit: a job stopped
//! longer than that) or the brokers are another cluster's: the restore is
//! refused ([`KafkaError::MarkerMissing`]), since writing the pending
//! transactions again may duplicate output. The override,
//! [`WriteAheadOutput::allow_missing_marker`] (`lockgate kafka run
//! --allow-missing-marker`), writes them again. Before the first commit
//! ever on a transactional id there is no marker to lose: its pending
//! transactions are written.
//!
//! A crash at any step leaves a state the next attempt resolves: before
//! step 3 commits, the open Kafka transaction is aborted by the next
//! `init` and the records are written again from the checkpoint; after it
//! commits, the marker says so and nothing is written twice. Readers use
//! `read_committed` and see each completed checkpoint's output exactly
//! once, in checkpoint order. The price: output becomes visible one
//! checkpoint completion later than it was computed (as with Flink's
//! transactional sink), and a checkpoint holds its interval's output
//! ([`crate::SINK_RECORD_BYTES`] a record). [`crate::FakeCluster`] models
//! exactly these operations, and a proptest state machine crashes the
//! protocol at every step against it.
//!
//! The `run` in the marker is drawn at a fresh start and kept across
//! restores, so that a marker left by an earlier, unrelated job on the
//! same transactional ids is never taken for this job's. Limits: two jobs
//! must not share a transactional-id prefix at the same time; a restore
//! from an older checkpoint than the newest completed one (the newest
//! found corrupt) cannot take back what newer ones committed to Kafka.

use crate::encoding::SinkRecord;
use crate::error::KafkaError;
use lockgate::{BoxError, CheckpointId, TwoPhaseCommit};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What a committed transaction leaves beside its records: the run that
/// wrote it and the checkpoint whose output it held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The run (drawn at a fresh start, kept across restores).
    pub run: u64,
    /// The checkpoint.
    pub checkpoint: u64,
}

impl Marker {
    /// True when this marker shows that `run`'s output of `checkpoint`
    /// landed (same run, a checkpoint at least as new).
    pub fn covers(&self, run: u64, checkpoint: u64) -> bool {
        self.run == run && self.checkpoint >= checkpoint
    }
}

/// The consumer group whose committed offset holds the marker of
/// `transactional_id` (`<transactional id>-marker`).
pub fn marker_group(transactional_id: &str) -> String {
    format!("{transactional_id}-marker")
}

/// Reads a marker from the marker group's committed offset: `offset` is
/// `None` when the group has none (no marker), `metadata` its metadata
/// (the run, 16 hex digits); `location` names the group and partition for
/// the error.
///
/// # Errors
/// [`KafkaError::BadMarker`] when an offset is there but its metadata is
/// absent or unreadable, or the offset is negative.
///
/// # Examples
/// ```
/// use lockgate_kafka::{decode_marker, Marker};
/// assert_eq!(decode_marker("g", None, "").unwrap(), None);
/// let m = decode_marker("g", Some(4), "00000000000000ff").unwrap();
/// assert_eq!(m, Some(Marker { run: 255, checkpoint: 4 }));
/// assert!(decode_marker("group `g`, partition out/0", Some(4), "").is_err());
/// ```
pub fn decode_marker(
    location: &str,
    offset: Option<i64>,
    metadata: &str,
) -> Result<Option<Marker>, KafkaError> {
    let Some(offset) = offset else {
        return Ok(None);
    };
    let bad = |why: String| KafkaError::BadMarker {
        location: location.to_string(),
        offset,
        why,
    };
    if metadata.is_empty() {
        return Err(bad("no metadata (the run that wrote it)".into()));
    }
    if metadata.len() != 16 || !metadata.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad(format!(
            "its metadata {metadata:?} is not a run id (16 hex digits)"
        )));
    }
    let run = u64::from_str_radix(metadata, 16).map_err(|e| bad(e.to_string()))?;
    let checkpoint = u64::try_from(offset).map_err(|_| bad("the offset is negative".into()))?;
    Ok(Some(Marker { run, checkpoint }))
}

/// The operations of one transactional producer (one transactional id)
/// that the protocol uses: Kafka's (`RdKafkaLog`), or a model's
/// ([`crate::FakeCluster`]).
pub trait TransactionalLog: Send {
    /// Starts this id's producer: fences every earlier producer of the id
    /// and aborts its open transaction (Kafka's `InitProducerId`), then
    /// returns the marker of the id's last committed transaction (`None`:
    /// the marker group has no committed offset).
    ///
    /// # Errors
    /// A broker or client error; [`KafkaError::BadMarker`] when the marker
    /// group's offset is there but unreadable ([`decode_marker`]).
    fn init(&mut self) -> Result<Option<Marker>, KafkaError>;

    /// Where the marker is kept (group and partition), in words, for
    /// errors.
    fn marker_location(&self) -> String {
        "the marker's consumer group".to_string()
    }

    /// Opens a transaction.
    ///
    /// # Errors
    /// [`KafkaError::Fenced`] when a newer producer took the id.
    fn begin(&mut self) -> Result<(), KafkaError>;

    /// Writes a record into the open transaction.
    ///
    /// # Errors
    /// As [`TransactionalLog::begin`].
    fn send(&mut self, record: &SinkRecord) -> Result<(), KafkaError>;

    /// Commits the open transaction with `marker`, atomically.
    ///
    /// # Errors
    /// As [`TransactionalLog::begin`]; after an error the transaction may
    /// or may not have committed (the marker tells, after the next
    /// `init`).
    fn commit(&mut self, marker: Marker) -> Result<(), KafkaError>;
}

/// A pending write-ahead transaction: the output of one checkpoint
/// interval, stored in the checkpoint until it is committed to Kafka.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteAheadTxn {
    /// The run that wrote it.
    pub run: u64,
    /// The checkpoint it was pre-committed for (0 while open).
    pub checkpoint: u64,
    /// The records, [`crate::SINK_RECORD_BYTES`] each, base64 in the
    /// checkpoint's JSON.
    #[serde(with = "b64")]
    pub records: Vec<u8>,
    /// A marker had been committed on this subtask's transactional id
    /// (by any run) when the transaction was pre-committed: at a restore,
    /// a marker group with no offset then means the offset expired or
    /// another cluster ([`KafkaError::MarkerMissing`]). Absent in
    /// checkpoints of older builds (false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marker_committed: bool,
}

mod b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// A [`KafkaError::NoTransactions`], [`KafkaError::BadMarker`] or
/// [`KafkaError::MarkerMissing`] becomes a [`lockgate::error::FatalError`] (no
/// restart helps); other errors stay as they are.
fn fatal_if_unsupported(e: BoxError) -> BoxError {
    match e.downcast::<KafkaError>() {
        Ok(k)
            if matches!(
                *k,
                KafkaError::NoTransactions(_)
                    | KafkaError::BadMarker { .. }
                    | KafkaError::MarkerMissing { .. }
            ) =>
        {
            Box::new(lockgate::error::FatalError(k.to_string()))
        }
        Ok(k) => k,
        Err(e) => e,
    }
}

/// Makes the transactional log of sink subtask `j` (its transactional id
/// is the prefix and `j`); called at start, at restore, and for each old
/// subtask a rescaled restore takes over.
pub type LogFactory<L> = Arc<dyn Fn(usize) -> Result<L, KafkaError> + Send + Sync>;

/// The exactly-once Kafka output of one sink subtask, the
/// [`TwoPhaseCommit`] of [`lockgate::TwoPhaseCommitSink`] (protocol in the
/// module docs). A restore whose marker is unreadable, or gone although
/// one had been committed, fails ([`KafkaError::BadMarker`],
/// [`KafkaError::MarkerMissing`]); [`WriteAheadOutput::allow_missing_marker`]
/// writes the pending transactions again in the second case.
pub struct WriteAheadOutput<L: TransactionalLog> {
    logs: LogFactory<L>,
    adopted: LogFactory<L>,
    subtask: usize,
    log: Option<L>,
    run: u64,
    landed: Option<Marker>,
    allow_missing_marker: bool,
}

impl<L: TransactionalLog> std::fmt::Debug for WriteAheadOutput<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteAheadOutput")
            .field("subtask", &self.subtask)
            .field("run", &self.run)
            .field("landed", &self.landed)
            .finish_non_exhaustive()
    }
}

/// A run id no earlier run drew (std's per-process random hasher keys,
/// mixed with the time).
fn fresh_run() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

impl<L: TransactionalLog> WriteAheadOutput<L> {
    /// The output of sink subtask `subtask`, its logs made by `logs`.
    pub fn new(logs: LogFactory<L>, subtask: usize) -> Self {
        WriteAheadOutput {
            adopted: logs.clone(),
            logs,
            subtask,
            log: None,
            run: fresh_run(),
            landed: None,
            allow_missing_marker: false,
        }
    }

    /// With `allow`, a restore writes the restored checkpoint's pending
    /// transactions again even when the marker group has no committed
    /// offset although one had been committed before (it expired, or
    /// another cluster): output that had landed is then duplicated. The
    /// default refuses such a restore ([`KafkaError::MarkerMissing`]);
    /// `lockgate kafka run --allow-missing-marker` sets it.
    pub fn allow_missing_marker(mut self, allow: bool) -> Self {
        self.allow_missing_marker = allow;
        self
    }

    /// Takes old subtask `j`'s log from `adopted` on a rescaled restore
    /// (default: `logs`, the same transactional ids): across processes the
    /// old subtasks' ids are the old processes'.
    pub fn with_adopted_logs(mut self, adopted: LogFactory<L>) -> Self {
        self.adopted = adopted;
        self
    }

    /// The run id of this output's transactions.
    pub fn run(&self) -> u64 {
        self.run
    }

    /// Writes `txn` to `log` unless `landed` shows it committed; returns
    /// the marker after it. A broker without transactions is a
    /// [`lockgate::error::FatalError`]: restarts would not change it.
    fn write_through(
        log: &mut L,
        landed: Option<Marker>,
        txn: &WriteAheadTxn,
    ) -> Result<Option<Marker>, BoxError> {
        Self::write_once(log, landed, txn).map_err(fatal_if_unsupported)
    }

    fn write_once(
        log: &mut L,
        landed: Option<Marker>,
        txn: &WriteAheadTxn,
    ) -> Result<Option<Marker>, BoxError> {
        if landed.is_some_and(|m| m.covers(txn.run, txn.checkpoint)) {
            return Ok(landed);
        }
        let records = SinkRecord::decode_all(&txn.records)?;
        log.begin()?;
        for r in &records {
            log.send(r)?;
        }
        let marker = Marker {
            run: txn.run,
            checkpoint: txn.checkpoint,
        };
        log.commit(marker)?;
        Ok(Some(marker))
    }

    /// Starts this subtask's producer once (fencing older ones) and reads
    /// its marker.
    fn open_log(&mut self) -> Result<(), BoxError> {
        if self.log.is_none() {
            let mut log = (self.logs)(self.subtask)?;
            self.landed = log.init().map_err(|e| fatal_if_unsupported(e.into()))?;
            self.log = Some(log);
        }
        Ok(())
    }

    /// Refuses to write `pending` again after a restore when `log`'s
    /// marker group has no offset (`landed` is `None`) although one had
    /// been committed before their checkpoint (see the module docs),
    /// unless [`WriteAheadOutput::allow_missing_marker`].
    fn check_marker_kept(
        &self,
        log: &L,
        landed: Option<Marker>,
        pending: &[WriteAheadTxn],
    ) -> Result<(), BoxError> {
        let with_records: Vec<&WriteAheadTxn> =
            pending.iter().filter(|t| !t.records.is_empty()).collect();
        if landed.is_some()
            || self.allow_missing_marker
            || with_records.is_empty()
            || !pending.iter().any(|t| t.marker_committed)
        {
            return Ok(());
        }
        Err(fatal_if_unsupported(Box::new(KafkaError::MarkerMissing {
            location: log.marker_location(),
            pending: with_records.len(),
            first: with_records.first().map_or(0, |t| t.checkpoint),
            last: with_records.last().map_or(0, |t| t.checkpoint),
        })))
    }
}

impl<L: TransactionalLog> TwoPhaseCommit<SinkRecord> for WriteAheadOutput<L> {
    type Txn = WriteAheadTxn;

    fn begin(&mut self, _seq: u64) -> Result<WriteAheadTxn, BoxError> {
        Ok(WriteAheadTxn {
            run: self.run,
            checkpoint: 0,
            records: Vec::new(),
            marker_committed: false,
        })
    }

    fn write(
        &mut self,
        txn: &mut WriteAheadTxn,
        records: &mut Vec<SinkRecord>,
    ) -> Result<(), BoxError> {
        txn.records
            .reserve(records.len() * crate::encoding::SINK_RECORD_BYTES);
        for r in records.drain(..) {
            r.append_to(&mut txn.records);
        }
        Ok(())
    }

    /// Closes the transaction for `checkpoint`; it becomes durable with the
    /// checkpoint that stores it.
    fn pre_commit(
        &mut self,
        txn: &mut WriteAheadTxn,
        checkpoint: CheckpointId,
    ) -> Result<(), BoxError> {
        // Kafka offsets (where the marker is kept) are i64; a job without
        // checkpoints pre-commits its one transaction for u64::MAX.
        txn.checkpoint = checkpoint.0.min(i64::MAX as u64);
        txn.marker_committed = self.landed.is_some();
        Ok(())
    }

    fn commit(&mut self, txn: WriteAheadTxn) -> Result<(), BoxError> {
        self.open_log()?;
        let landed = self.landed;
        let log = self.log.as_mut().expect("opened above");
        self.landed = Self::write_through(log, landed, &txn)?;
        Ok(())
    }

    fn abort(&mut self, _txn: WriteAheadTxn) -> Result<(), BoxError> {
        // Nothing of it reached Kafka.
        Ok(())
    }

    /// Restarts the subtask's producer (fencing a zombie, aborting its open
    /// transaction) and reads its marker; the pending transactions keep
    /// their run, so the marker tells which of them landed. A marker that
    /// is gone refuses the restore (see the module docs).
    fn recover(
        &mut self,
        _restored: CheckpointId,
        pending: &[WriteAheadTxn],
    ) -> Result<(), BoxError> {
        if let Some(first) = pending.first() {
            self.run = first.run;
        }
        self.log = None;
        self.open_log()?;
        let log = self.log.as_ref().expect("opened above");
        self.check_marker_kept(log, self.landed, pending)
    }

    /// Old subtask `old`'s pending transactions, written through its own
    /// transactional id (so its zombie is fenced and its marker read).
    /// This subtask's own output then goes on under its own id and a fresh
    /// run (its log opens, fencing leftovers, at its first commit).
    fn adopt(
        &mut self,
        old: usize,
        _restored: CheckpointId,
        pending: Vec<WriteAheadTxn>,
    ) -> Result<(), BoxError> {
        let mut log = (self.adopted)(old)?;
        let mut landed = log.init().map_err(|e| fatal_if_unsupported(e.into()))?;
        self.check_marker_kept(&log, landed, &pending)?;
        for txn in &pending {
            landed = Self::write_through(&mut log, landed, txn)?;
        }
        Ok(())
    }

    /// Fences and aborts what an earlier run of this transactional id left
    /// open; a fresh run ignores earlier markers (another run id).
    fn start_fresh(&mut self) -> Result<(), BoxError> {
        self.log = None;
        self.open_log()?;
        Ok(())
    }

    fn is_empty(&self, txn: &WriteAheadTxn) -> bool {
        txn.records.is_empty()
    }
}
