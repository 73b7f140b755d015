//! A small exactly-once job for crash tests: numbers → running sums →
//! transactional file sink, with checkpoints in a folder.
//!
//! `lockgate-txn-demo --out DIR --checkpoint-dir DIR --records N [--restore]`
//!
//! Source `i` of 2 emits the numbers `x < N` with `x % 2 == i`, 64 every
//! millisecond; `keyed_sum` keeps the running sum per key `x % 2` and emits
//! `x,sum` lines, committed per checkpoint (every 20 ms). Killed at any
//! moment and restarted with `--restore`, the committed output is the same
//! as that of a run that was never killed.

use lockgate::two_phase::TwoPhaseCommitSink;
use lockgate::*;
use lockgate_operators::file_sink::{Formatter, TransactionalFileSink};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

struct Paced {
    next: u64,
    end: u64,
}

impl Source<u64> for Paced {
    fn poll(&mut self, out: &mut Vec<u64>, _max: usize) -> Result<SourcePoll, BoxError> {
        for _ in 0..64 {
            if self.next >= self.end {
                return Ok(SourcePoll::Finished);
            }
            out.push(self.next);
            self.next += 2;
        }
        Ok(SourcePoll::Idle {
            wake_at_ns: Some(clock::now_ns() + 1_000_000),
        })
    }
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(self.next.to_le_bytes().to_vec()))
    }
    fn restore_state(&mut self, s: &[u8]) -> Result<(), BoxError> {
        self.next = u64::from_le_bytes(s.try_into()?);
        Ok(())
    }
}

#[derive(Default)]
struct RunningSum(HashMap<u64, u64>);

impl Operator<u64, (u64, u64)> for RunningSum {
    fn process(&mut self, input: &mut Vec<u64>, out: &mut Vec<(u64, u64)>) -> Result<(), BoxError> {
        for x in input.drain(..) {
            let s = self.0.entry(x % 2).or_default();
            *s += x;
            out.push((x, *s));
        }
        Ok(())
    }
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(serde_json::to_vec(
            &self.0.iter().collect::<Vec<_>>(),
        )?))
    }
    fn restore_state(&mut self, s: &[u8]) -> Result<(), BoxError> {
        let v: Vec<(u64, u64)> = serde_json::from_slice(s)?;
        self.0 = v.into_iter().collect();
        Ok(())
    }
}

fn main() -> ExitCode {
    let mut out = None;
    let mut chk = None;
    let mut records = 100_000u64;
    let mut restore = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = args.next().map(PathBuf::from),
            "--checkpoint-dir" => chk = args.next().map(PathBuf::from),
            "--records" => match args.next().and_then(|v| v.parse().ok()) {
                Some(n) => records = n,
                None => {
                    eprintln!("error: --records needs a number");
                    return ExitCode::from(2);
                }
            },
            "--restore" => restore = true,
            other => {
                eprintln!("error: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let (Some(out), Some(chk)) = (out, chk) else {
        eprintln!(
            "usage: lockgate-txn-demo --out DIR --checkpoint-dir DIR [--records N] [--restore]"
        );
        return ExitCode::from(2);
    };
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(20));
    config.checkpoint.dir = Some(chk);
    config.checkpoint.restore = restore;
    let job = JobBuilder::new("txn-demo", config)
        .with_app_config(serde_json::json!({ "records": records }));
    job.source("numbers", 2, move |i| Paced {
        next: i as u64,
        end: records,
    })
    .key_by(|x| x % 2)
    .process("keyed_sum", 2, |_| RunningSum::default())
    .rebalance()
    .sink("files", 1, move |i| {
        let fmt: Formatter<(u64, u64)> =
            Box::new(|r, b| b.extend_from_slice(format!("{},{}\n", r.0, r.1).as_bytes()));
        TwoPhaseCommitSink::new(
            TransactionalFileSink::new(out.clone(), i, fmt).expect("output folder"),
        )
    });
    match job.start().and_then(|h| h.wait()) {
        Ok(m) => {
            println!("done: {} checkpoints completed", m.completed_checkpoints());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
