//! The reference topology over Kafka, as `lockgate kafka run` drives it:
//! a Kafka source with the chained map (`value = 2n + 1`), `key_by(key)`,
//! `keyed_sum` (a running sum per key in managed keyed state) and a Kafka
//! sink chained behind it, each output record written to its input
//! record's partition of the output topic. Built from `lockgate-kafka`'s
//! connector and `lockgate-workloads`' chained map, here so that the
//! connector depends on no workload.

use lockgate::{
    keys::Rescale, BoxError, Context, JobBuilder, KeyedState, Managed, StatefulOperator,
    TwoPhaseCommitSink,
};
use lockgate_kafka::{
    partition_of_key, process_owns, ClientSettings, KafkaError, KafkaSink, KafkaSource,
    KafkaSourceConfig, LogFactory, OutputRecord, RdKafkaLog, SinkRecord, SourceRecord,
    WriteAheadOutput,
};
use std::sync::Arc;

/// What the Kafka sink guarantees its readers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkGuarantee {
    /// Every record of a completed checkpoint is in the output; after a
    /// restore, records since it are written again (readers may see
    /// duplicates).
    AtLeastOnce,
    /// `read_committed` readers see each record once: output is written in
    /// Kafka transactions after its checkpoint completes (see the protocol
    /// of `lockgate-kafka`'s `txn` module). Needs brokers with
    /// transactions.
    ExactlyOnce,
}

/// A Kafka job of the reference topology.
#[derive(Clone, Debug)]
pub struct KafkaJobSpec {
    /// The source's settings (brokers, input topic, ownership, bounds).
    pub source: KafkaSourceConfig,
    /// The output topic (with at least the input's partition count).
    pub output: String,
    /// Subtasks of the source and of `keyed_sum` (with its sink) in this
    /// process.
    pub parallelism: usize,
    /// The sink's guarantee.
    pub guarantee: SinkGuarantee,
    /// Exactly-once: sink subtask `j` uses transactional id
    /// `<prefix>-<j>` (one prefix per process and output; never shared by
    /// two running jobs).
    pub transactional_prefix: String,
    /// Exactly-once, after a restore merged from other processes'
    /// checkpoints ([`lockgate::storage::RestoredState::merge`]): the transactional
    /// id of each old sink subtask, by its index in the merged state, whose
    /// pending transactions this process finishes. Empty: old subtask `j`
    /// had `<prefix>-<j>` (a restore of this process's own folder).
    pub adopted_ids: Vec<String>,
    /// Exactly-once, at a restore: write the checkpoint's pending
    /// transactions again even when their marker group lost its offset
    /// (expired, or another cluster), which may duplicate output
    /// ([`WriteAheadOutput::allow_missing_marker`]; `lockgate kafka run
    /// --allow-missing-marker`). False: such a restore is refused.
    pub allow_missing_marker: bool,
}

/// `keyed_sum`: the running sum of the mapped values per key, in managed
/// keyed state (snapshotted incrementally). On a rescaled restore it keeps
/// the keys of its key groups *and* of this process's partitions
/// ([`Managed::after_rescale`] in [`build_job`]): a restore merged from
/// several processes' checkpoints holds every process's keys, and the key
/// groups of a subtask here span other processes' partitions. Its state
/// bytes are `KeyedState`'s own, as when it snapshotted them by hand.
struct KafkaKeyedSum;

impl StatefulOperator<SourceRecord, SinkRecord> for KafkaKeyedSum {
    type State = KeyedState<u64, u64>;

    fn process(
        &mut self,
        sums: &mut Self::State,
        input: &mut Vec<SourceRecord>,
        ctx: &mut Context<'_, SinkRecord>,
    ) -> Result<(), BoxError> {
        for r in input.drain(..) {
            let sum = sums.get_or_default(r.key);
            *sum = sum.wrapping_add(r.value);
            ctx.emit(SinkRecord {
                partition: r.partition,
                record: OutputRecord {
                    key: r.key,
                    sum: *sum,
                    n: lockgate_workloads::workload::seq_of_mapped_value(r.value),
                },
                ts_ns: r.ts_ns,
            });
        }
        Ok(())
    }
}

/// Adds the topology to `job`. The sinks connect lazily (on their first
/// record or checkpoint), so a broker problem fails the task, and the
/// job's restart strategy applies.
///
/// # Errors
/// None today; reserved for settings the builder can check up front.
pub fn build_job(job: &JobBuilder, spec: &KafkaJobSpec) -> Result<(), KafkaError> {
    let source = Arc::new(spec.source.clone());
    let p = spec.parallelism;
    let summed = job
        .source("source", p, move |info| {
            KafkaSource::new(source.clone(), info)
        })
        .map_in_place(|r| r.value = lockgate_workloads::workload::chained_map(r.value))
        .key_by(|r: &SourceRecord| r.key)
        .task("keyed_sum", p)
        .process("keyed_sum", {
            let (partitions, processes, index) = (
                spec.source.partitions,
                spec.source.processes,
                spec.source.index,
            );
            move |_| {
                Managed::new(KafkaKeyedSum).after_rescale(
                    move |sums: &mut KeyedState<u64, u64>, _: &Rescale| {
                        sums.retain(|&key, _| {
                            process_owns(partition_of_key(key, partitions), processes, index)
                        });
                        Ok(())
                    },
                )
            }
        });
    let settings: ClientSettings = spec.source.client.clone();
    let output = spec.output.clone();
    match spec.guarantee {
        SinkGuarantee::AtLeastOnce => {
            summed.sink("sink", move |_| {
                LazySink::new(settings.clone(), output.clone())
            });
        }
        SinkGuarantee::ExactlyOnce => {
            let prefix = spec.transactional_prefix.clone();
            let (s2, o2) = (settings.clone(), output.clone());
            let logs: LogFactory<RdKafkaLog> =
                Arc::new(move |j| RdKafkaLog::new(&settings, &output, &format!("{prefix}-{j}")));
            let adopted = if spec.adopted_ids.is_empty() {
                logs.clone()
            } else {
                let ids = spec.adopted_ids.clone();
                let adopted: LogFactory<RdKafkaLog> = Arc::new(move |j| {
                    let id = ids.get(j).ok_or_else(|| {
                        KafkaError::Other(format!("no transactional id for old sink subtask {j}"))
                    })?;
                    RdKafkaLog::new(&s2, &o2, id)
                });
                adopted
            };
            let allow_missing_marker = spec.allow_missing_marker;
            summed.sink("sink", move |info| {
                TwoPhaseCommitSink::new(
                    WriteAheadOutput::new(logs.clone(), info.index)
                        .with_adopted_logs(adopted.clone())
                        .allow_missing_marker(allow_missing_marker),
                )
            });
        }
    }
    Ok(())
}

/// A [`KafkaSink`] created on first use, so that a bad setting fails the
/// task (with the job's restart strategy) instead of the job's build.
struct LazySink {
    settings: ClientSettings,
    topic: String,
    sink: Option<KafkaSink>,
}

impl LazySink {
    fn new(settings: ClientSettings, topic: String) -> Self {
        LazySink {
            settings,
            topic,
            sink: None,
        }
    }

    fn get(&mut self) -> Result<&mut KafkaSink, BoxError> {
        if self.sink.is_none() {
            self.sink = Some(KafkaSink::new(&self.settings, &self.topic)?);
        }
        Ok(self.sink.as_mut().expect("created above"))
    }
}

impl lockgate::Sink<SinkRecord> for LazySink {
    fn write(&mut self, input: &mut Vec<SinkRecord>) -> Result<(), BoxError> {
        self.get()?.write(input)
    }

    fn end_of_input(&mut self) -> Result<(), BoxError> {
        self.get()?.end_of_input()
    }
}

impl lockgate::Checkpointed for LazySink {
    fn snapshot_state(&mut self, id: lockgate::CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        lockgate::Checkpointed::snapshot_state(self.get()?, id)
    }
}
