//! lockgate-workloads: the reference workloads of lockgate
//! (`docs/workloads.md`), the job the load generator runs on them, and
//! the latency reports it writes.
//!
//! - [`workload`]: the W1-W4 record generator, routing, pacing schedule
//!   and the closed-form correctness check.
//! - [`refjob`]: the reference topology on the engine, with its checking,
//!   latency-recording sink.
//! - [`latency`]: latency histograms (HdrHistogram) and their reports
//!   (`.hgrm`, `.hlog`, base64 for JSON).
//! - [`charts`]: latency by percentile and the latency timeline, as SVG.
//!
//! It is a crate of its own so that a user of the reusable operators
//! (`lockgate-operators`) compiles no histogram or plotting library.

pub mod charts;
pub mod latency;
pub mod refjob;
pub mod workload;
