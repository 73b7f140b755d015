//! The incremental-checkpoint flags, shared by `lockgate loadgen` and
//! `lockgate flights` (the four settings of `CheckpointConfig`).

use lockgate::CheckpointConfig;

/// `--incremental`, `--full-every`, `--full-min-interval-ms`,
/// `--max-chain-ratio`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct IncrementalArgs {
    /// Incremental checkpoints: a subtask writes only what changed since
    /// the last completed checkpoint (with a checkpoint folder; savepoints
    /// are always full) [default: true]
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub incremental: Option<bool>,
    /// With --incremental: at most N parts in a subtask's chain (its full
    /// snapshot and the deltas after it), then a full snapshot (1: always
    /// full) [default: 1000]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub full_every: Option<u32>,
    /// With --incremental: every subtask writes a full snapshot at the
    /// first checkpoint MS or more after the last full one (0: every
    /// checkpoint full) [default: 2000]
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub full_min_interval_ms: Option<u64>,
    /// With --incremental: a full snapshot once a subtask's chain holds
    /// more than X times the bytes of its live state [default: 2]
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub max_chain_ratio: Option<f64>,
}

impl IncrementalArgs {
    /// The flag given, if any (they need checkpoints).
    pub(crate) fn given(&self) -> Option<&'static str> {
        if self.incremental.is_some() {
            Some("incremental")
        } else if self.full_every.is_some() {
            Some("full-every")
        } else if self.full_min_interval_ms.is_some() {
            Some("full-min-interval-ms")
        } else if self.max_chain_ratio.is_some() {
            Some("max-chain-ratio")
        } else {
            None
        }
    }

    /// Sets the three fields of `c` (those not given keep their defaults).
    ///
    /// # Errors
    /// A message naming the flag when a value is out of range.
    pub(crate) fn apply(&self, c: &mut CheckpointConfig) -> Result<(), String> {
        if self.full_every == Some(0) {
            return Err("--full-every must be at least 1 (1: every snapshot full)".into());
        }
        if let Some(r) = self
            .max_chain_ratio
            .filter(|r| !(r.is_finite() && *r > 0.0))
        {
            return Err(format!(
                "--max-chain-ratio must be a positive number, got {r}"
            ));
        }
        if let Some(i) = self.incremental {
            c.incremental = i;
        }
        if let Some(n) = self.full_every {
            c.full_every = n;
        }
        if let Some(ms) = self.full_min_interval_ms {
            c.full_min_interval = std::time::Duration::from_millis(ms);
        }
        if let Some(r) = self.max_chain_ratio {
            c.max_chain_ratio = r;
        }
        Ok(())
    }

    /// The settings `c` runs with, as JSON fields of a run's configuration.
    /// `full_min_interval_ms` is left out at its default, so that the
    /// flags recorded by a build before it existed still match.
    pub(crate) fn json(c: &CheckpointConfig) -> serde_json::Value {
        let mut j = serde_json::json!({
            "incremental": c.incremental,
            "full_every": c.full_every,
            "max_chain_ratio": c.max_chain_ratio,
        });
        if c.full_min_interval != CheckpointConfig::default().full_min_interval {
            j["full_min_interval_ms"] = (c.full_min_interval.as_millis() as u64).into();
        }
        j
    }
}
