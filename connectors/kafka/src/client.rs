//! rdkafka set-up and the few administrative calls the connector needs:
//! reachability, topic creation, partition counts, end offsets, reading a
//! whole topic.

use crate::error::KafkaError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// How long a first contact with the brokers may take before the
/// connector gives up (the CLI's "no broker reachable within 5 s").
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a request to a reachable broker may take (metadata, offsets,
/// commits, flushes) before it is an error.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The connector's client context: librdkafka's own log lines and
/// client-level errors (a broker down, a reconnect) go to `tracing` at
/// debug level (`lockgate -vv` shows them), because every call that
/// matters reports its failure through its result, with what was being
/// done; at warning level they would repeat each outage many times.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        tracing::debug!(target: "librdkafka", ?level, "{fac}: {log_message}");
    }

    fn error(&self, error: RdError, reason: &str) {
        tracing::debug!(target: "librdkafka", "{error}: {reason}");
    }
}

impl ConsumerContext for Quiet {}

/// A consumer of the connector (its context is [`Quiet`]).
pub(crate) type QuietConsumer = BaseConsumer<Quiet>;

/// Where the brokers are, and the client settings every connector client
/// shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSettings {
    /// `bootstrap.servers`: `HOST:PORT[,HOST:PORT...]`.
    pub bootstrap: String,
}

impl ClientSettings {
    /// Settings for the brokers at `bootstrap`.
    pub fn new(bootstrap: impl Into<String>) -> Self {
        ClientSettings {
            bootstrap: bootstrap.into(),
        }
    }

    /// A client configuration with the bootstrap servers and quiet logs
    /// (librdkafka's own log lines go through its default logger only at
    /// warning level and above).
    pub(crate) fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("log_level", "4")
            // A missing topic is an error, never created by a read.
            .set("allow.auto.create.topics", "false");
        c
    }

    /// A consumer that reads by explicit assignment (no group
    /// membership); `group` is used only for committed offsets.
    pub(crate) fn consumer(
        &self,
        group: &str,
        read_committed: bool,
    ) -> Result<QuietConsumer, KafkaError> {
        self.config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            // 256 KiB a partition a fetch (librdkafka's default is 1 MiB):
            // a first record sooner after an assignment (measured against
            // tansu: 2.5-3.6 s instead of 10.8 s to the first record of a
            // 250k-record partition), at no loss of throughput there.
            .set("max.partition.fetch.bytes", "262144")
            .set(
                "isolation.level",
                if read_committed {
                    "read_committed"
                } else {
                    "read_uncommitted"
                },
            )
            .create_with_context(Quiet)
            .map_err(|e| KafkaError::client("cannot create a Kafka consumer", e))
    }
}

/// Checks a topic name as Kafka does: 1 to 249 characters of ASCII
/// letters, digits, `.`, `_` and `-`, and not `.` or `..`.
///
/// # Errors
/// What is wrong with it, in words.
///
/// # Examples
/// ```
/// assert!(lockgate_kafka::check_topic_name("in-1.b_2").is_ok());
/// assert!(lockgate_kafka::check_topic_name("").is_err());
/// assert!(lockgate_kafka::check_topic_name("a b").is_err());
/// ```
pub fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 249 {
        return Err(format!(
            "a topic name has 1 to 249 characters, `{name}` has {}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("`{name}` is not a topic name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic `{name}` has {c:?}: a topic name has only ASCII letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Checks that a broker is reachable: a TCP connection to one of the
/// bootstrap servers within [`CONNECT_TIMEOUT`], then a metadata request
/// answered within the request timeout (30 s: a loaded broker may be slow
/// to answer, which is not the same as absent).
///
/// # Errors
/// [`KafkaError::Unreachable`] when no bootstrap server accepts a
/// connection in time, or none answers.
pub fn connect_check(settings: &ClientSettings) -> Result<(), KafkaError> {
    use std::net::{TcpStream, ToSocketAddrs};
    let unreachable = |why: String| KafkaError::Unreachable {
        bootstrap: settings.bootstrap.clone(),
        secs: CONNECT_TIMEOUT.as_secs(),
        why,
    };
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut last = String::from("no address given");
    let mut connected = false;
    for server in settings
        .bootstrap
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let addrs = match server.to_socket_addrs() {
            Ok(a) => a,
            Err(e) => {
                last = format!("{server}: {e}");
                continue;
            }
        };
        for addr in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(_) => connected = true,
                Err(e) => last = format!("{server}: {e}"),
            }
            if connected {
                break;
            }
        }
        if connected {
            break;
        }
    }
    if !connected {
        return Err(unreachable(last));
    }
    let consumer = settings.consumer("lockgate-connect-check", false)?;
    consumer
        .fetch_metadata(None, REQUEST_TIMEOUT)
        .map(|_| ())
        .map_err(|e| KafkaError::NoAnswer {
            bootstrap: settings.bootstrap.clone(),
            secs: REQUEST_TIMEOUT.as_secs(),
            why: e.to_string(),
        })
}

/// The number of partitions of `topic`.
///
/// # Errors
/// [`KafkaError::MissingTopic`] when it does not exist; a client error.
pub fn partition_count(settings: &ClientSettings, topic: &str) -> Result<u32, KafkaError> {
    let consumer = settings.consumer("lockgate-metadata", false)?;
    let mut attempt = 1;
    let md = loop {
        match consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT) {
            Ok(md) => break md,
            Err(e) if attempt < READ_ATTEMPTS && is_timeout(&e) => attempt += 1,
            Err(e) => {
                return Err(KafkaError::client(
                    format!("cannot read the metadata of `{topic}` ({attempt} attempts)"),
                    e,
                ))
            }
        }
    };
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Err(KafkaError::MissingTopic(topic.to_string()));
    };
    if t.error().is_some() || t.partitions().is_empty() {
        return Err(KafkaError::MissingTopic(topic.to_string()));
    }
    Ok(t.partitions().len() as u32)
}

/// Creates `topic` with `partitions` partitions (replication factor 1)
/// unless it exists. Returns true when it created it.
///
/// # Errors
/// [`KafkaError::PartitionCount`] when it exists with another count; a
/// client error.
pub fn create_topic(
    settings: &ClientSettings,
    topic: &str,
    partitions: u32,
) -> Result<bool, KafkaError> {
    match partition_count(settings, topic) {
        Ok(actual) if actual == partitions => return Ok(false),
        Ok(actual) => {
            return Err(KafkaError::PartitionCount {
                topic: topic.to_string(),
                actual,
                wanted: partitions,
            })
        }
        Err(KafkaError::MissingTopic(_)) => {}
        Err(e) => return Err(e),
    }
    let admin: AdminClient<Quiet> = settings
        .config()
        .create_with_context(Quiet)
        .map_err(|e| KafkaError::client("cannot create a Kafka admin client", e))?;
    let new = NewTopic::new(
        topic,
        i32::try_from(partitions).unwrap_or(i32::MAX),
        TopicReplication::Fixed(1),
    );
    let opts = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
    let results = futures_executor::block_on(admin.create_topics([&new], &opts))
        .map_err(|e| KafkaError::client(format!("cannot create topic `{topic}`"), e))?;
    let mut created = true;
    for r in results {
        match r {
            Ok(_) => {}
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => created = false,
            Err((_, code)) => {
                return Err(KafkaError::Other(format!(
                    "cannot create topic `{topic}`: {code}"
                )))
            }
        }
    }
    // The metadata may lag the creation: wait until the topic is seen with
    // its partitions (bounded by the request timeout).
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    loop {
        match partition_count(settings, topic) {
            Ok(n) if n == partitions => return Ok(created),
            Ok(actual) if !created => {
                return Err(KafkaError::PartitionCount {
                    topic: topic.to_string(),
                    actual,
                    wanted: partitions,
                })
            }
            _ if Instant::now() >= deadline => {
                return Err(KafkaError::Other(format!(
                    "topic `{topic}` was created but its {partitions} partitions did not appear within {} s",
                    REQUEST_TIMEOUT.as_secs()
                )))
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Attempts of a read-only request (metadata, offsets) before its error
/// is returned: a loaded broker may time out once (tansu with four
/// processes on it timed out a 30 s offsets request) and answer the next.
const READ_ATTEMPTS: u32 = 3;

/// The end offset (high watermark: the offset the next record will take)
/// of every partition of `topic`, by partition.
///
/// # Errors
/// A client error, after 3 timeouts of one request.
pub fn end_offsets(
    settings: &ClientSettings,
    topic: &str,
    partitions: u32,
) -> Result<Vec<i64>, KafkaError> {
    let consumer = settings.consumer("lockgate-metadata", false)?;
    (0..partitions as i32)
        .map(|p| {
            let mut attempt = 1;
            loop {
                match consumer.fetch_watermarks(topic, p, REQUEST_TIMEOUT) {
                    Ok((_, high)) => return Ok(high),
                    Err(e) if attempt < READ_ATTEMPTS && is_timeout(&e) => attempt += 1,
                    Err(e) => {
                        return Err(KafkaError::client(
                            format!(
                                "cannot read the end offset of {topic}/{p} ({attempt} attempts)"
                            ),
                            e,
                        ))
                    }
                }
            }
        })
        .collect()
}

/// True for a consumer error librdkafka recovers from by itself (a broker
/// of the bootstrap list down, a reconnect, a name that did not resolve
/// while another did): reported, not fatal; the read goes on.
pub(crate) fn is_transient(e: &RdError) -> bool {
    matches!(
        e,
        RdError::MessageConsumption(
            RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::Resolve
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::NetworkException
        )
    )
}

/// True for a request that timed out (worth one more try).
fn is_timeout(e: &RdError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut)
        || e.rdkafka_error_code() == Some(RDKafkaErrorCode::RequestTimedOut)
}

/// Reads every record of `topic` up to the end offsets seen at the call,
/// in partition order, calling `f(partition, offset, key, value)` (key and
/// value empty when absent). `read_committed`: only committed
/// transactions' records (Kafka's `isolation.level`).
///
/// # Errors
/// A client error, or the first error `f` returns.
pub fn read_topic(
    settings: &ClientSettings,
    topic: &str,
    read_committed: bool,
    mut f: impl FnMut(i32, i64, &[u8], &[u8]) -> Result<(), KafkaError>,
) -> Result<u64, KafkaError> {
    let partitions = partition_count(settings, topic)?;
    let ends = end_offsets(settings, topic, partitions)?;
    let consumer = settings.consumer("lockgate-reader", read_committed)?;
    let mut records = 0u64;
    for (p, &end) in ends.iter().enumerate() {
        let p = p as i32;
        if end <= 0 {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| KafkaError::client("bad assignment", e))?;
        consumer
            .assign(&tpl)
            .map_err(|e| KafkaError::client(format!("cannot read {topic}/{p}"), e))?;
        let mut idle_since = Instant::now();
        loop {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    idle_since = Instant::now();
                    if m.offset() >= end {
                        break;
                    }
                    records += 1;
                    f(
                        p,
                        m.offset(),
                        m.key().unwrap_or_default(),
                        m.payload().unwrap_or_default(),
                    )?;
                    if m.offset() + 1 >= end {
                        break;
                    }
                }
                // At the end (for read_committed: the last stable offset,
                // below which every transaction has ended).
                Some(Err(RdError::PartitionEOF(_))) => break,
                Some(Err(e)) if is_transient(&e) => {
                    tracing::debug!("reading {topic}/{p}: {e} (librdkafka recovers)");
                }
                Some(Err(e)) => {
                    return Err(KafkaError::client(format!("cannot read {topic}/{p}"), e))
                }
                None if idle_since.elapsed() > REQUEST_TIMEOUT => {
                    return Err(KafkaError::Other(format!(
                        "reading {topic}/{p}: no record and no end of partition within {} s",
                        REQUEST_TIMEOUT.as_secs()
                    )))
                }
                None => {}
            }
        }
    }
    Ok(records)
}

/// Transactional producers use the quiet context too.
impl rdkafka::producer::ProducerContext for Quiet {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}
