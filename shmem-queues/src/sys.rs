//! The OpenSHMEM calls this library makes, as safe wrappers.
//!
//! The functions are declared `extern "C"` and left undefined in `libshmem_queues.so`; they
//! resolve against the application's OpenSHMEM (SOS's libsma, Open MPI's liboshmem, ...) when
//! the program is linked by its `oshcc` and loaded. Only OpenSHMEM 1.4 calls are used (Open MPI
//! 4.1's oshmem is 1.4), so any 1.4 or 1.5 library will do.
//!
//! # Safety
//! The wrappers take symmetric addresses as `*mut u8`/`*const u8` plus lengths; the callers in
//! this crate only pass addresses inside a symmetric allocation made by [`malloc`] (or local
//! buffers for the local side of a transfer), with lengths inside it. The OpenSHMEM library
//! itself does not dereference remote addresses in this process.
//!
//! Unit tests (`cfg(test)`) link a one-PE stand-in instead, so the queue logic can be tested
//! without an OpenSHMEM library.

/// This PE's number.
pub fn my_pe() -> i32 {
    // SAFETY: no arguments; OpenSHMEM is initialized before any queue call (documented).
    unsafe { real::shmem_my_pe() }
}

/// The number of PEs.
pub fn n_pes() -> i32 {
    // SAFETY: as for my_pe.
    unsafe { real::shmem_n_pes() }
}

/// Collective symmetric allocation; null on failure.
pub fn malloc(size: usize) -> *mut u8 {
    // SAFETY: shmem_malloc takes any size and returns null or a symmetric block.
    unsafe { real::shmem_malloc(size) }.cast()
}

/// Collective free of a block from [`malloc`].
///
/// # Safety
/// `ptr` came from [`malloc`] and is not used afterwards.
pub unsafe fn free(ptr: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe { real::shmem_free(ptr.cast()) }
}

/// Blocking put of `src` to the symmetric address `dest` on `pe`.
///
/// # Safety
/// `dest..dest+src.len()` lies inside a symmetric allocation.
pub unsafe fn put(dest: *mut u8, src: &[u8], pe: i32) {
    // SAFETY: src is a live slice; dest per the caller's contract.
    unsafe { real::shmem_putmem(dest.cast(), src.as_ptr().cast(), src.len(), pe) }
}

/// Blocking get of `dest.len()` bytes from the symmetric address `src` on `pe`.
///
/// # Safety
/// `src..src+dest.len()` lies inside a symmetric allocation.
pub unsafe fn get(dest: &mut [u8], src: *const u8, pe: i32) {
    // SAFETY: dest is a live slice; src per the caller's contract.
    unsafe { real::shmem_getmem(dest.as_mut_ptr().cast(), src.cast(), dest.len(), pe) }
}

/// Non-blocking put; complete after [`quiet`].
///
/// # Safety
/// `dest` is symmetric with `len` bytes on `pe`; `src` is readable for `len` bytes and stays so
/// until the next [`quiet`] (the OpenSHMEM `_nbi` contract).
pub unsafe fn put_nbi(dest: *mut u8, src: *const u8, len: usize, pe: i32) {
    // SAFETY: the caller's contract.
    unsafe { real::shmem_putmem_nbi(dest.cast(), src.cast(), len, pe) }
}

/// Non-blocking get; complete after [`quiet`].
///
/// # Safety
/// `src` is symmetric with `len` bytes on `pe`; `dest` is writable for `len` bytes and not read
/// until the next [`quiet`].
pub unsafe fn get_nbi(dest: *mut u8, src: *const u8, len: usize, pe: i32) {
    // SAFETY: the caller's contract.
    unsafe { real::shmem_getmem_nbi(dest.cast(), src.cast(), len, pe) }
}

/// Atomic fetch of a symmetric 64-bit word on `pe`.
///
/// # Safety
/// `src` is an 8-byte aligned word inside a symmetric allocation.
pub unsafe fn fetch_u64(src: *const u64, pe: i32) -> u64 {
    // SAFETY: the caller's contract; c_ulong is u64 on the LP64 targets this builds for.
    unsafe { real::shmem_ulong_atomic_fetch(src.cast(), pe) }
}

/// Atomic set of a symmetric 64-bit word on `pe`.
///
/// # Safety
/// As for [`fetch_u64`].
pub unsafe fn set_u64(dest: *mut u64, value: u64, pe: i32) {
    // SAFETY: the caller's contract.
    unsafe { real::shmem_ulong_atomic_set(dest.cast(), value, pe) }
}

/// Orders this PE's earlier puts to each PE before its later ones.
pub fn fence() {
    // SAFETY: no arguments.
    unsafe { real::shmem_fence() }
}

/// Completes this PE's outstanding non-blocking operations.
pub fn quiet() {
    // SAFETY: no arguments.
    unsafe { real::shmem_quiet() }
}

/// Barrier over all PEs (also completes outstanding puts).
pub fn barrier_all() {
    // SAFETY: no arguments.
    unsafe { real::shmem_barrier_all() }
}

#[cfg(not(test))]
mod real {
    use std::ffi::{c_int, c_ulong, c_void};

    extern "C" {
        pub fn shmem_my_pe() -> c_int;
        pub fn shmem_n_pes() -> c_int;
        pub fn shmem_malloc(size: usize) -> *mut c_void;
        pub fn shmem_free(ptr: *mut c_void);
        pub fn shmem_putmem(dest: *mut c_void, src: *const c_void, len: usize, pe: c_int);
        pub fn shmem_getmem(dest: *mut c_void, src: *const c_void, len: usize, pe: c_int);
        pub fn shmem_putmem_nbi(dest: *mut c_void, src: *const c_void, len: usize, pe: c_int);
        pub fn shmem_getmem_nbi(dest: *mut c_void, src: *const c_void, len: usize, pe: c_int);
        pub fn shmem_ulong_atomic_fetch(src: *const c_ulong, pe: c_int) -> c_ulong;
        pub fn shmem_ulong_atomic_set(dest: *mut c_ulong, value: c_ulong, pe: c_int);
        pub fn shmem_fence();
        pub fn shmem_quiet();
        pub fn shmem_barrier_all();
    }
}

#[cfg(test)]
mod real {
    //! One PE (PE 0), symmetric memory from the global allocator: enough for the queue logic.
    #![allow(clippy::missing_safety_doc)]
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::collections::HashMap;
    use std::ffi::{c_int, c_ulong, c_void};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    static SIZES: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

    pub unsafe fn shmem_my_pe() -> c_int {
        0
    }
    pub unsafe fn shmem_n_pes() -> c_int {
        1
    }
    pub unsafe fn shmem_malloc(size: usize) -> *mut c_void {
        let layout = Layout::from_size_align(size.max(1), 4096).unwrap();
        // SAFETY: the layout has a nonzero size.
        let p = unsafe { alloc_zeroed(layout) };
        SIZES.lock().unwrap().get_or_insert_with(HashMap::new).insert(p as usize, size.max(1));
        p.cast()
    }
    pub unsafe fn shmem_free(ptr: *mut c_void) {
        let size = SIZES.lock().unwrap().as_mut().unwrap().remove(&(ptr as usize)).unwrap();
        // SAFETY: ptr came from shmem_malloc above with this layout.
        unsafe { dealloc(ptr.cast(), Layout::from_size_align(size, 4096).unwrap()) }
    }
    pub unsafe fn shmem_putmem(dest: *mut c_void, src: *const c_void, len: usize, pe: c_int) {
        assert_eq!(pe, 0);
        // SAFETY: the caller passes valid ranges (the module's contract).
        unsafe { std::ptr::copy(src.cast::<u8>(), dest.cast::<u8>(), len) }
    }
    pub unsafe fn shmem_getmem(dest: *mut c_void, src: *const c_void, len: usize, pe: c_int) {
        // SAFETY: as for shmem_putmem.
        unsafe { shmem_putmem(dest, src, len, pe) }
    }
    pub unsafe fn shmem_putmem_nbi(dest: *mut c_void, src: *const c_void, len: usize, pe: c_int) {
        // SAFETY: as for shmem_putmem.
        unsafe { shmem_putmem(dest, src, len, pe) }
    }
    pub unsafe fn shmem_getmem_nbi(dest: *mut c_void, src: *const c_void, len: usize, pe: c_int) {
        // SAFETY: as for shmem_putmem.
        unsafe { shmem_putmem(dest, src, len, pe) }
    }
    pub unsafe fn shmem_ulong_atomic_fetch(src: *const c_ulong, pe: c_int) -> c_ulong {
        assert_eq!(pe, 0);
        // SAFETY: src is an aligned symmetric word (the module's contract).
        unsafe { AtomicU64::from_ptr(src.cast_mut().cast()) }.load(Ordering::Acquire)
    }
    pub unsafe fn shmem_ulong_atomic_set(dest: *mut c_ulong, value: c_ulong, pe: c_int) {
        assert_eq!(pe, 0);
        // SAFETY: dest is an aligned symmetric word (the module's contract).
        unsafe { AtomicU64::from_ptr(dest.cast()) }.store(value, Ordering::Release)
    }
    pub unsafe fn shmem_fence() {}
    pub unsafe fn shmem_quiet() {}
    pub unsafe fn shmem_barrier_all() {}
}

#[cfg(not(target_pointer_width = "64"))]
compile_error!("shmem-queues assumes LP64 (unsigned long is 64 bits)");
