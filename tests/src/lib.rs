//! Shared helpers for the multi-process tests.
