//! Atomic operations: the semantics the target applies.

pub mod apply;
