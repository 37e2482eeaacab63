//! The libfabric side of `rshm-fi-bench`: everything goes through libfabric's public API, as an
//! application sees it, so the figures compare providers exactly as their users meet them.
//!
//! The object wrappers (`fabric`) are fabtests-adapter's, compiled into this crate from its
//! source so both harnesses share one set of ops-table calls; `endpoint` opens one RDM endpoint
//! with a CQ and an AV and counts completions; `tests` holds the measured loops, each in two
//! roles: the initiator, which times, and the responder, which echoes or just progresses.

#[path = "../../../fabtests-adapter/src/fabric/mod.rs"]
#[allow(dead_code, clippy::all)]
pub mod fabric;

pub mod endpoint;
pub mod tests;

pub use endpoint::{Endpoint, Family, RemoteMr};
pub use tests::Test;
