//! Raw memory access: words of a queue's symmetric block, and applying one record to this
//! PE's symmetric memory.
//!
//! # Safety
//! Addresses handed to these functions are inside memory that stays mapped for the call: a
//! queue's symmetric block (alive until the queue is destroyed, which first quiesces every
//! PE), or application memory named by a push, which the OpenSHMEM queue contract keeps valid
//! until the operation is flushed. Words are 8-byte aligned (the block is laid out in 64-byte
//! lines); record targets are checked for alignment before any atomic access.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Acquire-load of an aligned 64-bit word at `addr`.
pub fn load_word(addr: usize) -> u64 {
    debug_assert_eq!(addr % 8, 0);
    // SAFETY: module contract: an aligned word of a live block; other PEs write it only with
    // OpenSHMEM puts/atomics, this process only through these functions.
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }.load(Ordering::Acquire)
}

/// Release-store of an aligned 64-bit word at `addr`.
pub fn store_word(addr: usize, value: u64) {
    debug_assert_eq!(addr % 8, 0);
    // SAFETY: as for load_word.
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }.store(value, Ordering::Release)
}

/// A copy of `len` bytes at `addr` (a received batch, an incoming data area).
pub fn read_bytes(addr: usize, len: usize) -> &'static [u8] {
    // SAFETY: module contract: the range is inside a live block; the bytes were published
    // before the acquire load that made the caller read them, and nobody writes them while the
    // caller holds the slice (a slot is rewritten only after its ack, data areas only in a
    // flush that excludes pops). The 'static lifetime is the caller's to shorten.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

/// The `len` aligned words at `addr` (a received batch).
pub fn read_words(addr: usize, len: usize) -> &'static [u64] {
    debug_assert_eq!(addr % 8, 0);
    // SAFETY: as for read_bytes; `addr` is 8-byte aligned (a batch's place in a block whose
    // address the queue checked for alignment at creation).
    unsafe { std::slice::from_raw_parts(addr as *const u64, len) }
}

/// The bytes of `words` (a batch, shipped with one put).
pub fn as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: the same memory, as bytes: u8 has no alignment or validity requirement, and the
    // length is the slice's size in bytes.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

/// Atomically adds 1 to the 8-byte integer at `addr` (8-byte aligned: the caller checks).
#[inline]
pub fn inc_u64(addr: usize) {
    debug_assert_eq!(addr % 8, 0);
    // SAFETY: module contract; aligned per the caller.
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }.fetch_add(1, Ordering::Relaxed);
}

/// Atomically adds 1 to the 4-byte integer at `addr` (4-byte aligned: the caller checks).
#[inline]
pub fn inc_u32(addr: usize) {
    debug_assert_eq!(addr % 4, 0);
    // SAFETY: module contract; aligned per the caller.
    unsafe { AtomicU32::from_ptr(addr as *mut u32) }.fetch_add(1, Ordering::Relaxed);
}

/// Copies `src` to `addr`.
pub fn write_bytes(addr: usize, src: &[u8]) {
    // SAFETY: module contract: `addr..addr+len` is writable memory of this process.
    unsafe { std::ptr::copy(src.as_ptr(), addr as *mut u8, src.len()) }
}

/// Copies `len` bytes from `src` to `dst` (the ranges may overlap).
pub fn move_bytes(dst: usize, src: usize, len: usize) {
    // SAFETY: module contract: both ranges are inside memory of this process.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
}

pub fn aligned(addr: usize, esize: usize) -> bool {
    addr % esize == 0
}

pub fn add_elems(addr: usize, esize: usize, nelems: usize, value: impl Fn(usize) -> u64) {
    for i in 0..nelems {
        let a = addr + i * esize;
        let v = value(i);
        if esize == 8 {
            // SAFETY: module contract; `a` is 8-byte aligned (checked by the caller).
            unsafe { AtomicU64::from_ptr(a as *mut u64) }.fetch_add(v, Ordering::Relaxed);
        } else {
            // SAFETY: module contract; `a` is 4-byte aligned (checked by the caller).
            unsafe { AtomicU32::from_ptr(a as *mut u32) }.fetch_add(v as u32, Ordering::Relaxed);
        }
    }
}
