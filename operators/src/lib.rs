//! lockgate-operators: sources, transforms, keyed state, windows and sinks
//! for lockgate, plus the engine-independent parts of the reference
//! workloads and of the load generator's reports.
//!
//! - [`workload`]: the W1/W2/W3 record generator, routing, pacing schedule
//!   and the closed-form correctness check of the reference workloads
//!   (`docs/workloads.md`).
//! - [`latency`]: latency histograms (HdrHistogram) and their reports
//!   (`.hgrm`, `.hlog`, base64 for JSON, SVG percentile plots).
//! - [`sources`]: general-purpose sources (a replayable [`sources::Sequence`]).
//! - [`demo`]: a small exactly-once job for crash tests.
//! - [`file_sink`]: the transactional (two-phase-commit) file sink.
//! - [`flights`]: the NYC flights records, a resumable CSV reader (plain or
//!   gzip) and the engine-independent reference computation.
//! - [`refjob`]: the reference topology of W1/W2/W3 on the engine, with
//!   its checking, latency-recording sink (what the load generator runs).
//! - Event time: [`timers`] (keyed event/processing-time timers),
//!   [`window`] (tumbling and sliding windows), [`co_process`] (keyed
//!   two-input operators), [`join`] (an enrichment join on it).
//! - [`csv_source`]: a replayable CSV file source; [`flights_job`]: the NYC
//!   flights job.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

pub mod co_process;
pub mod csv_source;
pub mod demo;
pub mod file_sink;
pub mod flights;
pub mod flights_job;
pub mod join;
pub mod latency;
pub mod refjob;
pub mod sources;
pub mod timers;
pub mod window;
pub mod workload;
