//! The `lockgate` command: one subcommand per tool (`lockgate scenario`
//! runs barrier scenario files; `loadgen`, `report` and `flights` are to
//! come). To add a subcommand: a module `<name>_cmd.rs` with its clap `Args`
//! struct and a `run` function returning the exit code, one variant in
//! [`Command`], one arm in `main`.

mod scenario_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// mimalloc: faster than the system allocator for the engine's many small
/// batch allocations.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// lockgate: a streaming dataflow engine with Flink-style aligned
/// checkpoints, built for low latency.
#[derive(Debug, Parser)]
#[command(name = "lockgate", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run barrier scenario files through lockgate's barrier handlers and
    /// compare with their expectations (see testdata/scenarios/README.md).
    Scenario(scenario_cmd::ScenarioArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Scenario(args) => scenario_cmd::run(&args),
    };
    ExitCode::from(code)
}
