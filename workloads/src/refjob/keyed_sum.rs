//! The reference job's `keyed_sum` operator ([`RefKeyedSum`]): the
//! specification's running sum per key, in managed keyed state.

use super::records::{Payload, RefEvent, RefSum};
use crate::workload::seq_of_mapped_value;
use lockgate::Context;
use lockgate::{BoxError, KeyedState, StatefulOperator};

/// `keyed_sum`: workloads.md's running sum per key, in managed keyed state
/// ([`Managed`](lockgate::Managed) snapshots it incrementally and restores it: a snapshot
/// copies only the keys changed since the last one).
pub(super) struct RefKeyedSum;

impl<P: Payload> StatefulOperator<RefEvent<P>, RefSum<P>> for RefKeyedSum {
    type State = KeyedState<u64, u64>;

    #[inline]
    fn process(
        &mut self,
        sums: &mut Self::State,
        input: &mut Vec<RefEvent<P>>,
        ctx: &mut Context<'_, RefSum<P>>,
    ) -> Result<(), BoxError> {
        for e in input.drain(..) {
            // As workload::KeyedSum::apply: a wrapping sum per key.
            let sum = sums.get_or_default(e.key);
            *sum = sum.wrapping_add(e.value);
            ctx.emit(RefSum {
                key: e.key,
                sum: *sum,
                n: seq_of_mapped_value(e.value),
                ts_ns: e.ts_ns,
                sent_ns: e.sent_ns,
                payload: e.payload,
            });
        }
        Ok(())
    }
}
