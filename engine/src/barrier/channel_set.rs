//! [`ChannelSet`]: a compact bitset of channel indices, the blocked set of
//! the aligner and the seen set of a pending checkpoint in the tracker.

/// Channel counts up to this many keep their bits inline (two `u64` words,
/// 16 bytes), with no heap allocation: an input gate rarely has more than 128
/// channels (a keyed exchange of parallelism 128 into one task).
pub const INLINE_CHANNELS: usize = 128;

/// A set of channel indices `0..capacity`, one bit per channel.
///
/// Up to [`INLINE_CHANNELS`] channels the bits live inline; more channels use
/// one heap-allocated word array, allocated once at construction. Every
/// operation is O(1) except [`ChannelSet::clear`] and [`ChannelSet::len`],
/// which are O(capacity / 64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelSet {
    words: Words,
    capacity: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Words {
    Inline([u64; 2]),
    Heap(Box<[u64]>),
}

impl ChannelSet {
    /// An empty set for channels `0..capacity`.
    pub fn new(capacity: usize) -> Self {
        let words = if capacity <= INLINE_CHANNELS {
            Words::Inline([0; 2])
        } else {
            Words::Heap(vec![0; capacity.div_ceil(64)].into_boxed_slice())
        };
        ChannelSet { words, capacity }
    }

    /// How many channels the set can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    #[inline]
    fn words(&self) -> &[u64] {
        match &self.words {
            Words::Inline(w) => w,
            Words::Heap(w) => w,
        }
    }

    #[inline]
    fn words_mut(&mut self) -> &mut [u64] {
        match &mut self.words {
            Words::Inline(w) => w,
            Words::Heap(w) => w,
        }
    }

    /// True when `channel` is in the set.
    ///
    /// # Panics
    /// When `channel >= capacity`.
    #[inline]
    pub fn contains(&self, channel: usize) -> bool {
        assert!(channel < self.capacity, "channel {channel} out of range");
        let word = match &self.words {
            // channel < capacity <= 128, so channel / 64 is 0 or 1: the mask
            // states it, and the index needs no bounds check.
            Words::Inline(w) => w[(channel / 64) & 1],
            Words::Heap(w) => w[channel / 64],
        };
        word & (1 << (channel % 64)) != 0
    }

    /// Adds `channel`; returns true when it was not in the set before.
    ///
    /// # Panics
    /// When `channel >= capacity`.
    #[inline]
    pub fn insert(&mut self, channel: usize) -> bool {
        assert!(channel < self.capacity, "channel {channel} out of range");
        let word = &mut self.words_mut()[channel / 64];
        let bit = 1 << (channel % 64);
        let fresh = *word & bit == 0;
        *word |= bit;
        fresh
    }

    /// Removes `channel`; returns true when it was in the set.
    ///
    /// # Panics
    /// When `channel >= capacity`.
    #[inline]
    pub fn remove(&mut self, channel: usize) -> bool {
        assert!(channel < self.capacity, "channel {channel} out of range");
        let word = &mut self.words_mut()[channel / 64];
        let bit = 1 << (channel % 64);
        let present = *word & bit != 0;
        *word &= !bit;
        present
    }

    /// Empties the set.
    #[inline]
    pub fn clear(&mut self) {
        self.words_mut().iter_mut().for_each(|w| *w = 0);
    }

    /// The number of channels in the set.
    pub fn len(&self) -> usize {
        self.words().iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when no channel is in the set.
    pub fn is_empty(&self) -> bool {
        self.words().iter().all(|w| *w == 0)
    }

    /// The channels in the set, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words()
            .iter()
            .enumerate()
            .flat_map(|(i, &w)| {
                let mut w = w;
                std::iter::from_fn(move || {
                    if w == 0 {
                        return None;
                    }
                    let bit = w.trailing_zeros() as usize;
                    w &= w - 1;
                    Some(i * 64 + bit)
                })
            })
            .take_while(move |&c| c < self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_sets_agree() {
        for cap in [1, 2, 63, 64, 65, 128, 129, 130, 1000] {
            let mut s = ChannelSet::new(cap);
            assert!(s.is_empty());
            let picks: Vec<usize> = (0..cap).filter(|c| c % 3 == 0 || *c == cap - 1).collect();
            for &c in &picks {
                assert!(s.insert(c));
                assert!(!s.insert(c));
            }
            assert_eq!(s.len(), picks.len());
            assert_eq!(s.iter().collect::<Vec<_>>(), picks);
            assert!(s.contains(cap - 1));
            assert!(s.remove(cap - 1));
            assert!(!s.remove(cap - 1));
            assert!(!s.contains(cap - 1));
            s.clear();
            assert!(s.is_empty());
            assert_eq!(s.len(), 0);
        }
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn out_of_range_channel_panics() {
        ChannelSet::new(4).insert(4);
    }
}
