//! Kafka for lockgate: a source whose splits are a topic's partitions, with
//! the partition offsets in the checkpoint; an at-least-once sink; and an
//! exactly-once sink through the engine's two-phase commit
//! ([`lockgate::TwoPhaseCommitSink`]).
//!
//! Modules, bottom to top: `error` and `encoding` (the vocabulary: records
//! on the topics), `partitions` (ownership, watermarks), `txn` (the
//! exactly-once protocol, sans-I/O) and `fake` (its model for tests),
//! `client` (rdkafka set-up and topic administration), `source` and
//! `sink`.
//!
//! This crate is the reusable connector only: the reference topology over
//! Kafka (what `lockgate kafka run` runs) and the tansu test broker live
//! in the CLI crate (`lockgate-cli`, `bin/src/kafka/`), so that this one
//! depends on no workload.
//!
//! # Records on the topics
//! All integers 8 bytes big-endian ([`InputRecord`], [`OutputRecord`]):
//!
//! | | key | value |
//! |---|---|---|
//! | input record | `key` | `n`, then `ts_ns` (16 bytes) |
//! | output record | `key` | `sum`, then `n` (16 bytes) |
//!
//! The Kafka timestamp of a record is `ts_ns / 1e6` ms ([`timestamp_ms`]).
//!
//! Anchors: Flink's Kafka connector (offsets in the checkpoint, committed
//! to Kafka only for monitoring after a checkpoint completes; `KafkaSink`'s
//! `EXACTLY_ONCE` over two-phase commit) and FLIP-27's splits.

mod client;
mod encoding;
mod error;
mod fake;
mod partitions;
mod sink;
mod source;
mod txn;

pub use client::{
    check_topic_name, connect_check, create_topic, end_offsets, partition_count, read_topic,
    ClientSettings, CONNECT_TIMEOUT,
};
pub use encoding::{
    decode_key, encode_key, timestamp_ms, InputRecord, OutputRecord, SinkRecord, SourceRecord,
    KEY_BYTES, SINK_RECORD_BYTES, VALUE_BYTES,
};
pub use error::KafkaError;
pub use fake::{Crash, FakeCluster, FakeProducer};
pub use partitions::{
    owned_partitions, partition_of_key, process_owns, subtask_owns, PartitionWatermarks,
};
pub use sink::{KafkaSink, RdKafkaLog, TopicWriter};
pub use source::{KafkaSource, KafkaSourceConfig};
pub use txn::{
    decode_marker, marker_group, LogFactory, Marker, TransactionalLog, WriteAheadOutput,
    WriteAheadTxn,
};
