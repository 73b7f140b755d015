//! The reference workload over Kafka: the topology `lockgate kafka run`
//! builds on `lockgate-kafka`'s source and sinks ([`build_job`],
//! [`KafkaJobSpec`]), and a Kafka-API broker for the tests
//! ([`TestBroker`], tansu).
//!
//! Operator names (`source`, `keyed_sum`, `sink`), state and transactional
//! ids (`<prefix>-<j>`) are what existing checkpoints and open
//! transactions hold: a change would stop them restoring and fencing.

mod job;
mod test_broker;

pub use job::{build_job, KafkaJobSpec, SinkGuarantee};
pub use test_broker::TestBroker;
