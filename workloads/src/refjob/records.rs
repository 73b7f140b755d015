//! The records between the reference job's tasks ([`RefEvent`],
//! [`RefSum`]): the specification's records plus the actual send time,
//! and an optional heap [`Payload`] ([`Bytes`]).

use lockgate::RecordSize;

/// The extra bytes a record carries: nothing (`()`) or a heap buffer
/// ([`Bytes`]), chosen at run time by [`RefJobConfig::payload_bytes`](super::RefJobConfig::payload_bytes).
pub trait Payload: Clone + Send + serde::Serialize + serde::de::DeserializeOwned + 'static {
    /// True when the payload adds no heap bytes.
    const FIXED_SIZE: bool;
    /// A payload of `len` bytes for record `n`.
    fn make(len: usize, n: u64) -> Self;
    /// Heap bytes the payload holds.
    fn heap_bytes(&self) -> usize;
}

impl Payload for () {
    const FIXED_SIZE: bool = true;
    #[inline]
    fn make(_len: usize, _n: u64) -> Self {}
    #[inline]
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// A heap payload (filled with the low byte of `n`, so that it is really
/// written and not left to lazily zeroed pages).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bytes(pub Box<[u8]>);

impl Payload for Bytes {
    const FIXED_SIZE: bool = false;
    fn make(len: usize, n: u64) -> Self {
        Bytes(vec![n as u8; len].into_boxed_slice())
    }
    fn heap_bytes(&self) -> usize {
        self.0.len()
    }
}

/// The event between the sources and `keyed_sum`: workloads.md's `Event`
/// (key, value, ts_ns) plus the actual send time (32 bytes without
/// payload).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(bound = "P: Payload")]
pub struct RefEvent<P = ()> {
    /// The key.
    pub key: u64,
    /// `n`, then `2n + 1` after the chained map.
    pub value: u64,
    /// Intended emission time, ns (schedule time for W2/W3, actual for W1).
    pub ts_ns: u64,
    /// Actual emission time, ns.
    pub sent_ns: u64,
    /// Extra bytes.
    pub payload: P,
}

impl<P: Payload> RecordSize for RefEvent<P> {
    const FIXED_SIZE: bool = P::FIXED_SIZE;
    #[inline]
    fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.payload.heap_bytes()
    }
}

/// What `keyed_sum` emits: workloads.md's `(key, sum, n, ts_ns)` plus the
/// actual send time (40 bytes without payload).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(bound = "P: Payload")]
pub struct RefSum<P = ()> {
    /// The key.
    pub key: u64,
    /// The key's running sum after this record.
    pub sum: u64,
    /// The record's sequence number.
    pub n: u64,
    /// Intended emission time, ns.
    pub ts_ns: u64,
    /// Actual emission time, ns.
    pub sent_ns: u64,
    /// Extra bytes.
    pub payload: P,
}

impl<P: Payload> RecordSize for RefSum<P> {
    const FIXED_SIZE: bool = P::FIXED_SIZE;
    #[inline]
    fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.payload.heap_bytes()
    }
}
