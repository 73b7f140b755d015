//! The `lockgate` command.

use clap::{Parser, Subcommand};

mod flights_cmd;

/// lockgate: a streaming dataflow engine with Flink's checkpoint semantics.
#[derive(Parser, Debug)]
#[command(name = "lockgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs the NYC flights job: enrich flights with hourly weather, write
    /// by_visibility.csv and daily.csv.
    Flights(flights_cmd::Args),
}

fn main() -> std::process::ExitCode {
    match Cli::parse().command {
        Command::Flights(args) => flights_cmd::run(args),
    }
}
