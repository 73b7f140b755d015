//! `--restore DIR` without guessing: the run's flags come from the
//! checkpoint it restores.
//!
//! A run with a checkpoint folder records its flags in every checkpoint's
//! metadata (the application config's `run` object: every flag of the
//! JSON `config` but those in [`MAY_DIFFER`]). On `--restore`, a flag not
//! given takes the recorded value; a flag given with another value is
//! refused, each difference named as `flag: recorded → given`. A folder
//! written by a build that recorded no flags restores with the flags as
//! given (the engine still refuses another workload configuration).

use super::Args;
use clap::{CommandFactory, Parser};
use lockgate::{storage::CheckpointStorage, storage::LocalDirStorage};
use serde_json::{Map, Value};
use std::ffi::OsString;
use std::path::Path;

/// Flags that may differ between a run and its restore (the parallelism,
/// outputs, the failure plan, the folders themselves); the rest must
/// match.
pub(crate) const MAY_DIFFER: &[&str] = &[
    // A rescale (issue 14): the engine redistributes keyed state by key
    // group and the sources' splits; not given, it is the checkpoint's.
    "parallelism",
    // Threading is not state: a checkpoint restores on any number of
    // workers or with a thread per task, pinned or not, with any wait
    // strategy.
    "workers",
    "pin",
    "wait_strategy",
    "inject_failures",
    "seed",
    "restore",
    "restore_mode",
    "checkpoint_dir",
    "json",
    "hgrm",
    "hlog",
    "svg",
    "timeline",
    "html",
    "progress",
    "quiet",
    // Outputs too (not in the JSON `config`, so never recorded).
    "metrics_addr",
    "metrics_linger",
];

/// Flags added after checkpoints began recording flags, with their
/// defaults: recorded only when they differ from it, so that a folder
/// written before a flag existed (which the run took with the default)
/// restores, as `bin/tests/old_checkpoints.rs` checks.
const RECORDED_UNLESS_DEFAULT: &[(&str, &str)] =
    &[("output", "processing"), ("checkpoint_storage", "disk")];

/// The flags in the JSON `config` that a checkpoint records: all but
/// [`MAY_DIFFER`], and those of [`RECORDED_UNLESS_DEFAULT`] at their
/// default.
pub(crate) fn recorded_flags(config_json: &Value) -> Value {
    let mut m = config_json.as_object().cloned().unwrap_or_default();
    m.retain(|k, v| {
        !MAY_DIFFER.contains(&k.as_str())
            && !RECORDED_UNLESS_DEFAULT
                .iter()
                .any(|(flag, default)| k == flag && v.as_str() == Some(*default))
    });
    Value::Object(m)
}

/// `loadgen`'s flags alone, to parse its part of the command line again.
#[derive(Parser, Debug)]
#[command(name = "loadgen", allow_negative_numbers = true)]
struct LoadgenLine {
    #[command(flatten)]
    args: Args,
    /// The global -v (it may follow the subcommand).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// The flags `dir`'s newest readable checkpoint recorded (`None`: none
/// recorded them, or no checkpoint's metadata reads: the engine reports
/// that when it restores).
fn recorded_in(dir: &Path) -> Option<Map<String, Value>> {
    recorded_config(dir, |c| c.get("run")?.as_object().cloned())
}

/// What `pick` takes from the application config of the newest checkpoint
/// in `dir` whose metadata reads and has it (`None`: no such checkpoint,
/// or no folder; opening would create a missing one, so it is not).
pub(crate) fn recorded_config<T>(dir: &Path, pick: impl Fn(&Value) -> Option<T>) -> Option<T> {
    if !dir.is_dir() {
        return None;
    }
    let storage = LocalDirStorage::open(dir).ok()?;
    let ids = storage.list().ok()?;
    ids.iter()
        .rev()
        .find_map(|id| pick(&storage.load_metadata(*id).ok()?.job.config))
}

/// The parallelism of task `task` in `dir`'s newest checkpoint whose
/// metadata reads and has it (`None`: none does).
pub(crate) fn recorded_parallelism(dir: &Path, task: &str) -> Option<usize> {
    if !dir.is_dir() {
        return None;
    }
    let storage = LocalDirStorage::open(dir).ok()?;
    let ids = storage.list().ok()?;
    ids.iter().rev().find_map(|id| {
        let meta = storage.load_metadata(*id).ok()?;
        meta.job.parallelism.get(task).map(|p| *p as usize)
    })
}

/// `incremental: {incremental, full_every, max_chain_ratio}` as three
/// flags, as the command line has them.
fn flat(m: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in m {
        match (k.as_str(), v) {
            ("incremental", Value::Object(inner)) => {
                out.extend(inner.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "(not set)".into(),
        other => other.to_string(),
    }
}

/// The arguments after the `loadgen` subcommand in `argv` (past the
/// program's own name, which may be `loadgen` too).
fn loadgen_tail(argv: &[OsString]) -> Option<Vec<OsString>> {
    let at = argv.iter().skip(1).position(|a| a == "loadgen")? + 1;
    Some(argv[at + 1..].to_vec())
}

/// Whether the user's `raw` value of a flag is `recorded`: the same number,
/// or the same word (case aside: enums parse either way).
fn same_value(raw: &str, recorded: &Value) -> bool {
    let recorded = shown(recorded);
    match (raw.parse::<f64>(), recorded.parse::<f64>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => raw.eq_ignore_ascii_case(&recorded),
    }
}

/// The first line of a clap error, without its `error: ` prefix.
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// With `--restore`, `args` completed from the flags its checkpoint
/// recorded; without, `args` as they are. `argv` is the process's command
/// line.
///
/// # Errors
/// A flag given with another value than the checkpoint's, naming every
/// such difference (the caller exits with code 2).
pub(crate) fn resolve(args: Args, argv: &[OsString]) -> Result<Args, String> {
    let Some(dir) = args.restore.clone() else {
        return Ok(args);
    };
    let Some(recorded) = recorded_in(&dir) else {
        return Ok(args);
    };
    let Some(tail) = loadgen_tail(argv) else {
        return Ok(args);
    };
    let mut line = vec![OsString::from("loadgen")];
    line.extend(tail);
    let matches = LoadgenLine::command()
        .try_get_matches_from(&line)
        .map_err(|e| clap_message(&e))?;
    let given =
        |flag: &str| matches.value_source(flag) == Some(clap::parser::ValueSource::CommandLine);
    let recorded = flat(&recorded);
    let refuse = |differences: Vec<String>| {
        format!(
            "--restore {}: the checkpoint was taken with other flags ({}); give them as recorded, or leave them out to take the recorded values",
            dir.display(),
            differences.join(", ")
        )
    };
    // The flags given as typed against the recorded values first, so that a
    // difference is named as such rather than as what it breaks.
    let typed: Vec<String> = recorded
        .iter()
        .filter(|(flag, _)| !MAY_DIFFER.contains(&flag.as_str()) && given(flag))
        .filter_map(|(flag, value)| {
            let raw: Vec<String> = matches
                .get_raw(flag)?
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let raw = raw.join(",");
            (!same_value(&raw, value)).then(|| format!("{flag}: {} → {raw}", shown(value)))
        })
        .collect();
    if !typed.is_empty() {
        return Err(refuse(typed));
    }
    // Builds up to 2020620 recorded a tick for W1 and W4 too, which do
    // not pace their sources (and refuse `--tick-us` now): not applied.
    let unpaced = matches!(
        recorded.get("workload").and_then(Value::as_str),
        Some("w1" | "w4")
    );
    // Every recorded flag not given takes the recorded value.
    for (flag, value) in &recorded {
        if flag == "tick_us" && unpaced {
            continue;
        }
        if !MAY_DIFFER.contains(&flag.as_str()) && !given(flag) && !value.is_null() {
            line.push(format!("--{}", flag.replace('_', "-")).into());
            line.push(shown(value).into());
        }
    }
    // The parallelism, not recorded with the flags (it may differ), is
    // the checkpoint's unless given; W4 is not rescaled.
    let stored_p = recorded_parallelism(&dir, "source");
    if !given("parallelism") {
        if let Some(p) = stored_p {
            line.push("--parallelism".into());
            line.push(p.to_string().into());
        }
    }
    let completed = LoadgenLine::try_parse_from(&line)
        .map(|l| l.args)
        .map_err(|e| {
            format!(
                "--restore {}: the flags recorded in its checkpoint are not valid (a damaged or edited _metadata?): {}",
                dir.display(),
                clap_message(&e)
            )
        })?;
    // The merged flags must make a run. (That they make the recorded one
    // the engine checks itself: the checkpoint's `run` config must equal
    // this run's, and it names any difference.)
    if let Some(p) = stored_p.filter(|p| *p != completed.parallelism) {
        if matches!(completed.workload, super::args::WorkloadArg::W4) {
            return Err(format!(
                "--restore {}: W4 cannot be restored at another parallelism (the checkpoint's is {p}, --parallelism {}): its run is timed per source",
                dir.display(),
                completed.parallelism
            ));
        }
    }
    completed.plan().map_err(|e| {
        format!(
            "--restore {}: the flags recorded in its checkpoint, with yours, do not make a run: {e}",
            dir.display()
        )
    })?;
    Ok(completed)
}

/// Says on stderr (even with `--quiet`) which newer checkpoints a restore
/// went past because they did not load, why, and where each was kept.
pub(crate) fn warn_skipped(skipped: &[lockgate::storage::SkippedCheckpoint]) {
    for s in skipped {
        eprintln!(
            "warning: chk-{} does not load, restored an older checkpoint ({}){}",
            s.id,
            s.reason,
            s.kept_at
                .as_ref()
                .map(|at| format!("; kept as {at}"))
                .unwrap_or_default()
        );
    }
}
