//! Regenerates the golden outputs of the `lockgate flights` job,
//! `testdata/flights/by_visibility.csv` and `testdata/flights/daily.csv`,
//! with the engine-independent reference computation over the bundled
//! nycflights13 data.
//!
//! Usage: `cargo run -p lockgate-operators --example flights_reference [-- OUT_DIR]`
//! (default OUT_DIR: `testdata/flights` of this repository).

use std::path::PathBuf;
use std::process::ExitCode;

use lockgate_examples::flights::{
    find_bundled, read_all, reference, write_outputs, BadRows, BundledFile, Flight, Weather,
};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            // Input errors exit 2, as the `lockgate flights` job does.
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), lockgate_examples::flights::FlightsError> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/flights"));
    let (flights, _) = read_all::<Flight>(find_bundled(BundledFile::Flights)?, BadRows::Fail)?;
    let (weather, _) = read_all::<Weather>(find_bundled(BundledFile::Weather)?, BadRows::Fail)?;
    let (by_visibility, daily) = reference::compute(&flights, &weather);
    write_outputs(&out, &by_visibility, &daily)?;
    println!(
        "{} flights, {} weather rows -> {} by_visibility rows, {} daily rows in {}",
        flights.len(),
        weather.len(),
        by_visibility.len(),
        daily.len(),
        out.display()
    );
    Ok(())
}
