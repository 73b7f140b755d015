//! Sinks the engine itself provides.

use crate::operator::{Checkpointed, Sink};
use crate::types::error::BoxError;

/// A sink calling a closure for every record (see
/// [`crate::Stream::for_each`]).
pub(crate) struct FnSink<F>(pub(crate) F);

impl<T, F: FnMut(T) + Send> Sink<T> for FnSink<F> {
    fn write(&mut self, input: &mut Vec<T>) -> Result<(), BoxError> {
        for r in input.drain(..) {
            (self.0)(r);
        }
        Ok(())
    }
}

impl<F> Checkpointed for FnSink<F> {}
