//! `lockgate scenario [FILE...]` and `lockgate scenario --emit FILE`: run
//! barrier scenario files (format and contract in
//! `testdata/scenarios/README.md`, lockgate's watermark extension in
//! `testdata/scenarios/EXTENSIONS.md`) through lockgate's handlers.

use clap::Args;
use lockgate_scenario::{Scenario, ScenarioError};
use std::io::{self, Write};
use std::path::PathBuf;

/// Exit code when every scenario passed.
pub(crate) const EXIT_PASSED: u8 = 0;
/// Exit code when a scenario failed (and every file could be read).
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit code when a file could not be read or parsed (or output could not
/// be written).
pub(crate) const EXIT_UNREADABLE: u8 = 2;

/// Arguments of `lockgate scenario`.
#[derive(Debug, Args)]
pub(crate) struct ScenarioArgs {
    /// Scenario files to run. Without any, runs the copies of the project's
    /// scenario files bundled in the binary.
    #[arg(value_name = "FILE", conflicts_with = "emit")]
    pub files: Vec<PathBuf>,

    /// Print what the handler actually does with FILE's input, as one JSON
    /// object {"output": [...], "notifications": [...]} in the shapes of the
    /// file's expect_output and expect_notifications (watermark and idle
    /// items appear in the output only when the input has some).
    #[arg(long, value_name = "FILE")]
    pub emit: Option<PathBuf>,
}

/// Expands to `(file name, contents)` of a bundled scenario file.
macro_rules! bundled {
    ($name:literal) => {
        (
            concat!($name, ".json"),
            include_str!(concat!("../../testdata/scenarios/", $name, ".json")),
        )
    };
}

/// The project's scenario files (`testdata/scenarios/`: the 18 translated
/// from Flink's tests and lockgate's own `lg_*` files), embedded at build
/// time so that `lockgate scenario` works from any directory, sorted by
/// name. A test checks that this list names every file of the directory.
pub(crate) const BUNDLED: &[(&str, &str)] = &[
    bundled!("ac120_abort_on_canceled_barriers"),
    bundled!("ac120_multi_channel_no_barriers"),
    bundled!("ac120_multi_channel_with_barriers"),
    bundled!("ac120_single_channel_abort_checkpoint"),
    bundled!("bb18_end_of_stream_while_checkpoint"),
    bundled!("bb18_ignore_cancel_barrier_if_checkpoint_subsumed"),
    bundled!("bb18_multi_channel_abort_checkpoint"),
    bundled!("bb18_multi_channel_with_barriers"),
    bundled!("bb18_single_channel_with_barriers"),
    bundled!("bb18_start_alignment_with_closed_channels"),
    bundled!("bbl_break_checkpoint_at_alignment_limit"),
    bundled!("bt18_complete_checkpoints_on_late_barriers"),
    bundled!("cbt120_abort_checkpoints_after_end_of_partition_received"),
    bundled!("cbt120_interleaved_cancellation_barriers"),
    bundled!("cbt120_multi_channel_skipping_checkpoints"),
    bundled!("cbt120_multi_channel_with_barriers"),
    bundled!("cbt120_single_channel_with_barriers"),
    bundled!("cbt120_trigger_checkpoints_with_end_of_partition"),
    bundled!("lg_aligned_timeout_end_of_partition_switches"),
    bundled!("lg_aligned_timeout_late_barrier_that_aligns"),
    bundled!("lg_aligned_timeout_switches_to_unaligned"),
    bundled!("lg_alignment_limit_counts_queued_releases_only"),
    bundled!("lg_at_least_once_watermarks_pass_at_once"),
    bundled!("lg_unaligned_cancel_and_end_of_partition"),
    bundled!("lg_unaligned_late_priority_is_ignored"),
    bundled!("lg_unaligned_priority_barrier_overtakes"),
    bundled!("lg_watermark_held_while_blocked"),
    bundled!("lg_watermark_on_unblocked_channel_passes"),
];

/// Runs the subcommand; returns the exit code: 0 all passed, 1 a scenario
/// failed, 2 a file could not be read or parsed.
pub(crate) fn run(args: &ScenarioArgs) -> u8 {
    let stdout = io::stdout();
    let stderr = io::stderr();
    let result = match &args.emit {
        Some(file) => emit(file, &mut stdout.lock(), &mut stderr.lock()),
        None => run_files(&args.files, &mut stdout.lock(), &mut stderr.lock()),
    };
    result.unwrap_or_else(|e| {
        // A closed pipe (e.g. `| head`) is no error of the scenarios.
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("lockgate scenario: cannot write output: {e}");
        }
        EXIT_UNREADABLE
    })
}

/// Runs each file (or every bundled scenario when `files` is empty),
/// printing `PASS <name>` or `FAIL <name>: <first difference>` per scenario
/// to `out`, the file name and reason of each unusable file to `err`, then
/// `N passed, M failed` to `out`.
fn run_files(files: &[PathBuf], out: &mut impl Write, err: &mut impl Write) -> io::Result<u8> {
    let loaded: Vec<Result<Scenario, ScenarioError>> = if files.is_empty() {
        BUNDLED
            .iter()
            .map(|(name, text)| Scenario::from_json(&format!("{name} (bundled)"), text))
            .collect()
    } else {
        files.iter().map(Scenario::from_file).collect()
    };
    let (mut passed, mut failed, mut unreadable) = (0usize, 0usize, 0usize);
    for scenario in loaded {
        match scenario {
            Ok(s) => match s.check().difference {
                None => {
                    passed += 1;
                    writeln!(out, "PASS {}", s.name)?;
                }
                Some(difference) => {
                    failed += 1;
                    writeln!(out, "FAIL {}: {difference}", s.name)?;
                }
            },
            Err(e) => {
                unreadable += 1;
                writeln!(err, "{e}")?;
            }
        }
    }
    if unreadable > 0 {
        // On stderr with the files' errors: stdout keeps one line per
        // scenario and the summary, for other tools.
        eprintln!(
            "{unreadable} file{} could not be read or parsed (see above)",
            if unreadable == 1 { "" } else { "s" }
        );
    }
    writeln!(out, "{passed} passed, {failed} failed")?;
    Ok(if unreadable > 0 {
        EXIT_UNREADABLE
    } else if failed > 0 {
        EXIT_FAILED
    } else {
        EXIT_PASSED
    })
}

/// Prints the actual result of `file` as JSON to `out`.
fn emit(file: &PathBuf, out: &mut impl Write, err: &mut impl Write) -> io::Result<u8> {
    match Scenario::from_file(file) {
        Ok(s) => {
            writeln!(out, "{}", s.run().to_json())?;
            Ok(EXIT_PASSED)
        }
        Err(e) => {
            writeln!(err, "{e}")?;
            Ok(EXIT_UNREADABLE)
        }
    }
}
