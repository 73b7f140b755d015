//! What the CLI test files share: the binary, and one heavy run at a time.

use std::process::Command;
use std::sync::Mutex;

/// Runs that move records take the machine's 2 cores: one at a time
/// (within one test binary; cargo runs the binaries one after another).
static HEAVY: Mutex<()> = Mutex::new(());

/// Holds the machine for one heavy run.
pub(crate) fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `lockgate` binary, with `RUST_LOG` cleared.
pub(crate) fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockgate"));
    c.env_remove("RUST_LOG");
    c
}
