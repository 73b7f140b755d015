//! Encoding buffers a snapshot thread keeps from one checkpoint to the
//! next (a leaf module: it depends on nothing of the crate).
//!
//! Every asynchronous snapshot encodes into a `Vec<u8>`. A fresh buffer
//! of megabytes costs a page fault and a page of zeroing per 4 KiB at
//! every checkpoint, which showed in `perf` profiles of W1 with
//! exactly-once checkpoints (docs/benchmarks-history.md has the figures).
//! So once a part is written to storage, the
//! snapshot thread gives its operators' buffers back here, and the next
//! encodings take them again. Without storage the encodings go to the job
//! (it keeps the parts in memory) and nothing is kept.

use std::cell::RefCell;

/// The largest buffer a snapshot thread keeps for its next job, bytes,
/// and the most its spare encodings keep together: 8 MiB, above an
/// unaligned checkpoint's part under W4 (about 3 MB: two full channels of
/// records) and the W1 sink's full part at 40 M records (5 MB), well below
/// a large keyed state's full part (14 MB at 1 M keys), which would
/// otherwise stay resident per task between checkpoints. The thread's
/// part buffer (the task's whole part, encoded from the operators') is
/// kept apart under the same limit, so a snapshot thread keeps at most
/// 16 MiB.
pub(crate) const KEEP_BUFFER_BYTES: usize = 8 << 20;

/// Spare buffers kept per thread at most: one per operator of a task's
/// chain that encodes megabytes is the common case (a chain has one or
/// two stateful operators), and together they stay under
/// [`KEEP_BUFFER_BYTES`].
const SPARE_BUFFERS: usize = 4;

thread_local! {
    /// This thread's spare encoding buffers, empty, given back by
    /// [`recycle`].
    static SPARES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer of at least `capacity` bytes for an asynchronous
/// snapshot's encoding. On a snapshot thread that kept buffers of earlier
/// parts (it does when the job writes to checkpoint storage), it is the
/// smallest of them that holds `capacity`; otherwise, or when none holds
/// it, a new one (the kept ones stay for later calls). Give the exact size
/// when it is known (as `postcard::experimental::serialized_size` tells):
/// a buffer that must grow while encoding copies itself each time.
///
/// Costs a scan of at most 4 kept buffers; allocates only when none holds
/// `capacity`.
///
/// # Examples
/// ```
/// use lockgate::{CheckpointId, state::EncodedState, state::SnapshotRequest, state::StateSnapshot};
///
/// let sums: Vec<u64> = vec![1, 2, 3];
/// let snap = StateSnapshot::deferred(move || {
///     let size = postcard::experimental::serialized_size(&sums)?;
///     Ok(postcard::to_extend(&sums, lockgate::tuning::snapshot_buffer(size))?)
/// });
/// let req = SnapshotRequest::full(CheckpointId(1));
/// let state: EncodedState = snap.run(&req).unwrap();
/// assert_eq!(postcard::from_bytes::<Vec<u64>>(&state.bytes).unwrap(), [1, 2, 3]);
/// ```
pub fn snapshot_buffer(capacity: usize) -> Vec<u8> {
    let kept = SPARES.with_borrow_mut(|spares| {
        let fits = spares
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= capacity)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        fits.map(|i| spares.swap_remove(i))
    });
    match kept {
        Some(mut b) => {
            b.clear();
            b
        }
        // Not a kept one grown: growing reallocates and copies the old
        // contents (the allocator does not know they are dead).
        None => Vec::with_capacity(capacity),
    }
}

/// Gives `bytes`, an encoding that was written, back to this thread for
/// a later [`snapshot_buffer`]. Dropped instead when larger than
/// [`KEEP_BUFFER_BYTES`], or when the kept ones would pass
/// [`KEEP_BUFFER_BYTES`] together (then the smaller buffers go first).
/// Returns the bytes of capacity freed (dropped, not kept).
pub(crate) fn recycle(bytes: Vec<u8>) -> u64 {
    let cap = bytes.capacity();
    if cap == 0 {
        return 0;
    }
    if cap > KEEP_BUFFER_BYTES {
        return cap as u64;
    }
    SPARES.with_borrow_mut(|spares| {
        spares.push(bytes);
        // Largest first: what must go is the smallest.
        spares.sort_unstable_by_key(|b| std::cmp::Reverse(b.capacity()));
        let mut total = 0usize;
        let keep = spares
            .iter()
            .take(SPARE_BUFFERS)
            .take_while(|b| {
                total += b.capacity();
                total <= KEEP_BUFFER_BYTES
            })
            .count();
        spares.drain(keep..).map(|b| b.capacity() as u64).sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> Vec<usize> {
        SPARES.with_borrow(|s| s.iter().map(|b| b.capacity()).collect())
    }

    #[test]
    fn a_recycled_buffer_is_handed_out_again_empty() {
        let mut b = Vec::with_capacity(1 << 20);
        b.extend_from_slice(&[7u8; 1000]);
        let ptr = b.as_ptr();
        recycle(b);
        let again = snapshot_buffer(4096);
        assert_eq!(again.as_ptr(), ptr, "the kept buffer, not a new one");
        assert!(again.is_empty());
        assert!(again.capacity() >= 1 << 20);
        assert!(kept().is_empty());
    }

    #[test]
    fn the_smallest_buffer_that_fits_is_taken_else_a_new_one() {
        recycle(Vec::with_capacity(1000));
        recycle(Vec::with_capacity(100_000));
        recycle(Vec::with_capacity(10_000));
        let b = snapshot_buffer(5_000);
        assert_eq!(b.capacity(), 10_000, "the smallest that fits");
        let big = snapshot_buffer(200_000);
        assert!(big.capacity() >= 200_000);
        let mut left = kept();
        left.sort_unstable();
        assert_eq!(left, [1000, 100_000], "none fitted: the kept ones stay");
        SPARES.with_borrow_mut(|s| s.clear());
    }

    #[test]
    fn kept_buffers_stay_within_the_count_and_byte_limits() {
        for _ in 0..10 {
            recycle(Vec::with_capacity(100));
        }
        assert_eq!(kept().len(), SPARE_BUFFERS);
        let freed = recycle(Vec::with_capacity(KEEP_BUFFER_BYTES + 1));
        assert_eq!(freed, KEEP_BUFFER_BYTES as u64 + 1);
        assert_eq!(kept().len(), SPARE_BUFFERS, "too large: dropped");
        assert_eq!(recycle(Vec::with_capacity(100)), 100, "a fifth: one goes");
        let freed = recycle(Vec::with_capacity(KEEP_BUFFER_BYTES - 150));
        assert_eq!(kept()[0], KEEP_BUFFER_BYTES - 150, "the largest first");
        assert_eq!(freed, 300, "three of 100 bytes make room: {:?}", kept());
        assert!(
            kept().iter().sum::<usize>() <= KEEP_BUFFER_BYTES,
            "{:?}",
            kept()
        );
        assert_eq!(recycle(Vec::new()), 0);
        assert!(kept().iter().all(|&c| c > 0));
        SPARES.with_borrow_mut(|s| s.clear());
    }

    #[test]
    fn a_thread_without_spares_gets_a_new_buffer() {
        let b = std::thread::spawn(|| snapshot_buffer(64)).join().unwrap();
        assert!(b.is_empty() && b.capacity() >= 64);
    }
}
