//! The `lockgate` command.
fn main() {}
