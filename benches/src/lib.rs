//! Benchmarks of lockgate beside hand-written baselines.
