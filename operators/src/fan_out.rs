//! Feeding one stream to two operators, and two streams to two sinks, in
//! one task.
//!
//! The engine's [`lockgate::Stream`] has one consumer (a chain or one
//! exchange). [`Tee`] runs two operators on the same input in one chain
//! stage and tags their outputs [`Either::Left`] / [`Either::Right`];
//! [`SplitSink`] sends `Left` records to one sink and `Right` records to
//! another. Both keep their two parts' states in their own snapshot
//! (framed: a presence byte and a little-endian `u64` length per part), so
//! each part checkpoints and restores as if it ran alone.

use lockgate::{BoxError, CheckpointId, Either, Operator, Sink, Watermark};

/// Frames two optional states into one.
fn frame(a: Option<Vec<u8>>, b: Option<Vec<u8>>) -> Option<Vec<u8>> {
    if a.is_none() && b.is_none() {
        return None;
    }
    let mut out = Vec::new();
    for part in [a, b] {
        match part {
            Some(bytes) => {
                out.push(1);
                out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                out.extend_from_slice(&bytes);
            }
            None => out.push(0),
        }
    }
    Some(out)
}

/// Splits what [`frame`] made.
fn unframe(mut s: &[u8]) -> Result<[Option<&[u8]>; 2], BoxError> {
    let mut parts = [None, None];
    for part in &mut parts {
        let (&flag, rest) = s.split_first().ok_or("fan-out state is truncated")?;
        s = rest;
        if flag == 1 {
            if s.len() < 8 {
                return Err("fan-out state is truncated".into());
            }
            let (len, rest) = s.split_at(8);
            let len = u64::from_le_bytes(len.try_into()?) as usize;
            if rest.len() < len {
                return Err("fan-out state is truncated".into());
            }
            *part = Some(&rest[..len]);
            s = &rest[len..];
        } else if flag != 0 {
            return Err("fan-out state is corrupt".into());
        }
    }
    Ok(parts)
}

/// Two operators over the same input (each gets every record), their
/// outputs tagged `Left` and `Right`.
pub struct Tee<L, R, OL, OR> {
    left: L,
    right: R,
    left_out: Vec<OL>,
    right_out: Vec<OR>,
}

impl<L, R, OL, OR> Tee<L, R, OL, OR> {
    /// Runs `left` and `right` side by side.
    pub fn new(left: L, right: R) -> Self {
        Tee {
            left,
            right,
            left_out: Vec::new(),
            right_out: Vec::new(),
        }
    }

    fn drain_into(&mut self, out: &mut Vec<Either<OL, OR>>) {
        out.extend(self.left_out.drain(..).map(Either::Left));
        out.extend(self.right_out.drain(..).map(Either::Right));
    }
}

impl<T, L, R, OL, OR> Operator<T, Either<OL, OR>> for Tee<L, R, OL, OR>
where
    T: Clone,
    L: Operator<T, OL>,
    R: Operator<T, OR>,
    OL: Send,
    OR: Send,
{
    fn process(
        &mut self,
        input: &mut Vec<T>,
        out: &mut Vec<Either<OL, OR>>,
    ) -> Result<(), BoxError> {
        let mut copy = input.clone();
        self.left.process(&mut copy, &mut self.left_out)?;
        self.right.process(input, &mut self.right_out)?;
        self.drain_into(out);
        Ok(())
    }

    fn on_watermark(
        &mut self,
        w: Watermark,
        out: &mut Vec<Either<OL, OR>>,
    ) -> Result<(), BoxError> {
        self.left.on_watermark(w, &mut self.left_out)?;
        self.right.on_watermark(w, &mut self.right_out)?;
        self.drain_into(out);
        Ok(())
    }

    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(frame(
            self.left.snapshot_state(id)?,
            self.right.snapshot_state(id)?,
        ))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let [l, r] = unframe(state)?;
        if let Some(l) = l {
            self.left.restore_state(l)?;
        }
        if let Some(r) = r {
            self.right.restore_state(r)?;
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.left.notify_checkpoint_complete(id)?;
        self.right.notify_checkpoint_complete(id)
    }

    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.left.notify_checkpoint_aborted(id)?;
        self.right.notify_checkpoint_aborted(id)
    }

    fn end_of_input(&mut self, out: &mut Vec<Either<OL, OR>>) -> Result<(), BoxError> {
        self.left.end_of_input(&mut self.left_out)?;
        self.right.end_of_input(&mut self.right_out)?;
        self.drain_into(out);
        Ok(())
    }

    fn next_timer_ns(&self) -> Option<u64> {
        match (self.left.next_timer_ns(), self.right.next_timer_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        }
    }

    fn on_processing_time(
        &mut self,
        now_ns: u64,
        out: &mut Vec<Either<OL, OR>>,
    ) -> Result<(), BoxError> {
        if self.left.next_timer_ns().is_some_and(|t| t <= now_ns) {
            self.left.on_processing_time(now_ns, &mut self.left_out)?;
        }
        if self.right.next_timer_ns().is_some_and(|t| t <= now_ns) {
            self.right.on_processing_time(now_ns, &mut self.right_out)?;
        }
        self.drain_into(out);
        Ok(())
    }
}

/// A sink of `Either<A, B>`: `Left` records go to one sink, `Right`
/// records to the other (each is called only with a non-empty batch).
pub struct SplitSink<L, R, A, B> {
    left: L,
    right: R,
    a: Vec<A>,
    b: Vec<B>,
}

impl<L, R, A, B> SplitSink<L, R, A, B> {
    /// Routes to `left` and `right`.
    pub fn new(left: L, right: R) -> Self {
        SplitSink {
            left,
            right,
            a: Vec::new(),
            b: Vec::new(),
        }
    }
}

impl<A, B, L, R> Sink<Either<A, B>> for SplitSink<L, R, A, B>
where
    A: Send,
    B: Send,
    L: Sink<A>,
    R: Sink<B>,
{
    fn write(&mut self, input: &mut Vec<Either<A, B>>) -> Result<(), BoxError> {
        for e in input.drain(..) {
            match e {
                Either::Left(a) => self.a.push(a),
                Either::Right(b) => self.b.push(b),
            }
        }
        if !self.a.is_empty() {
            self.left.write(&mut self.a)?;
            self.a.clear();
        }
        if !self.b.is_empty() {
            self.right.write(&mut self.b)?;
            self.b.clear();
        }
        Ok(())
    }

    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(frame(
            self.left.snapshot_state(id)?,
            self.right.snapshot_state(id)?,
        ))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let [l, r] = unframe(state)?;
        if let Some(l) = l {
            self.left.restore_state(l)?;
        }
        if let Some(r) = r {
            self.right.restore_state(r)?;
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.left.notify_checkpoint_complete(id)?;
        self.right.notify_checkpoint_complete(id)
    }

    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.left.notify_checkpoint_aborted(id)?;
        self.right.notify_checkpoint_aborted(id)
    }

    fn on_watermark(&mut self, w: Watermark) -> Result<(), BoxError> {
        self.left.on_watermark(w)?;
        self.right.on_watermark(w)
    }

    fn end_of_input(&mut self) -> Result<(), BoxError> {
        self.left.end_of_input()?;
        self.right.end_of_input()
    }

    fn next_timer_ns(&self) -> Option<u64> {
        match (self.left.next_timer_ns(), self.right.next_timer_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        }
    }

    fn on_processing_time(&mut self, now_ns: u64) -> Result<(), BoxError> {
        if self.left.next_timer_ns().is_some_and(|t| t <= now_ns) {
            self.left.on_processing_time(now_ns)?;
        }
        if self.right.next_timer_ns().is_some_and(|t| t <= now_ns) {
            self.right.on_processing_time(now_ns)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::{Count, WindowAssigner, WindowOperator, WindowOutput};

    #[test]
    fn framing_round_trips_and_rejects_garbage() {
        let f = frame(Some(vec![1, 2, 3]), None).unwrap();
        assert_eq!(unframe(&f).unwrap(), [Some(&[1u8, 2, 3][..]), None]);
        let f = frame(None, Some(vec![])).unwrap();
        assert_eq!(unframe(&f).unwrap(), [None, Some(&[][..])]);
        assert_eq!(frame(None, None), None);
        assert!(unframe(&[1, 9]).is_err());
        assert!(unframe(&[7, 0]).is_err());
    }

    #[test]
    fn a_tee_feeds_both_operators_and_restores_both() {
        let make = || {
            Tee::new(
                WindowOperator::new(
                    WindowAssigner::tumbling(10).unwrap(),
                    Count,
                    |x: &i64| *x % 2,
                    |x: &i64| *x,
                ),
                WindowOperator::new(WindowAssigner::Global, Count, |_: &i64| 0i64, |x: &i64| *x),
            )
        };
        let mut tee = make();
        let mut out = Vec::new();
        tee.process(&mut vec![1, 2, 3, 12], &mut out).unwrap();
        let snap = tee.snapshot_state(CheckpointId(1)).unwrap().unwrap();
        let mut restored = make();
        restored.restore_state(&snap).unwrap();
        for t in [&mut tee, &mut restored] {
            let mut out = Vec::new();
            t.end_of_input(&mut out).unwrap();
            let mut left: Vec<(i64, i64, u64)> = Vec::new();
            let mut right = Vec::new();
            for o in out {
                match o {
                    Either::Left(WindowOutput::Fired(r)) => {
                        left.push((r.key, r.window.start, r.value))
                    }
                    Either::Right(WindowOutput::Fired(r)) => right.push(r.value),
                    _ => panic!("no late records here"),
                }
            }
            left.sort();
            assert_eq!(left, [(0, 0, 1), (0, 10, 1), (1, 0, 2)]);
            assert_eq!(right, [4]);
        }
    }
}
