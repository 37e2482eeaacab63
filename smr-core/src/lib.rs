//! smr-core: rshm's shared-memory engine.
//!
//! One region per endpoint in /dev/shm holds a command ring (peers -> owner), a response ring,
//! inject and SAR buffer pools and a peer table. Messages travel inline in a command, through an
//! inject buffer, by CMA straight from the sender's memory, or in SAR segments. Nothing here
//! knows libfabric; the provider builds libfabric's objects on top of `Endpoint`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod copy;
pub mod error;
pub mod free_stack;
pub mod held;
pub mod idmap;
pub mod pod;
pub mod ring;
pub(crate) mod sync;

#[cfg(not(loom))]
pub mod clock;
#[cfg(not(loom))]
pub mod cma;
#[cfg(not(loom))]
pub mod cmd;
#[cfg(not(loom))]
pub mod cpu_marks;
#[cfg(not(loom))]
pub mod endpoint;
#[cfg(not(loom))]
pub mod fd_limit;
#[cfg(not(loom))]
pub mod iov;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
pub mod liveness;
pub mod published;
#[cfg(not(loom))]
pub mod reap;
#[cfg(not(loom))]
pub mod region;
#[cfg(not(loom))]
pub mod shm;
#[cfg(not(loom))]
pub mod signal_unlink;
#[cfg(test)]
mod test_child;
#[cfg(feature = "test-hooks")]
pub mod testing;
#[cfg(not(loom))]
pub mod wake;

pub use error::{Error, Result};
