//! The Kafka sinks: at-least-once ([`KafkaSink`]) and the transactional
//! log of the exactly-once one ([`RdKafkaLog`], driven by
//! [`crate::WriteAheadOutput`]).

use crate::client::{ClientSettings, Quiet, QuietConsumer, REQUEST_TIMEOUT};
use crate::encoding::{timestamp_ms, SinkRecord};
use crate::error::KafkaError;
use crate::txn::{decode_marker, marker_group, Marker, TransactionalLog};
use lockgate::{BoxError, CheckpointId, Checkpointed, Sink};
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError as RdError, RDKafkaErrorCode};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Counts failed deliveries (librdkafka reports them from its own thread).
#[derive(Default)]
struct DeliveryErrors {
    count: AtomicU64,
    first: Mutex<Option<String>>,
}

impl ClientContext for DeliveryErrors {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        Quiet.log(level, fac, log_message);
    }

    fn error(&self, error: RdError, reason: &str) {
        Quiet.error(error, reason);
    }
}

impl ProducerContext for DeliveryErrors {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.count.fetch_add(1, Ordering::Relaxed);
            let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert_with(|| e.to_string());
        }
    }
}

/// Enqueues one record on `topic`, waiting (bounded by
/// [`REQUEST_TIMEOUT`]) while librdkafka's queue is full: backpressure
/// from the brokers reaches the task.
fn enqueue(
    send: impl Fn(BaseRecord<'_, [u8], [u8]>) -> Result<(), (RdError, BaseRecord<'_, [u8], [u8]>)>,
    poll: impl Fn(),
    topic: &str,
    partition: u32,
    key: &[u8],
    value: &[u8],
    ts_ms: i64,
) -> Result<(), KafkaError> {
    let mut r = BaseRecord::to(topic)
        .partition(i32::try_from(partition).unwrap_or(i32::MAX))
        .key(key)
        .payload(value)
        .timestamp(ts_ms);
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    loop {
        match send(r) {
            Ok(()) => return Ok(()),
            Err((RdError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                if Instant::now() < deadline =>
            {
                r = back;
                poll();
            }
            Err((e, _)) => return Err(map_error(topic, e)),
        }
    }
}

/// A non-transactional writer to one topic: records go to the partition
/// given, acknowledged by every in-sync replica (idempotent producer, so a
/// retry inside librdkafka never duplicates). [`TopicWriter::flush`] waits
/// for every acknowledgement and reports failed deliveries.
///
/// # Examples
/// ```no_run
/// use lockgate_kafka::{ClientSettings, InputRecord, TopicWriter};
/// let mut w = TopicWriter::new(&ClientSettings::new("127.0.0.1:9092"), "input").unwrap();
/// let r = InputRecord { key: 1, n: 0, ts_ns: 0 };
/// w.send(0, &r.key_bytes(), &r.value_bytes(), 0).unwrap();
/// w.flush().unwrap();
/// ```
pub struct TopicWriter {
    topic: String,
    producer: ThreadedProducer<DeliveryErrors>,
}

impl std::fmt::Debug for TopicWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicWriter")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl TopicWriter {
    /// A writer to `topic`.
    ///
    /// # Errors
    /// When the producer cannot be created (bad settings).
    pub fn new(settings: &ClientSettings, topic: &str) -> Result<Self, KafkaError> {
        let producer = settings
            .config()
            .set("linger.ms", "5")
            .set("enable.idempotence", "true")
            // At most 10,000 records queued unacknowledged (librdkafka's
            // default is 100,000): the flush on a checkpoint barrier waits
            // for all of them, so the queue bounds the checkpoint's wait
            // on a slow broker (10,000 records at tansu's ~25,000 records/s
            // of writes: 0.4 s), and a fuller queue is backpressure on the
            // task instead (`send` waits).
            .set("queue.buffering.max.messages", "10000")
            .create_with_context(DeliveryErrors::default())
            .map_err(|e| KafkaError::client("cannot create a Kafka producer", e))?;
        Ok(TopicWriter {
            topic: topic.to_string(),
            producer,
        })
    }

    /// Enqueues a record (key and value bytes as they are, timestamp in
    /// ms); waits while librdkafka's queue is full.
    ///
    /// # Errors
    /// When the queue stays full for 30 s, or the record is
    /// refused.
    // rdkafka's `send` hands the record back by value in its error (so it
    // can be retried): the large error is its signature, not ours.
    #[allow(clippy::result_large_err)]
    pub fn send(
        &mut self,
        partition: u32,
        key: &[u8],
        value: &[u8],
        ts_ms: i64,
    ) -> Result<(), KafkaError> {
        enqueue(
            |rec| self.producer.send(rec),
            || std::thread::sleep(Duration::from_millis(1)),
            &self.topic,
            partition,
            key,
            value,
            ts_ms,
        )
    }

    /// Waits until every record sent is acknowledged.
    ///
    /// # Errors
    /// A timeout, or the count of records not delivered with the first
    /// reason.
    pub fn flush(&mut self) -> Result<(), KafkaError> {
        self.producer
            .flush(REQUEST_TIMEOUT)
            .map_err(|e| KafkaError::client(format!("flushing `{}`", self.topic), e))?;
        let ctx = self.producer.context();
        let failed = ctx.count.load(Ordering::Relaxed);
        if failed > 0 {
            let first = ctx.first.lock().unwrap_or_else(|e| e.into_inner()).clone();
            return Err(KafkaError::Other(format!(
                "{failed} records were not delivered to `{}`: {}",
                self.topic,
                first.unwrap_or_default()
            )));
        }
        Ok(())
    }
}

/// A fenced producer's errors become [`KafkaError::Fenced`].
fn map_error(what: &str, e: RdError) -> KafkaError {
    let fenced = matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    );
    let text = e.to_string();
    if fenced {
        KafkaError::Fenced(what.to_string())
    } else if text.contains("not supported by broker") {
        KafkaError::NoTransactions(text)
    } else {
        KafkaError::client(format!("writing to `{what}`"), e)
    }
}

/// The at-least-once Kafka sink: writes each [`SinkRecord`] to its
/// partition of the output topic as it comes, and on every checkpoint's
/// barrier waits until everything written is acknowledged by the brokers
/// (a flush), so a completed checkpoint never misses output; records
/// replayed after a restore are written again (duplicates, never loss).
#[derive(Debug)]
pub struct KafkaSink {
    writer: TopicWriter,
}

impl KafkaSink {
    /// A sink writing to `topic`.
    ///
    /// # Errors
    /// When the producer cannot be created (bad settings).
    pub fn new(settings: &ClientSettings, topic: &str) -> Result<Self, KafkaError> {
        Ok(KafkaSink {
            writer: TopicWriter::new(settings, topic)?,
        })
    }
}

impl Sink<SinkRecord> for KafkaSink {
    fn write(&mut self, input: &mut Vec<SinkRecord>) -> Result<(), BoxError> {
        for r in input.drain(..) {
            let (k, v) = (r.record.key_bytes(), r.record.value_bytes());
            self.writer
                .send(r.partition, &k, &v, timestamp_ms(r.ts_ns))?;
        }
        Ok(())
    }

    fn end_of_input(&mut self) -> Result<(), BoxError> {
        Ok(self.writer.flush()?)
    }
}

impl Checkpointed for KafkaSink {
    /// No state: the flush makes everything before the barrier durable in
    /// Kafka before the checkpoint can complete.
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        self.writer.flush()?;
        Ok(None)
    }
}

/// Kafka's side of the exactly-once protocol ([`TransactionalLog`]) for
/// one transactional id: a transactional producer, and the marker as the
/// committed offset of partition 0 of the output topic in the marker
/// group `<transactional id>-marker` (offset = checkpoint, metadata = run
/// in hex), committed in the same transaction as the records. An offset
/// there whose metadata is absent or unreadable is an error
/// ([`KafkaError::BadMarker`]), not "no marker".
pub struct RdKafkaLog {
    id: String,
    topic: String,
    producer: BaseProducer<Quiet>,
    markers: QuietConsumer,
}

impl std::fmt::Debug for RdKafkaLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdKafkaLog")
            .field("id", &self.id)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl RdKafkaLog {
    /// The log of `transactional_id`, writing to `topic`.
    ///
    /// # Errors
    /// When the clients cannot be created.
    pub fn new(
        settings: &ClientSettings,
        topic: &str,
        transactional_id: &str,
    ) -> Result<Self, KafkaError> {
        let producer = settings
            .config()
            .set("transactional.id", transactional_id)
            .set("linger.ms", "5")
            .create_with_context(Quiet)
            .map_err(|e| KafkaError::client("cannot create a transactional producer", e))?;
        let markers = settings.consumer(&marker_group(transactional_id), true)?;
        Ok(RdKafkaLog {
            id: transactional_id.to_string(),
            topic: topic.to_string(),
            producer,
            markers,
        })
    }

    fn marker_partition(&self, marker: Option<Marker>) -> Result<TopicPartitionList, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        let offset = marker.map_or(Offset::Invalid, |m| {
            Offset::Offset(i64::try_from(m.checkpoint).unwrap_or(i64::MAX))
        });
        tpl.add_partition_offset(&self.topic, 0, offset)
            .map_err(|e| KafkaError::client("bad marker", e))?;
        if let Some(m) = marker {
            if let Some(mut e) = tpl.find_partition(&self.topic, 0) {
                e.set_metadata(format!("{:016x}", m.run));
            }
        }
        Ok(tpl)
    }
}

impl TransactionalLog for RdKafkaLog {
    fn init(&mut self) -> Result<Option<Marker>, KafkaError> {
        self.producer
            .init_transactions(REQUEST_TIMEOUT)
            .map_err(|e| map_error(&self.id, e))?;
        let tpl = self.marker_partition(None)?;
        let committed = self
            .markers
            .committed_offsets(tpl, REQUEST_TIMEOUT)
            .map_err(|e| KafkaError::client(format!("reading the marker of `{}`", self.id), e))?;
        let Some(e) = committed.find_partition(&self.topic, 0) else {
            return Ok(None);
        };
        let offset = match e.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        decode_marker(&self.marker_location(), offset, e.metadata())
    }

    fn marker_location(&self) -> String {
        format!(
            "group `{}`, partition 0 of `{}`",
            marker_group(&self.id),
            self.topic
        )
    }

    fn begin(&mut self) -> Result<(), KafkaError> {
        self.producer
            .begin_transaction()
            .map_err(|e| map_error(&self.id, e))
    }

    // rdkafka's `send` hands the record back by value in its error (so it
    // can be retried): the large error is its signature, not ours.
    #[allow(clippy::result_large_err)]
    fn send(&mut self, record: &SinkRecord) -> Result<(), KafkaError> {
        let (k, v) = (record.record.key_bytes(), record.record.value_bytes());
        enqueue(
            |rec| self.producer.send(rec),
            || self.producer.poll(Duration::from_millis(1)),
            &self.topic,
            record.partition,
            &k,
            &v,
            timestamp_ms(record.ts_ns),
        )
    }

    fn commit(&mut self, marker: Marker) -> Result<(), KafkaError> {
        let tpl = self.marker_partition(Some(marker))?;
        let group = self.markers.group_metadata().ok_or_else(|| {
            KafkaError::Other(format!("no group metadata for the marker of `{}`", self.id))
        })?;
        self.producer
            .send_offsets_to_transaction(&tpl, &group, REQUEST_TIMEOUT)
            .map_err(|e| map_error(&self.id, e))?;
        self.producer
            .commit_transaction(REQUEST_TIMEOUT)
            .map_err(|e| map_error(&self.id, e))
    }
}
