//! The Kafka source: a replayable source whose splits are partitions.

use crate::client::{ClientSettings, QuietConsumer};
use crate::encoding::{InputRecord, SourceRecord};
use crate::error::KafkaError;
use crate::partitions::{owned_partitions, subtask_owns, PartitionWatermarks};
use lockgate::{
    error::FatalError, keys::Rescale, task::SubtaskInfo, BoxError, CheckpointId, Checkpointed,
    Source, SourcePoll, Watermark,
};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
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
/// record timestamps (event time). Its checkpointed
/// state is each partition's next offset (postcard `Vec<(u32, i64)>`).
pub struct KafkaSource {
    config: Arc<KafkaSourceConfig>,
    subtask: usize,
    parallelism: usize,
    mine: Vec<u32>,
    consumer: Option<QuietConsumer>,
    /// Next offset to read, per partition read or restored so far.
    next: BTreeMap<u32, i64>,
    /// Bounded mode: partitions read up to their end.
    done: BTreeSet<u32>,
    /// Offsets of each checkpoint taken and not yet completed.
    snapshots: Vec<(CheckpointId, Vec<(u32, i64)>)>,
    /// When offsets were last committed to the group (ns, `now_ns`).
    committed_at_ns: Option<u64>,
    watermarks: PartitionWatermarks,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("topic", &self.config.topic)
            .field("subtask", &self.subtask)
            .field("partitions", &self.mine)
            .field("next", &self.next)
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
        let watermarks = PartitionWatermarks::new(&mine, config.out_of_orderness_ns);
        KafkaSource {
            config,
            subtask,
            parallelism,
            mine,
            consumer: None,
            next: BTreeMap::new(),
            done: BTreeSet::new(),
            snapshots: Vec::new(),
            committed_at_ns: None,
            watermarks,
        }
    }

    /// The partitions this subtask reads.
    pub fn partitions(&self) -> &[u32] {
        &self.mine
    }

    fn end_of(&self, p: u32) -> Option<i64> {
        self.config
            .end_offsets
            .as_ref()
            .map(|e| e.get(p as usize).copied().unwrap_or(0))
    }

    fn mark_done(&mut self, p: u32) {
        if self.done.insert(p) {
            self.watermarks.set_idle(p, true);
            if let Some(c) = &self.consumer {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(&self.config.topic, p as i32);
                // Stops fetching beyond the end; an error only costs reads.
                let _ = c.pause(&tpl);
            }
        }
    }

    /// Creates the consumer and assigns the partitions at their offsets.
    fn open(&mut self) -> Result<(), KafkaError> {
        let consumer = self.config.client.consumer(&self.config.group_id, false)?;
        let mut tpl = TopicPartitionList::new();
        for &p in &self.mine {
            let at = self.next.get(&p).copied();
            if let (Some(end), Some(next)) = (self.end_of(p), at) {
                if next >= end {
                    self.done.insert(p);
                    self.watermarks.set_idle(p, true);
                    continue;
                }
            }
            if self.end_of(p) == Some(0) {
                self.done.insert(p);
                self.watermarks.set_idle(p, true);
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
        self.consumer = Some(consumer);
        Ok(())
    }

    fn positions(&self) -> Vec<(u32, i64)> {
        self.next.iter().map(|(&p, &o)| (p, o)).collect()
    }

    fn restore_positions(&mut self, positions: Vec<(u32, i64)>) {
        self.next = positions
            .into_iter()
            .filter(|(p, _)| self.mine.contains(p))
            .collect();
    }
}

fn decode_positions(bytes: &[u8]) -> Result<Vec<(u32, i64)>, BoxError> {
    postcard::from_bytes(bytes)
        .map_err(|e| format!("the Kafka source's state does not decode: {e}").into())
}

impl Source<SourceRecord> for KafkaSource {
    fn poll(&mut self, out: &mut Vec<SourceRecord>, max: usize) -> Result<SourcePoll, BoxError> {
        if self.consumer.is_none() {
            self.open()?;
        }
        let bounded = self.config.end_offsets.is_some();
        if bounded && self.done.len() == self.mine.len() {
            return Ok(SourcePoll::Finished);
        }
        let start = out.len();
        while out.len() - start < max {
            let polled = self
                .consumer
                .as_ref()
                .expect("opened above")
                .poll(Duration::ZERO);
            let m = match polled {
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
            if let Some(end) = self.end_of(p) {
                if offset >= end {
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
            out.push(SourceRecord {
                key: record.key,
                value: record.n,
                ts_ns: record.ts_ns,
                partition: p,
            });
            self.next.insert(p, offset + 1);
            self.watermarks.observe(p, event_ns);
            if self.end_of(p).is_some_and(|end| offset + 1 >= end) {
                self.mark_done(p);
            }
        }
        if out.len() > start {
            Ok(SourcePoll::Ready)
        } else if bounded && self.done.len() == self.mine.len() {
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
}

impl Checkpointed for KafkaSource {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        let positions = self.positions();
        let bytes = postcard::to_allocvec(&positions)?;
        self.snapshots.push((id, positions));
        Ok(Some(bytes))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let positions = decode_positions(state)?;
        self.restore_positions(positions);
        Ok(())
    }

    /// Every partition goes, with its offset, to the subtask that owns it
    /// at the new parallelism.
    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        debug_assert_eq!(rescale.parallelism, self.parallelism);
        let mut all = Vec::new();
        for chain in chains {
            if let Some(last) = chain.last() {
                all.extend(decode_positions(last)?);
            }
        }
        self.restore_positions(all);
        Ok(())
    }

    /// Commits the checkpoint's offsets to the consumer group, for
    /// monitoring only (a failed commit is logged, not an error).
    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        let Some(i) = self.snapshots.iter().rposition(|(c, _)| *c <= id) else {
            return Ok(());
        };
        let (_, positions) = self.snapshots[i].clone();
        self.snapshots.drain(..=i);
        let now = lockgate::tuning::now_ns();
        let finished = self.config.end_offsets.is_some() && self.done.len() == self.mine.len();
        if !finished
            && self
                .committed_at_ns
                .is_some_and(|t| now.saturating_sub(t) < COMMIT_INTERVAL_NS)
        {
            return Ok(());
        }
        self.committed_at_ns = Some(now);
        let Some(consumer) = &self.consumer else {
            return Ok(());
        };
        let mut tpl = TopicPartitionList::new();
        for (p, o) in positions {
            if tpl
                .add_partition_offset(&self.config.topic, p as i32, Offset::Offset(o))
                .is_err()
            {
                return Ok(());
            }
        }
        if tpl.count() > 0 {
            if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
                tracing::warn!(
                    "kafka source {}: committing offsets of checkpoint {id} failed: {e}",
                    self.subtask
                );
            }
        }
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.snapshots.retain(|(c, _)| *c != id);
        Ok(())
    }
}
