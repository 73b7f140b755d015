//! lockgate-examples: whole jobs built on lockgate and its operators.
//!
//! - [`flights`]: the NYC flights records (`data/nycflights13/`), their
//!   CSV parsing, the bundled-data locator, the outputs, and an
//!   engine-independent [`reference`](flights::reference) computation.
//! - [`flights_job`]: the `lockgate flights` job on the engine (event-time
//!   windows, an enrichment join, transactional file sinks).
//! - [`trades`]: a trade aggregator fed by the application (event time on
//!   pushed records, 1-second windows, exactly-once output): README's
//!   Embedding walkthrough.
//! - [`tcp_feed`]: a TCP feed replayable from a sequence number, read
//!   through the replayable-source contract.
//! - [`demo`]: a small exactly-once job for crash tests (the
//!   `lockgate-txn-demo` binary runs it).

pub mod demo;
pub mod flights;
pub mod flights_job;
pub mod tcp_feed;
pub mod trades;
