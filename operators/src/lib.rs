//! lockgate-operators: reusable sources, operators and sinks for lockgate.
//!
//! # Contents
//!
//! Sources (start a job with [`lockgate::JobBuilder::source`]):
//!
//! - [`sources`]: [`Sequence`](sources::Sequence), a replayable sequence
//!   of numbers split over subtasks.
//! - [`csv_source`]: [`CsvSource`](csv_source::CsvSource), a replayable
//!   CSV file source (plain or gzip) with bounded-out-of-orderness
//!   watermarks, on [`CsvFile`](csv_source::CsvFile) and
//!   [`CsvFileReader`](csv_source::CsvFileReader); it reports through a
//!   [`CsvSourceProbe`](csv_source::CsvSourceProbe).
//! - [`csv`]: the resumable reader under it,
//!   [`CsvRecordReader`](csv::CsvRecordReader), of records that implement
//!   [`CsvRecord`](csv::CsvRecord) from named [`Fields`](csv::Fields),
//!   and [`read_all`](csv::read_all).
//!
//! Operators (attach with [`lockgate::Stream::process`] after a `key_by`):
//!
//! - [`window`]: [`WindowOperator`](window::WindowOperator), keyed
//!   event-time windows ([`WindowAssigner`](window::WindowAssigner):
//!   tumbling, sliding, global) over an incremental
//!   [`AggregateFunction`](window::AggregateFunction) ([`Count`](window::Count),
//!   [`Sum`](window::Sum), [`Mean`](window::Mean) or your own
//!   [`AggregateFn`](window::AggregateFn)), emitting
//!   [`WindowOutput`](window::WindowOutput)s.
//! - [`co_process`]: a keyed two-input operator,
//!   [`KeyedCoProcessOperator`](co_process::KeyedCoProcessOperator), running a
//!   [`KeyedCoProcessFunction`](co_process::KeyedCoProcessFunction) with
//!   keyed state and timers.
//! - [`join`]: [`EnrichJoin`](join::EnrichJoin), an event-time enrichment
//!   join of facts with dimension rows, on the co-process operator.
//! - [`timers`]: [`TimerService`](timers::TimerService), the keyed
//!   event- and processing-time timers those operators keep in their state.
//!
//! Sinks (end a stream with [`lockgate::Stream::sink`]):
//!
//! - [`file_sink`]: exactly-once part files through two-phase commit,
//!   [`TransactionalFileSink`](file_sink::TransactionalFileSink), read back with
//!   [`committed_parts`](file_sink::committed_parts) and
//!   [`read_committed`](file_sink::read_committed).
//!
//! # Examples
//!
//! Every public type and function but the error type has an example;
//! those that need a running job use lockgate's shared helper,
//! [`lockgate::example::run`]: it feeds a list of records to a job, lets
//! the example attach operators to the stream, runs the job to its end
//! and returns what the stream carried ([`lockgate::example::run_source`]
//! does the same from a source). A count per key in tumbling windows of
//! 10 ms:
//!
//! ```
//! use lockgate::example;
//! use lockgate_operators::window::{Count, WindowAssigner, WindowOperator};
//!
//! // (key, event time in ms)
//! let records = vec![(1u64, 3i64), (1, 7), (2, 5), (1, 12)];
//! let mut counts = example::run(records, |records| {
//!     records
//!         .key_by(|r| r.0)
//!         .task("count", 1)
//!         .process("count", |_| {
//!             let tumbling = WindowAssigner::tumbling(10).unwrap();
//!             WindowOperator::new(tumbling, Count, |r: &(u64, i64)| r.0, |r: &(u64, i64)| r.1)
//!         })
//!         .flat_map(|out| out.fired().map(|w| (w.key, w.window.start, w.value)))
//! });
//! counts.sort_unstable();
//! assert_eq!(counts, [(1, 0, 2), (1, 10, 1), (2, 0, 1)]);
//! ```
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
