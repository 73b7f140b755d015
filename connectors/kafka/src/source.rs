//! The Kafka source: a replayable source whose splits are partitions.

use crate::client::{ClientSettings, QuietConsumer};
use crate::encoding::{InputRecord, SourceRecord};
use crate::error::KafkaError;
use crate::partitions::{owned_partitions, subtask_owns, PartitionWatermarks};
use lockgate::source::{Replayable, SplitOutput, SplitReader, SplitSource};
use lockgate::{
    error::FatalError, keys::Rescale, task::SubtaskInfo, BoxError, CheckpointId, Checkpointed,
    Source, SourcePoll, Watermark,
};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How long an idle source waits before polling Kafka again, ns (1 ms:
/// librdkafka prefetches in the background, so a poll finds what arrived
/// meanwhile; the wait bounds the added latency and the idle CPU).
const IDLE_POLL_NS: u64 = 1_000_000;

/// The least time between two commits of offsets to the consumer group,
/// ns (1 s): they serve lag monitoring only, and a commit per checkpoint
/// (10 a second per subtask at the default interval) is write load on the
/// brokers (against tansu it slowed everything else). The source's last
/// completed checkpoint is always committed when it finishes.
const COMMIT_INTERVAL_NS: u64 = 1_000_000_000;

/// What every subtask of a Kafka source shares.
#[derive(Clone, Debug)]
pub struct KafkaSourceConfig {
    /// The brokers.
    pub client: ClientSettings,
    /// The input topic.
    pub topic: String,
    /// Its partition count.
    pub partitions: u32,
    /// The processes sharing the topic, and this one's index (see
    /// [`crate::process_owns`]).
    pub processes: u32,
    /// This process's index, below `processes`.
    pub index: u32,
    /// Bounded mode: the end offset of every partition (by partition),
    /// taken once when the job started; each partition is read up to it,
    /// then the source ends (and the final checkpoint commits the tail,
    /// FLIP-147). `None`: unbounded.
    pub end_offsets: Option<Vec<i64>>,
    /// The consumer group the offsets are committed to after each
    /// completed checkpoint (for lag monitoring only: a restore seeks to
    /// the checkpoint's offsets, never to the group's).
    pub group_id: String,
    /// The watermark's allowed out-of-orderness, ns.
    pub out_of_orderness_ns: u64,
}

/// One subtask of a Kafka source (see the crate docs): reads its
/// partitions by explicit assignment from the offsets of the restored
/// checkpoint (or from the beginning), emits [`SourceRecord`]s, and keeps
/// a watermark per partition ([`PartitionWatermarks`]) on the Kafka
/// record timestamps (event time). A [`Replayable`] source whose splits
/// are the partitions: its checkpointed state is
/// each partition's next offset (postcard `Vec<(u32, i64)>`, as in every
/// earlier build), and the consumer of an earlier attempt is closed before
/// a new one is assigned the restored offsets.
pub struct KafkaSource(Replayable<KafkaPartitions>);

/// The partitions a Kafka source subtask reads, as a [`SplitSource`]
/// (split: a partition; position: the next offset to read).
pub(crate) struct KafkaPartitions {
    config: Arc<KafkaSourceConfig>,
    subtask: usize,
    parallelism: usize,
    mine: Vec<u32>,
}

/// The reader of [`KafkaPartitions`]: a consumer assigned the partitions
/// at their offsets.
pub(crate) struct KafkaPartitionReader {
    config: Arc<KafkaSourceConfig>,
    subtask: usize,
    mine: Vec<u32>,
    consumer: QuietConsumer,
    /// Bounded mode: partitions read up to their end.
    done: BTreeSet<u32>,
    /// When offsets were last committed to the group (ns, `now_ns`).
    committed_at_ns: Option<u64>,
    watermarks: PartitionWatermarks,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.source();
        f.debug_struct("KafkaSource")
            .field("topic", &s.config.topic)
            .field("subtask", &s.subtask)
            .field("partitions", &s.mine)
            .field("next", &self.0.positions())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for KafkaPartitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaPartitions")
            .field("topic", &self.config.topic)
            .field("subtask", &self.subtask)
            .field("partitions", &self.mine)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for KafkaPartitionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaPartitionReader")
            .field("topic", &self.config.topic)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// The source subtask `info` of a job, reading its share of the
    /// process's partitions ([`crate::subtask_owns`]).
    pub fn new(config: Arc<KafkaSourceConfig>, info: &SubtaskInfo) -> Self {
        let (subtask, parallelism) = (info.index, info.parallelism);
        let mine: Vec<u32> = owned_partitions(config.partitions, config.processes, config.index)
            .into_iter()
            .filter(|&p| subtask_owns(p, config.processes, parallelism, subtask))
            .collect();
        KafkaSource(Replayable::new(KafkaPartitions {
            config,
            subtask,
            parallelism,
            mine,
        }))
    }

    /// The partitions this subtask reads.
    pub fn partitions(&self) -> &[u32] {
        &self.0.source().mine
    }
}

fn end_of(config: &KafkaSourceConfig, p: u32) -> Option<i64> {
    config
        .end_offsets
        .as_ref()
        .map(|e| e.get(p as usize).copied().unwrap_or(0))
}

impl SplitSource for KafkaPartitions {
    type Record = SourceRecord;
    type Split = u32;
    type Position = i64;
    type Reader = KafkaPartitionReader;

    fn splits(&self) -> Vec<u32> {
        self.mine.clone()
    }

    /// Creates the consumer and assigns the partitions at their offsets.
    fn open(&mut self, splits: &[(u32, Option<i64>)]) -> Result<KafkaPartitionReader, BoxError> {
        let consumer = self.config.client.consumer(&self.config.group_id, false)?;
        let mut watermarks = PartitionWatermarks::new(&self.mine, self.config.out_of_orderness_ns);
        let mut done = BTreeSet::new();
        let mut tpl = TopicPartitionList::new();
        for &(p, at) in splits {
            let end = end_of(&self.config, p);
            if end == Some(0) || matches!((end, at), (Some(end), Some(next)) if next >= end) {
                done.insert(p);
                watermarks.set_idle(p, true);
                continue;
            }
            let offset = at.map_or(Offset::Beginning, Offset::Offset);
            tpl.add_partition_offset(&self.config.topic, p as i32, offset)
                .map_err(|e| KafkaError::client("bad assignment", e))?;
        }
        consumer.assign(&tpl).map_err(|e| {
            KafkaError::client(
                format!("cannot assign partitions of `{}`", self.config.topic),
                e,
            )
        })?;
        Ok(KafkaPartitionReader {
            config: self.config.clone(),
            subtask: self.subtask,
            mine: self.mine.clone(),
            consumer,
            done,
            committed_at_ns: None,
            watermarks,
        })
    }
}

impl KafkaPartitionReader {
    fn mark_done(&mut self, p: u32) {
        if self.done.insert(p) {
            self.watermarks.set_idle(p, true);
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&self.config.topic, p as i32);
            // Stops fetching beyond the end; an error only costs reads.
            let _ = self.consumer.pause(&tpl);
        }
    }

    fn all_done(&self) -> bool {
        self.config.end_offsets.is_some() && self.done.len() == self.mine.len()
    }
}

impl SplitReader<KafkaPartitions> for KafkaPartitionReader {
    fn read(&mut self, out: &mut SplitOutput<'_, KafkaPartitions>) -> Result<SourcePoll, BoxError> {
        let bounded = self.config.end_offsets.is_some();
        if self.all_done() {
            return Ok(SourcePoll::Finished);
        }
        let start = out.len();
        while !out.is_full() {
            let m = match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => m,
                Some(Err(RdError::PartitionEOF(p))) => {
                    let p = p as u32;
                    // At the end of what is there now: idle (it must not
                    // hold back the watermark) and, bounded, done: the end
                    // now is at least the end offset taken at start, so
                    // every record below it was delivered (even when the
                    // last offsets are transaction markers, never delivered
                    // as records).
                    self.watermarks.set_idle(p, true);
                    if bounded {
                        self.mark_done(p);
                    }
                    continue;
                }
                Some(Err(e)) if crate::client::is_transient(&e) => {
                    tracing::debug!("kafka source {}: {e} (librdkafka recovers)", self.subtask);
                    break;
                }
                Some(Err(e)) => {
                    return Err(Box::new(KafkaError::client(
                        format!("reading `{}`", self.config.topic),
                        e,
                    )))
                }
            };
            let (p, offset) = (m.partition() as u32, m.offset());
            if let Some(end) = end_of(&self.config, p) {
                if offset >= end {
                    drop(m);
                    self.mark_done(p);
                    continue;
                }
            }
            let record =
                InputRecord::decode(m.key().unwrap_or_default(), m.payload().unwrap_or_default())
                    .map_err(|why| {
                    // The same record would fail every restart: fatal.
                    FatalError(
                        KafkaError::BadRecord {
                            topic: self.config.topic.clone(),
                            partition: p as i32,
                            offset,
                            why,
                        }
                        .to_string(),
                    )
                })?;
            // Event time is the Kafka record's timestamp (ms; the value's
            // ts_ns when the record has none).
            let event_ns = m
                .timestamp()
                .to_millis()
                .and_then(|ms| u64::try_from(ms).ok())
                .map_or(record.ts_ns, |ms| ms.saturating_mul(1_000_000));
            drop(m);
            out.emit(
                SourceRecord {
                    key: record.key,
                    value: record.n,
                    ts_ns: record.ts_ns,
                    partition: p,
                },
                &p,
                offset + 1,
            );
            self.watermarks.observe(p, event_ns);
            if end_of(&self.config, p).is_some_and(|end| offset + 1 >= end) {
                self.mark_done(p);
            }
        }
        if out.len() > start {
            Ok(SourcePoll::Ready)
        } else if self.all_done() {
            Ok(SourcePoll::Finished)
        } else {
            Ok(SourcePoll::Idle {
                wake_at_ns: Some(lockgate::tuning::now_ns() + IDLE_POLL_NS),
            })
        }
    }

    fn current_watermark(&self) -> Option<Watermark> {
        self.watermarks
            .watermark()
            .map(|w| Watermark(i64::try_from(w).unwrap_or(i64::MAX)))
    }

    fn is_idle(&self) -> bool {
        !self.mine.is_empty() && self.watermarks.all_idle()
    }

    /// Commits the checkpoint's offsets to the consumer group, for
    /// monitoring only (a failed commit is logged, not an error).
    fn checkpoint_complete(
        &mut self,
        id: CheckpointId,
        positions: &[(u32, i64)],
    ) -> Result<(), BoxError> {
        let now = lockgate::tuning::now_ns();
        if !self.all_done()
            && self
                .committed_at_ns
                .is_some_and(|t| now.saturating_sub(t) < COMMIT_INTERVAL_NS)
        {
            return Ok(());
        }
        self.committed_at_ns = Some(now);
        let mut tpl = TopicPartitionList::new();
        for &(p, o) in positions {
            if tpl
                .add_partition_offset(&self.config.topic, p as i32, Offset::Offset(o))
                .is_err()
            {
                return Ok(());
            }
        }
        if tpl.count() > 0 {
            if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
                tracing::warn!(
                    "kafka source {}: committing offsets of checkpoint {id} failed: {e}",
                    self.subtask
                );
            }
        }
        Ok(())
    }
}

impl Source<SourceRecord> for KafkaSource {
    fn poll(&mut self, out: &mut Vec<SourceRecord>, max: usize) -> Result<SourcePoll, BoxError> {
        self.0.poll(out, max)
    }

    fn current_watermark(&self) -> Option<Watermark> {
        self.0.current_watermark()
    }

    fn is_idle(&self) -> bool {
        self.0.is_idle()
    }
}

impl Checkpointed for KafkaSource {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        self.0.snapshot_state(id)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.0.restore_state(state)
    }

    /// Every partition goes, with its offset, to the subtask that owns it
    /// at the new parallelism.
    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        debug_assert_eq!(rescale.parallelism, self.0.source().parallelism);
        self.0.restore_rescaled(chains, rescale)
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.0.notify_checkpoint_complete(id)
    }

    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.0.notify_checkpoint_aborted(id)
    }
}
