//! The CPU an idle job uses (issue 12: under 1 % of a core): a running job
//! whose source has no input, measured from the kernel's per-thread CPU
//! time (`CLOCK_PROCESS_CPUTIME_ID`), with a per-thread breakdown from
//! `/proc/self/task/*/stat` (utime + stime, sampled per clock tick, so
//! coarse).
//!
//! The job: an ingest source the application never pushes to → map →
//! `key_by` → `keyed` (2 subtasks) → an output channel, with the default
//! wait strategy; optionally exactly-once checkpoints every 100 ms (each
//! one wakes every task). After a settling second, the CPU used by every
//! thread of the process over `--seconds` (default 10) is reported as a
//! percentage of one core, in total and per thread name.
//!
//! Usage: `idle [--seconds N] [--checkpoint] [--workers N]` (Linux only;
//! `--workers N`: the tasks on N cooperative worker threads).

use lockgate::{CheckpointMode, JobBuilder, JobConfig};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The CPU time of the whole process, ns (`CLOCK_PROCESS_CPUTIME_ID`: the
/// scheduler's exact run time of every thread, not tick sampling).
fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU ticks (utime + stime) per thread name, summed over threads of one
/// name, from `/proc/self/task/*/stat`.
fn thread_ticks() -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ...`: comm may hold spaces; fields after the
        // closing parenthesis are space separated, utime and stime being
        // the 14th and 15th fields of the whole line.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // fields[0] is field 3 (state): utime is field 14, stime 15.
        *out.entry(name).or_default() += ticks(11) + ticks(12);
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seconds = 10u64;
    let mut checkpoint = false;
    let mut workers = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                seconds = match it.next().and_then(|s| s.parse().ok()) {
                    Some(s) if s > 0 => s,
                    _ => {
                        eprintln!("error: --seconds needs a whole number above 0");
                        std::process::exit(2);
                    }
                }
            }
            "--checkpoint" => checkpoint = true,
            "--workers" => {
                workers = match it.next().and_then(|s| s.parse().ok()) {
                    Some(n) if n > 0 => Some(n),
                    _ => {
                        eprintln!("error: --workers needs a whole number above 0");
                        std::process::exit(2);
                    }
                }
            }
            other => {
                eprintln!(
                    "error: unknown argument '{other}' (usage: idle [--seconds N] [--checkpoint] [--workers N])"
                );
                std::process::exit(2);
            }
        }
    }
    let mut config = JobConfig::default();
    config.workers = workers;
    if checkpoint {
        config.checkpoint.mode = CheckpointMode::ExactlyOnce;
        config.checkpoint.interval = Some(Duration::from_millis(100));
    }
    let job = JobBuilder::new("idle", config);
    let (input, ingest) = job.ingest::<u64>("input", 1024);
    let output = input
        .map(|x| x + 1)
        .key_by(|x| *x)
        .task("keyed", 2)
        .map(|x| x * 2)
        .collect();
    let handle = job.start().expect("a valid job");
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: sysconf only reads a configuration value; no memory is passed.
    let hz = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        t if t > 0 => t as f64,
        _ => 100.0,
    };
    let before = thread_ticks();
    let cpu0 = process_cpu_ns();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let after = thread_ticks();
    let total = process_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    let wall = t0.elapsed().as_secs_f64();
    let mut rows = Vec::new();
    for (name, ticks) in &after {
        let used = ticks.saturating_sub(before.get(name).copied().unwrap_or(0)) as f64 / hz;
        rows.push((name.clone(), used));
    }
    println!(
        "idle job ({}), {wall:.1} s: {:.3} % of one core ({:.4} s of CPU; per thread, sampled at {:.0} Hz:)",
        if checkpoint {
            "exactly-once checkpoints every 100 ms"
        } else {
            "no checkpoints"
        },
        100.0 * total / wall,
        total,
        hz
    );
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, used) in rows.iter().filter(|r| r.1 > 0.0) {
        println!("  {name:<16} {:.2} %", 100.0 * used / wall);
    }
    drop(ingest);
    handle.stop();
    let _ = handle.wait();
    drop(output);
}
