//! Counters: read, readerr, add, set, adderr, seterr, and wait with a threshold and timeout.

use crate::error::{int_ret, FiError, FiResult};
use crate::object::{self, put};
use crate::state::cntr::CntrState;
use crate::state::waiters::{Waitable, Waiters};
use crate::state::{DomainShared, PollTurn};
use rshm_ffi as ffi;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

#[repr(C)]
pub struct Cntr {
    pub fid: ffi::fid_cntr,
    pub shared: Arc<DomainShared>,
    pub id: usize,
    /// Its place in the wait set it was opened with (FI_WAIT_SET), left when it closes.
    _member: Option<crate::waitset::Member>,
}

static FI_OPS: ffi::fi_ops = object::fi_ops(cntr_close, None, Some(cntr_control));

static CNTR_OPS: ffi::fi_ops_cntr = ffi::fi_ops_cntr {
    size: size_of::<ffi::fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};

/// # Safety
/// `fid` must be NULL or a live counter of ours.
pub unsafe fn get<'a>(fid: *const ffi::fid) -> FiResult<&'a Cntr> {
    // SAFETY: per the contract.
    unsafe { object::get::<Cntr>(fid, ffi::FI_CLASS_CNTR) }
}

/// `fi_cntr_open`.
pub(crate) unsafe extern "C" fn cntr_open(
    domain: *mut ffi::fid_domain,
    attr: *mut ffi::fi_cntr_attr,
    cntr: *mut *mut ffi::fid_cntr,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_cntr_open", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let dom = unsafe { crate::state::get(domain) }?;
            let mut state = CntrState::default();
            let mut waiting = crate::waitset::Waiting::Inside;
            // SAFETY: NULL or the caller's attr.
            if let Some(attr) = unsafe { attr.as_ref() } {
                if attr.events != ffi::FI_CNTR_EVENTS_COMP {
                    return Err(FiError::NOSYS);
                }
                // SAFETY: the caller's attr names a wait set of theirs, if any (fi_cntr(3)).
                waiting = unsafe { crate::waitset::Waiting::of(attr.wait_obj, attr.wait_set, "fi_cntr_open") }?;
                state.wait_obj = attr.wait_obj;
            }
            let mut st = dom.shared.lock();
            let id = st.cntrs.insert(state);
            let (wait_fd, member) = waiting.attach(&dom.shared, Waitable::Cntr(id));
            st.cntrs[id].waiters = wait_fd.map(|fd| Box::new(Waiters::with_fd(fd)));
            drop(st);
            let obj = object::into_raw(Cntr {
                fid: ffi::fid_cntr {
                    fid: object::fid(ffi::FI_CLASS_CNTR, context, &FI_OPS),
                    ops: &CNTR_OPS as *const _ as *mut _,
                },
                shared: Arc::clone(&dom.shared),
                id,
                _member: member,
            });
            // SAFETY: the caller's out-pointer.
            unsafe { put(cntr, obj.cast::<ffi::fid_cntr>()) }
        })())
    })
}

unsafe extern "C" fn cntr_control(fid: *mut ffi::fid, command: c_int, arg: *mut c_void) -> i32 {
    crate::boundary::guard("cntr control", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract.
        let c = match unsafe { get(fid) } {
            Ok(c) => c,
            Err(e) => return e.code(),
        };
        let st = c.shared.lock();
        let Some(state) = st.cntrs.get(c.id) else { return FiError::INVAL.code() };
        // SAFETY: FI_GETWAIT and FI_GETWAITOBJ give `arg` as the caller's int / enum
        // fi_wait_obj to fill (fi_control(3)); NULL is refused.
        unsafe { crate::waitfd::control(command, arg, state.wait_obj, state.wait_fd().map(|f| f.raw())) }
    })
}

unsafe extern "C" fn cntr_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Cntr| -> FiResult<()> {
        let mut st = obj.shared.lock();
        if !st.cntrs[obj.id].eps.is_empty() || st.cntrs[obj.id].mrs > 0 {
            crate::warn!(Domain, "fi_close: endpoints or memory regions are still bound to it");
            return Err(FiError::BUSY);
        }
        st.cntrs.remove(obj.id);
        Ok(())
    };
    // SAFETY: the libfabric contract: a live cntr of ours.
    unsafe { object::close::<Cntr>(fid, ffi::FI_CLASS_CNTR, "fi_close(cntr)", release) }
}

/// What a counter call does besides reading or changing it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    /// fi_cntr_read: drive the endpoints that can move the counter first.
    Read,
    /// fi_cntr_readerr: the same, unless the counter call just before it was a fi_cntr_read of
    /// this counter. A poll loop reads the pair on every turn (SOS's quiet and get waits: read,
    /// readerr, then a CQ probe), and the second pass, a few nanoseconds after the first, found
    /// nothing new but cost every turn an idle pass (about 200 instructions); the error count
    /// the read's pass left is as current. A readerr on its own still drives progress. After
    /// the pair, the probe of a CQ of the same endpoints skips its pass too
    /// (`DomainState::poll_turn`).
    ReadErr,
    /// add, set, adderr, seterr: the application changes it, and waiters learn of that.
    Change,
}

/// Look at (or change) the counter with `f`, after driving its endpoints as `call` says.
fn with_counter<T>(cntr: *mut ffi::fid_cntr, call: Call, f: impl FnOnce(&mut CntrState) -> T) -> FiResult<T> {
    // SAFETY: libfabric contract.
    let c = unsafe { get(cntr.cast()) }?;
    if matches!(call, Call::Read | Call::ReadErr) {
        c.shared.app_polls();
    }
    let mut st = c.shared.lock();
    if !st.cntrs.contains(c.id) {
        return Err(FiError::INVAL);
    }
    let after_read = st.poll_turn.take() == Some(PollTurn { cntr: c.id, paired: false });
    let drive = call == Call::Read || (call == Call::ReadErr && !after_read);
    st.poll_turn = match call {
        Call::Read => Some(PollTurn { cntr: c.id, paired: false }),
        Call::ReadErr if after_read => Some(PollTurn { cntr: c.id, paired: true }),
        _ => None,
    };
    // Waiters in other threads learn of what this pass changed through the counter's waiters
    // (`CntrState::count`), and of what `f` changed below.
    if drive {
        crate::progress::cntr(&mut st, c.id);
    }
    let state = st.cntrs.get_mut(c.id).ok_or(FiError::INVAL)?;
    let answer = f(state);
    if let Some(waiters) = &mut state.waiters {
        match (call, waiters.fd.as_mut()) {
            // The application read it: what fi_trywait compares with, and no peer needs to
            // wake the descriptor any more.
            (Call::Read | Call::ReadErr, Some(fd)) => {
                fd.seen = (state.value, state.errors);
                fd.disarm();
            }
            (Call::Change, _) => waiters.changed(),
            _ => {}
        }
    }
    Ok(answer)
}

unsafe extern "C" fn cntr_read(cntr: *mut ffi::fid_cntr) -> u64 {
    crate::boundary::guard("fi_cntr_read", 0, || with_counter(cntr, Call::Read, |c| c.value).unwrap_or(0))
}

unsafe extern "C" fn cntr_readerr(cntr: *mut ffi::fid_cntr) -> u64 {
    crate::boundary::guard("fi_cntr_readerr", 0, || with_counter(cntr, Call::ReadErr, |c| c.errors).unwrap_or(0))
}

unsafe extern "C" fn cntr_add(cntr: *mut ffi::fid_cntr, value: u64) -> i32 {
    crate::boundary::guard("fi_cntr_add", FiError::OTHER.code(), || {
        int_ret(with_counter(cntr, Call::Change, |c| c.value = c.value.wrapping_add(value)))
    })
}

unsafe extern "C" fn cntr_set(cntr: *mut ffi::fid_cntr, value: u64) -> i32 {
    crate::boundary::guard("fi_cntr_set", FiError::OTHER.code(), || {
        int_ret(with_counter(cntr, Call::Change, |c| c.value = value))
    })
}

unsafe extern "C" fn cntr_adderr(cntr: *mut ffi::fid_cntr, value: u64) -> i32 {
    crate::boundary::guard("fi_cntr_adderr", FiError::OTHER.code(), || {
        int_ret(with_counter(cntr, Call::Change, |c| c.errors = c.errors.wrapping_add(value)))
    })
}

unsafe extern "C" fn cntr_seterr(cntr: *mut ffi::fid_cntr, value: u64) -> i32 {
    crate::boundary::guard("fi_cntr_seterr", FiError::OTHER.code(), || {
        int_ret(with_counter(cntr, Call::Change, |c| c.errors = value))
    })
}

/// Wait until the counter reaches `threshold`; an error count that moves ends the wait.
fn wait(cntr: *mut ffi::fid_cntr, threshold: u64, timeout_ms: c_int) -> FiResult<()> {
    // SAFETY: libfabric contract.
    let c = unsafe { get(cntr.cast()) }?;
    // The error count the wait starts from, read by its first poll before it drives progress
    // (a look of its own took the lock once more per wait).
    let mut start_errors = None;
    crate::block::until(&c.shared, timeout_ms, FiError::TIMEDOUT, Waitable::Cntr(c.id), |st| {
        let start = match start_errors {
            Some(start) => start,
            None => {
                let errors = st.cntrs.get(c.id).ok_or(FiError::INVAL)?.errors;
                // Not a read: a probe after the wait drives progress again (`with_counter`).
                st.poll_turn = None;
                *start_errors.insert(errors)
            }
        };
        crate::progress::cntr(st, c.id);
        let s = &st.cntrs[c.id];
        if s.value >= threshold {
            Ok(Some(()))
        } else if s.errors != start {
            Err(FiError::AVAIL)
        } else {
            Ok(None)
        }
    })
}

unsafe extern "C" fn cntr_wait(cntr: *mut ffi::fid_cntr, threshold: u64, timeout: c_int) -> i32 {
    crate::boundary::guard("fi_cntr_wait", FiError::OTHER.code(), || int_ret(wait(cntr, threshold, timeout)))
}
