//! Placeholder, replaced by the handler bench.
fn main() {}
