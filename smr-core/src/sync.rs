//! The one place atomics and interior mutability come from.
//!
//! Under `--cfg loom` every atomic and cell is loom's, so the model checker sees every access the
//! algorithms make; otherwise they are the std types, whose layout matches plain integers and can
//! therefore live in shared memory. Nothing else in the crate may import `core::sync::atomic`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Only in modules the loom models do not build (a region's private per-mapping flags).
#[cfg(not(loom))]
pub(crate) use core::sync::atomic::AtomicBool;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `core::cell::UnsafeCell` with loom's closure API, so both builds share one call shape.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Tell the scheduler (or loom) that this thread is waiting for another one.
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// What a `prefetch` prepares the cache line for.
#[derive(Clone, Copy)]
pub(crate) enum Prefetch {
    /// The caller expects to read it soon (the next ring slot, while it handles this one).
    Read,
    /// The caller is about to read and then write it (a ring slot's stamp, which the consumer
    /// last wrote): the line comes in a writable state, one coherence transaction instead of
    /// two (a shared copy for the read, then an upgrade for the write).
    Write,
}

/// Start bringing the cache line holding `*target` in, as `kind` says. A hint only: no effect
/// on the value or on ordering.
#[inline(always)]
pub(crate) fn prefetch<T>(target: &T, kind: Prefetch) {
    prefetch_addr((target as *const T).cast::<u8>(), kind)
}

/// `prefetch` of the line holding the byte at `at` (a prefetch never faults, whatever the
/// address). Nothing under loom or Miri, which model no cache and run no inline assembly
/// (`scripts/sanitizers.sh miri` stopped at the first ring test before this was left out).
#[inline(always)]
pub(crate) fn prefetch_addr(at: *const u8, kind: Prefetch) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    {
        // SAFETY: PREFETCHT0 and PREFETCHW only hint the cache (PREFETCHW asks for the line in
        // a writable state); they read no data, fault on no address, and write nothing.
        unsafe {
            match kind {
                Prefetch::Read => {
                    core::arch::asm!("prefetcht0 [{0}]", in(reg) at, options(nostack, readonly, preserves_flags))
                }
                Prefetch::Write => {
                    core::arch::asm!("prefetchw [{0}]", in(reg) at, options(nostack, readonly, preserves_flags))
                }
            }
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    let _ = (at, kind);
}
