//! Operators.

pub mod flights;
