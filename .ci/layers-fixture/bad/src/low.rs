// A bad import: `low` is below `high` in the layer order.
use crate::high::Top;
pub struct Base;
pub fn wrap(t: Top) -> Top {
    t
}
