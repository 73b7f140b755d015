//! Benchmarks of lockgate beside hand-written baselines.
//!
//! - [`raw`]: the reference topology on raw crossbeam channels and
//!   threads, the baseline every lockgate figure is compared with.

pub mod raw;
