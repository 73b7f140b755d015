//! With a thread per task, a task's checkpoint work (the asynchronous
//! phase) runs on its snapshot thread, also where the tasks leave no core
//! to spare: the task thread goes back to its records at once instead of
//! holding them until the work is done. Its own test binary: it sizes the
//! job to the machine's cores.

mod common;

use common::*;
use lockgate::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn a_task_thread_is_not_held_by_its_checkpoint_work_when_no_core_is_spare() {
    // Sources, probes and sinks, a task each and as many of each as cores:
    // three task threads a core.
    let cores = std::thread::available_parallelism().unwrap().get();
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(10));
    config.checkpoint.dir = Some(dir.path().to_path_buf());
    let job = JobBuilder::new("snapshot-threads", config);
    let probes: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let p2 = probes.clone();
    job.source("numbers", cores, |i| {
        Counter::paced(i.index, i.parallelism, u64::MAX, 16, 20_000)
    })
    .rebalance()
    .task("probe", cores)
    .process("probe", move |_| SnapshotProbe {
        seen: Arc::default(),
        probes: p2.clone(),
    })
    .rebalance()
    .task("sink", cores)
    .for_each(|_| ());
    let h = job.start().unwrap();
    assert!(wait_for(60, || probes.lock().unwrap().len() >= 3));
    h.stop();
    h.wait().unwrap();
    for (thread, grew) in probes.lock().unwrap().iter() {
        assert!(thread.starts_with("lg-snap-"), "ran on {thread}");
        assert!(
            grew,
            "records passed the probe while its checkpoint work waited"
        );
    }
}
