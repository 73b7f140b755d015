//! General-purpose sources.

use lockgate::Checkpointed;
use lockgate::{tuning::now_ns, BoxError, CheckpointId, Source, SourcePoll};

/// A replayable sequence of numbers: subtask `i` of `p` emits the `x <
/// end` with `x % p == i`, in increasing order, optionally paced. Its state
/// is the next number, so a restore rewinds it exactly.
///
/// # Examples
/// Two subtasks share the numbers below 10 in a job (with lockgate's
/// example helper):
/// ```
/// use lockgate::example;
/// use lockgate_operators::sources::Sequence;
///
/// let mut numbers = example::run_source(
///     2,
///     |info| Sequence::part(info.index, info.parallelism, 10),
///     |numbers| numbers,
/// );
/// numbers.sort_unstable();
/// assert_eq!(numbers, (0..10).collect::<Vec<u64>>());
/// ```
///
/// Its checkpointed state rewinds a fresh sequence to where the first one
/// was:
/// ```
/// use lockgate::{CheckpointId, Checkpointed, Source, SourcePoll};
/// use lockgate_operators::sources::Sequence;
///
/// let mut first = Sequence::part(1, 3, 12).per_poll(2); // 1, 4, 7, 10
/// let mut out = Vec::new();
/// assert_eq!(first.poll(&mut out, 100).unwrap(), SourcePoll::Ready);
/// assert_eq!(out, [1, 4]);
/// let position = first.snapshot_state(CheckpointId(1)).unwrap().unwrap();
///
/// let mut again = Sequence::part(1, 3, 12);
/// again.restore_state(&position).unwrap();
/// out.clear();
/// assert_eq!(again.poll(&mut out, 100).unwrap(), SourcePoll::Finished);
/// assert_eq!(out, [7, 10]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequence {
    next: u64,
    end: u64,
    step: u64,
    per_poll: usize,
    pause_ns: u64,
}

impl Sequence {
    /// Subtask `i` of `p`: the numbers below `end` congruent to `i` modulo
    /// `p`, as fast as the job takes them.
    ///
    /// # Panics
    /// When `p` is 0.
    pub fn part(i: usize, p: usize, end: u64) -> Self {
        assert!(p > 0, "parallelism is at least 1");
        Sequence {
            next: i as u64,
            end,
            step: p as u64,
            per_poll: usize::MAX,
            pause_ns: 0,
        }
    }

    /// Emits at most `per_poll` numbers a poll, then idles for `pause`
    /// (a paced source: `per_poll / pause` numbers per second).
    pub fn paced(mut self, per_poll: usize, pause: std::time::Duration) -> Self {
        self.per_poll = per_poll.max(1);
        self.pause_ns = pause.as_nanos() as u64;
        self
    }

    /// Emits at most `per_poll` numbers a poll (small batches).
    pub fn per_poll(mut self, per_poll: usize) -> Self {
        self.per_poll = per_poll.max(1);
        self
    }
}

impl Source<u64> for Sequence {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourcePoll, BoxError> {
        let max = max.min(self.per_poll);
        while out.len() < max && self.next < self.end {
            out.push(self.next);
            self.next += self.step;
        }
        Ok(if self.next >= self.end {
            SourcePoll::Finished
        } else if self.pause_ns > 0 {
            SourcePoll::Idle {
                wake_at_ns: Some(now_ns() + self.pause_ns),
            }
        } else {
            SourcePoll::Ready
        })
    }
}

impl Checkpointed for Sequence {
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(self.next.to_le_bytes().to_vec()))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let bytes: [u8; 8] = state
            .try_into()
            .map_err(|_| format!("a sequence position is 8 bytes, got {}", state.len()))?;
        self.next = u64::from_le_bytes(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &mut Sequence) -> Vec<u64> {
        let mut all = Vec::new();
        loop {
            let mut out = Vec::new();
            let done = s.poll(&mut out, 3).unwrap() == SourcePoll::Finished;
            all.extend(out);
            if done {
                return all;
            }
        }
    }

    #[test]
    fn parts_cover_the_range_once_and_restore_rewinds() {
        let mut a = Sequence::part(0, 2, 10);
        let mut b = Sequence::part(1, 2, 10);
        assert_eq!(drain(&mut a), vec![0, 2, 4, 6, 8]);
        let mut first = Vec::new();
        b.poll(&mut first, 2).unwrap();
        let pos = b.snapshot_state(CheckpointId(1)).unwrap().unwrap();
        let rest = drain(&mut b);
        let mut c = Sequence::part(1, 2, 10);
        c.restore_state(&pos).unwrap();
        assert_eq!(drain(&mut c), rest);
        assert_eq!([first, rest].concat(), vec![1, 3, 5, 7, 9]);
        assert!(c.restore_state(&[1, 2]).is_err());
    }
}
