//! End-to-end runs of small jobs on real threads.

use lockgate::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Emits 0..n (subtask i of p emits the numbers with n % p == i), with its
/// position as state.
struct Counter {
    next: u64,
    end: u64,
    step: u64,
}

impl Source<u64> for Counter {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourcePoll, BoxError> {
        while out.len() < max && self.next < self.end {
            out.push(self.next);
            self.next += self.step;
        }
        Ok(if self.next >= self.end {
            SourcePoll::Finished
        } else {
            SourcePoll::Ready
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

/// Running sum per key (key = x % 10), emits (key, sum).
#[derive(Default)]
struct KeyedSum {
    sums: HashMap<u64, u64>,
}

impl Operator<u64, (u64, u64)> for KeyedSum {
    fn process(&mut self, input: &mut Vec<u64>, out: &mut Vec<(u64, u64)>) -> Result<(), BoxError> {
        for x in input.drain(..) {
            let s = self.sums.entry(x % 10).or_default();
            *s += x;
            out.push((x % 10, *s));
        }
        Ok(())
    }
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        let mut v: Vec<(u64, u64)> = self.sums.iter().map(|(k, s)| (*k, *s)).collect();
        v.sort();
        Ok(Some(
            v.iter()
                .flat_map(|(k, s)| k.to_le_bytes().into_iter().chain(s.to_le_bytes()))
                .collect(),
        ))
    }
    fn restore_state(&mut self, b: &[u8]) -> Result<(), BoxError> {
        self.sums = b
            .chunks_exact(16)
            .map(|c| {
                (
                    u64::from_le_bytes(c[..8].try_into().unwrap()),
                    u64::from_le_bytes(c[8..].try_into().unwrap()),
                )
            })
            .collect();
        Ok(())
    }
}

type Shared<T> = Arc<Mutex<T>>;

fn counting_job(config: JobConfig, n: u64) -> (JobBuilder, Shared<HashMap<u64, u64>>, Shared<u64>) {
    let job = JobBuilder::new("count", config);
    let last = Arc::new(Mutex::new(HashMap::new()));
    let count = Arc::new(Mutex::new(0u64));
    let (l2, c2) = (last.clone(), count.clone());
    job.source("numbers", 2, move |i| Counter {
        next: i as u64,
        end: n,
        step: 2,
    })
    .filter(|_| true)
    .key_by(|x| x % 10)
    .process("keyed_sum", 2, |_| KeyedSum::default())
    .rebalance()
    .union(
        // a second, empty input to exercise union
        job.source("empty", 1, |_| Counter {
            next: 0,
            end: 0,
            step: 1,
        })
        .map(|x| (x, x))
        .rebalance(),
    )
    .sink("sink", 1, move |_| CollectSink {
        last: l2.clone(),
        count: c2.clone(),
    });
    (job, last, count)
}

struct CollectSink {
    last: Arc<Mutex<HashMap<u64, u64>>>,
    count: Arc<Mutex<u64>>,
}

impl Sink<(u64, u64)> for CollectSink {
    fn write(&mut self, input: &mut Vec<(u64, u64)>) -> Result<(), BoxError> {
        let mut last = self.last.lock().unwrap();
        *self.count.lock().unwrap() += input.len() as u64;
        for (k, s) in input.drain(..) {
            let e = last.entry(k).or_default();
            *e = (*e).max(s);
        }
        Ok(())
    }
}

fn expected(n: u64) -> HashMap<u64, u64> {
    let mut m = HashMap::new();
    for x in 0..n {
        *m.entry(x % 10).or_default() += x;
    }
    m
}

#[test]
fn a_job_runs_to_the_end_with_the_right_result() {
    let n = 100_000;
    let (job, last, count) = counting_job(JobConfig::default(), n);
    let res = job.start().unwrap().wait().unwrap();
    assert_eq!(*count.lock().unwrap(), n);
    assert_eq!(*last.lock().unwrap(), expected(n));
    let sink = res.tasks.iter().find(|t| t.name == "sink[0]").unwrap();
    assert_eq!(sink.records_in, n);
}

#[test]
fn checkpointed_job_restarts_after_failures_with_exact_state() {
    let n = 200_000;
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(std::time::Duration::from_millis(5));
    config.restart = RestartStrategy {
        max_attempts: 5,
        delay: std::time::Duration::ZERO,
    };
    let (job, last, _count) = counting_job(config, n);
    let names = job.task_names();
    let ks = names.iter().position(|t| t == "keyed_sum[1]").unwrap();
    let job = job.with_failures(FailurePlan::none().with(ks, FailurePoint::AfterRecords(30_000)));
    let res = job.start().unwrap().wait().unwrap();
    assert_eq!(res.restarts, 1, "{:?}", res.failures);
    // keyed state restored from the checkpoint: the final sums are exact
    assert_eq!(*last.lock().unwrap(), expected(n));
}
