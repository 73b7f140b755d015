//! Benchmarks of lockgate beside hand-written baselines.
//!
//! - [`raw`]: the reference topology on raw crossbeam channels and
//!   threads, the baseline every lockgate figure is compared with.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

pub mod raw;
