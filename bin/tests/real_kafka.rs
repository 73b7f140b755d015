//! The exactly-once sink against a real Kafka (transactions), only when
//! `LOCKGATE_KAFKA_BOOTSTRAP` names one (`HOST:PORT`); otherwise it skips,
//! saying so (tansu, the test broker, has no transactions). Topics are
//! named after the time, so runs never share them.

use lockgate::{
    testing::FailurePlan, testing::FailurePoint, CheckpointMode, JobBuilder, JobConfig,
    RestartStrategy,
};
use lockgate_cli::kafka::{build_job, KafkaJobSpec, SinkGuarantee};
use lockgate_kafka::{
    create_topic, end_offsets, partition_of_key, read_topic, ClientSettings, InputRecord,
    KafkaSourceConfig, OutputRecord, TopicWriter,
};
use std::collections::HashMap;
use std::time::Duration;

#[test]
fn exactly_once_output_survives_failures_on_a_real_kafka() {
    let Ok(bootstrap) = std::env::var("LOCKGATE_KAFKA_BOOTSTRAP") else {
        eprintln!(
            "skipped: LOCKGATE_KAFKA_BOOTSTRAP is not set (it names a Kafka with transactions)"
        );
        return;
    };
    let s = ClientSettings::new(bootstrap);
    let tag = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let (input, output) = (format!("lockgate-in-{tag}"), format!("lockgate-out-{tag}"));
    let (partitions, records, keys) = (3u32, 20_000u64, 101u64);
    create_topic(&s, &input, partitions).unwrap();
    create_topic(&s, &output, partitions).unwrap();
    let mut w = TopicWriter::new(&s, &input).unwrap();
    for n in 0..records {
        let r = InputRecord {
            key: n % keys,
            n,
            ts_ns: n,
        };
        w.send(
            partition_of_key(r.key, partitions),
            &r.key_bytes(),
            &r.value_bytes(),
            0,
        )
        .unwrap();
    }
    w.flush().unwrap();
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(50));
    config.restart = RestartStrategy {
        max_attempts: 3,
        delay: Duration::ZERO,
    };
    let job = JobBuilder::new("kafka-eo", config).with_failures(
        FailurePlan::none()
            .with(2, FailurePoint::AfterRecords(4_000))
            .with(3, FailurePoint::DuringSnapshot),
    );
    let spec = KafkaJobSpec {
        source: KafkaSourceConfig {
            client: s.clone(),
            topic: input.clone(),
            partitions,
            processes: 1,
            index: 0,
            end_offsets: Some(end_offsets(&s, &input, partitions).unwrap()),
            group_id: format!("lockgate-test-{tag}"),
            out_of_orderness_ns: 0,
        },
        output: output.clone(),
        parallelism: 2,
        guarantee: SinkGuarantee::ExactlyOnce,
        transactional_prefix: format!("lockgate-test-{tag}"),
        adopted_ids: Vec::new(),
        allow_missing_marker: false,
    };
    build_job(&job, &spec).unwrap();
    let m = job.start().unwrap().wait().unwrap();
    assert!(m.restarts >= 1);
    let mut seen: HashMap<u64, u32> = HashMap::new();
    read_topic(&s, &output, true, |_, _, k, v| {
        let r = OutputRecord::decode(k, v).unwrap();
        *seen.entry(r.n).or_insert(0) += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(seen.len() as u64, records, "lost records");
    assert!(seen.values().all(|&c| c == 1), "duplicated records");
}
