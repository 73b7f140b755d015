//! lockgate-scenario: barrier-handler conformance files. A scenario file is
//! an input sequence for a barrier handler and what must come out of it,
//! run through lockgate's own [`Aligner`] or [`Tracker`]. The CLI's
//! `lockgate scenario` and the tests use it; the engine does not.
//!
//! The file format and the contract the handlers follow are described in
//! `testdata/scenarios/README.md`; the files there are translated from the
//! tests of Apache Flink's barrier handlers. lockgate extends the format
//! (`testdata/scenarios/EXTENSIONS.md`, its own `lg_*.json` files) with
//! in-band watermarks and watermark status:
//!
//! - input items `{"ch": 0, "watermark": 17}` (a [`Watermark`] of 17 ms)
//!   and `{"ch": 0, "idle": true}` (`false`: active again; Flink's
//!   `WatermarkStatus`). They count 0 bytes (rule 7), are held on a blocked
//!   channel like any element (rule 1) and are handed on like records.
//!   On a channel, watermark values never decrease, and nothing follows an
//!   end of partition.
//! - `expect_output` lists them where the handler hands them on, as
//!   `{"ch":0,"watermark":17}` and `{"ch":0,"idle":true}`, among the
//!   buffers. A file without them in its input has none in its output, so
//!   the Flink files and their `--emit` output are unchanged.
//! - A notification's `after_output` still counts **buffers only**: its
//!   place among watermark and idle items between two buffers is not part
//!   of the format (put a buffer between them where the order matters).
//!
//! - `"mode": "unaligned"` runs the [`Unaligned`] handler (rules 11-17 of
//!   `EXTENSIONS.md`): input items `{"ch": 0, "priority": 2}` (a barrier on
//!   the channel's priority lane), notifications of kind
//!   `channel_state_done`, and `expect_channel_state` (per checkpoint, per
//!   channel, the buffer ids that are its channel state), which
//!   [`Run::to_json`] writes as `"channel_state"`.
//! - `"mode": "exactly_once"` with `"aligned_checkpoint_timeout": T` (and
//!   optionally `"trigger_times"`) runs the [`Unaligned`] handler with that
//!   timeout (rule 19; time counts input items), modelling pure blocking:
//!   an item of a blocked channel waits until the channel is unblocked.
//!
//! This crate parses a file
//! ([`Scenario::from_file`], [`Scenario::from_json`]), drives it through the
//! handler of its mode exactly as an input gate does ([`Scenario::run`]),
//! compares the result with the file's expectation ([`Scenario::check`]), and
//! writes the actual result in the file's shapes ([`Run::to_json`]).
//!
//! Bad input (an unreadable file, bad JSON, a channel out of range, an
//! unknown mode, ...) is a [`ScenarioError`] naming the file and the problem;
//! nothing here panics on input.

use lockgate::{
    barrier::AbortReason, barrier::Aligner, barrier::BarrierHandler, barrier::BarrierSignal,
    barrier::HandlerConfig, barrier::Tracker, barrier::Unaligned,
};
use lockgate::{
    barrier::CheckpointBarrier, barrier::StreamElement, CheckpointId, RecordSize, Watermark,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;

/// The most channels a scenario may have: 65,536 (the handlers allocate per
/// channel; a scenario drives one input gate).
pub const MAX_SCENARIO_CHANNELS: usize = 1 << 16;

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
    /// barrier, priority barrier, cancel, end of partition, watermark and
    /// idle, a priority barrier or `expect_channel_state` outside the
    /// unaligned mode, a duplicate
    /// buffer id, input after a channel's end of partition, a watermark
    /// below an earlier one of its channel, a notification whose `reason`
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
    /// The [`Unaligned`] handler (rules 11-17, lockgate's extension,
    /// `EXTENSIONS.md`): priority barriers, channel state.
    Unaligned,
}

/// The channel state of the checkpoints whose state was complete: per
/// checkpoint id, per channel open at its trigger, the ids of the buffers
/// that are its channel state, in order. In JSON the keys are strings:
/// `{"2": {"0": [5, 6], "1": []}}`.
pub type ChannelStates = BTreeMap<u64, BTreeMap<usize, Vec<u64>>>;

/// How the actual result is compared with the expectation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// Output and notifications equal the expectation element by element.
    Exact,
    /// The output is a permutation of the input buffers (and watermark and
    /// idle items) keeping per-channel order; the notifications have the
    /// expected ids, kinds and reasons in order; a trigger of N comes after
    /// exactly (exactly-once) or at least (at-least-once) the buffers that
    /// precede barrier N on their channel, and, as far as `after_output`
    /// (a buffer count) can tell, after the watermark and idle items that
    /// precede it and (exactly-once) before those that follow it; abort
    /// positions are free.
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
    /// Every channel's state of an unaligned checkpoint ended (lockgate's
    /// extension, `EXTENSIONS.md`).
    ChannelStateDone,
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
    /// A checkpoint barrier on the channel's priority lane (lockgate's
    /// extension, `EXTENSIONS.md`, unaligned mode only):
    /// `{"ch": 0, "priority": 2}`. It overtook the channel's queued
    /// elements; the in-band `barrier` of the same id still follows them.
    Priority {
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
    /// An event-time watermark (lockgate's extension, `EXTENSIONS.md`):
    /// `{"ch": 0, "watermark": 17}`; counts 0 bytes.
    Watermark {
        /// 0-based channel index.
        ch: usize,
        /// The watermark in ms (never below an earlier one of the channel).
        value: i64,
    },
    /// A watermark status change (lockgate's extension, `EXTENSIONS.md`;
    /// Flink's `WatermarkStatus`): `{"ch": 0, "idle": true}`; counts 0
    /// bytes.
    Idle {
        /// 0-based channel index.
        ch: usize,
        /// `true`: the channel became idle; `false`: active again.
        idle: bool,
    },
}

impl InputItem {
    /// The channel the item arrived on.
    pub fn channel(&self) -> usize {
        match *self {
            InputItem::Buffer { ch, .. }
            | InputItem::Barrier { ch, .. }
            | InputItem::Priority { ch, .. }
            | InputItem::Cancel { ch, .. }
            | InputItem::EndOfPartition { ch }
            | InputItem::Watermark { ch, .. }
            | InputItem::Idle { ch, .. } => ch,
        }
    }

    /// The item as the handler hands it on, for the items that are handed
    /// on and listed in `expect_output` (buffers, watermarks, idle items);
    /// `None` for barriers, cancel markers and ends of partition.
    pub fn as_output(&self) -> Option<OutputItem> {
        match *self {
            InputItem::Buffer { ch, id, .. } => Some(OutputItem::Buffer { ch, buffer: id }),
            InputItem::Watermark { ch, value } => Some(OutputItem::Watermark {
                ch,
                watermark: value,
            }),
            InputItem::Idle { ch, idle } => Some(OutputItem::Idle { ch, idle }),
            _ => None,
        }
    }
}

/// An element handed on by a handler, as `expect_output` lists it:
/// `{"ch": 0, "buffer": 1}`, or (lockgate's extension, `EXTENSIONS.md`)
/// `{"ch": 0, "watermark": 17}` and `{"ch": 0, "idle": true}`. Exactly one
/// of `buffer`, `watermark` and `idle` is present; `ch` comes first when
/// written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawOutput", into = "RawOutput")]
pub enum OutputItem {
    /// A data buffer.
    Buffer {
        /// 0-based channel index.
        ch: usize,
        /// The buffer's id.
        buffer: u64,
    },
    /// A watermark, in ms.
    Watermark {
        /// 0-based channel index.
        ch: usize,
        /// The watermark's value in ms.
        watermark: i64,
    },
    /// A watermark status change (`true`: idle, `false`: active).
    Idle {
        /// 0-based channel index.
        ch: usize,
        /// The new status.
        idle: bool,
    },
}

impl OutputItem {
    /// The channel the element came from.
    pub fn channel(&self) -> usize {
        match *self {
            OutputItem::Buffer { ch, .. }
            | OutputItem::Watermark { ch, .. }
            | OutputItem::Idle { ch, .. } => ch,
        }
    }

    /// The buffer's id for a buffer, `None` for a watermark or idle item.
    pub fn buffer_id(&self) -> Option<u64> {
        match *self {
            OutputItem::Buffer { buffer, .. } => Some(buffer),
            _ => None,
        }
    }
}

impl fmt::Display for OutputItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            OutputItem::Buffer { ch, buffer } => write!(f, "buffer {buffer} of ch {ch}"),
            OutputItem::Watermark { ch, watermark } => {
                write!(f, "watermark {watermark} of ch {ch}")
            }
            OutputItem::Idle { ch, idle: true } => write!(f, "idle of ch {ch}"),
            OutputItem::Idle { ch, idle: false } => write!(f, "active of ch {ch}"),
        }
    }
}

/// [`OutputItem`]'s JSON, as written: `ch` and one of the rest.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    ch: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    buffer: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    watermark: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idle: Option<bool>,
}

impl TryFrom<RawOutput> for OutputItem {
    type Error = String;
    fn try_from(raw: RawOutput) -> Result<Self, String> {
        match (raw.buffer, raw.watermark, raw.idle) {
            (Some(buffer), None, None) => Ok(OutputItem::Buffer { ch: raw.ch, buffer }),
            (None, Some(watermark), None) => Ok(OutputItem::Watermark {
                ch: raw.ch,
                watermark,
            }),
            (None, None, Some(idle)) => Ok(OutputItem::Idle { ch: raw.ch, idle }),
            _ => Err(
                "an output item must have `ch` and exactly one of `buffer`, \
                      `watermark`, `idle`"
                    .to_string(),
            ),
        }
    }
}

impl From<OutputItem> for RawOutput {
    fn from(item: OutputItem) -> Self {
        let mut raw = RawOutput {
            ch: item.channel(),
            buffer: None,
            watermark: None,
            idle: None,
        };
        match item {
            OutputItem::Buffer { buffer, .. } => raw.buffer = Some(buffer),
            OutputItem::Watermark { watermark, .. } => raw.watermark = Some(watermark),
            OutputItem::Idle { idle, .. } => raw.idle = Some(idle),
        }
        raw
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
    /// How many buffers had been handed on before it (buffers only:
    /// watermark and idle items in the output do not count).
    pub after_output: usize,
}

impl fmt::Display for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.reason) {
            (NotificationKind::Triggered, _) => write!(f, "triggered {}", self.checkpoint)?,
            (NotificationKind::Aborted, Some(r)) => write!(f, "aborted {} ({r})", self.checkpoint)?,
            (NotificationKind::Aborted, None) => write!(f, "aborted {}", self.checkpoint)?,
            (NotificationKind::ChannelStateDone, _) => {
                write!(f, "channel state of {} done", self.checkpoint)?
            }
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
    expect_channel_state: Option<ChannelStates>,
    #[serde(default)]
    aligned_checkpoint_timeout: Option<u64>,
    #[serde(default)]
    trigger_times: Option<BTreeMap<u64, u64>>,
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
    priority: Option<u64>,
    #[serde(default)]
    cancel: Option<u64>,
    #[serde(default)]
    end_of_partition: Option<bool>,
    #[serde(default)]
    watermark: Option<i64>,
    #[serde(default)]
    idle: Option<bool>,
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
    /// The buffers (and watermark and idle items) in the order the handler
    /// must hand them on.
    pub expect_output: Vec<OutputItem>,
    /// The checkpoints triggered or aborted, in order.
    pub expect_notifications: Vec<Notification>,
    /// Unaligned mode: the channel state of every checkpoint that reached
    /// `channel_state_done` (empty when the file has none).
    pub expect_channel_state: ChannelStates,
    /// Exactly-once only (lockgate's extension, rule 19): the
    /// aligned-checkpoint timeout, in input items (item i arrives at time
    /// i); `None`: no timeout. With it the file runs through the
    /// [`Unaligned`] handler with that timeout.
    pub aligned_checkpoint_timeout: Option<u64>,
    /// With a timeout: when each checkpoint was triggered (the time its
    /// barriers carry), in input items; a checkpoint not listed was
    /// triggered at 0.
    pub trigger_times: BTreeMap<u64, u64>,
    /// Free text.
    pub notes: String,
}

/// What a handler did with a scenario's input.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The buffers, watermarks and idle items handed on, in order.
    pub output: Vec<OutputItem>,
    /// The checkpoints triggered or aborted, in order, each with the number
    /// of buffers (only) handed on before it.
    pub notifications: Vec<Notification>,
    /// Unaligned mode only: the channel state of every checkpoint whose
    /// state ended (`None` in the other modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_state: Option<ChannelStates>,
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
        let channel_state = match &self.channel_state {
            None => String::new(),
            Some(states) => format!(
                ",\n  \"channel_state\": {}",
                serde_json::to_string(states).expect("plain data")
            ),
        };
        format!(
            "{{\n  \"output\": {},\n  \"notifications\": {}{channel_state}\n}}",
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
        if raw.channels == 0 || raw.channels > MAX_SCENARIO_CHANNELS {
            return Err(invalid(format!(
                "`channels` must be between 1 and {MAX_SCENARIO_CHANNELS}, got {}",
                raw.channels
            )));
        }
        if raw.aligned_checkpoint_timeout.is_some() && raw.mode != ScenarioMode::ExactlyOnce {
            return Err(invalid(
                "`aligned_checkpoint_timeout` needs `\"mode\": \"exactly_once\"`".to_string(),
            ));
        }
        if raw.trigger_times.is_some() && raw.aligned_checkpoint_timeout.is_none() {
            return Err(invalid(
                "`trigger_times` needs `aligned_checkpoint_timeout`".to_string(),
            ));
        }
        let unaligned_handler =
            raw.mode == ScenarioMode::Unaligned || raw.aligned_checkpoint_timeout.is_some();
        if unaligned_handler && raw.max_alignment_bytes.is_some() {
            // As the CLI and `JobConfig::validate`: an unaligned checkpoint
            // holds nothing, and a blocking alignment before its timeout
            // holds nothing either (rule 19).
            return Err(invalid(
                "`max_alignment_bytes` does not apply with `\"mode\": \"unaligned\"` or `aligned_checkpoint_timeout` (those alignments hold nothing)".to_string(),
            ));
        }
        let mut input = Vec::with_capacity(raw.input.len());
        let mut ids = HashSet::new();
        let mut ended = vec![false; raw.channels];
        let mut last_watermark: Vec<Option<i64>> = vec![None; raw.channels];
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
            if item.priority.is_some() && !unaligned_handler {
                return Err(invalid(format!(
                    "input[{i}]: a `priority` barrier needs `\"mode\": \"unaligned\"` or an \
                     `aligned_checkpoint_timeout`"
                )));
            }
            let kinds = [
                item.buffer.is_some(),
                item.barrier.is_some(),
                item.priority.is_some(),
                item.cancel.is_some(),
                eop,
                item.watermark.is_some(),
                item.idle.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                return Err(invalid(format!(
                    "input[{i}]: must have exactly one of `buffer`, `barrier`, `priority`, \
                     `cancel`, `end_of_partition`, `watermark`, `idle`"
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
            } else if let Some(id) = item.priority {
                InputItem::Priority { ch, id }
            } else if let Some(id) = item.cancel {
                InputItem::Cancel { ch, id }
            } else if let Some(value) = item.watermark {
                // A channel's watermarks never go back (Flink's sources and
                // operators emit non-decreasing watermarks per output).
                if let Some(last) = last_watermark[ch].filter(|&last| value < last) {
                    return Err(invalid(format!(
                        "input[{i}]: watermark {value} on channel {ch} is below its earlier \
                         watermark {last}"
                    )));
                }
                last_watermark[ch] = Some(value);
                InputItem::Watermark { ch, value }
            } else if let Some(idle) = item.idle {
                InputItem::Idle { ch, idle }
            } else {
                ended[ch] = true;
                InputItem::EndOfPartition { ch }
            };
            input.push(parsed);
        }
        for (i, out) in raw.expect_output.iter().enumerate() {
            if out.channel() >= raw.channels {
                return Err(invalid(format!(
                    "expect_output[{i}]: channel {} out of range (the scenario has {} channels)",
                    out.channel(),
                    raw.channels
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
        if raw.expect_channel_state.is_some() && !unaligned_handler {
            return Err(invalid(
                "`expect_channel_state` needs `\"mode\": \"unaligned\"` or an \
                 `aligned_checkpoint_timeout`"
                    .to_string(),
            ));
        }
        let expect_channel_state = raw.expect_channel_state.unwrap_or_default();
        for (id, channels) in &expect_channel_state {
            if let Some(ch) = channels.keys().find(|&&ch| ch >= raw.channels) {
                return Err(invalid(format!(
                    "expect_channel_state[\"{id}\"]: channel {ch} out of range (the scenario \
                     has {} channels)",
                    raw.channels
                )));
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
            expect_channel_state,
            aligned_checkpoint_timeout: raw.aligned_checkpoint_timeout,
            trigger_times: raw.trigger_times.unwrap_or_default(),
            notes: raw.notes,
        })
    }

    /// True when the file runs through the [`Unaligned`] handler: unaligned
    /// mode, or exactly-once with an aligned-checkpoint timeout.
    pub fn runs_unaligned_handler(&self) -> bool {
        self.mode == ScenarioMode::Unaligned || self.aligned_checkpoint_timeout.is_some()
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
    /// drain. Each buffer is one `StreamElement::Records(vec![buffer])`, a
    /// watermark a `StreamElement::Watermark`, an idle item a
    /// `StreamElement::Idle`; time does not matter (every element is fed at
    /// `now_ns` = its index).
    pub fn run(&self) -> Run {
        match self.mode {
            ScenarioMode::ExactlyOnce if self.aligned_checkpoint_timeout.is_some() => {
                drive_unaligned(self)
            }
            ScenarioMode::ExactlyOnce => {
                drive(Aligner::new(self.channels, self.handler_config()), self)
            }
            ScenarioMode::AtLeastOnce => drive(Tracker::new(self.channels), self),
            ScenarioMode::Unaligned => drive_unaligned(self),
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
        if let Some(d) = list_difference(
            "notification",
            &self.expect_notifications,
            &run.notifications,
        ) {
            return Some(d);
        }
        self.channel_state_difference(run)
    }

    /// Unaligned mode: the run's channel state must equal
    /// `expect_channel_state` (in the other modes there is none).
    fn channel_state_difference(&self, run: &Run) -> Option<String> {
        if !self.runs_unaligned_handler() {
            return None;
        }
        let empty = ChannelStates::new();
        let actual = run.channel_state.as_ref().unwrap_or(&empty);
        for id in self.expect_channel_state.keys().chain(actual.keys()) {
            let (e, a) = (self.expect_channel_state.get(id), actual.get(id));
            if e != a {
                let show = |s: Option<&BTreeMap<usize, Vec<u64>>>| match s {
                    None => "none".to_string(),
                    Some(s) => serde_json::to_string(s).expect("plain data"),
                };
                return Some(format!(
                    "channel state of checkpoint {id}: expected {}, got {}",
                    show(e),
                    show(a)
                ));
            }
        }
        None
    }

    /// Step 3 of the semantic check in unaligned mode, where a trigger may
    /// come anywhere: for every checkpoint N whose channel state is
    /// complete, on every channel, the buffers handed on before the
    /// trigger of N followed by N's channel state of that channel (none
    /// for a channel ended at the trigger) are exactly the buffers that
    /// precede barrier N on it (all of an ended channel without barrier
    /// N): nothing lost, nothing duplicated after a restore from N.
    fn unaligned_difference(&self, run: &Run) -> Option<String> {
        let empty = ChannelStates::new();
        let states = run.channel_state.as_ref().unwrap_or(&empty);
        let done: Vec<&Notification> = run
            .notifications
            .iter()
            .filter(|n| n.kind == NotificationKind::ChannelStateDone)
            .collect();
        if done.len() != states.len() || done.iter().any(|n| !states.contains_key(&n.checkpoint)) {
            return Some(format!(
                "channel state recorded for checkpoints {:?}, but channel_state_done for {:?}",
                states.keys().collect::<Vec<_>>(),
                done.iter().map(|n| n.checkpoint).collect::<Vec<_>>()
            ));
        }
        let buffers: Vec<OutputItem> = run
            .output
            .iter()
            .filter(|o| o.buffer_id().is_some())
            .copied()
            .collect();
        for (&id, state) in states {
            let Some(trigger) = run
                .notifications
                .iter()
                .find(|n| n.kind == NotificationKind::Triggered && n.checkpoint == id)
            else {
                return Some(format!("channel state of {id} without its trigger"));
            };
            let before = &buffers[..trigger.after_output.min(buffers.len())];
            let required = self.buffers_before_barrier(id);
            for ch in 0..self.channels {
                let mut got: Vec<u64> = before
                    .iter()
                    .filter(|o| o.channel() == ch)
                    .filter_map(OutputItem::buffer_id)
                    .collect();
                got.extend(state.get(&ch).into_iter().flatten());
                let want: Vec<u64> = required
                    .iter()
                    .filter(|&&(c, _)| c == ch)
                    .map(|&(_, b)| b)
                    .collect();
                if got != want {
                    return Some(format!(
                        "checkpoint {id}, ch {ch}: buffers handed on before the trigger and \
                         then the channel state are {got:?}, but {want:?} precede barrier \
                         {id} on the channel"
                    ));
                }
            }
        }
        None
    }

    fn semantic_difference(&self, run: &Run) -> Option<String> {
        // 1. The output is a permutation of the input's buffers, watermarks
        //    and idle items, per-channel order kept.
        let mut per_channel: Vec<Vec<OutputItem>> = vec![Vec::new(); self.channels];
        for item in &self.input {
            if let Some(out) = item.as_output() {
                per_channel[out.channel()].push(out);
            }
        }
        let mut next = vec![0usize; self.channels];
        for (i, out) in run.output.iter().enumerate() {
            let ch = out.channel();
            let Some(expected) = per_channel.get(ch) else {
                return Some(format!("output[{i}]: {out} is on no channel of the input"));
            };
            match expected.get(next[ch]) {
                Some(e) if e == out => next[ch] += 1,
                Some(e) => {
                    return Some(format!(
                        "output[{i}]: {out} where ch {ch} must hand on {e} next"
                    ))
                }
                None => {
                    return Some(format!(
                        "output[{i}]: {out} after every item of ch {ch} was handed on"
                    ))
                }
            }
        }
        for (ch, items) in per_channel.iter().enumerate() {
            if let Some(item) = items.get(next[ch]) {
                return Some(format!("output: {item} was never handed on"));
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
        if self.runs_unaligned_handler() {
            return self.unaligned_difference(run);
        }
        // 3. A trigger of N comes after exactly (exactly-once) or at least
        //    (at-least-once) the buffers that precede barrier N on their
        //    channel; a channel without barrier N contributes all its
        //    buffers when it ended, none otherwise. `after_output` counts
        //    buffers, so positions are among the buffers only.
        let buffers: Vec<OutputItem> = run
            .output
            .iter()
            .filter(|o| o.buffer_id().is_some())
            .copied()
            .collect();
        let position: HashMap<u64, usize> = buffers
            .iter()
            .enumerate()
            .filter_map(|(i, o)| Some((o.buffer_id()?, i)))
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
                let extra = buffers[..n.after_output.min(buffers.len())]
                    .iter()
                    .find(|o| o.buffer_id().is_some_and(|id| !required.contains(&id)));
                if let Some(o) = extra {
                    return Some(format!(
                        "triggered {} after {} outputs, but {o} before it does not precede \
                         barrier {} on its channel",
                        n.checkpoint, n.after_output, n.checkpoint
                    ));
                }
            }
            if let Some(d) = self.event_position_difference(run, n) {
                return Some(d);
            }
        }
        None
    }

    /// Step 3 of the semantic check for watermark and idle items (whose
    /// place the buffer count `after_output` pins only up to the buffers
    /// around them): one that precedes barrier N on its channel (every one
    /// of an ended channel without barrier N) has at most `after_output`
    /// buffers before it in the output; in exactly-once mode one that
    /// follows barrier N on its channel has at least `after_output`.
    /// Assumes step 1 passed (the output's items of a channel are the
    /// input's, in order).
    fn event_position_difference(&self, run: &Run, n: &Notification) -> Option<String> {
        // For each output item, the number of buffers handed on before it;
        // per channel, the output indices of its items in order.
        let mut buffers_before = Vec::with_capacity(run.output.len());
        let mut indices: Vec<Vec<usize>> = vec![Vec::new(); self.channels];
        let mut count = 0;
        for (i, o) in run.output.iter().enumerate() {
            buffers_before.push(count);
            count += usize::from(o.buffer_id().is_some());
            indices[o.channel()].push(i);
        }
        let mut has_barrier = vec![false; self.channels];
        let mut ended = vec![false; self.channels];
        for item in &self.input {
            match *item {
                InputItem::Barrier { ch, id } if id == n.checkpoint => has_barrier[ch] = true,
                InputItem::EndOfPartition { ch } => ended[ch] = true,
                _ => {}
            }
        }
        let mut seen_barrier = vec![false; self.channels];
        let mut k = vec![0usize; self.channels];
        for item in &self.input {
            let ch = item.channel();
            match *item {
                InputItem::Barrier { id, .. } if id == n.checkpoint => seen_barrier[ch] = true,
                InputItem::Buffer { .. } => k[ch] += 1,
                InputItem::Watermark { .. } | InputItem::Idle { .. } => {
                    let out = item.as_output().expect("handed-on item");
                    let before = indices[ch].get(k[ch]).map(|&i| buffers_before[i])?;
                    k[ch] += 1;
                    let precedes = !seen_barrier[ch] && (has_barrier[ch] || ended[ch]);
                    if precedes && before > n.after_output {
                        return Some(format!(
                            "triggered {} after {} outputs, but {out} precedes barrier {} on \
                             its channel and was handed on after {before} outputs",
                            n.checkpoint, n.after_output, n.checkpoint
                        ));
                    }
                    if seen_barrier[ch]
                        && self.mode == ScenarioMode::ExactlyOnce
                        && before < n.after_output
                    {
                        return Some(format!(
                            "triggered {} after {} outputs, but {out} follows barrier {} on \
                             its channel and was handed on after {before} outputs",
                            n.checkpoint, n.after_output, n.checkpoint
                        ));
                    }
                }
                _ => {}
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

    /// The handler's data-lane input: each item as the element it is;
    /// `None` for a priority barrier, which is not an element of the data
    /// lane.
    fn element(item: &InputItem) -> Option<(usize, StreamElement<ScenarioBuffer>)> {
        Some(match *item {
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
            InputItem::Watermark { ch, value } => (ch, StreamElement::Watermark(Watermark(value))),
            InputItem::Idle { ch, idle } => (ch, StreamElement::Idle(idle)),
            InputItem::Priority { .. } => return None,
        })
    }
}

/// What a run has seen so far: the run itself and the number of buffers in
/// its output (what a notification's `after_output` counts).
#[derive(Default)]
struct Recorder {
    run: Run,
    buffers: usize,
}

/// Feeds one element and records what came out.
fn feed<H: BarrierHandler<ScenarioBuffer>>(
    handler: &mut H,
    channel: usize,
    element: StreamElement<ScenarioBuffer>,
    now_ns: u64,
    signals: &mut Vec<BarrierSignal>,
    rec: &mut Recorder,
) {
    let passed = handler.on_element(channel, element, now_ns, signals);
    record_signals(signals, passed, channel, rec);
}

/// Records a handler's signals, then the element it passed (if any), as
/// an input gate acts on them.
fn record_signals(
    signals: &mut Vec<BarrierSignal>,
    passed: Option<StreamElement<ScenarioBuffer>>,
    channel: usize,
    rec: &mut Recorder,
) {
    // Signals are acted on before the passed element is handed on.
    for signal in signals.drain(..) {
        rec.run.notifications.push(match signal {
            BarrierSignal::Trigger { barrier, .. } => Notification {
                checkpoint: barrier.id.get(),
                kind: NotificationKind::Triggered,
                reason: None,
                after_output: rec.buffers,
            },
            BarrierSignal::Abort { id, reason } => Notification {
                checkpoint: id.get(),
                kind: NotificationKind::Aborted,
                reason: Some(reason.into()),
                after_output: rec.buffers,
            },
            BarrierSignal::ChannelStateDone { id } => Notification {
                checkpoint: id.get(),
                kind: NotificationKind::ChannelStateDone,
                reason: None,
                after_output: rec.buffers,
            },
        });
    }
    match passed {
        Some(StreamElement::Records(batch)) => {
            rec.buffers += batch.len();
            rec.run
                .output
                .extend(batch.iter().map(|b| OutputItem::Buffer {
                    ch: channel,
                    buffer: b.id,
                }));
        }
        Some(StreamElement::Watermark(Watermark(watermark))) => {
            rec.run.output.push(OutputItem::Watermark {
                ch: channel,
                watermark,
            })
        }
        Some(StreamElement::Idle(idle)) => {
            rec.run.output.push(OutputItem::Idle { ch: channel, idle })
        }
        // An end of partition is not listed in the output (the format
        // has no item for it); barriers and cancel markers never pass.
        _ => {}
    }
}

/// Feeds every replayed element until the replay is empty.
fn drain<H: BarrierHandler<ScenarioBuffer>>(
    handler: &mut H,
    now_ns: u64,
    signals: &mut Vec<BarrierSignal>,
    rec: &mut Recorder,
) {
    while let Some((channel, element)) = handler.next_replay() {
        feed(handler, channel, element, now_ns, signals, rec);
    }
}

fn drive<H: BarrierHandler<ScenarioBuffer>>(mut handler: H, scenario: &Scenario) -> Run {
    let mut rec = Recorder::default();
    let mut signals = Vec::new();
    for (i, item) in scenario.input.iter().enumerate() {
        // Only the unaligned mode has priority items (checked on parsing).
        let Some((channel, element)) = Scenario::element(item) else {
            continue;
        };
        let now_ns = i as u64;
        feed(
            &mut handler,
            channel,
            element,
            now_ns,
            &mut signals,
            &mut rec,
        );
        drain(&mut handler, now_ns, &mut signals, &mut rec);
    }
    handler.end_of_input();
    let now_ns = scenario.input.len() as u64;
    drain(&mut handler, now_ns, &mut signals, &mut rec);
    rec.run
}

/// Runs an unaligned scenario, or an exactly-once one with an
/// aligned-checkpoint timeout: each item is fed as the input gate feeds the
/// [`Unaligned`] handler (a priority item to [`Unaligned::on_priority`],
/// the rest to `on_element`), and a buffer read while its channel's state
/// is open ([`Unaligned::channel_state_open`]) is recorded as channel state
/// of the pending checkpoint. The state of a checkpoint taken unaligned
/// starts at its trigger with an empty list for every channel neither ended
/// nor blocked before the item that triggered it (none for one taken
/// aligned), and is kept when it
/// reaches `channel_state_done` (dropped when it is aborted).
///
/// Blocking (rules 18, 19) is pure: an item that arrives on a blocked
/// channel waits in that channel, with any after it, and is read when the
/// channel is unblocked, before the next input item (the lowest channel
/// first), at the time of the item that unblocked it. After the last item
/// the handler's input ends and what still waits is read in channel order.
/// Barriers carry the time of their checkpoint in `trigger_times`.
fn drive_unaligned(scenario: &Scenario) -> Run {
    let mut handler = match scenario.aligned_checkpoint_timeout {
        Some(t) => Unaligned::with_aligned_timeout(scenario.channels, t),
        None => Unaligned::new(scenario.channels),
    };
    let mut d = UnalignedDriver {
        rec: Recorder::default(),
        signals: Vec::new(),
        ended: vec![false; scenario.channels],
        recording: None,
        done: ChannelStates::new(),
    };
    let mut waiting: Vec<std::collections::VecDeque<InputItem>> =
        vec![Default::default(); scenario.channels];
    for (i, item) in scenario.input.iter().enumerate() {
        let now_ns = i as u64;
        let data_ch = match *item {
            InputItem::Priority { .. } => None,
            ref other => Scenario::element(other).map(|(ch, _)| ch),
        };
        match data_ch {
            Some(ch)
                if BarrierHandler::<ScenarioBuffer>::is_blocked(&handler, ch)
                    || !waiting[ch].is_empty() =>
            {
                waiting[ch].push_back(*item);
            }
            _ => d.step(&mut handler, scenario, item, now_ns),
        }
        // What waits in channels unblocked now is read next.
        while let Some(ch) = (0..scenario.channels).find(|&c| {
            !waiting[c].is_empty() && !BarrierHandler::<ScenarioBuffer>::is_blocked(&handler, c)
        }) {
            let next = waiting[ch].pop_front().expect("not empty");
            d.step(&mut handler, scenario, &next, now_ns);
        }
    }
    BarrierHandler::<ScenarioBuffer>::end_of_input(&mut handler);
    let now_ns = scenario.input.len() as u64;
    for queue in &mut waiting {
        while let Some(next) = queue.pop_front() {
            d.step(&mut handler, scenario, &next, now_ns);
        }
    }
    d.rec.run.channel_state = Some(d.done);
    d.rec.run
}

/// The state of [`drive_unaligned`].
struct UnalignedDriver {
    rec: Recorder,
    signals: Vec<BarrierSignal>,
    ended: Vec<bool>,
    recording: Option<(u64, BTreeMap<usize, Vec<u64>>)>,
    done: ChannelStates,
}

impl UnalignedDriver {
    /// Feeds one item read now.
    fn step(
        &mut self,
        handler: &mut Unaligned,
        scenario: &Scenario,
        item: &InputItem,
        now_ns: u64,
    ) {
        let seen = self.rec.run.notifications.len();
        let channels = scenario.channels;
        let blocked_before: Vec<bool> = (0..channels)
            .map(|c| BarrierHandler::<ScenarioBuffer>::is_blocked(handler, c))
            .collect();
        let trigger_time = |id: u64| scenario.trigger_times.get(&id).copied().unwrap_or(0);
        match (*item, Scenario::element(item)) {
            (InputItem::Priority { ch, id }, _) => {
                handler.on_priority(
                    ch,
                    CheckpointBarrier::new(CheckpointId(id), trigger_time(id)),
                    now_ns,
                    &mut self.signals,
                );
            }
            (_, Some((ch, element))) => {
                if let (InputItem::Buffer { id, .. }, Some((_, state))) =
                    (item, &mut self.recording)
                {
                    if handler.channel_state_open(ch) {
                        state.entry(ch).or_default().push(*id);
                    }
                }
                if matches!(item, InputItem::EndOfPartition { .. }) {
                    self.ended[ch] = true;
                }
                let element = match element {
                    StreamElement::Barrier(b) => StreamElement::Barrier(CheckpointBarrier::new(
                        b.id,
                        trigger_time(b.id.get()),
                    )),
                    other => other,
                };
                let passed = handler.on_element(ch, element, now_ns, &mut self.signals);
                self.note_triggers(channels, &blocked_before);
                record_signals(&mut self.signals, passed, ch, &mut self.rec);
                return self.bookkeep(seen);
            }
            (_, None) => unreachable!("only priority items are not elements"),
        }
        self.note_triggers(channels, &blocked_before);
        // Nothing passes a priority item: only the signals are recorded.
        let none: Option<StreamElement<ScenarioBuffer>> = None;
        record_signals(&mut self.signals, none, item.channel(), &mut self.rec);
        self.bookkeep(seen)
    }

    /// Starts a recording for a trigger among the new signals: one list per
    /// channel that neither ended nor was blocked, when taken unaligned.
    fn note_triggers(&mut self, channels: usize, blocked_before: &[bool]) {
        for s in &self.signals {
            if let BarrierSignal::Trigger { barrier, alignment } = s {
                let open = (0..channels)
                    .filter(|&c| alignment.unaligned && !self.ended[c] && !blocked_before[c])
                    .map(|c| (c, Vec::new()))
                    .collect();
                self.recording = Some((barrier.id.get(), open));
            }
        }
    }

    /// Keeps or drops the recording per the new notifications.
    fn bookkeep(&mut self, seen: usize) {
        for n in &self.rec.run.notifications[seen..] {
            match n.kind {
                NotificationKind::Triggered => {}
                NotificationKind::ChannelStateDone => {
                    if let Some((id, state)) = self.recording.take() {
                        debug_assert_eq!(id, n.checkpoint);
                        self.done.insert(id, state);
                    }
                }
                NotificationKind::Aborted => {
                    if self
                        .recording
                        .as_ref()
                        .is_some_and(|(id, _)| *id == n.checkpoint)
                    {
                        self.recording = None;
                    }
                }
            }
        }
    }
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
                "must be between 1 and",
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
            (
                TINY.replace("\"channels\": 2", "\"channels\": 18446744073709551615"),
                "must be between 1 and 65536",
            ),
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

    /// Two channels; channel 0 is blocked for checkpoint 1 when watermark
    /// 10 and buffer 3 arrive, channel 1's watermark 4 precedes its barrier.
    const WATERMARKS: &str = r#"{
        "name": "wm", "source": "test", "mode": "exactly_once", "check": "exact",
        "channels": 2, "buffer_size": 8,
        "input": [
            {"ch": 0, "watermark": 1}, {"ch": 0, "barrier": 1}, {"ch": 0, "watermark": 10},
            {"ch": 0, "buffer": 3}, {"ch": 0, "idle": true}, {"ch": 1, "buffer": 2},
            {"ch": 1, "watermark": 4}, {"ch": 1, "barrier": 1}
        ],
        "expect_output": [
            {"ch": 0, "watermark": 1}, {"ch": 1, "buffer": 2}, {"ch": 1, "watermark": 4},
            {"ch": 0, "watermark": 10}, {"ch": 0, "buffer": 3}, {"ch": 0, "idle": true}
        ],
        "expect_notifications": [{"checkpoint": 1, "kind": "triggered", "after_output": 1}]
    }"#;

    #[test]
    fn watermarks_and_idle_items_are_held_replayed_and_emitted_in_their_shapes() {
        let s = Scenario::from_json("wm.json", WATERMARKS).unwrap();
        assert_eq!(
            s.input[2],
            InputItem::Watermark { ch: 0, value: 10 },
            "parsed as a watermark"
        );
        assert_eq!(s.input[4], InputItem::Idle { ch: 0, idle: true });
        assert_eq!(s.check().difference, None);
        let mut semantic = s.clone();
        semantic.check = CheckKind::Semantic;
        assert_eq!(semantic.check().difference, None);
        let text = s.run().to_json();
        assert!(text.contains(r#"{"ch":0,"watermark":10}"#), "{text}");
        assert!(text.contains(r#"{"ch":0,"idle":true}"#), "{text}");
        // The emitted output reads back as the file's expectation.
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let back: Vec<OutputItem> = serde_json::from_value(json["output"].clone()).unwrap();
        assert_eq!(back, s.expect_output);
    }

    #[test]
    fn semantic_check_places_watermarks_around_the_trigger() {
        let mut s = Scenario::from_json("wm.json", WATERMARKS).unwrap();
        s.check = CheckKind::Semantic;
        let wm = |ch, watermark| OutputItem::Watermark { ch, watermark };
        let buf = |ch, buffer| OutputItem::Buffer { ch, buffer };
        let idle = OutputItem::Idle { ch: 0, idle: true };
        let mut run = s.run();
        // Watermark 10 follows barrier 1 on ch 0 but comes before any
        // buffer, so before the trigger after 1 buffer.
        run.output = vec![wm(0, 1), wm(0, 10), buf(1, 2), wm(1, 4), buf(0, 3), idle];
        let d = s.check_run(&run).difference.unwrap();
        assert!(d.contains("watermark 10 of ch 0 follows barrier 1"), "{d}");
        // Watermark 4 precedes barrier 1 on ch 1 but comes after buffer 3,
        // which is handed on after the trigger.
        run.output = vec![wm(0, 1), buf(1, 2), wm(0, 10), buf(0, 3), wm(1, 4), idle];
        let d = s.check_run(&run).difference.unwrap();
        assert!(d.contains("watermark 4 of ch 1 precedes barrier 1"), "{d}");
        // A lost idle item.
        run.output = s.expect_output[..5].to_vec();
        let d = s.check_run(&run).difference.unwrap();
        assert!(d.contains("idle of ch 0 was never handed on"), "{d}");
    }

    /// Two channels, unaligned: priority barrier 1 on ch 0 after buffer 1;
    /// buffer 2 (ch 1) and buffer 3 (ch 0) are channel state.
    const UNALIGNED: &str = r#"{
        "name": "ua", "source": "test", "mode": "unaligned", "check": "exact",
        "channels": 2, "buffer_size": 8,
        "input": [
            {"ch": 0, "buffer": 1}, {"ch": 0, "priority": 1}, {"ch": 1, "buffer": 2},
            {"ch": 0, "buffer": 3}, {"ch": 0, "barrier": 1}, {"ch": 0, "buffer": 4},
            {"ch": 1, "barrier": 1}
        ],
        "expect_output": [
            {"ch": 0, "buffer": 1}, {"ch": 1, "buffer": 2}, {"ch": 0, "buffer": 3},
            {"ch": 0, "buffer": 4}
        ],
        "expect_notifications": [
            {"checkpoint": 1, "kind": "triggered", "after_output": 1},
            {"checkpoint": 1, "kind": "channel_state_done", "after_output": 4}
        ],
        "expect_channel_state": {"1": {"0": [3], "1": [2]}}
    }"#;

    #[test]
    fn an_unaligned_scenario_records_and_emits_channel_state() {
        let s = Scenario::from_json("ua.json", UNALIGNED).unwrap();
        assert_eq!(s.input[1], InputItem::Priority { ch: 0, id: 1 });
        assert_eq!(s.check().difference, None);
        let mut semantic = s.clone();
        semantic.check = CheckKind::Semantic;
        assert_eq!(semantic.check().difference, None);
        let text = s.run().to_json();
        assert!(
            text.contains(r#""channel_state": {"1":{"0":[3],"1":[2]}}"#),
            "{text}"
        );
        // Another expected state fails the exact check, naming it.
        let mut wrong = s.clone();
        wrong
            .expect_channel_state
            .get_mut(&1)
            .unwrap()
            .insert(0, vec![3, 4]);
        let d = wrong.check().difference.unwrap();
        assert!(
            d.starts_with("channel state of checkpoint 1: expected"),
            "{d}"
        );
        // A state holding a post-barrier buffer fails the semantic check.
        let mut run = s.run();
        let state = run.channel_state.as_mut().unwrap().get_mut(&1).unwrap();
        state.insert(0, vec![3, 4]);
        let d = semantic.check_run(&run).difference.unwrap();
        assert!(d.contains("checkpoint 1, ch 0"), "{d}");
        // And one missing a buffer too.
        let mut run = s.run();
        run.channel_state
            .as_mut()
            .unwrap()
            .get_mut(&1)
            .unwrap()
            .insert(1, vec![]);
        assert!(semantic.check_run(&run).difference.is_some());
        // The other modes emit no channel state.
        let aligned = Scenario::from_json("tiny.json", TINY).unwrap();
        assert!(!aligned.run().to_json().contains("channel_state"));
    }

    #[test]
    fn bad_unaligned_input_is_an_error_naming_the_problem() {
        let cases = [
            (
                UNALIGNED.replace("\"unaligned\"", "\"exactly_once\""),
                "input[1]: a `priority` barrier needs",
            ),
            (
                UNALIGNED.replace("{\"1\": {\"0\"", "{\"1\": {\"5\""),
                "expect_channel_state[\"1\"]: channel 5 out of range",
            ),
            (
                UNALIGNED.replace("{\"1\": {\"0\"", "{\"x\": {\"0\""),
                "bad scenario JSON",
            ),
            (
                UNALIGNED.replace(
                    "{\"ch\": 0, \"priority\": 1}",
                    "{\"ch\": 0, \"priority\": 1, \"barrier\": 1}",
                ),
                "exactly one of `buffer`, `barrier`, `priority`",
            ),
            (
                UNALIGNED.replace(
                    "\"buffer_size\": 8,",
                    "\"buffer_size\": 8, \"max_alignment_bytes\": 100,",
                ),
                "`max_alignment_bytes` does not apply",
            ),
        ];
        for (text, want) in cases {
            assert_ne!(text, UNALIGNED, "the case for {want} changes the file");
            let e = Scenario::from_json("x.json", &text)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("x.json: ") && e.contains(want),
                "{e} lacks {want}"
            );
        }
        let e = Scenario::from_json(
            "x.json",
            &TINY.replace("\"notes\": \"\"", "\"expect_channel_state\": {}"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`expect_channel_state` needs"), "{e}");
    }

    #[test]
    fn bad_watermark_input_is_an_error_naming_the_item() {
        let cases = [
            (
                WATERMARKS.replace("\"watermark\": 10}", "\"watermark\": 0}"),
                "input[2]: watermark 0 on channel 0 is below its earlier watermark 1",
            ),
            (
                WATERMARKS.replace(
                    "{\"ch\": 1, \"watermark\": 4}, {\"ch\": 1, \"barrier\": 1}",
                    "{\"ch\": 1, \"end_of_partition\": true}, {\"ch\": 1, \"watermark\": 4}",
                ),
                "input[7]: channel 1 delivers input after its end_of_partition",
            ),
            (
                WATERMARKS.replace(
                    "\"idle\": true}, {\"ch\": 1",
                    "\"idle\": true, \"buffer\": 9}, {\"ch\": 1",
                ),
                "input[4]: must have exactly one of",
            ),
            (
                WATERMARKS.replace(
                    "{\"ch\": 0, \"watermark\": 10},\n",
                    "{\"ch\": 0, \"watermark\": 10, \"size\": 3},\n",
                ),
                "input[2]: `size` is only allowed on a buffer",
            ),
            (
                WATERMARKS.replace(
                    "{\"ch\": 0, \"watermark\": 10}, {\"ch\": 0, \"buffer\": 3}",
                    "{\"ch\": 0, \"watermark\": 10, \"buffer\": 4}, {\"ch\": 0, \"buffer\": 3}",
                ),
                "exactly one of `buffer`, `watermark`, `idle`",
            ),
            (
                WATERMARKS.replace(
                    "{\"ch\": 0, \"idle\": true}\n",
                    "{\"ch\": 5, \"idle\": true}\n",
                ),
                "expect_output[5]: channel 5 out of range",
            ),
            (
                WATERMARKS.replace(
                    "\"watermark\": 1}, {\"ch\": 0, \"barrier\"",
                    "\"watermark\": \"x\"}, {\"ch\": 0, \"barrier\"",
                ),
                "bad scenario JSON",
            ),
        ];
        for (text, want) in cases {
            assert_ne!(text, WATERMARKS, "the case for {want} changes the file");
            let e = Scenario::from_json("x.json", &text)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("x.json: ") && e.contains(want),
                "{e} lacks {want}"
            );
        }
    }
}
