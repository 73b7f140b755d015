use crate::low::Base;
pub struct Top(pub Base);
