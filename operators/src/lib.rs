//! lockgate-operators: reusable sources, operators and sinks for lockgate.
//!
//! - [`sources`]: general-purpose sources (a replayable [`sources::Sequence`]).
//! - [`csv`]: a resumable reader of CSV files (plain or gzip) into typed
//!   records; [`csv_source`]: a replayable CSV file source on it.
//! - [`file_sink`]: the transactional (two-phase-commit) file sink.
//! - Event time: [`timers`] (keyed event/processing-time timers),
//!   [`window`] (tumbling and sliding windows), [`co_process`] (keyed
//!   two-input operators), [`join`] (an enrichment join on it).
//!
//! The reference workloads and their reports are in `lockgate-workloads`,
//! the example jobs (NYC flights) in `lockgate-examples`.

pub mod co_process;
pub mod csv;
pub mod csv_source;
pub mod file_sink;
pub mod join;
pub mod sources;
pub mod timers;
pub mod window;
