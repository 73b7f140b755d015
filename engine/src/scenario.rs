//! Scenario files: an input sequence for a barrier handler and what must come
//! out of it, run through lockgate's own [`Aligner`] or [`Tracker`].
//!
//! The file format and the contract the handlers follow are described in
//! `testdata/scenarios/README.md`; the files there are translated from the
//! tests of Apache Flink's barrier handlers. This module parses a file
//! ([`Scenario::from_file`], [`Scenario::from_json`]), drives it through the
//! handler of its mode exactly as an input gate does ([`Scenario::run`]),
//! compares the result with the file's expectation ([`Scenario::check`]), and
//! writes the actual result in the file's shapes ([`Run::to_json`]).
//!
//! Bad input (an unreadable file, bad JSON, a channel out of range, an
//! unknown mode, ...) is a [`ScenarioError`] naming the file and the problem;
//! nothing here panics on input.

use crate::barrier::{AbortReason, Aligner, BarrierHandler, BarrierSignal, HandlerConfig, Tracker};
use crate::element::{CheckpointBarrier, CheckpointId, RecordSize, StreamElement};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;

/// Why a scenario file could not be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file, as given.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not JSON of the scenario format (syntax error, missing or
    /// unknown field, unknown `mode` or `check`, wrong type).
    #[error("{file}: bad scenario JSON: {source}")]
    Json {
        /// The file, as given.
        file: String,
        /// The parser's error, with line and column.
        source: serde_json::Error,
    },
    /// The JSON is well-formed but describes no valid scenario (a channel
    /// out of range, an input item that is not exactly one of buffer,
    /// barrier, cancel and end of partition, a duplicate buffer id, input
    /// after a channel's end of partition, a notification whose `reason`
    /// does not fit its `kind`, no channel at all).
    #[error("{file}: {reason}")]
    Invalid {
        /// The file, as given.
        file: String,
        /// What is wrong, naming the item (0-based index).
        reason: String,
    },
}

/// The checkpointing mode a scenario runs in, which picks the handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScenarioMode {
    /// The [`Aligner`] (rules 1-7 of the contract).
    ExactlyOnce,
    /// The [`Tracker`] (rules 8-9 of the contract).
    AtLeastOnce,
}

/// How the actual result is compared with the expectation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// Output and notifications equal the expectation element by element.
    Exact,
    /// The output is a permutation of the input buffers keeping per-channel
    /// order; the notifications have the expected ids, kinds and reasons in
    /// order; a trigger of N comes after exactly (exactly-once) or at least
    /// (at-least-once) the buffers that precede barrier N on their channel;
    /// abort positions are free.
    Semantic,
}

/// A reason in a scenario file's notification. The format has two more
/// than the handlers produce under lockgate's contract (`end_of_partition`
/// from Flink 1.8, and `other`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScenarioReason {
    /// A newer barrier arrived during the alignment.
    Subsumed,
    /// A cancel-checkpoint marker arrived.
    Canceled,
    /// The alignment held more than `max_alignment_bytes`.
    AlignmentLimit,
    /// A channel ended during the alignment (Flink 1.8; never produced by
    /// lockgate, whose rule 6 counts an ended channel as aligned).
    EndOfPartition,
    /// Any other reason.
    Other,
}

impl From<AbortReason> for ScenarioReason {
    fn from(reason: AbortReason) -> Self {
        match reason {
            AbortReason::Subsumed => ScenarioReason::Subsumed,
            AbortReason::Canceled => ScenarioReason::Canceled,
            AbortReason::AlignmentLimit => ScenarioReason::AlignmentLimit,
            _ => ScenarioReason::Other,
        }
    }
}

impl fmt::Display for ScenarioReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScenarioReason::Subsumed => "subsumed",
            ScenarioReason::Canceled => "canceled",
            ScenarioReason::AlignmentLimit => "alignment_limit",
            ScenarioReason::EndOfPartition => "end_of_partition",
            ScenarioReason::Other => "other",
        })
    }
}

/// Triggered or aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotificationKind {
    /// The checkpoint was triggered (snapshot taken).
    Triggered,
    /// The checkpoint was given up.
    Aborted,
}

/// One input item: what arrived on which channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputItem {
    /// A data buffer with a unique `id` and `size` bytes.
    Buffer {
        /// 0-based channel index.
        ch: usize,
        /// The buffer's unique id.
        id: u64,
        /// Its size in bytes (the file's `size`, else `buffer_size`).
        size: usize,
    },
    /// A checkpoint barrier.
    Barrier {
        /// 0-based channel index.
        ch: usize,
        /// The checkpoint id.
        id: u64,
    },
    /// A cancel-checkpoint marker.
    Cancel {
        /// 0-based channel index.
        ch: usize,
        /// The checkpoint id.
        id: u64,
    },
    /// The channel's end of partition.
    EndOfPartition {
        /// 0-based channel index.
        ch: usize,
    },
}

impl InputItem {
    /// The channel the item arrived on.
    pub fn channel(&self) -> usize {
        match *self {
            InputItem::Buffer { ch, .. }
            | InputItem::Barrier { ch, .. }
            | InputItem::Cancel { ch, .. }
            | InputItem::EndOfPartition { ch } => ch,
        }
    }
}

/// A buffer handed on by a handler: `{"ch": 0, "buffer": 1}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputItem {
    /// 0-based channel index.
    pub ch: usize,
    /// The buffer's id.
    pub buffer: u64,
}

impl fmt::Display for OutputItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buffer {} of ch {}", self.buffer, self.ch)
    }
}

/// A checkpoint triggered or aborted, and where:
/// `{"checkpoint": 2, "kind": "aborted", "reason": "subsumed", "after_output": 1}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notification {
    /// The checkpoint id.
    pub checkpoint: u64,
    /// Triggered or aborted.
    pub kind: NotificationKind,
    /// Why it was aborted; present on aborts only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ScenarioReason>,
    /// How many buffers had been handed on before it.
    pub after_output: usize,
}

impl fmt::Display for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.reason) {
            (NotificationKind::Triggered, _) => write!(f, "triggered {}", self.checkpoint)?,
            (NotificationKind::Aborted, Some(r)) => write!(f, "aborted {} ({r})", self.checkpoint)?,
            (NotificationKind::Aborted, None) => write!(f, "aborted {}", self.checkpoint)?,
        }
        write!(f, " after {} outputs", self.after_output)
    }
}

/// The record type scenarios run with: a buffer's id and its size in bytes,
/// which is what it counts for in the alignment limit (rule 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScenarioBuffer {
    /// The buffer's unique id.
    pub id: u64,
    /// Its size in bytes.
    pub size: usize,
}

impl RecordSize for ScenarioBuffer {
    const FIXED_SIZE: bool = false;
    fn size_bytes(&self) -> usize {
        self.size
    }
}

/// The file's JSON, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    #[serde(default)]
    source: String,
    mode: ScenarioMode,
    check: CheckKind,
    channels: usize,
    #[serde(default)]
    max_alignment_bytes: Option<u64>,
    buffer_size: usize,
    input: Vec<RawInput>,
    expect_output: Vec<OutputItem>,
    expect_notifications: Vec<Notification>,
    #[serde(default)]
    notes: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    ch: usize,
    #[serde(default)]
    buffer: Option<u64>,
    #[serde(default)]
    size: Option<usize>,
    #[serde(default)]
    barrier: Option<u64>,
    #[serde(default)]
    cancel: Option<u64>,
    #[serde(default)]
    end_of_partition: Option<bool>,
}

/// A parsed and validated scenario file.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// The file name it was read from (as given), for messages.
    pub file: String,
    /// The scenario's `name`.
    pub name: String,
    /// Where the case comes from.
    pub source: String,
    /// Which handler runs it.
    pub mode: ScenarioMode,
    /// How the result is compared.
    pub check: CheckKind,
    /// The number of input channels (at least 1).
    pub channels: usize,
    /// The alignment limit in bytes (rule 7); `None`: no limit.
    pub max_alignment_bytes: Option<u64>,
    /// The size in bytes of a buffer without its own `size`.
    pub buffer_size: usize,
    /// The arrival order at the handler.
    pub input: Vec<InputItem>,
    /// The buffers in the order the handler must hand them on.
    pub expect_output: Vec<OutputItem>,
    /// The checkpoints triggered or aborted, in order.
    pub expect_notifications: Vec<Notification>,
    /// Free text.
    pub notes: String,
}

/// What a handler did with a scenario's input.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The buffers handed on, in order.
    pub output: Vec<OutputItem>,
    /// The checkpoints triggered or aborted, in order, each with the number
    /// of buffers handed on before it.
    pub notifications: Vec<Notification>,
}

impl Run {
    /// The run as one JSON object `{"output": [...], "notifications": [...]}`
    /// in the shapes (and key order) of a scenario file's `expect_output` and
    /// `expect_notifications` (`reason` only on aborts), one item per line
    /// so that it can be pasted into a scenario file.
    pub fn to_json(&self) -> String {
        fn list<T: Serialize>(items: &[T]) -> String {
            if items.is_empty() {
                return "[]".to_string();
            }
            let lines: Vec<String> = items
                .iter()
                .map(|i| format!("    {}", serde_json::to_string(i).expect("plain data")))
                .collect();
            format!("[\n{}\n  ]", lines.join(",\n"))
        }
        format!(
            "{{\n  \"output\": {},\n  \"notifications\": {}\n}}",
            list(&self.output),
            list(&self.notifications)
        )
    }
}

/// The result of checking one scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioResult {
    /// The scenario's `name`.
    pub name: String,
    /// The first difference between the actual result and the expectation,
    /// in words; `None` when the scenario passed.
    pub difference: Option<String>,
}

impl ScenarioResult {
    /// True when the actual result met the expectation.
    pub fn passed(&self) -> bool {
        self.difference.is_none()
    }
}

impl Scenario {
    /// Reads and validates the scenario file at `path`.
    ///
    /// # Errors
    /// [`ScenarioError::Read`] when the file cannot be read, else as
    /// [`Scenario::from_json`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Scenario, ScenarioError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            file: file.clone(),
            source,
        })?;
        Scenario::from_json(&file, &text)
    }

    /// Parses and validates a scenario from its JSON `text`; `file` names it
    /// in errors.
    ///
    /// # Errors
    /// [`ScenarioError::Json`] for text that is not a scenario object (bad
    /// syntax, a missing or unknown field, an unknown `mode` or `check`);
    /// [`ScenarioError::Invalid`] for a scenario that breaks the format's
    /// rules (see the variant).
    pub fn from_json(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let raw: RawScenario =
            serde_json::from_str(text).map_err(|source| ScenarioError::Json {
                file: file.to_string(),
                source,
            })?;
        let invalid = |reason: String| ScenarioError::Invalid {
            file: file.to_string(),
            reason,
        };
        if raw.channels == 0 {
            return Err(invalid("`channels` must be at least 1".into()));
        }
        let mut input = Vec::with_capacity(raw.input.len());
        let mut ids = HashSet::new();
        let mut ended = vec![false; raw.channels];
        for (i, item) in raw.input.iter().enumerate() {
            let ch = item.ch;
            if ch >= raw.channels {
                return Err(invalid(format!(
                    "input[{i}]: channel {ch} out of range (the scenario has {} channels)",
                    raw.channels
                )));
            }
            if ended[ch] {
                return Err(invalid(format!(
                    "input[{i}]: channel {ch} delivers input after its end_of_partition"
                )));
            }
            let eop = match item.end_of_partition {
                Some(true) => true,
                None => false,
                Some(false) => {
                    return Err(invalid(format!(
                        "input[{i}]: `end_of_partition` must be true when present"
                    )))
                }
            };
            let kinds = [
                item.buffer.is_some(),
                item.barrier.is_some(),
                item.cancel.is_some(),
                eop,
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                return Err(invalid(format!(
                    "input[{i}]: must have exactly one of `buffer`, `barrier`, `cancel`, \
                     `end_of_partition`"
                )));
            }
            if item.size.is_some() && item.buffer.is_none() {
                return Err(invalid(format!(
                    "input[{i}]: `size` is only allowed on a buffer"
                )));
            }
            let parsed = if let Some(id) = item.buffer {
                if !ids.insert(id) {
                    return Err(invalid(format!("input[{i}]: buffer id {id} is not unique")));
                }
                InputItem::Buffer {
                    ch,
                    id,
                    size: item.size.unwrap_or(raw.buffer_size),
                }
            } else if let Some(id) = item.barrier {
                InputItem::Barrier { ch, id }
            } else if let Some(id) = item.cancel {
                InputItem::Cancel { ch, id }
            } else {
                ended[ch] = true;
                InputItem::EndOfPartition { ch }
            };
            input.push(parsed);
        }
        for (i, out) in raw.expect_output.iter().enumerate() {
            if out.ch >= raw.channels {
                return Err(invalid(format!(
                    "expect_output[{i}]: channel {} out of range (the scenario has {} channels)",
                    out.ch, raw.channels
                )));
            }
        }
        for (i, n) in raw.expect_notifications.iter().enumerate() {
            match (n.kind, n.reason) {
                (NotificationKind::Triggered, Some(_)) => {
                    return Err(invalid(format!(
                        "expect_notifications[{i}]: a trigger has no `reason`"
                    )))
                }
                (NotificationKind::Aborted, None) => {
                    return Err(invalid(format!(
                        "expect_notifications[{i}]: an abort needs a `reason`"
                    )))
                }
                _ => {}
            }
        }
        Ok(Scenario {
            file: file.to_string(),
            name: raw.name,
            source: raw.source,
            mode: raw.mode,
            check: raw.check,
            channels: raw.channels,
            max_alignment_bytes: raw.max_alignment_bytes,
            buffer_size: raw.buffer_size,
            input,
            expect_output: raw.expect_output,
            expect_notifications: raw.expect_notifications,
            notes: raw.notes,
        })
    }

    /// The handler configuration the scenario runs with: its alignment limit
    /// and an unbounded blocker (capacity is advice to an input gate, which a
    /// scenario does not have).
    pub fn handler_config(&self) -> HandlerConfig {
        HandlerConfig {
            max_alignment_bytes: self.max_alignment_bytes,
            blocker_capacity_bytes: u64::MAX,
        }
    }

    /// Runs the input through the handler of the scenario's mode, driven as
    /// an input gate drives it: each input item is fed, then the replay is
    /// drained completely (each replayed element fed again) before the next
    /// item; after the last item, [`BarrierHandler::end_of_input`] and a last
    /// drain. Each buffer is one `StreamElement::Records(vec![buffer])`;
    /// time does not matter (every element is fed at `now_ns` = its index).
    pub fn run(&self) -> Run {
        match self.mode {
            ScenarioMode::ExactlyOnce => {
                drive(Aligner::new(self.channels, self.handler_config()), self)
            }
            ScenarioMode::AtLeastOnce => drive(Tracker::new(self.channels), self),
        }
    }

    /// Runs the scenario and compares the result per its `check`.
    pub fn check(&self) -> ScenarioResult {
        self.check_run(&self.run())
    }

    /// Compares `run` (normally [`Scenario::run`]'s result) with the
    /// expectation per the scenario's `check`.
    pub fn check_run(&self, run: &Run) -> ScenarioResult {
        let difference = match self.check {
            CheckKind::Exact => self.exact_difference(run),
            CheckKind::Semantic => self.semantic_difference(run),
        };
        ScenarioResult {
            name: self.name.clone(),
            difference,
        }
    }

    fn exact_difference(&self, run: &Run) -> Option<String> {
        if let Some(d) = list_difference("output", &self.expect_output, &run.output) {
            return Some(d);
        }
        list_difference(
            "notification",
            &self.expect_notifications,
            &run.notifications,
        )
    }

    fn semantic_difference(&self, run: &Run) -> Option<String> {
        // 1. The output is a permutation of the input buffers, per-channel
        //    order kept.
        let mut per_channel: Vec<Vec<u64>> = vec![Vec::new(); self.channels];
        for item in &self.input {
            if let InputItem::Buffer { ch, id, .. } = *item {
                per_channel[ch].push(id);
            }
        }
        let mut next = vec![0usize; self.channels];
        for (i, out) in run.output.iter().enumerate() {
            let Some(expected) = per_channel.get(out.ch) else {
                return Some(format!("output[{i}]: {out} is on no channel of the input"));
            };
            match expected.get(next[out.ch]) {
                Some(&id) if id == out.buffer => next[out.ch] += 1,
                Some(&id) => {
                    return Some(format!(
                        "output[{i}]: {out} where ch {} must hand on buffer {id} next",
                        out.ch
                    ))
                }
                None => {
                    return Some(format!(
                        "output[{i}]: {out} after every buffer of ch {} was handed on",
                        out.ch
                    ))
                }
            }
        }
        for (ch, ids) in per_channel.iter().enumerate() {
            if let Some(id) = ids.get(next[ch]) {
                return Some(format!(
                    "output: buffer {id} of ch {ch} was never handed on"
                ));
            }
        }
        // 2. The same ids, kinds and reasons in the same order.
        let key = |n: &Notification| (n.checkpoint, n.kind, n.reason);
        for (i, (e, a)) in self
            .expect_notifications
            .iter()
            .zip(&run.notifications)
            .enumerate()
        {
            if key(e) != key(a) {
                return Some(format!("notification[{i}]: expected {e}, got {a}"));
            }
        }
        if let Some(d) = count_difference(
            "notification",
            &self.expect_notifications,
            &run.notifications,
        ) {
            return Some(d);
        }
        // 3. A trigger of N comes after exactly (exactly-once) or at least
        //    (at-least-once) the buffers that precede barrier N on their
        //    channel; a channel without barrier N contributes all its
        //    buffers when it ended, none otherwise.
        let position: HashMap<u64, usize> = run
            .output
            .iter()
            .enumerate()
            .map(|(i, o)| (o.buffer, i))
            .collect();
        for n in run
            .notifications
            .iter()
            .filter(|n| n.kind == NotificationKind::Triggered)
        {
            let required = self.buffers_before_barrier(n.checkpoint);
            for &(ch, id) in &required {
                if position[&id] >= n.after_output {
                    return Some(format!(
                        "triggered {} after {} outputs, but buffer {id} of ch {ch} precedes \
                         barrier {} on its channel and was handed on after it",
                        n.checkpoint, n.after_output, n.checkpoint
                    ));
                }
            }
            if self.mode == ScenarioMode::ExactlyOnce && required.len() != n.after_output {
                let required: HashSet<u64> = required.iter().map(|&(_, id)| id).collect();
                let extra = run.output[..n.after_output.min(run.output.len())]
                    .iter()
                    .find(|o| !required.contains(&o.buffer));
                if let Some(o) = extra {
                    return Some(format!(
                        "triggered {} after {} outputs, but {o} before it does not precede \
                         barrier {} on its channel",
                        n.checkpoint, n.after_output, n.checkpoint
                    ));
                }
            }
        }
        None
    }

    /// The buffers `(channel, id)` that precede barrier `checkpoint` on
    /// their channel (all buffers of an ended channel without that barrier).
    fn buffers_before_barrier(&self, checkpoint: u64) -> Vec<(usize, u64)> {
        let mut seen_barrier = vec![false; self.channels];
        let mut ended = vec![false; self.channels];
        let mut buffers: Vec<Vec<u64>> = vec![Vec::new(); self.channels];
        for item in &self.input {
            match *item {
                InputItem::Buffer { ch, id, .. } if !seen_barrier[ch] => buffers[ch].push(id),
                InputItem::Barrier { ch, id } if id == checkpoint => seen_barrier[ch] = true,
                InputItem::EndOfPartition { ch } => ended[ch] = true,
                _ => {}
            }
        }
        (0..self.channels)
            .filter(|&ch| seen_barrier[ch] || ended[ch])
            .flat_map(|ch| buffers[ch].iter().map(move |&id| (ch, id)))
            .collect()
    }

    /// The handler's input: each item as the element it is.
    fn element(item: &InputItem) -> (usize, StreamElement<ScenarioBuffer>) {
        match *item {
            InputItem::Buffer { ch, id, size } => (
                ch,
                StreamElement::Records(vec![ScenarioBuffer { id, size }]),
            ),
            InputItem::Barrier { ch, id } => (
                ch,
                StreamElement::Barrier(CheckpointBarrier::new(CheckpointId(id), 0)),
            ),
            InputItem::Cancel { ch, id } => (ch, StreamElement::CancelCheckpoint(CheckpointId(id))),
            InputItem::EndOfPartition { ch } => (ch, StreamElement::EndOfPartition),
        }
    }
}

/// Feeds one element and records what came out.
fn feed<H: BarrierHandler<ScenarioBuffer>>(
    handler: &mut H,
    channel: usize,
    element: StreamElement<ScenarioBuffer>,
    now_ns: u64,
    signals: &mut Vec<BarrierSignal>,
    run: &mut Run,
) {
    let passed = handler.on_element(channel, element, now_ns, signals);
    // Signals are acted on before the passed element is handed on.
    for signal in signals.drain(..) {
        run.notifications.push(match signal {
            BarrierSignal::Trigger { barrier, .. } => Notification {
                checkpoint: barrier.id.get(),
                kind: NotificationKind::Triggered,
                reason: None,
                after_output: run.output.len(),
            },
            BarrierSignal::Abort { id, reason } => Notification {
                checkpoint: id.get(),
                kind: NotificationKind::Aborted,
                reason: Some(reason.into()),
                after_output: run.output.len(),
            },
        });
    }
    if let Some(StreamElement::Records(batch)) = passed {
        run.output.extend(batch.iter().map(|b| OutputItem {
            ch: channel,
            buffer: b.id,
        }));
    }
}

/// Feeds every replayed element until the replay is empty.
fn drain<H: BarrierHandler<ScenarioBuffer>>(
    handler: &mut H,
    now_ns: u64,
    signals: &mut Vec<BarrierSignal>,
    run: &mut Run,
) {
    while let Some((channel, element)) = handler.next_replay() {
        feed(handler, channel, element, now_ns, signals, run);
    }
}

fn drive<H: BarrierHandler<ScenarioBuffer>>(mut handler: H, scenario: &Scenario) -> Run {
    let mut run = Run::default();
    let mut signals = Vec::new();
    for (i, item) in scenario.input.iter().enumerate() {
        let (channel, element) = Scenario::element(item);
        let now_ns = i as u64;
        feed(
            &mut handler,
            channel,
            element,
            now_ns,
            &mut signals,
            &mut run,
        );
        drain(&mut handler, now_ns, &mut signals, &mut run);
    }
    handler.end_of_input();
    let now_ns = scenario.input.len() as u64;
    drain(&mut handler, now_ns, &mut signals, &mut run);
    run
}

/// The first difference between two lists, element by element, in words.
fn list_difference<T: PartialEq + fmt::Display>(
    what: &str,
    expected: &[T],
    actual: &[T],
) -> Option<String> {
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        if e != a {
            return Some(format!("{what}[{i}]: expected {e}, got {a}"));
        }
    }
    count_difference(what, expected, actual)
}

/// Describes a difference in length of two lists whose common prefix agrees.
fn count_difference<T: fmt::Display>(what: &str, expected: &[T], actual: &[T]) -> Option<String> {
    let common = expected.len().min(actual.len());
    if expected.len() > common {
        Some(format!(
            "{what}[{common}]: expected {}, got nothing ({} {what}s in all instead of {})",
            expected[common],
            actual.len(),
            expected.len()
        ))
    } else if actual.len() > common {
        Some(format!(
            "{what}[{common}]: expected nothing, got {} ({} {what}s in all instead of {})",
            actual[common],
            actual.len(),
            expected.len()
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"{
        "name": "tiny", "source": "test", "mode": "exactly_once", "check": "exact",
        "channels": 2, "max_alignment_bytes": null, "buffer_size": 8,
        "input": [
            {"ch": 0, "buffer": 1}, {"ch": 0, "barrier": 1}, {"ch": 0, "buffer": 2},
            {"ch": 1, "buffer": 3}, {"ch": 1, "barrier": 1}
        ],
        "expect_output": [{"ch": 0, "buffer": 1}, {"ch": 1, "buffer": 3}, {"ch": 0, "buffer": 2}],
        "expect_notifications": [{"checkpoint": 1, "kind": "triggered", "after_output": 2}],
        "notes": ""
    }"#;

    #[test]
    fn a_tiny_scenario_passes_and_emits_its_shapes() {
        let s = Scenario::from_json("tiny.json", TINY).unwrap();
        assert_eq!(
            s.check(),
            ScenarioResult {
                name: "tiny".into(),
                difference: None
            }
        );
        let text = s.run().to_json();
        assert!(text.contains(r#"{"ch":0,"buffer":1}"#), "{text}");
        assert!(text.find("output") < text.find("notif"));
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            json["notifications"][0],
            serde_json::json!({"checkpoint": 1, "kind": "triggered", "after_output": 2})
        );
        assert_eq!(json["output"][2], serde_json::json!({"ch": 0, "buffer": 2}));
    }

    #[test]
    fn semantic_check_accepts_the_same_run_and_rejects_a_wrong_trigger_position() {
        let mut s = Scenario::from_json("tiny.json", TINY).unwrap();
        s.check = CheckKind::Semantic;
        assert!(s.check().passed());
        let mut run = s.run();
        run.notifications[0].after_output = 3;
        let d = s.check_run(&run).difference.unwrap();
        assert!(d.contains("buffer 2 of ch 0"), "{d}");
        let mut run = s.run();
        run.output.swap(0, 2); // breaks ch 0's order
        assert!(s
            .check_run(&run)
            .difference
            .unwrap()
            .contains("must hand on buffer 1"));
    }

    #[test]
    fn bad_input_is_an_error_naming_file_and_problem() {
        let cases = [
            (
                TINY.replace("\"ch\": 1, \"barrier\"", "\"ch\": 7, \"barrier\""),
                "channel 7 out of range",
            ),
            (
                TINY.replace("exactly_once", "sometimes"),
                "unknown variant `sometimes`",
            ),
            (
                TINY.replace("\"channels\": 2", "\"channels\": 0"),
                "at least 1",
            ),
            (
                TINY.replace("\"buffer\": 3}", "\"buffer\": 1}"),
                "not unique",
            ),
            (
                TINY.replace(
                    "\"barrier\": 1}, {\"ch\": 0, \"buffer\"",
                    "\"barrier\": 1, \"cancel\": 1}, {\"ch\": 0, \"buffer\"",
                ),
                "exactly one of",
            ),
            ("{".to_string(), "bad scenario JSON"),
        ];
        for (text, want) in cases {
            let e = Scenario::from_json("x.json", &text)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("x.json: ") && e.contains(want),
                "{e} lacks {want}"
            );
        }
        let e = Scenario::from_file("/nonexistent/dir/s.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/dir/s.json: cannot read"), "{e}");
    }
}
