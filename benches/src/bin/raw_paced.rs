//! One W2 or W3 run (`docs/workloads.md`) of the raw crossbeam pipeline,
//! paced as loadgen's sources are ([`lockgate_benches::raw::run_paced`]);
//! prints one JSON line with the latency from the intended send times.
//!
//! `raw_paced [--workload w2|w3] [--rate R] [--duration SECS] [--warmup SECS]
//!     [--keys K] [--batch-size N] [--channel-capacity N] [--tick-us US]`
//!
//! `perf-scripts/latency-compare.sh` runs it beside lockgate and timely.

use lockgate_benches::raw::{run_paced, PacedConfig};
use lockgate_workloads::workload::{Workload, DEFAULT_RATE, MEASURE_NS, WARMUP_NS};
use std::process::ExitCode;
use std::time::Duration;

// The same allocator as the `lockgate` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: raw_paced [--workload w2|w3] [--rate R] [--duration SECS] [--warmup SECS] [--keys K] [--batch-size N] [--channel-capacity N] [--tick-us US]";

fn parse() -> Result<PacedConfig, String> {
    let mut cfg = PacedConfig::new(
        Workload::W2,
        DEFAULT_RATE,
        Duration::from_nanos(MEASURE_NS),
        Duration::from_nanos(WARMUP_NS),
    );
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
        }
        let v = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let int = |v: &str| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{flag}: '{v}' is not a whole number"))
        };
        let secs = |v: &str| -> Result<Duration, String> {
            v.parse::<f64>()
                .ok()
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| format!("{flag}: '{v}' is not a number of seconds"))
        };
        match flag.as_str() {
            "--workload" => cfg.workload = v.parse().map_err(|e| format!("--workload: {e}"))?,
            "--rate" => cfg.rate = int(&v)?,
            "--duration" => cfg.duration = secs(&v)?,
            "--warmup" => cfg.warmup = secs(&v)?,
            "--keys" => cfg.keys = int(&v)?,
            "--batch-size" => cfg.batch = int(&v)? as usize,
            "--channel-capacity" => cfg.capacity = int(&v)? as usize,
            "--tick-us" => cfg.tick = Duration::from_micros(int(&v)?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(cfg)
}

fn main() -> ExitCode {
    let cfg = match parse() {
        Ok(c) => c,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let r = match run_paced(&cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let l = r.latency;
    println!(
        "{{\"system\":\"raw\",\"workload\":\"{}\",\"rate\":{},\"duration_s\":{},\"warmup_s\":{},\"total_records\":{},\"delivered\":{},\"records\":{},\"seconds\":{:.4},\"latency_ns\":{{\"count\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"p999\":{},\"p9999\":{},\"max\":{}}},\"ok\":{}}}",
        cfg.workload,
        cfg.rate,
        cfg.duration.as_secs_f64(),
        cfg.warmup.as_secs_f64(),
        r.total_records,
        r.delivered,
        l.count,
        r.seconds,
        l.count,
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.p9999,
        l.max,
        r.exact
    );
    if r.exact {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: the result does not match the closed form");
        ExitCode::from(1)
    }
}
