//! Who owns which partition, and the source's per-partition watermarks.
//!
//! Partitions are the source's splits (as the reference workload's 128
//! splits, `docs/workloads.md`): there is no consumer-group rebalancing
//! inside the engine. With `processes` processes, process `index` owns the
//! partitions `p` with `p % processes == index` ([`process_owns`]); its
//! source subtasks share them in turn: the `i`-th owned partition
//! (`i = p / processes`) goes to subtask `i % parallelism`
//! ([`subtask_owns`]). A restore at another source parallelism inside one
//! process hands each partition, with its offset, to its new owner.

use std::collections::BTreeMap;

/// The partition of `key` in a topic of `partitions` partitions:
/// `key_hash(key) % partitions` (the engine's routing hash,
/// [`lockgate::keys::key_hash`]), so that all of a key's records live in one
/// partition.
///
/// # Panics
/// When `partitions` is 0.
///
/// # Examples
/// ```
/// let p = lockgate_kafka::partition_of_key(42, 4);
/// assert!(p < 4);
/// assert_eq!(p, lockgate_kafka::partition_of_key(42, 4));
/// ```
pub fn partition_of_key(key: u64, partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    (lockgate::keys::key_hash(key) % u64::from(partitions)) as u32
}

/// True when process `index` of `processes` owns `partition`
/// (`partition % processes == index`).
///
/// # Examples
/// ```
/// assert!(lockgate_kafka::process_owns(5, 2, 1));
/// assert!(!lockgate_kafka::process_owns(4, 2, 1));
/// ```
pub fn process_owns(partition: u32, processes: u32, index: u32) -> bool {
    processes > 0 && partition % processes == index
}

/// The partitions of a topic of `partitions` that process `index` of
/// `processes` owns, in increasing order.
///
/// # Examples
/// ```
/// assert_eq!(lockgate_kafka::owned_partitions(5, 2, 0), [0, 2, 4]);
/// ```
pub fn owned_partitions(partitions: u32, processes: u32, index: u32) -> Vec<u32> {
    (0..partitions)
        .filter(|&p| process_owns(p, processes, index))
        .collect()
}

/// True when source subtask `subtask` of `parallelism` in its process (of
/// `processes`) reads `partition`: the partition's place among its
/// process's partitions (`partition / processes`) modulo the parallelism.
///
/// # Examples
/// ```
/// // Process 0 of 2 owns 0, 2, 4, 6; its two subtasks take 0, 4 and 2, 6.
/// assert!(lockgate_kafka::subtask_owns(4, 2, 2, 0));
/// assert!(lockgate_kafka::subtask_owns(6, 2, 2, 1));
/// ```
pub fn subtask_owns(partition: u32, processes: u32, parallelism: usize, subtask: usize) -> bool {
    processes > 0 && parallelism > 0 && (partition / processes) as usize % parallelism == subtask
}

/// The event-time watermark of a source over its partitions, as Flink's
/// Kafka source keeps one per split: each partition's watermark is the
/// largest record timestamp read from it minus the allowed
/// out-of-orderness (ns); the source's watermark is the smallest over its
/// partitions that are not idle, so an idle partition (at its end, or with
/// nothing new for a while) does not hold the watermark back. A partition
/// that is not idle and has no record yet holds it at "none".
///
/// # Examples
/// ```
/// use lockgate_kafka::PartitionWatermarks;
/// let mut w = PartitionWatermarks::new(&[0, 1], 10);
/// w.observe(0, 100);
/// assert_eq!(w.watermark(), None); // partition 1 has nothing yet
/// w.set_idle(1, true);
/// assert_eq!(w.watermark(), Some(90));
/// w.observe(1, 50); // a record makes it active again
/// assert_eq!(w.watermark(), Some(40));
/// ```
#[derive(Clone, Debug)]
pub struct PartitionWatermarks {
    out_of_orderness_ns: u64,
    /// Per partition: the largest timestamp seen, and whether it is idle.
    parts: BTreeMap<u32, (Option<u64>, bool)>,
}

impl PartitionWatermarks {
    /// Tracks `partitions`, none idle and none with a record yet.
    pub fn new(partitions: &[u32], out_of_orderness_ns: u64) -> Self {
        PartitionWatermarks {
            out_of_orderness_ns,
            parts: partitions.iter().map(|&p| (p, (None, false))).collect(),
        }
    }

    /// A record of `partition` with timestamp `ts_ns`: the partition is
    /// active again. Unknown partitions are ignored.
    pub fn observe(&mut self, partition: u32, ts_ns: u64) {
        if let Some((max, idle)) = self.parts.get_mut(&partition) {
            *max = Some(max.map_or(ts_ns, |m| m.max(ts_ns)));
            *idle = false;
        }
    }

    /// Marks `partition` idle (or active).
    pub fn set_idle(&mut self, partition: u32, idle: bool) {
        if let Some((_, i)) = self.parts.get_mut(&partition) {
            *i = idle;
        }
    }

    /// True when every partition is idle (so is the source, then: Flink's
    /// `withIdleness`); true for none.
    pub fn all_idle(&self) -> bool {
        self.parts.values().all(|&(_, idle)| idle)
    }

    /// The source's watermark, ns: the minimum over active partitions of
    /// their largest timestamp minus the out-of-orderness (saturating at
    /// 0); `None` while an active partition has no record, or when all
    /// are idle.
    pub fn watermark(&self) -> Option<u64> {
        let mut min: Option<u64> = None;
        for &(max, idle) in self.parts.values() {
            if idle {
                continue;
            }
            let w = max?.saturating_sub(self.out_of_orderness_ns);
            min = Some(min.map_or(w, |m| m.min(w)));
        }
        min
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every partition has exactly one owning process and, inside it,
        /// exactly one owning subtask.
        #[test]
        fn every_partition_has_one_owner(partitions in 1u32..200, processes in 1u32..9, parallelism in 1usize..9) {
            for p in 0..partitions {
                let procs: Vec<u32> = (0..processes).filter(|&i| process_owns(p, processes, i)).collect();
                prop_assert_eq!(procs.len(), 1);
                let subs = (0..parallelism).filter(|&s| subtask_owns(p, processes, parallelism, s)).count();
                prop_assert_eq!(subs, 1);
            }
            let all: usize = (0..processes).map(|i| owned_partitions(partitions, processes, i).len()).sum();
            prop_assert_eq!(all, partitions as usize);
        }
    }

    #[test]
    fn the_watermark_ignores_idle_partitions_and_never_goes_negative() {
        let mut w = PartitionWatermarks::new(&[3, 7], 1_000);
        w.observe(3, 10);
        w.observe(7, 5_000);
        assert_eq!(w.watermark(), Some(0));
        w.set_idle(3, true);
        assert_eq!(w.watermark(), Some(4_000));
        w.set_idle(7, true);
        assert!(w.all_idle());
        assert_eq!(w.watermark(), None);
        w.observe(9, 1); // not tracked
        assert!(w.all_idle());
    }
}
