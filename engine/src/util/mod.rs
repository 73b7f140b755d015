//! The bottom layer: helpers with no lockgate vocabulary. The engine's one
//! monotonic clock (`clock`), background threads' yield points
//! (`background`), and the snapshot threads' buffer pool (`buffers`).

pub(crate) mod background;
pub(crate) mod buffers;
pub(crate) mod calls;
pub(crate) mod clock;
