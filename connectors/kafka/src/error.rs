//! The connector's errors (a leaf module: every other module uses it).

/// What can go wrong talking to Kafka or reading its records.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// No broker answered within the connect timeout
    /// ([`crate::CONNECT_TIMEOUT`]).
    #[error("no Kafka broker reachable at {bootstrap} within {secs} s: {why}")]
    Unreachable {
        /// The bootstrap servers given.
        bootstrap: String,
        /// The timeout, s.
        secs: u64,
        /// The client's last error.
        why: String,
    },
    /// A server accepted a connection but answered no Kafka metadata
    /// request in time (not a Kafka broker, or one too loaded to answer).
    #[error("the server at {bootstrap} accepted a connection but answered no Kafka metadata request within {secs} s (is it a Kafka broker?): {why}")]
    NoAnswer {
        /// The bootstrap servers given.
        bootstrap: String,
        /// The timeout, s.
        secs: u64,
        /// The client's error.
        why: String,
    },
    /// The topic does not exist.
    #[error("topic `{0}` does not exist")]
    MissingTopic(String),
    /// The topic exists with another partition count than asked for.
    #[error("topic `{topic}` exists with {actual} partitions, not {wanted}")]
    PartitionCount {
        /// The topic.
        topic: String,
        /// Its partition count.
        actual: u32,
        /// The count asked for.
        wanted: u32,
    },
    /// A record whose key or value is not in the connector's encoding
    /// (see the crate docs and [`crate::InputRecord`]).
    #[error("record at {topic}/{partition}@{offset} is not a lockgate record: {why}")]
    BadRecord {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// What is wrong with it.
        why: String,
    },
    /// The Kafka client failed.
    #[error("{context}: {source}")]
    Client {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A transactional producer was fenced: a newer instance with the same
    /// transactional id started (this one is a zombie and must stop).
    #[error("transactional id `{0}` was fenced by a newer producer")]
    Fenced(String),
    /// The broker lacks Kafka transactions (e.g. tansu has no `EndTxn`):
    /// the exactly-once sink cannot run against it.
    #[error("the broker does not support Kafka transactions, which --sink exactly-once needs ({0}); use a Kafka broker, or --sink at-least-once")]
    NoTransactions(String),
    /// The exactly-once marker's committed offset is there, but its
    /// metadata (the run that wrote it) is absent or unreadable: which
    /// transactions landed cannot be told.
    #[error("the exactly-once marker ({location}) has a committed offset ({offset}) but {why}: which checkpoint's output landed cannot be told (another client may have committed that group's offset); delete the group's offsets to restore with --allow-missing-marker, which writes the pending output again")]
    BadMarker {
        /// The marker group and partition, in words.
        location: String,
        /// The committed offset found.
        offset: i64,
        /// What is wrong with its metadata.
        why: String,
    },
    /// A restored checkpoint holds pending transactions, and the marker
    /// group has no committed offset at all although one was committed
    /// before that checkpoint was taken: the offset expired or the brokers
    /// are another cluster's. Writing them again may duplicate output; the
    /// override is [`crate::WriteAheadOutput::allow_missing_marker`]
    /// (`lockgate kafka run --allow-missing-marker`).
    #[error("the restored checkpoint holds {pending} pending exactly-once transactions (of checkpoints {first} to {last}), but the marker ({location}) has no committed offset, although one had been committed before that checkpoint: the offset expired (Kafka drops a group's offsets offsets.retention.minutes after its last commit, 7 days by default) or these brokers are another cluster's. Which of them landed cannot be told, and writing them again may duplicate output; to write them anyway, restore with --allow-missing-marker (WriteAheadOutput::allow_missing_marker)")]
    MarkerMissing {
        /// The marker group and partition, in words.
        location: String,
        /// Pending transactions with records.
        pending: usize,
        /// The checkpoint of the first of them.
        first: u64,
        /// The checkpoint of the last of them.
        last: u64,
    },
    /// Anything else, said in words.
    #[error("{0}")]
    Other(String),
}

impl KafkaError {
    /// Wraps a client error with what was being done.
    pub(crate) fn client(context: impl Into<String>, source: rdkafka::error::KafkaError) -> Self {
        KafkaError::Client {
            context: context.into(),
            source,
        }
    }
}
