//! OpenSHMEM queues (the communication and data aggregation proposal) as a C library over any
//! OpenSHMEM 1.4/1.5 library. See README.md for the API, the design and the choices made where
//! the proposal leaves points open.
//!
//! Modules: `ffi` (the exported C functions), `handle` (queue objects and their sharing rule),
//! `comm` (communication queues), `data` (data queues), `service` (the thread that applies
//! incoming batches), `inbox` (the symmetric block layout of a communication queue), `image`
//! (where the main program's symmetric globals are), `wire` (the batch format, and
//! what a record does to memory), `mem` (raw
//! memory access), `sys` (the OpenSHMEM calls), `config` (C types and error codes). Unsafe code
//! is confined to `sys`, `mem`, `image`, `handle` and `ffi`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod comm;
pub mod config;
pub mod data;
pub mod ffi;
pub mod handle;
pub mod image;
pub mod inbox;
pub mod mem;
pub mod service;
pub mod sys;
pub mod wire;

#[cfg(test)]
mod tests;
