//! Sources the engine itself provides.

use crate::element::CheckpointId;
use crate::error::BoxError;
use crate::operator::{Source, SourcePoll};
use crossbeam_channel::{Receiver, TryRecvError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The source behind [`crate::JobBuilder::ingest`]: reads what the
/// application pushes. Its state is the number of records consumed.
pub(crate) struct IngestSource<T> {
    pub(crate) rx: Receiver<T>,
    pub(crate) consumed: u64,
    pub(crate) restored: Arc<AtomicU64>,
}

impl<T: Send> Source<T> for IngestSource<T> {
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourcePoll, BoxError> {
        while out.len() < max {
            match self.rx.try_recv() {
                Ok(r) => {
                    out.push(r);
                    self.consumed += 1;
                }
                Err(TryRecvError::Empty) => {
                    return Ok(SourcePoll::Idle { wake_at_ns: None });
                }
                Err(TryRecvError::Disconnected) => return Ok(SourcePoll::Finished),
            }
        }
        Ok(SourcePoll::Ready)
    }

    fn wake_on(&self) -> Option<&Receiver<T>> {
        Some(&self.rx)
    }

    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(self.consumed.to_le_bytes().to_vec()))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let bytes: [u8; 8] = state
            .try_into()
            .map_err(|_| format!("ingest position must be 8 bytes, got {}", state.len()))?;
        self.consumed = u64::from_le_bytes(bytes);
        self.restored.store(self.consumed, Ordering::Release);
        Ok(())
    }
}
