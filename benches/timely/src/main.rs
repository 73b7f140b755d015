//! W2 and W3 of `docs/workloads.md` on timely-dataflow, for comparison with
//! lockgate's `loadgen` and the raw crossbeam pipeline.
//!
//! One timely worker per source (2 by default, as the reference topology's
//! parallelism): worker `i` is `source[i]` (it drives a [`Generator`] for
//! source `i` of `workers` and applies the chained map), hosts
//! `keyed_sum[i]` (records are exchanged by key group, as lockgate routes:
//! timely's `Exchange` with lockgate's `key_to_subtask(key, workers)` as
//! the hash, which timely's `hash & (peers - 1)` or `hash % peers` leaves
//! as it is, being below `peers`), and worker 0 hosts
//! the single sink (every `SumRecord` is exchanged to worker 0).
//!
//! Pacing is lockgate's reference source's (`lockgate_workloads::refjob`):
//! record `n` is due at `t0 + scheduled_offset_ns(n, rate, burst)` (burst for
//! the odd-numbered sources in W3: the records with odd `n` at an even
//! worker count, as lockgate's rule), carries that intended time in `ts_ns`,
//! and a worker emits everything due, advances its input's epoch, then
//! steps timely or parks until the next record is due (`--tick-us T` sets a
//! floor of T µs on that wait, as loadgen's source tick, 10 µs by default; default 0:
//! no floor, as timely's authors would write a paced input). `t0` is shared by all
//! workers (the first poll of any). The sink reads the clock once per batch
//! and records `now - ts_ns` for every record whose unburst schedule offset
//! is at or after the warm-up.
//!
//! Timely's timestamps: the input's epoch is the time since `t0` in units
//! of `--epoch-us` (default 1 µs, so every round that sends records closes
//! an epoch); `keyed_sum` and the sink are data-driven (they never wait on
//! a frontier), so the timestamps only drive timely's progress tracking.
//! Why the epoch must be short: timely 0.32's `InputHandle::flush` hands
//! records to the exchange's pushers but only `advance_to` (closing the
//! epoch) calls their `done()`, which sends partial buffers and activates
//! the consumers; with millisecond epochs (this port until 2026-12-01) a
//! record waited half a millisecond on average for its epoch to close
//! (W2 p50 ~565 µs against ~25 µs with 1 µs epochs on the same machine).
//!
//! Prints one JSON line (`system`, `workload`, `records`, `latency_ns`
//! {count, p50, p90, p99, p999, p9999, max}, `ok`, ...) like loadgen's
//! `--json`, and exits 1 when the correctness check fails.

use lockgate_workloads::latency::{LatencyRecorder, Percentiles};
use lockgate_workloads::refjob::RefJobConfig;
use lockgate_workloads::workload::{
    due_until, key_to_subtask, scheduled_offset_ns, Event, ExpectedResult, Generator, KeySpace,
    KeyedSum, SinkCheck, SumRecord, Workload,
};
use std::cell::RefCell;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::Input;
use timely::dataflow::InputHandleVec;

const USAGE: &str = "usage: lockgate-timely [--workload w2|w3] [--rate R] [--duration SECS] [--warmup SECS] [--keys K] [--workers N] [--tick-us US] [--epoch-us US]";

/// The command line.
#[derive(Clone, Debug)]
struct Args {
    workload: Workload,
    rate: u64,
    duration: Duration,
    warmup: Duration,
    keys: u64,
    workers: usize,
    /// A floor on each wait for the next due record (zero: none).
    tick: Duration,
    /// The input epoch's unit, in ns.
    epoch_ns: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        workload: Workload::W2,
        rate: lockgate_workloads::workload::DEFAULT_RATE,
        duration: Duration::from_nanos(lockgate_workloads::workload::MEASURE_NS),
        warmup: Duration::from_nanos(lockgate_workloads::workload::WARMUP_NS),
        keys: lockgate_workloads::workload::DEFAULT_KEYS,
        workers: 2,
        tick: Duration::ZERO,
        epoch_ns: 1_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
        }
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let secs = |v: String| -> Result<Duration, String> {
            let s: f64 = v
                .parse()
                .map_err(|_| format!("{flag}: '{v}' is not a number of seconds"))?;
            Duration::try_from_secs_f64(s)
                .map_err(|_| format!("{flag}: {v} is not a valid duration"))
        };
        let int = |v: String| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{flag}: '{v}' is not a whole number"))
        };
        // An unknown flag is named as such before any value is taken.
        match flag.as_str() {
            "--workload" => {
                a.workload = value()?.parse().map_err(|e| format!("--workload: {e}"))?;
                if !a.workload.is_paced() {
                    return Err("--workload: only w2 and w3 (open loop) run on timely".into());
                }
            }
            "--rate" => a.rate = int(value()?)?,
            "--duration" => a.duration = secs(value()?)?,
            "--warmup" => a.warmup = secs(value()?)?,
            "--keys" => a.keys = int(value()?)?,
            "--workers" => a.workers = int(value()?)? as usize,
            "--tick-us" => a.tick = Duration::from_micros(int(value()?)?),
            "--epoch-us" => a.epoch_ns = int(value()?)?.saturating_mul(1_000),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    for (zero, flag) in [
        (a.rate == 0, "--rate"),
        (a.duration.is_zero(), "--duration"),
        (a.workers == 0, "--workers"),
        (a.epoch_ns == 0, "--epoch-us"),
    ] {
        if zero {
            return Err(format!("{flag} must be positive"));
        }
    }
    Ok(a)
}

/// What the sink of worker 0 hands back.
struct SinkResult {
    check: SinkCheck,
    latency: LatencyRecorder,
    first_recorded_ns: u64,
    last_delivery_ns: u64,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    // The reference job's own arithmetic for the totals, so that every
    // system runs the same records.
    let reference = RefJobConfig::paced(args.workload, args.rate, args.duration, args.warmup);
    let total = reference.total_records();
    let first_recorded = reference.first_recorded_n();
    let space = match KeySpace::uniform(args.keys) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: --keys: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = SinkCheck::new(total, args.keys) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // One monotonic clock for every worker: ns since `epoch`.
    let epoch = Instant::now();
    let now_ns = move || epoch.elapsed().as_nanos() as u64;
    let t0_cell: Arc<OnceLock<u64>> = Arc::new(OnceLock::new());
    let a = args.clone();
    let sp = space.clone();
    let config = timely::Config::process(args.workers);
    let guards = timely::execute(config, move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let burst = a.workload.source_bursts(index);
        let mut gen = Generator::new(&sp, index, peers, total).expect("valid source index");
        let result: Rc<RefCell<Option<SinkResult>>> = Rc::new(RefCell::new(None));
        if index == 0 {
            *result.borrow_mut() = Some(SinkResult {
                check: SinkCheck::new(total, a.keys).expect("checked in main"),
                latency: LatencyRecorder::new(),
                first_recorded_ns: 0,
                last_delivery_ns: 0,
            });
        }
        let mut input: InputHandleVec<u64, Event> = InputHandleVec::new();
        let sink_state = result.clone();
        worker.dataflow::<u64, _, _>(|scope| {
            scope
                .input_from(&mut input)
                .unary::<timely::container::CapacityContainerBuilder<Vec<SumRecord>>, _, _, _>(
                    // The subtask itself as the hash: below `peers`, timely's
                    // `% peers` (or mask) keeps it, so routing is lockgate's.
                    Exchange::new(move |e: &Event| key_to_subtask(e.key, peers) as u64),
                    "keyed_sum",
                    |_cap, _info| {
                        let mut state = KeyedSum::new();
                        move |input, output| {
                            input.for_each(|cap, data| {
                                let mut session = output.session(&cap);
                                for ev in data.drain(..) {
                                    session.give(state.apply(&ev));
                                }
                            });
                        }
                    },
                )
                .sink(
                    Exchange::new(|_: &SumRecord| 0),
                    "sink",
                    move |(input, _frontier)| {
                        let mut guard = sink_state.borrow_mut();
                        let mut now = 0;
                        input.for_each(|_cap, data| {
                            // Every record is exchanged to worker 0, the
                            // only one with sink state; the others' sink
                            // operators are scheduled but never get data.
                            let s = guard.as_mut().expect("records reach worker 0 only");
                            if now == 0 {
                                now = now_ns();
                            }
                            for r in data.drain(..) {
                                s.check.observe(&r);
                                if r.n >= first_recorded {
                                    s.latency.record(now, r.ts_ns);
                                    if s.first_recorded_ns == 0 {
                                        s.first_recorded_ns = now;
                                    }
                                }
                            }
                            s.last_delivery_ns = now;
                        });
                    },
                );
        });
        let t0 = *t0_cell.get_or_init(now_ns);
        let rate = a.rate;
        while let Some(mut next) = gen.next_n() {
            let now = now_ns();
            let offset = now.saturating_sub(t0);
            let due = due_until(offset, rate, burst);
            while next < due {
                let Some((n, key)) = gen.next() else { break };
                let ts = t0 + scheduled_offset_ns(n, rate, burst);
                input.send(Event::generated(n, key, ts).mapped());
                match gen.next_n() {
                    Some(m) => next = m,
                    None => break,
                }
            }
            let epoch = offset / a.epoch_ns;
            if epoch > *input.time() {
                input.advance_to(epoch);
            } else {
                input.flush();
            }
            if gen.next_n().is_none() {
                break;
            }
            let next_due = t0 + scheduled_offset_ns(next, rate, burst);
            let wait = next_due
                .saturating_sub(now_ns())
                .max(a.tick.as_nanos() as u64);
            worker.step_or_park(Some(Duration::from_nanos(wait)));
        }
        drop(input);
        while worker.step_or_park(None) {}
        let r = result.borrow_mut().take();
        r
    });
    let guards = match guards {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: timely could not start: {e}");
            return ExitCode::from(1);
        }
    };
    let mut sink = None;
    for r in guards.join() {
        match r {
            Ok(Some(s)) => sink = Some(s),
            Ok(None) => {}
            Err(e) => {
                eprintln!("error: a worker failed: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let Some(sink) = sink else {
        eprintln!("error: worker 0 returned no sink result");
        return ExitCode::from(1);
    };
    let expected = ExpectedResult::compute(total, &space);
    let report = sink.check.verify(&expected);
    let ok = report.is_exact();
    let p = Percentiles::from_histogram(sink.latency.histogram());
    let seconds = sink.last_delivery_ns.saturating_sub(sink.first_recorded_ns) as f64 / 1e9;
    let line = serde_json::json!({
        "system": "timely",
        "timely_version": "0.32",
        "epoch_us": args.epoch_ns / 1_000,
        "tick_us": args.tick.as_micros() as u64,
        "workload": args.workload.name(),
        "workers": args.workers,
        "rate": args.rate,
        "duration_s": args.duration.as_secs_f64(),
        "warmup_s": args.warmup.as_secs_f64(),
        "total_records": total,
        "delivered": sink.check.received(),
        "records": sink.latency.count(),
        "seconds": seconds,
        "records_per_s": if seconds > 0.0 { sink.latency.count() as f64 / seconds } else { 0.0 },
        "latency_ns": {
            "count": p.count, "p50": p.p50, "p90": p.p90, "p99": p.p99,
            "p999": p.p999, "p9999": p.p9999, "max": p.max,
        },
        "check": report.to_string(),
        "ok": ok,
    });
    println!("{line}");
    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: the result does not match the closed form: {report}");
        ExitCode::from(1)
    }
}
