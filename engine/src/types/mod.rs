//! The vocabulary every layer above speaks: what a channel carries
//! (`element`), who is who (`task_id`), what can go wrong (`error`), how
//! keys map to key groups and subtasks (`key_groups`), a task's counters
//! (`metrics`), and what the job thread tells a task (`control`).

pub(crate) mod control;
pub(crate) mod element;
pub(crate) mod error;
pub(crate) mod key_groups;
pub(crate) mod metrics;
pub(crate) mod task_id;
