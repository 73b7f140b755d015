mod high;
mod low;
pub use high::Top;
