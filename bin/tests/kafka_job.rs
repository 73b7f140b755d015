//! The Kafka source and the at-least-once sink against a real Kafka-API
//! broker (tansu, see `TestBroker`), in the reference topology over Kafka
//! (`lockgate_cli::kafka::build_job`): skipped, saying so, when tansu is
//! not installed, unless `LOCKGATE_REQUIRE_KAFKA=1` (then they fail).

use lockgate::{
    testing::FailurePlan, testing::FailurePoint, CheckpointMode, JobBuilder, JobConfig,
    RestartStrategy,
};
use lockgate_cli::kafka::{build_job, KafkaJobSpec, SinkGuarantee, TestBroker};
use lockgate_kafka::{
    create_topic, end_offsets, partition_of_key, read_topic, ClientSettings, InputRecord,
    KafkaSourceConfig, OutputRecord, TopicWriter,
};
use std::collections::HashMap;
use std::time::Duration;

const KEYS: u64 = 37;

fn key_of(n: u64) -> u64 {
    (n * 7 + 3) % KEYS
}

fn produce(s: &ClientSettings, topic: &str, partitions: u32, records: u64) {
    create_topic(s, topic, partitions).unwrap();
    let mut w = TopicWriter::new(s, topic).unwrap();
    for n in 0..records {
        let r = InputRecord {
            key: key_of(n),
            n,
            ts_ns: 1_000_000 * n,
        };
        w.send(
            partition_of_key(r.key, partitions),
            &r.key_bytes(),
            &r.value_bytes(),
            n as i64,
        )
        .unwrap();
    }
    w.flush().unwrap();
}

fn spec(
    s: &ClientSettings,
    input: &str,
    output: &str,
    partitions: u32,
    processes: u32,
    index: u32,
) -> KafkaJobSpec {
    KafkaJobSpec {
        source: KafkaSourceConfig {
            client: s.clone(),
            topic: input.into(),
            partitions,
            processes,
            index,
            end_offsets: Some(end_offsets(s, input, partitions).unwrap()),
            group_id: format!("test-{input}"),
            out_of_orderness_ns: 0,
        },
        output: output.into(),
        parallelism: 2,
        guarantee: SinkGuarantee::AtLeastOnce,
        transactional_prefix: format!("test-{output}"),
        adopted_ids: Vec::new(),
        allow_missing_marker: false,
    }
}

/// Reads `topic` and returns, per `n`, how often it was seen, and per key
/// the sum at its largest `n`; checks each record's partition.
fn read_output(
    s: &ClientSettings,
    topic: &str,
    partitions: u32,
) -> (HashMap<u64, u32>, HashMap<u64, (u64, u64)>) {
    let mut seen = HashMap::new();
    let mut last: HashMap<u64, (u64, u64)> = HashMap::new();
    read_topic(s, topic, false, |p, _, k, v| {
        let r = OutputRecord::decode(k, v).unwrap();
        assert_eq!(
            p as u32,
            partition_of_key(r.key, partitions),
            "record {r:?} in partition {p}"
        );
        *seen.entry(r.n).or_insert(0) += 1;
        let e = last.entry(r.key).or_insert((r.n, r.sum));
        if r.n >= e.0 {
            *e = (r.n, r.sum);
        }
        Ok(())
    })
    .unwrap();
    (seen, last)
}

fn closed_form(records: u64) -> HashMap<u64, u64> {
    let mut sums = HashMap::new();
    for n in 0..records {
        *sums.entry(key_of(n)).or_insert(0u64) += 2 * n + 1;
    }
    sums
}

#[test]
fn a_bounded_job_reads_every_partition_once_and_recovers_from_failures() {
    let Some(b) = TestBroker::for_test() else {
        return;
    };
    let s = ClientSettings::new(b.bootstrap());
    let records = 5_000;
    produce(&s, "in", 3, records);
    create_topic(&s, "out", 3).unwrap();
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(20));
    config.restart = RestartStrategy {
        max_attempts: 2,
        delay: Duration::ZERO,
    };
    let job = JobBuilder::new("kafka-test", config);
    build_job(&job, &spec(&s, "in", "out", 3, 1, 0)).unwrap();
    // Task order: source[0], source[1], keyed_sum[0], keyed_sum[1].
    let job = job.with_failures(
        FailurePlan::none()
            .with(0, FailurePoint::AfterRecords(800))
            .with(3, FailurePoint::AfterRecords(1_500)),
    );
    let metrics = job.start().unwrap().wait().unwrap();
    assert_eq!(metrics.restarts, 2, "both planned failures struck");
    let (seen, last) = read_output(&s, "out", 3);
    let lost: Vec<u64> = (0..records).filter(|n| !seen.contains_key(n)).collect();
    assert!(
        lost.is_empty(),
        "lost {} records, first {:?}",
        lost.len(),
        lost.first()
    );
    assert!(seen.keys().all(|&n| n < records));
    let want = closed_form(records);
    for (key, sum) in want {
        assert_eq!(last.get(&key).map(|l| l.1), Some(sum), "key {key}");
    }
}

#[test]
fn two_processes_split_the_partitions_between_them() {
    let Some(b) = TestBroker::for_test() else {
        return;
    };
    let s = ClientSettings::new(b.bootstrap());
    let records = 2_000;
    produce(&s, "in2", 4, records);
    create_topic(&s, "out2", 4).unwrap();
    for index in 0..2 {
        let mut config = JobConfig::default();
        config.checkpoint.mode = CheckpointMode::AtLeastOnce;
        config.checkpoint.interval = Some(Duration::from_millis(50));
        let job = JobBuilder::new("kafka-test", config);
        build_job(&job, &spec(&s, "in2", "out2", 4, 2, index)).unwrap();
        job.start().unwrap().wait().unwrap();
        let (seen, _) = read_output(&s, "out2", 4);
        // After process 0 only the keys of partitions 0 and 2 are there.
        let expect: Vec<u64> = (0..records)
            .filter(|&n| partition_of_key(key_of(n), 4) % 2 <= index)
            .collect();
        let mut got: Vec<u64> = seen.keys().copied().collect();
        got.sort_unstable();
        assert_eq!(got, expect, "after process {index}");
        assert!(
            seen.values().all(|&c| c == 1),
            "no failure, so no duplicate"
        );
    }
}
