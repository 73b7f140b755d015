//! The incremental-checkpoint flags, shared by `lockgate loadgen` and
//! `lockgate flights` (the three settings of `CheckpointConfig`).

use lockgate::CheckpointConfig;

/// `--incremental`, `--full-every`, `--max-chain-ratio`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct IncrementalArgs {
    /// Incremental checkpoints: a subtask writes only what changed since
    /// the last completed checkpoint (with a checkpoint folder; savepoints
    /// are always full)
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub incremental: bool,
    /// With --incremental: at most N parts in a subtask's chain (its full
    /// snapshot and the deltas after it), then a full snapshot (1: always
    /// full)
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub full_every: u32,
    /// With --incremental: a full snapshot once a subtask's chain holds
    /// more than X times the bytes of its live state
    #[arg(long, value_name = "X", default_value_t = 2.0)]
    pub max_chain_ratio: f64,
}

impl IncrementalArgs {
    /// Sets the three fields of `c`.
    ///
    /// # Errors
    /// A message naming the flag when a value is out of range.
    pub(crate) fn apply(&self, c: &mut CheckpointConfig) -> Result<(), String> {
        if self.full_every == 0 {
            return Err("--full-every must be at least 1 (1: every snapshot full)".into());
        }
        if !(self.max_chain_ratio.is_finite() && self.max_chain_ratio > 0.0) {
            return Err(format!(
                "--max-chain-ratio must be a positive number, got {}",
                self.max_chain_ratio
            ));
        }
        c.incremental = self.incremental;
        c.full_every = self.full_every;
        c.max_chain_ratio = self.max_chain_ratio;
        Ok(())
    }

    /// The settings as JSON fields of a run's configuration.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "incremental": self.incremental,
            "full_every": self.full_every,
            "max_chain_ratio": self.max_chain_ratio,
        })
    }
}
