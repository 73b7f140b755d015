//! [`ChannelSet`]: a compact bitset of channel indices, the blocked set of
//! the aligner and the seen set of a pending checkpoint in the tracker.

/// Channel counts up to this many keep all their bits inline (one `u64`
/// word), with no heap allocation. A set of more channels allocates the
/// words of channels `64..` once, at construction (8 bytes per 64
/// channels), and a test of one of those channels costs a bounds check
/// more (issue 12's handler figures, docs/benchmarks-history.md: 130 channels 1.19×
/// the tracker, 2 and 8 channels 1.13×). 64 is one machine word: the
/// common gates (parallelism up to 64) pay one compare and one bit test.
pub const INLINE_CHANNELS: usize = 64;

/// A set of channel indices `0..capacity`, one bit per channel.
///
/// Channels `0..64` live in one word of their own (`low`), so that
/// [`ChannelSet::contains`] for them, the question the aligner asks of
/// every record batch while an alignment runs, is a range check, one
/// compare and one bit test, with no match on the representation
/// ([`INLINE_CHANNELS`]). The channels from 64 up keep their bits in one
/// heap-allocated word array, allocated once at construction. Every
/// operation is O(1) except [`ChannelSet::clear`],
/// [`ChannelSet::len`], [`ChannelSet::is_empty`] and
/// [`ChannelSet::iter`], which are O(capacity / 64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelSet {
    /// Channels `0..64`: bit `c` is channel `c`.
    low: u64,
    /// Channels `64..capacity`: bit `c % 64` of word `c / 64 - 1`.
    high: Box<[u64]>,
    capacity: usize,
}

impl ChannelSet {
    /// An empty set for channels `0..capacity`.
    pub fn new(capacity: usize) -> Self {
        let high = vec![0; capacity.div_ceil(64).saturating_sub(1)].into_boxed_slice();
        ChannelSet {
            low: 0,
            high,
            capacity,
        }
    }

    /// How many channels the set can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The word that holds `channel` (already checked: `< capacity`).
    #[inline]
    fn word_mut(&mut self, channel: usize) -> &mut u64 {
        if channel < 64 {
            return &mut self.low;
        }
        &mut self.high[channel / 64 - 1]
    }

    /// Every word, `low` first (channel `c` is bit `c % 64` of word `c / 64`).
    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.low).chain(self.high.iter().copied())
    }

    /// True when `channel` is in the set.
    ///
    /// # Panics
    /// When `channel >= capacity`.
    #[inline]
    pub fn contains(&self, channel: usize) -> bool {
        assert!(channel < self.capacity, "channel {channel} out of range");
        if channel < 64 {
            return self.low & (1 << channel) != 0;
        }
        self.high[channel / 64 - 1] & (1 << (channel % 64)) != 0
    }

    /// True when `channel` is in the set; false for every channel outside
    /// `0..capacity` (never in the set), with no panic. This is
    /// [`ChannelSet::contains`] without its range check, for a caller on
    /// the hot path whose channel index its input gate has already
    /// checked (the aligner's question for every record batch while an
    /// alignment runs, issue 12): for channels `0..64` one compare and
    /// one bit test.
    ///
    /// ```
    /// use lockgate::barrier::ChannelSet;
    /// let mut blocked = ChannelSet::new(70);
    /// blocked.insert(3);
    /// blocked.insert(69);
    /// assert!(blocked.is_member(3) && blocked.is_member(69));
    /// assert!(!blocked.is_member(4));
    /// assert!(!blocked.is_member(70), "outside the range: not a member");
    /// ```
    #[inline(always)]
    pub fn is_member(&self, channel: usize) -> bool {
        if channel < 64 {
            return self.low & (1 << channel) != 0;
        }
        self.high
            .get(channel / 64 - 1)
            .is_some_and(|w| w & (1 << (channel % 64)) != 0)
    }

    /// Adds `channel`; returns true when it was not in the set before.
    ///
    /// # Panics
    /// When `channel >= capacity`.
    #[inline]
    pub fn insert(&mut self, channel: usize) -> bool {
        assert!(channel < self.capacity, "channel {channel} out of range");
        let word = self.word_mut(channel);
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
        let word = self.word_mut(channel);
        let bit = 1 << (channel % 64);
        let present = *word & bit != 0;
        *word &= !bit;
        present
    }

    /// Empties the set.
    #[inline]
    pub fn clear(&mut self) {
        self.low = 0;
        self.high.iter_mut().for_each(|w| *w = 0);
    }

    /// The number of channels in the set.
    pub fn len(&self) -> usize {
        self.words().map(|w| w.count_ones() as usize).sum()
    }

    /// True when no channel is in the set.
    pub fn is_empty(&self) -> bool {
        self.words().all(|w| w == 0)
    }

    /// The channels in the set, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words()
            .enumerate()
            .flat_map(|(i, w)| {
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
    fn sets_with_and_without_heap_words_agree() {
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
            for c in 0..cap {
                assert_eq!(
                    s.contains(c),
                    picks.contains(&c),
                    "capacity {cap}, channel {c}"
                );
                assert_eq!(
                    s.is_member(c),
                    picks.contains(&c),
                    "capacity {cap}, channel {c}"
                );
            }
            for c in cap..cap + 130 {
                assert!(!s.is_member(c), "capacity {cap}, channel {c} is outside");
            }
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

    #[test]
    #[should_panic(expected = "out of range")]
    fn an_out_of_range_question_panics_below_64_too() {
        ChannelSet::new(4).contains(5);
    }

    #[test]
    fn sets_of_one_capacity_compare_by_members() {
        for cap in [3, 64, 100, 200] {
            let (mut a, mut b) = (ChannelSet::new(cap), ChannelSet::new(cap));
            a.insert(cap - 1);
            assert_ne!(a, b);
            b.insert(cap - 1);
            assert_eq!(a, b);
            a.remove(cap - 1);
            a.insert(0);
            assert_ne!(a, b);
        }
    }
}
