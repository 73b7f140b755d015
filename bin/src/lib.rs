//! The library half of the `lockgate` command: what its subcommands and
//! its integration tests share and drive directly.
//!
//! - [`kafka`]: the reference topology over Kafka, which `lockgate kafka
//!   run` runs, and the tansu test broker harness. They live here, not in
//!   `lockgate-kafka` (which keeps the reusable connector and depends on
//!   no workload), nor in `lockgate-workloads` (which would then pull
//!   librdkafka into every bench).
//! - [`metrics_http`]: `--metrics-addr`'s listener, serving `/metrics`
//!   (Prometheus) and `/health`.

pub mod kafka;
pub mod metrics_http;
