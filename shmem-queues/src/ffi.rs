//! The exported C functions (include/shmem_queues.h). Each one catches panics (nothing unwinds
//! into C) and reports errors as negative return codes (config.rs).

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::comm::{CommQueue, Inc, Push};
use crate::config::{QueueAttr, QueueConfig, EINTERNAL, EINVAL, ENOTSUP, OK, OP_ATOMIC_INC};
use crate::data::DataQueue;
use crate::handle::{self, bad_handle, Kind, Queue};

/// `shmem_queue_t`.
pub type Handle = *mut Queue;

#[inline(always)]
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(EINTERNAL)
}

fn code(r: Result<(), c_int>) -> c_int {
    r.err().unwrap_or(OK)
}

/// Runs `f` on a communication queue, inside `guard`; a data queue answers `ENOTSUP`.
///
/// # Safety
/// `queue` is null or a live handle.
unsafe fn on_comm(queue: Handle, f: impl FnOnce(&mut CommQueue) -> c_int) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe {
            handle::with(queue, bad_handle(queue), |k| match k {
                Kind::Comm(q) => f(q),
                Kind::Data(_) => ENOTSUP,
            })
        }
    })
}

/// Runs `f` on a data queue, inside `guard`; a communication queue answers `ENOTSUP`.
///
/// # Safety
/// `queue` is null or a live handle.
unsafe fn on_data(queue: Handle, f: impl FnOnce(&mut DataQueue) -> c_int) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe {
            handle::with(queue, bad_handle(queue), |k| match k {
                Kind::Data(q) => f(q),
                Kind::Comm(_) => ENOTSUP,
            })
        }
    })
}

/// Creates a queue of either kind; stores the handle in `*queue` (null on failure).
///
/// # Safety
/// `queue` and `cfg` are null or valid pointers.
unsafe fn create(
    queue: *mut Handle,
    cfg: *const QueueConfig,
    make: fn(u64, &QueueConfig) -> Result<Kind, c_int>,
) -> c_int {
    if queue.is_null() || cfg.is_null() {
        return EINVAL;
    }
    // SAFETY: non-null, and valid per the caller's contract.
    let cfg = unsafe { *cfg };
    // SAFETY: as above.
    unsafe { *queue = std::ptr::null_mut() };
    let shared = match crate::config::is_shared(&cfg) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match make(handle::next_id(), &cfg) {
        Ok(kind) => {
            // SAFETY: as above.
            unsafe { *queue = Box::into_raw(Queue::new(shared, kind)) };
            OK
        }
        Err(e) => e,
    }
}

/// Takes the queue back from C for a destroy.
///
/// # Safety
/// `h` is a live handle that no other thread uses now (destroy is the last call on it).
unsafe fn take(h: Handle) -> Option<Kind> {
    // SAFETY: the caller's contract: h came from Box::into_raw in create.
    unsafe { Box::from_raw(h) }.into_kind()
}

/// # Safety
/// `queue`: where to store the handle; `qconfig`: a valid `shmem_queue_config_t`. Collective
/// over all PEs.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_comm_create(queue: *mut Handle, qconfig: *const QueueConfig) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { create(queue, qconfig, |id, c| CommQueue::create(id, c).map(Kind::Comm)) })
}

/// # Safety
/// `queue` is a live communication-queue handle, not used after this call by any thread.
/// Collective over all PEs.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_comm_destroy(queue: Handle) -> c_int {
    guard(|| {
        if queue.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's contract.
        match unsafe { take(queue) } {
            Some(Kind::Comm(q)) => q.destroy(),
            Some(Kind::Data(q)) => q.destroy(),
            None => EINTERNAL,
        }
    })
}

/// # Safety
/// `queue` is a live handle. For PUT/ADD `dest` is a symmetric address and `src` a local buffer
/// of `nelems * elem_size` bytes; for GET `src` is symmetric and `dest` local; for INC `src` is
/// ignored. Local buffers stay valid (and GET destinations unread) until a flush completes.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_comm_push_mem(
    queue: Handle,
    dest: *mut c_void,
    src: *const c_void,
    elem_size: usize,
    nelems: usize,
    pe: c_int,
    op: u64,
) -> c_int {
    // The histogram's push (a one-element increment of a long or an int on an EXCLUSIVE queue)
    // goes straight to the queue: no lock, no closure, no general dispatch. push_inc cannot
    // panic, so it runs outside the guard; the rest (the poll it may ask for, the general path)
    // runs inside.
    if op == OP_ATOMIC_INC && nelems == 1 {
        // SAFETY: the caller's contract.
        if let Some(q) = unsafe { handle::exclusive_comm(queue) } {
            let fast = match elem_size {
                8 => q.push_inc::<8>(dest as usize, pe),
                4 => q.push_inc::<4>(dest as usize, pe),
                _ => Inc::General,
            };
            match fast {
                Inc::Done => return OK,
                Inc::DonePoll => return every_poll(q),
                Inc::General => {}
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { push_general(queue, dest, src, elem_size, nelems, pe, op) }
}

/// The periodic poll of the push fast path, inside the panic guard.
#[inline(never)]
fn every_poll(q: &mut CommQueue) -> c_int {
    guard(|| {
        q.every_poll();
        OK
    })
}

/// Any push, through the handle's sharing rule (the arguments of `shmem_queue_comm_push_mem`,
/// so that the call from there is a jump).
///
/// # Safety
/// As for [`shmem_queue_comm_push_mem`].
#[inline(never)]
unsafe fn push_general(
    queue: Handle,
    dest: *mut c_void,
    src: *const c_void,
    elem_size: usize,
    nelems: usize,
    pe: c_int,
    op: u64,
) -> c_int {
    let p = Push { dest: dest as usize, src: src as usize, esize: elem_size, nelems, pe, op };
    // SAFETY: the caller's contract.
    unsafe { on_comm(queue, |q| q.push(p)) }
}

/// Returns the number of outstanding operations (>= 0) or an error (< 0).
///
/// # Safety
/// `queue` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_progress(queue: Handle) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe {
            handle::with(queue, bad_handle(queue), |k| match k {
                Kind::Comm(q) => c_int::try_from(q.progress()).unwrap_or(c_int::MAX),
                Kind::Data(q) => c_int::try_from(q.outstanding_elems()).unwrap_or(c_int::MAX),
            })
        }
    })
}

/// # Safety
/// `queue` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_local_flush(queue: Handle) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_comm(queue, |q| q.flush()) }
}

/// # Safety
/// `queue` is a live handle; `attr` null or valid.
#[no_mangle]
pub unsafe extern "C" fn shmem_query_attr(queue: Handle, attr: *mut QueueAttr) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        query(queue, attr, |k| match k {
            Kind::Comm(q) => q.attr(),
            Kind::Data(q) => q.attr(),
        })
    }
}

/// The proposal's spelling of [`shmem_query_attr`].
///
/// # Safety
/// As for [`shmem_query_attr`].
#[no_mangle]
pub unsafe extern "C" fn shmem_query_attrib(queue: Handle, attr: *mut QueueAttr) -> c_int {
    // SAFETY: same contract.
    unsafe { shmem_query_attr(queue, attr) }
}

/// # Safety
/// `queue` is a live handle; `size` null or valid.
#[no_mangle]
pub unsafe extern "C" fn shmem_query_size(queue: Handle, size: *mut usize) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        query(queue, size, |k| match k {
            Kind::Comm(q) => usize::try_from(q.outstanding()).unwrap_or(usize::MAX),
            Kind::Data(q) => usize::try_from(q.outstanding_elems()).unwrap_or(usize::MAX),
        })
    }
}

/// The queries: `f`'s answer for a queue of either kind, written to `out` (EINVAL if null).
///
/// # Safety
/// `queue` is a live handle; `out` null or valid for a write of a `T`.
unsafe fn query<T>(queue: Handle, out: *mut T, f: impl FnOnce(&Kind) -> T) -> c_int {
    guard(|| {
        if out.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's contract.
        match unsafe { handle::with(queue, None, |k| Some(f(k))) } {
            Some(v) => {
                // SAFETY: non-null and valid per the caller's contract.
                unsafe { out.write(v) };
                OK
            }
            None => bad_handle(queue),
        }
    })
}

/// # Safety
/// As for [`shmem_queue_comm_create`]; `team` is ignored (all PEs; see the README).
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_data_create(
    queue: *mut Handle,
    qconfig: *const QueueConfig,
    _team: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { create(queue, qconfig, |id, c| DataQueue::create(id, c).map(Kind::Data)) })
}

/// # Safety
/// `queue` is a live data-queue handle; `src` is readable for `elem_size * nelems` bytes.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_data_push_mem(
    queue: Handle,
    src: *const c_void,
    elem_size: usize,
    nelems: usize,
    pe: c_int,
) -> c_int {
    let Some(bytes) = elem_size.checked_mul(nelems) else { return EINVAL };
    // SAFETY: the caller's contract.
    unsafe { on_data(queue, |q| q.push(src as usize, bytes, pe)) }
}

/// # Safety
/// `queue` is a live data-queue handle; `dest` is writable for `elem_size * nelems` bytes.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_data_pop_mem(
    queue: Handle,
    dest: *mut c_void,
    elem_size: usize,
    nelems: usize,
    pe: c_int,
) -> c_int {
    let Some(bytes) = elem_size.checked_mul(nelems) else { return EINVAL };
    // SAFETY: the caller's contract.
    unsafe { on_data(queue, |q| q.pop(dest as usize, bytes, pe)) }
}

/// # Safety
/// `queue` is a live data-queue handle. Collective over all PEs.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_global_flush(queue: Handle) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_data(queue, |q| q.global_flush()) }
}

/// The spelling of [`shmem_queue_global_flush`].
///
/// # Safety
/// As for [`shmem_queue_global_flush`].
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_data_global_flush(queue: Handle) -> c_int {
    // SAFETY: same contract.
    unsafe { shmem_queue_global_flush(queue) }
}

/// # Safety
/// `queue` is a live data-queue handle; `incoming`/`outgoing` null or valid.
#[no_mangle]
pub unsafe extern "C" fn shmem_query_data_size(
    queue: Handle,
    incoming: *mut usize,
    outgoing: *mut usize,
    pe: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let r = unsafe {
            handle::with(queue, Err(bad_handle(queue)), |k| match k {
                Kind::Data(q) => q.sizes(pe),
                Kind::Comm(_) => Err(ENOTSUP),
            })
        };
        code(r.map(|(i, o)| {
            if !incoming.is_null() {
                // SAFETY: non-null and valid per the caller's contract.
                unsafe { *incoming = i };
            }
            if !outgoing.is_null() {
                // SAFETY: as above.
                unsafe { *outgoing = o };
            }
        }))
    })
}

/// Data queues move data only in the global flush: this checks the handle and returns 0.
///
/// # Safety
/// `queue` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_data_progress(queue: Handle, _team: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { handle::with(queue, bad_handle(queue), |_| OK) }
    })
}

/// # Safety
/// `queue` points to a live data-queue handle (set to null on return), not used by any other
/// thread. Collective over all PEs.
#[no_mangle]
pub unsafe extern "C" fn shmem_queue_data_destroy(queue: *mut Handle, _team: *mut c_void) -> c_int {
    guard(|| {
        if queue.is_null() {
            return EINVAL;
        }
        // SAFETY: non-null, valid per the caller's contract.
        let h = unsafe { std::mem::replace(&mut *queue, std::ptr::null_mut()) };
        if h.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's contract.
        match unsafe { take(h) } {
            Some(Kind::Data(q)) => q.destroy(),
            Some(Kind::Comm(q)) => q.destroy(),
            None => EINTERNAL,
        }
    })
}
