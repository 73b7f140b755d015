//! The `lockgate` command: one subcommand per tool.
//!
//! - `loadgen`: runs a reference workload and reports throughput, latency,
//!   checkpoints and correctness;
//! - `report`: shows or compares saved `loadgen` runs;
//! - `scenario`: runs barrier scenario files through the barrier handlers;
//! - `flights`: the NYC flights job (event time, a join, windows);
//! - `kafka`: the reference workload over Kafka, across processes.
//!
//! To add a subcommand: a module `<name>_cmd.rs` with its clap `Args`
//! struct and a `run` function returning the exit code, one variant in
//! [`Command`], one arm in `main`.
//!
//! What the integration tests drive directly too is in the crate's library
//! (`lib.rs`, `lockgate_cli`): the reference topology over Kafka that
//! `kafka run` builds, and the tansu test broker.

mod flights_cmd;
mod incremental_args;
mod kafka_cmd;
mod loadgen;
mod report_cmd;
mod restore_args;
mod scenario_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// mimalloc as the global allocator: the runtime allocates a batch vector
/// per channel element, and mimalloc's thread-local free lists keep that
/// cheap across threads.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// lockgate: a streaming dataflow engine with Flink-style aligned
/// checkpoints, built for low latency.
#[derive(Parser, Debug)]
#[command(
    name = "lockgate",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("LOCKGATE_GIT_COMMIT"), ")"),
    propagate_version = true
)]
struct Cli {
    /// More log output on stderr (-v info: a line per recovery, -vv debug:
    /// a line per checkpoint and its subtasks' parts, -vvv trace); RUST_LOG
    /// overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Runs a reference workload (W1-W4) and reports throughput,
    /// latency, checkpoints and correctness.
    Loadgen(Box<loadgen::Args>),
    /// Shows or compares saved runs (`--json` files of `loadgen`).
    Report(report_cmd::Args),
    /// Runs barrier scenario files through lockgate's barrier handlers and
    /// compares with their expectations (see testdata/scenarios/README.md).
    Scenario(scenario_cmd::ScenarioArgs),
    /// Runs the NYC flights job: enriches flights with hourly weather,
    /// writes by_visibility.csv and daily.csv.
    Flights(flights_cmd::Args),
    /// The reference workload over Kafka: produce an input topic, run the
    /// job on a share of its partitions, verify the output topic.
    #[command(subcommand)]
    Kafka(kafka_cmd::KafkaCommand),
}

fn init_tracing(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // A span (a recovery, at info; a checkpoint, at debug) is a line when
    // it closes, with its fields and how long it lasted.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Restores the default action of `SIGPIPE` (end the process), which the
/// Rust runtime sets to ignore: output piped into a reader that stops
/// early (`lockgate report show r.json | head`) then ends the command
/// quietly, as other Unix tools do, instead of a panic in `println!`.
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: signal(2) with SIG_DFL for SIGPIPE installs no handler code
    // and passes no memory; it runs before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn default_sigpipe() {}

/// Run by every snapshot thread after each snapshot job
/// ([`lockgate::tuning::set_after_snapshot_hook`]): after a job that freed at
/// least [`COLLECT_AFTER_BYTES`] of encoding buffers (those the snapshot
/// thread does not keep for its next jobs: one over 8 MiB, or past the
/// 8 MiB its spares keep together) and of an
/// unaligned checkpoint's in-flight records, returns what its
/// mimalloc heap keeps free to the OS; mimalloc would hold those pages
/// until the thread allocates again, at the next checkpoint. A job whose
/// buffers were all kept frees nothing worth a collection, which purges
/// free pages and costs every thread page faults afterwards: collecting
/// after every job that encoded 1 MiB (as until 2026-12-03) gave a
/// 20 M-record W1 with exactly-once checkpoints 8,397 page faults, against
/// 471 now and 380 without checkpoints (docs/benchmarks-history.md).
/// Under W4 with unaligned checkpoints every 100 ms (megabytes of channel
/// state each time), peak RSS was 146-152 MiB without a collection and
/// 100-106 MiB with one after every job; with the buffers kept, see
/// docs/benchmarks-history.md. `mi_collect(false)` does not lower it; mimalloc's purge
/// delay at 0 for every thread instead gave 105 MiB but cost W1 about a
/// quarter of its throughput.
fn collect_snapshot_heap(freed_bytes: u64) {
    if freed_bytes < COLLECT_AFTER_BYTES {
        return;
    }
    // SAFETY: mi_collect takes no pointer; it frees the calling thread's
    // own heap's unused pages, which mimalloc allows at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// 1 MiB: below it the freed buffers are a few of mimalloc's 64 KiB
/// pages, which its heap reuses at the next checkpoint; a collection costs
/// syscalls and page faults afterwards for no gain.
const COLLECT_AFTER_BYTES: u64 = 1 << 20;

fn main() -> ExitCode {
    default_sigpipe();
    lockgate::tuning::set_after_snapshot_hook(collect_snapshot_heap);
    let cli = Cli::parse();
    match cli.command {
        Command::Loadgen(args) => {
            init_tracing(cli.verbose, args.quiet);
            ExitCode::from(loadgen::run(*args))
        }
        Command::Report(args) => {
            init_tracing(cli.verbose, false);
            ExitCode::from(report_cmd::run(args))
        }
        Command::Scenario(args) => {
            init_tracing(cli.verbose, false);
            ExitCode::from(scenario_cmd::run(&args))
        }
        Command::Flights(args) => {
            init_tracing(cli.verbose, false);
            flights_cmd::run(args)
        }
        Command::Kafka(command) => {
            init_tracing(cli.verbose, false);
            kafka_cmd::run(command)
        }
    }
}
