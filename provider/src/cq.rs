//! Completion queues: every format, read/readfrom/readerr, sread with a timeout, signal.
//!
//! Reading a CQ first drives the endpoints bound to it (manual progress). `sread` arms the
//! endpoint's futex before the last drain and sleeps only if that drain found nothing, so a
//! completion that arrives meanwhile is never slept through.

use crate::error::{int_ret, ssize_ret, FiError, FiResult};
use crate::object::{self, put};
use crate::state::cq::{write_entry, CqEvent, CqState, Reader};
use crate::state::waiters::{Waitable, Waiters};
use crate::state::{DomainShared, DomainState};
use rshm_ffi as ffi;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[repr(C)]
pub struct Cq {
    pub fid: ffi::fid_cq,
    pub shared: Arc<DomainShared>,
    pub id: usize,
    signaled: AtomicBool,
    /// Its place in the wait set it was opened with (FI_WAIT_SET), left when it closes.
    _member: Option<crate::waitset::Member>,
}

static FI_OPS: ffi::fi_ops = object::fi_ops(cq_close, None, Some(cq_control));

static CQ_OPS: ffi::fi_ops_cq = ffi::fi_ops_cq {
    size: size_of::<ffi::fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

/// # Safety
/// `cq` must be NULL or a live CQ of ours.
pub unsafe fn get<'a>(cq: *const ffi::fid) -> FiResult<&'a Cq> {
    // SAFETY: per the contract.
    unsafe { object::get::<Cq>(cq, ffi::FI_CLASS_CQ) }
}

/// `fi_cq_open`.
pub(crate) unsafe extern "C" fn cq_open(
    domain: *mut ffi::fid_domain,
    attr: *mut ffi::fi_cq_attr,
    cq: *mut *mut ffi::fid_cq,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_cq_open", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let dom = unsafe { crate::state::get(domain) }?;
            // SAFETY: the caller's attr, valid for the call.
            let attr = unsafe { attr.as_ref() }.ok_or(FiError::INVAL)?;
            let format = match attr.format {
                ffi::FI_CQ_FORMAT_UNSPEC => ffi::FI_CQ_FORMAT_CONTEXT,
                f @ (ffi::FI_CQ_FORMAT_CONTEXT
                | ffi::FI_CQ_FORMAT_MSG
                | ffi::FI_CQ_FORMAT_DATA
                | ffi::FI_CQ_FORMAT_TAGGED) => f,
                _ => {
                    crate::warn!(Cq, "fi_cq_open: unsupported format {}", attr.format);
                    return Err(FiError::NOSYS);
                }
            };
            // SAFETY: the caller's attr names a wait set of theirs, if any (fi_cq(3)).
            let waiting = unsafe { crate::waitset::Waiting::of(attr.wait_obj, attr.wait_set, "fi_cq_open") }?;
            if attr.wait_cond != ffi::FI_CQ_COND_NONE && attr.wait_cond != ffi::FI_CQ_COND_THRESHOLD {
                return Err(FiError::INVAL);
            }
            let state =
                CqState { format, wait_obj: attr.wait_obj, events: VecDeque::new(), eps: Box::new([]), waiters: None };
            let mut st = dom.shared.lock();
            let id = st.cqs.insert(state);
            let (wait_fd, member) = waiting.attach(&dom.shared, Waitable::Cq(id));
            st.cqs[id].waiters = wait_fd.map(|fd| Box::new(Waiters::with_fd(fd)));
            drop(st);
            let obj = object::into_raw(Cq {
                fid: ffi::fid_cq {
                    fid: object::fid(ffi::FI_CLASS_CQ, context, &FI_OPS),
                    ops: &CQ_OPS as *const _ as *mut _,
                },
                shared: Arc::clone(&dom.shared),
                id,
                signaled: AtomicBool::new(false),
                _member: member,
            });
            // SAFETY: the caller's out-pointer.
            unsafe { put(cq, obj.cast::<ffi::fid_cq>()) }
        })())
    })
}

unsafe extern "C" fn cq_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Cq| -> FiResult<()> {
        let mut st = obj.shared.lock();
        if !st.cqs[obj.id].eps.is_empty() {
            crate::warn!(Cq, "fi_close: endpoints are still bound to it");
            return Err(FiError::BUSY);
        }
        st.cqs.remove(obj.id);
        Ok(())
    };
    // SAFETY: the libfabric contract: a live cq of ours.
    unsafe { object::close::<Cq>(fid, ffi::FI_CLASS_CQ, "fi_close(cq)", release) }
}

unsafe extern "C" fn cq_control(fid: *mut ffi::fid, command: c_int, arg: *mut c_void) -> i32 {
    crate::boundary::guard("cq control", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract.
        let cq = match unsafe { get(fid) } {
            Ok(cq) => cq,
            Err(e) => return e.code(),
        };
        let st = cq.shared.lock();
        let Some(state) = st.cqs.get(cq.id) else { return FiError::INVAL.code() };
        // SAFETY: (both arms) FI_GETWAIT and FI_GETWAITOBJ give `arg` as the caller's int /
        // enum fi_wait_obj to fill (fi_control(3)); NULL is refused.
        unsafe { crate::waitfd::control(command, arg, state.wait_obj, state.wait_fd().map(|f| f.raw())) }
    })
}

/// Drive the CQ's endpoints, then take up to `count` completions. Waiters asleep in other
/// threads learn of what this pass completed for them from the objects' bells
/// (`state::waiters`).
#[inline(always)]
fn read_locked(
    st: &mut DomainState,
    id: usize,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
    drive: bool,
) -> FiResult<usize> {
    if !st.cqs.contains(id) {
        return Err(FiError::INVAL);
    }
    let mut n = 0;
    if drive {
        // What this pass completes for the CQ while nothing is queued goes straight into the
        // caller's array (`Reader`); anything queued comes first, and then the pass queues.
        // SAFETY: the caller's arrays hold `count` entries (`buf` of the CQ's format), ours
        // until this call returns, and the reader ends before that.
        let mut reader = unsafe { Reader::new(id, buf, src, count) };
        crate::progress::cq(st, id, Some(&mut reader));
        n = reader.filled;
    }
    let cq = &mut st.cqs[id];
    if cq.waiters.is_some() {
        // The application reads: no peer needs to wake its descriptor any more.
        crate::state::waiters::reading(&mut cq.waiters);
    }
    if n == 0 {
        match cq.events.front() {
            None => return Err(FiError::AGAIN),
            Some(CqEvent::Failed { .. }) => return Err(FiError::AVAIL),
            Some(CqEvent::Done(_)) => {}
        }
    }
    while n < count {
        let Some(CqEvent::Done(c)) = cq.events.front().copied() else { break };
        cq.events.pop_front();
        // SAFETY: the caller's arrays hold `count` entries (`buf` of the CQ's format).
        unsafe { write_entry(buf, src, n, cq.format, &c) };
        n += 1;
    }
    Ok(n)
}

/// A progress probe: a read of count 0, which can return no entry (SOS's
/// `shmem_transport_probe`). Right after a counter's read/readerr pair of the same endpoints it
/// takes that pair's pass (`DomainState::poll_turn`, which it clears); otherwise it drives
/// them as any read does. `read` branches here first, so its own path stays as it was
/// (checking the mark there cost every fi_cq_read about 18 instructions).
#[inline(never)]
fn probe(cq: *mut ffi::fid_cq) -> FiResult<usize> {
    // SAFETY: libfabric contract.
    let cq = unsafe { get(cq.cast()) }?;
    cq.shared.app_polls();
    let mut st = cq.shared.lock();
    let turn = st.poll_turn.take();
    let served = turn.is_some_and(|t| t.paired && crate::progress::probe_is_fresh(&st, cq.id, t.cntr));
    read_locked(&mut st, cq.id, std::ptr::null_mut(), 0, std::ptr::null_mut(), !served)
}

// `read`, `read_locked` and `progress::cq` are forced inline: one fi_cq_read was five calls
// deep before any work, and an idle poll took 300 instructions (231 inlined).
#[inline(always)]
fn read(cq: *mut ffi::fid_cq, buf: *mut c_void, count: usize, src: *mut u64) -> FiResult<usize> {
    if count == 0 {
        return probe(cq);
    }
    // SAFETY: libfabric contract.
    let cq = unsafe { get(cq.cast()) }?;
    if buf.is_null() {
        return Err(FiError::INVAL);
    }
    cq.shared.app_polls();
    let mut st = cq.shared.lock();
    read_locked(&mut st, cq.id, buf, count, src, true)
}

/// Blocking read: sleep on the bound endpoint's futex until something arrives or time is up.
fn sread(cq: *mut ffi::fid_cq, buf: *mut c_void, count: usize, src: *mut u64, timeout_ms: c_int) -> FiResult<usize> {
    // SAFETY: libfabric contract.
    let obj = unsafe { get(cq.cast()) }?;
    if buf.is_null() && count > 0 {
        return Err(FiError::INVAL);
    }
    crate::block::until(&obj.shared, timeout_ms, FiError::AGAIN, Waitable::Cq(obj.id), |st| {
        match read_locked(st, obj.id, buf, count, src, true) {
            Err(FiError::AGAIN) if obj.signaled.swap(false, Ordering::AcqRel) => Err(FiError::AGAIN),
            Err(FiError::AGAIN) => Ok(None),
            other => other.map(Some),
        }
    })
}

unsafe extern "C" fn cq_read(cq: *mut ffi::fid_cq, buf: *mut c_void, count: usize) -> isize {
    crate::boundary::guard("fi_cq_read", FiError::OTHER.code() as isize, || {
        ssize_ret(read(cq, buf, count, std::ptr::null_mut()))
    })
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut ffi::fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut ffi::fi_addr_t,
) -> isize {
    crate::boundary::guard("fi_cq_readfrom", FiError::OTHER.code() as isize, || {
        ssize_ret(read(cq, buf, count, src_addr))
    })
}

unsafe extern "C" fn cq_sread(
    cq: *mut ffi::fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    crate::boundary::guard("fi_cq_sread", FiError::OTHER.code() as isize, || {
        ssize_ret(sread(cq, buf, count, std::ptr::null_mut(), timeout))
    })
}

unsafe extern "C" fn cq_sreadfrom(
    cq: *mut ffi::fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut ffi::fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    crate::boundary::guard("fi_cq_sreadfrom", FiError::OTHER.code() as isize, || {
        ssize_ret(sread(cq, buf, count, src_addr, timeout))
    })
}

unsafe extern "C" fn cq_readerr(cq: *mut ffi::fid_cq, buf: *mut ffi::fi_cq_err_entry, _flags: u64) -> isize {
    crate::boundary::guard("fi_cq_readerr", FiError::OTHER.code() as isize, || {
        ssize_ret((|| -> FiResult<usize> {
            // SAFETY: libfabric contract.
            let obj = unsafe { get(cq.cast()) }?;
            if buf.is_null() {
                return Err(FiError::INVAL);
            }
            let mut st = obj.shared.lock();
            let state = st.cqs.get_mut(obj.id).ok_or(FiError::INVAL)?;
            let Some(CqEvent::Failed { entry, err, olen }) = state.events.front().copied() else {
                return Err(FiError::AGAIN);
            };
            state.events.pop_front();
            // SAFETY: the caller's entry; we write only the fields of the 1.17 layout, which
            // every newer layout starts with.
            unsafe {
                let e = &mut *buf;
                e.op_context = entry.op_context as *mut c_void;
                e.flags = entry.flags;
                e.len = entry.len;
                e.buf = entry.buf as *mut c_void;
                e.data = entry.data;
                e.tag = entry.tag;
                e.olen = olen;
                e.err = err as c_int;
                e.prov_errno = err as c_int;
                if obj.shared.config.api_version < ffi::fi_version_make(1, 5) {
                    e.err_data = std::ptr::null_mut();
                }
                e.err_data_size = 0;
            }
            Ok(1)
        })())
    })
}

unsafe extern "C" fn cq_signal(cq: *mut ffi::fid_cq) -> i32 {
    crate::boundary::guard("fi_cq_signal", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract.
        match unsafe { get(cq.cast()) } {
            Ok(obj) => {
                // Stored under the domain lock, so that a waiter either saw the flag in its last
                // poll or read its bell before this rings it.
                let mut st = obj.shared.lock();
                obj.signaled.store(true, Ordering::Release);
                if let Some(waiters) =
                    crate::state::waiters::slot(&mut st, Waitable::Cq(obj.id)).and_then(|w| w.as_deref_mut())
                {
                    waiters.wake_sleepers();
                }
                0
            }
            Err(e) => e.code(),
        }
    })
}

unsafe extern "C" fn cq_strerror(
    _cq: *mut ffi::fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: the caller's buffer of `len` bytes, or NULL.
    unsafe { crate::core_api::strerror_into(prov_errno, buf, len) }
}
