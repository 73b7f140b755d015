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

/// The operations of one transactional producer (one transactional id)
/// that the protocol uses: Kafka's (`RdKafkaLog`), or a model's
/// ([`crate::FakeCluster`]).
pub trait TransactionalLog: Send {
    /// Starts this id's producer: fences every earlier producer of the id
    /// and aborts its open transaction (Kafka's `InitProducerId`), then
    /// returns the marker of the id's last committed transaction.
    ///
    /// # Errors
    /// A broker or client error.
    fn init(&mut self) -> Result<Option<Marker>, KafkaError>;

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

/// A [`KafkaError::NoTransactions`] becomes a [`lockgate::FatalError`] (no
/// restart helps); other errors stay as they are.
fn fatal_if_unsupported(e: BoxError) -> BoxError {
    match e.downcast::<KafkaError>() {
        Ok(k) if matches!(*k, KafkaError::NoTransactions(_)) => {
            Box::new(lockgate::FatalError(k.to_string()))
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
/// module docs).
pub struct WriteAheadOutput<L: TransactionalLog> {
    logs: LogFactory<L>,
    adopted: LogFactory<L>,
    subtask: usize,
    log: Option<L>,
    run: u64,
    landed: Option<Marker>,
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
        }
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
    /// [`lockgate::FatalError`]: restarts would not change it.
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
            self.landed = log.init()?;
            self.log = Some(log);
        }
        Ok(())
    }
}

impl<L: TransactionalLog> TwoPhaseCommit<SinkRecord> for WriteAheadOutput<L> {
    type Txn = WriteAheadTxn;

    fn begin(&mut self, _seq: u64) -> Result<WriteAheadTxn, BoxError> {
        Ok(WriteAheadTxn {
            run: self.run,
            checkpoint: 0,
            records: Vec::new(),
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
    /// their run, so the marker tells which of them landed.
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
        Ok(())
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
        let mut landed = log.init()?;
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
