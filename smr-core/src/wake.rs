//! Sleeping on a futex in shared memory, and waking a sleeper in another process.
//!
//! A waiter arms the word, re-checks its queues, and sleeps only if they are still empty; a
//! producer pays for the wake syscall only when a waiter is armed. SeqCst fences on both sides
//! order "publish entry, then read armed" against "arm, then read queues", so no wake-up is lost.

use crate::layout::WakeWord;
use crate::sync::{fence, Ordering};
use std::time::Duration;

/// A full StoreLoad barrier. On x86-64 a locked add to the stack is one (it is what Linux's
/// smp_mb() uses) and costs a fraction of an `mfence`; elsewhere a SeqCst fence.
#[inline(always)]
fn full_barrier() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: ORs zero into the word at the stack pointer with a lock prefix: no value changes,
    // no memory outside our own stack is touched.
    unsafe {
        core::arch::asm!("lock or dword ptr [rsp], 0", options(nostack))
    };
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
}

/// Producer side: call after publishing an entry into the owner's region.
pub fn notify(word: &WakeWord) {
    full_barrier();
    if word.armed.load(Ordering::Relaxed) != 0 {
        word.seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(&word.seq);
    }
}

/// Owner side, in three steps (see `endpoint::WaitHandle`): arm, returning the sequence to
/// sleep on.
pub fn arm(word: &WakeWord) -> u32 {
    let seq = word.seq.load(Ordering::SeqCst);
    word.armed.fetch_add(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    seq
}

/// Sleep until the sequence moves past `seq` or `timeout` passes.
pub fn sleep(word: &WakeWord, seq: u32, timeout: Option<Duration>) {
    futex_wait(&word.seq, seq, timeout);
}

pub fn disarm(word: &WakeWord) {
    word.armed.fetch_sub(1, Ordering::SeqCst);
}

/// Owner side: sleep until notified or `timeout` passes, unless `ready()` is already true.
pub fn wait(word: &WakeWord, timeout: Option<Duration>, ready: impl Fn() -> bool) {
    let seq = arm(word);
    if !ready() {
        sleep(word, seq, timeout);
    }
    disarm(word);
}

fn futex_wait(word: &crate::sync::AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as _ });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT on a live, aligned u32 in a shared mapping (not PRIVATE: other processes
    // wake it); the kernel only compares and sleeps.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, ts_ptr) };
}

fn futex_wake(word: &crate::sync::AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live, aligned u32; wakes every sleeper.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}
