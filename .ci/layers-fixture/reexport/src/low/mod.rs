// A facade's re-export of a module above counts as an import.
pub use crate::high::Top;
pub struct Base;
