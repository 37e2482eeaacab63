//! librshm-fi.so: libfabric's shared-memory provider on top of smr-core.
//!
//! libfabric loads this library as a DL provider and calls `fi_prov_ini` (`prov_ini`), which
//! returns our `fi_provider`. Every libfabric object is a `#[repr(C)]` struct whose first field is the
//! libfabric `fid_*`, so the `fid` pointer the application hands back converts to our object.
//! Every `extern "C"` entry point is a thin trampoline (`boundary::guard`) that catches panics and turns
//! errors into `-FI_E*` codes; the logic behind it is safe Rust.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod atomic;
pub mod av;
pub mod block;
pub mod boundary;
pub mod cntr;
pub mod core_api;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod eq;
pub mod error;
pub mod fabric;
pub mod getinfo;
pub mod iov;
pub mod mr;
pub mod names;
pub mod object;
pub mod params;
pub mod poll;
pub mod progress;
pub mod prov_ini;
pub mod reap;
pub mod state;
pub mod stubs;
pub mod wait;
pub mod waitfd;
pub mod waitset;
