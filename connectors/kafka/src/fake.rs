//! An in-process model of the Kafka operations the exactly-once protocol
//! uses ([`crate::TransactionalLog`]), for tests: producer epochs and
//! fencing, one open transaction per transactional id, atomic commit of a
//! transaction's records with its marker, `read_committed` reads, and
//! crashes injected before or after any operation. The marker is kept as
//! Kafka keeps it for [`crate::RdKafkaLog`]: a committed offset (the
//! checkpoint) with metadata (the run in hex) of the group
//! `<transactional id>-marker`, here on partition 0 of a topic named
//! `output`; a test can expire it ([`FakeCluster::expire_marker`]) or
//! damage its metadata ([`FakeCluster::set_marker_metadata`]). The test broker (tansu)
//! has no transactions, so the protocol is proven here; a real Kafka runs
//! it in the test that `LOCKGATE_KAFKA_BOOTSTRAP` enables.

use crate::encoding::SinkRecord;
use crate::error::KafkaError;
use crate::txn::{decode_marker, marker_group, Marker, TransactionalLog};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where an injected crash strikes: before operation number `at` takes
/// effect, or after it took effect but before its caller hears so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The operation's number (0-based over the cluster's whole life; see
    /// [`FakeCluster::operations`]).
    pub at: u64,
    /// True: the operation takes effect, then its caller gets an error.
    pub after: bool,
}

#[derive(Default)]
struct State {
    epochs: HashMap<String, u64>,
    open: HashMap<String, (u64, Vec<SinkRecord>)>,
    /// Each id's marker offset: the checkpoint, and the metadata.
    markers: HashMap<String, (i64, String)>,
    committed: Vec<SinkRecord>,
    operations: u64,
    crashes: Vec<Crash>,
}

/// The model's cluster: shared by every producer made from it (clones
/// share it too).
///
/// # Examples
/// ```
/// use lockgate_kafka::{FakeCluster, Marker, OutputRecord, SinkRecord, TransactionalLog};
/// let cluster = FakeCluster::new();
/// let r = SinkRecord { partition: 0, record: OutputRecord { key: 1, sum: 3, n: 1 }, ts_ns: 0 };
/// let mut old = cluster.producer("sink-0");
/// assert_eq!(old.init().unwrap(), None);
/// old.begin().unwrap();
/// old.send(&r).unwrap();
/// // A newer producer of the same id fences the old one and aborts its transaction.
/// let mut new = cluster.producer("sink-0");
/// assert_eq!(new.init().unwrap(), None);
/// assert!(old.commit(Marker { run: 1, checkpoint: 1 }).is_err());
/// assert!(cluster.committed().is_empty());
/// new.begin().unwrap();
/// new.send(&r).unwrap();
/// new.commit(Marker { run: 1, checkpoint: 1 }).unwrap();
/// assert_eq!(cluster.committed(), [r]);
/// assert_eq!(cluster.producer("sink-0").init().unwrap(), Some(Marker { run: 1, checkpoint: 1 }));
/// ```
#[derive(Clone, Default)]
pub struct FakeCluster(Arc<Mutex<State>>);

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster")
            .field("operations", &self.operations())
            .finish_non_exhaustive()
    }
}

impl FakeCluster {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// A producer of `transactional_id` (not started: call `init`).
    pub fn producer(&self, transactional_id: &str) -> FakeProducer {
        FakeProducer {
            cluster: self.clone(),
            id: transactional_id.to_string(),
            epoch: None,
        }
    }

    /// What a `read_committed` reader sees: every committed record, in
    /// commit order.
    pub fn committed(&self) -> Vec<SinkRecord> {
        self.lock().committed.clone()
    }

    /// Operations so far (each `init`, `begin`, `send` and `commit`).
    pub fn operations(&self) -> u64 {
        self.lock().operations
    }

    /// Drops the committed offset of `transactional_id`'s marker group, as
    /// a broker does `offsets.retention.minutes` after the group's last
    /// commit (or as brokers of another cluster never had it).
    pub fn expire_marker(&self, transactional_id: &str) {
        self.lock().markers.remove(transactional_id);
    }

    /// Replaces the metadata of `transactional_id`'s marker offset, keeping
    /// the offset (as another client committing that group's offset
    /// without metadata would); no-op without a marker.
    pub fn set_marker_metadata(&self, transactional_id: &str, metadata: &str) {
        if let Some(m) = self.lock().markers.get_mut(transactional_id) {
            m.1 = metadata.to_string();
        }
    }

    /// Plans a crash (see [`Crash`]); each strikes once.
    pub fn crash(&self, crash: Crash) {
        self.lock().crashes.push(crash);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One producer of the model (see [`FakeCluster`]).
#[derive(Debug)]
pub struct FakeProducer {
    cluster: FakeCluster,
    id: String,
    epoch: Option<u64>,
}

impl FakeProducer {
    /// Runs operation `op` under the crash plan and the fencing rule.
    fn step<T>(
        &mut self,
        what: &str,
        op: impl FnOnce(&mut State, &str, &mut Option<u64>) -> Result<T, KafkaError>,
    ) -> Result<T, KafkaError> {
        let mut s = self.cluster.lock();
        let n = s.operations;
        s.operations += 1;
        let crash = s.crashes.iter().position(|c| c.at == n);
        let crash = crash.map(|i| s.crashes.swap_remove(i));
        if crash.is_some_and(|c| !c.after) {
            return Err(KafkaError::Other(format!("injected crash before {what}")));
        }
        let out = op(&mut s, &self.id, &mut self.epoch)?;
        if crash.is_some() {
            return Err(KafkaError::Other(format!("injected crash after {what}")));
        }
        Ok(out)
    }
}

/// Where the model keeps `id`'s marker, in words.
fn fake_marker_location(id: &str) -> String {
    format!("group `{}`, partition 0 of `output`", marker_group(id))
}

/// The producer's epoch, if it is still the id's newest.
fn current(s: &State, id: &str, epoch: Option<u64>) -> Result<u64, KafkaError> {
    match epoch {
        Some(e) if s.epochs.get(id) == Some(&e) => Ok(e),
        Some(_) => Err(KafkaError::Fenced(id.to_string())),
        None => Err(KafkaError::Other(format!(
            "producer `{id}` not initialised"
        ))),
    }
}

impl TransactionalLog for FakeProducer {
    fn init(&mut self) -> Result<Option<Marker>, KafkaError> {
        self.step("init", |s, id, epoch| {
            let e = s.epochs.entry(id.to_string()).or_insert(0);
            *e += 1;
            *epoch = Some(*e);
            s.open.remove(id);
            let location = fake_marker_location(id);
            match s.markers.get(id) {
                Some((offset, metadata)) => decode_marker(&location, Some(*offset), metadata),
                None => Ok(None),
            }
        })
    }

    fn marker_location(&self) -> String {
        fake_marker_location(&self.id)
    }

    fn begin(&mut self) -> Result<(), KafkaError> {
        self.step("begin", |s, id, epoch| {
            let e = current(s, id, *epoch)?;
            if s.open.contains_key(id) {
                return Err(KafkaError::Other(format!("`{id}` has a transaction open")));
            }
            s.open.insert(id.to_string(), (e, Vec::new()));
            Ok(())
        })
    }

    fn send(&mut self, record: &SinkRecord) -> Result<(), KafkaError> {
        self.step("send", |s, id, epoch| {
            current(s, id, *epoch)?;
            match s.open.get_mut(id) {
                Some((_, records)) => {
                    records.push(*record);
                    Ok(())
                }
                None => Err(KafkaError::Other(format!("`{id}` has no open transaction"))),
            }
        })
    }

    fn commit(&mut self, marker: Marker) -> Result<(), KafkaError> {
        self.step("commit", |s, id, epoch| {
            current(s, id, *epoch)?;
            let Some((_, records)) = s.open.remove(id) else {
                return Err(KafkaError::Other(format!("`{id}` has no open transaction")));
            };
            s.committed.extend(records);
            let offset = i64::try_from(marker.checkpoint).unwrap_or(i64::MAX);
            s.markers
                .insert(id.to_string(), (offset, format!("{:016x}", marker.run)));
            Ok(())
        })
    }
}
