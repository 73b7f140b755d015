mod part;
pub use part::Top;
