//! The record encoding on the topics (the CLI and every reader rely on it):
//! all integers 8 bytes big-endian.
//!
//! | | key | value |
//! |---|---|---|
//! | input record | `key` | `n`, then `ts_ns` (16 bytes) |
//! | output record | `key` | `sum`, then `n` (16 bytes) |
//!
//! The Kafka timestamp of a record is `ts_ns / 1e6` ms
//! ([`timestamp_ms`]).

/// Bytes of an encoded key.
pub const KEY_BYTES: usize = 8;
/// Bytes of an encoded value (input or output).
pub const VALUE_BYTES: usize = 16;

/// A record of an input topic: the reference workload's record `n` with
/// its key and intended emission time (ns since the Unix epoch, so that
/// processes on different machines share the clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputRecord {
    /// The key.
    pub key: u64,
    /// The record's sequence number in the whole input.
    pub n: u64,
    /// Intended emission time, ns since the Unix epoch.
    pub ts_ns: u64,
}

/// A record of an output topic: the running sum of `key` after record `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputRecord {
    /// The key.
    pub key: u64,
    /// The running sum of `2m + 1` over the key's records `m` up to `n`.
    pub sum: u64,
    /// The input record's sequence number.
    pub n: u64,
}

/// The key's 8 bytes.
///
/// # Examples
/// ```
/// assert_eq!(lockgate_kafka::encode_key(258), [0, 0, 0, 0, 0, 0, 1, 2]);
/// assert_eq!(lockgate_kafka::decode_key(&[0, 0, 0, 0, 0, 0, 1, 2]), Ok(258));
/// ```
pub fn encode_key(key: u64) -> [u8; KEY_BYTES] {
    key.to_be_bytes()
}

/// Reads a key.
///
/// # Errors
/// When `bytes` is not 8 bytes long (the message says how long).
pub fn decode_key(bytes: &[u8]) -> Result<u64, String> {
    let b: [u8; KEY_BYTES] = bytes
        .try_into()
        .map_err(|_| format!("the key has {} bytes, not {KEY_BYTES}", bytes.len()))?;
    Ok(u64::from_be_bytes(b))
}

fn pair(a: u64, b: u64) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    v[..8].copy_from_slice(&a.to_be_bytes());
    v[8..].copy_from_slice(&b.to_be_bytes());
    v
}

fn unpair(bytes: &[u8]) -> Result<(u64, u64), String> {
    if bytes.len() != VALUE_BYTES {
        return Err(format!(
            "the value has {} bytes, not {VALUE_BYTES}",
            bytes.len()
        ));
    }
    let (a, b) = bytes.split_at(8);
    Ok((
        u64::from_be_bytes(a.try_into().expect("8 bytes")),
        u64::from_be_bytes(b.try_into().expect("8 bytes")),
    ))
}

impl InputRecord {
    /// The value's 16 bytes: `n`, then `ts_ns`.
    ///
    /// # Examples
    /// ```
    /// use lockgate_kafka::InputRecord;
    /// let r = InputRecord { key: 7, n: 1, ts_ns: 2 };
    /// assert_eq!(InputRecord::decode(&r.key_bytes(), &r.value_bytes()), Ok(r));
    /// ```
    pub fn value_bytes(&self) -> [u8; VALUE_BYTES] {
        pair(self.n, self.ts_ns)
    }

    /// The key's 8 bytes.
    pub fn key_bytes(&self) -> [u8; KEY_BYTES] {
        encode_key(self.key)
    }

    /// Reads a record from its key and value.
    ///
    /// # Errors
    /// When either has the wrong length.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Self, String> {
        let key = decode_key(key)?;
        let (n, ts_ns) = unpair(value)?;
        Ok(InputRecord { key, n, ts_ns })
    }
}

impl OutputRecord {
    /// The value's 16 bytes: `sum`, then `n`.
    ///
    /// # Examples
    /// ```
    /// use lockgate_kafka::OutputRecord;
    /// let r = OutputRecord { key: 7, sum: 9, n: 4 };
    /// assert_eq!(OutputRecord::decode(&r.key_bytes(), &r.value_bytes()), Ok(r));
    /// ```
    pub fn value_bytes(&self) -> [u8; VALUE_BYTES] {
        pair(self.sum, self.n)
    }

    /// The key's 8 bytes.
    pub fn key_bytes(&self) -> [u8; KEY_BYTES] {
        encode_key(self.key)
    }

    /// Reads a record from its key and value.
    ///
    /// # Errors
    /// When either has the wrong length.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Self, String> {
        let key = decode_key(key)?;
        let (sum, n) = unpair(value)?;
        Ok(OutputRecord { key, sum, n })
    }
}

/// The Kafka timestamp of a record emitted at `ts_ns`: ms, truncated
/// (saturating at `i64::MAX`).
pub fn timestamp_ms(ts_ns: u64) -> i64 {
    i64::try_from(ts_ns / 1_000_000).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_lengths_are_named() {
        assert_eq!(
            decode_key(&[1, 2, 3]),
            Err("the key has 3 bytes, not 8".into())
        );
        assert_eq!(
            InputRecord::decode(&[0; 8], &[0; 15]),
            Err("the value has 15 bytes, not 16".into())
        );
    }

    #[test]
    fn values_are_big_endian_in_order() {
        let r = OutputRecord {
            key: 1,
            sum: 2,
            n: 3,
        };
        let v = r.value_bytes();
        assert_eq!(&v[..8], &2u64.to_be_bytes());
        assert_eq!(&v[8..], &3u64.to_be_bytes());
        assert_eq!(timestamp_ms(1_999_999), 1);
    }
}

/// A record as the Kafka source emits it into a job: the input record
/// and the partition it was read from (so that its output goes to the
/// same partition of the output topic). 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceRecord {
    /// The key.
    pub key: u64,
    /// The record's `n` as read (a job's map may change it).
    pub value: u64,
    /// Intended emission time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// The input partition.
    pub partition: u32,
}

impl lockgate::RecordSize for SourceRecord {}

/// A record for a Kafka sink: an output record, the partition to write
/// it to and its time (the Kafka timestamp is [`timestamp_ms`] of it).
/// 40 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SinkRecord {
    /// The output partition.
    pub partition: u32,
    /// The record.
    pub record: OutputRecord,
    /// Its time, ns since the Unix epoch.
    pub ts_ns: u64,
}

impl lockgate::RecordSize for SinkRecord {}

/// Bytes of a [`SinkRecord`] in a write-ahead transaction's log
/// ([`SinkRecord::append_to`]): partition (4), key, sum, n, ts_ns (8 each).
pub const SINK_RECORD_BYTES: usize = 36;

impl SinkRecord {
    /// Appends the record's [`SINK_RECORD_BYTES`] bytes (big-endian
    /// fields in declaration order) to `out`.
    ///
    /// # Examples
    /// ```
    /// use lockgate_kafka::{OutputRecord, SinkRecord};
    /// let r = SinkRecord { partition: 3, record: OutputRecord { key: 1, sum: 2, n: 3 }, ts_ns: 4 };
    /// let mut bytes = Vec::new();
    /// r.append_to(&mut bytes);
    /// assert_eq!(SinkRecord::decode_all(&bytes), Ok(vec![r]));
    /// ```
    pub fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.partition.to_be_bytes());
        for x in [self.record.key, self.record.sum, self.record.n, self.ts_ns] {
            out.extend_from_slice(&x.to_be_bytes());
        }
    }

    /// Reads records written by [`SinkRecord::append_to`].
    ///
    /// # Errors
    /// When the length is not a multiple of [`SINK_RECORD_BYTES`].
    pub fn decode_all(bytes: &[u8]) -> Result<Vec<SinkRecord>, String> {
        if bytes.len() % SINK_RECORD_BYTES != 0 {
            return Err(format!(
                "{} bytes of records are not a multiple of {SINK_RECORD_BYTES}",
                bytes.len()
            ));
        }
        let u64_at = |c: &[u8], i: usize| u64::from_be_bytes(c[i..i + 8].try_into().expect("8"));
        Ok(bytes
            .chunks_exact(SINK_RECORD_BYTES)
            .map(|c| SinkRecord {
                partition: u32::from_be_bytes(c[..4].try_into().expect("4")),
                record: OutputRecord {
                    key: u64_at(c, 4),
                    sum: u64_at(c, 12),
                    n: u64_at(c, 20),
                },
                ts_ns: u64_at(c, 28),
            })
            .collect())
    }
}
