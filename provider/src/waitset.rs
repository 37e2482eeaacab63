//! Wait sets (`fi_wait_open`, `fi_wait`, fi_wait(3)): CQs and counters opened with
//! FI_WAIT_SET wait together. Each member's FI_WAIT_FD machinery (`waitfd`) rings the set's one
//! eventfd instead of an eventfd of its own; `fi_wait` arms every member and then blocks in
//! poll(2) on that descriptor, which the application may also take (FI_GETWAIT) to block on
//! itself after `fi_trywait` on the set.

use crate::error::{FiError, FiResult};
use crate::object::{self, put};
use crate::state::wait_fd::{self, WaitFd};
use crate::state::waiters::Waitable;
use crate::state::DomainShared;
use crate::waitfd;
use rshm_ffi as ffi;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// The objects of a set, each with its domain.
type Members = Mutex<Vec<(Arc<DomainShared>, Waitable)>>;

fn members_of(m: &Members) -> std::sync::MutexGuard<'_, Vec<(Arc<DomainShared>, Waitable)>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A CQ's or counter's place in its wait set: it leaves the set when dropped (the object closes).
pub struct Member {
    members: Arc<Members>,
    /// Its domain (by address: an object is its domain and its id there) and its id.
    domain: usize,
    w: Waitable,
}

impl Drop for Member {
    fn drop(&mut self) {
        members_of(&self.members).retain(|(d, w)| !(Arc::as_ptr(d) as usize == self.domain && *w == self.w));
    }
}

#[repr(C)]
pub struct WaitSet {
    pub fid: ffi::fid_wait,
    fd: Arc<OwnedFd>,
    members: Arc<Members>,
}

static FI_OPS: ffi::fi_ops = object::fi_ops(wait_close, None, Some(wait_control));

static WAIT_OPS: ffi::fi_ops_wait = ffi::fi_ops_wait { size: size_of::<ffi::fi_ops_wait>(), wait: Some(wait_wait) };

/// # Safety
/// `fid` must be NULL or a live object of ours.
pub unsafe fn get<'a>(fid: *const ffi::fid) -> FiResult<&'a WaitSet> {
    // SAFETY: per the contract.
    unsafe { object::get::<WaitSet>(fid, ffi::FI_CLASS_WAIT) }
}

/// How a CQ or counter being opened waits, from its attributes' `wait_obj` and `wait_set`.
pub enum Waiting<'a> {
    /// Inside the provider (fi_cq_sread, fi_cntr_wait), or not at all.
    Inside,
    /// FI_WAIT_FD: on a descriptor of its own.
    Fd(WaitFd),
    /// FI_WAIT_SET: with the other members of the set.
    Set(&'a WaitSet),
}

impl Waiting<'_> {
    /// What `wait_obj` asks for; `what` names the call in the log line of a refusal.
    ///
    /// # Safety
    /// `wait_set` is NULL or, per fi_cq(3) and fi_cntr(3), the caller's wait set.
    pub unsafe fn of<'a>(
        wait_obj: ffi::fi_wait_obj,
        wait_set: *mut ffi::fid_wait,
        what: &str,
    ) -> FiResult<Waiting<'a>> {
        match wait_obj {
            ffi::FI_WAIT_NONE | ffi::FI_WAIT_UNSPEC | ffi::FI_WAIT_YIELD | ffi::FI_WAIT_MUTEX_COND => {
                Ok(Waiting::Inside)
            }
            ffi::FI_WAIT_FD => WaitFd::new().map(Waiting::Fd).map_err(|e| {
                crate::warn!(Domain, "{what}: no eventfd for FI_WAIT_FD: {e}");
                FiError::NOMEM
            }),
            // SAFETY: per this function's contract; `get` checks that it is one of ours.
            ffi::FI_WAIT_SET => unsafe { get(wait_set.cast()) }.map(Waiting::Set).inspect_err(|_| {
                crate::warn!(Domain, "{what}: FI_WAIT_SET without a wait set of this provider");
            }),
            other => {
                crate::warn!(
                    Domain,
                    "{what}: wait object {other} not supported (FI_WAIT_UNSPEC, FI_WAIT_FD and FI_WAIT_SET are)"
                );
                Err(FiError::NOSYS)
            }
        }
    }

    /// For the object `w` of `shared`, now that it has its id: its descriptor (of its own, or its
    /// set's), and its place in the set.
    pub fn attach(self, shared: &Arc<DomainShared>, w: Waitable) -> (Option<WaitFd>, Option<Member>) {
        match self {
            Waiting::Inside => (None, None),
            Waiting::Fd(fd) => (Some(fd), None),
            Waiting::Set(set) => {
                members_of(&set.members).push((Arc::clone(shared), w));
                let member = Member { members: Arc::clone(&set.members), domain: Arc::as_ptr(shared) as usize, w };
                (Some(WaitFd::sharing(Arc::clone(&set.fd))), Some(member))
            }
        }
    }
}

/// `fi_wait_open`.
pub(crate) unsafe extern "C" fn wait_open(
    _fabric: *mut ffi::fid_fabric,
    attr: *mut ffi::fi_wait_attr,
    waitset: *mut *mut ffi::fid_wait,
) -> c_int {
    crate::boundary::guard("fi_wait_open", FiError::OTHER.code(), || {
        crate::error::int_ret((|| -> FiResult<()> {
            // SAFETY: NULL or the caller's attr.
            let attr = unsafe { attr.as_ref() }.ok_or(FiError::INVAL)?;
            match attr.wait_obj {
                ffi::FI_WAIT_UNSPEC | ffi::FI_WAIT_FD => {}
                other => {
                    crate::warn!(
                        Fabric,
                        "fi_wait_open: wait object {other} not supported (FI_WAIT_UNSPEC and FI_WAIT_FD are)"
                    );
                    return Err(FiError::NOSYS);
                }
            }
            let fd = wait_fd::eventfd().map_err(|e| {
                crate::warn!(Fabric, "fi_wait_open: no eventfd: {e}");
                FiError::NOMEM
            })?;
            let obj = object::into_raw(WaitSet {
                fid: ffi::fid_wait {
                    fid: object::fid(ffi::FI_CLASS_WAIT, std::ptr::null_mut(), &FI_OPS),
                    ops: &WAIT_OPS as *const _ as *mut _,
                },
                fd: Arc::new(fd),
                members: Arc::default(),
            });
            // SAFETY: the caller's out-pointer.
            unsafe { put(waitset, obj.cast::<ffi::fid_wait>()) }
        })())
    })
}

unsafe extern "C" fn wait_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &WaitSet| -> FiResult<()> {
        if !members_of(&obj.members).is_empty() {
            crate::warn!(Fabric, "fi_close(wait set): CQs or counters still wait on it");
            return Err(FiError::BUSY);
        }
        Ok(())
    };
    // SAFETY: the libfabric contract: a live wait set of ours.
    unsafe { object::close::<WaitSet>(fid, ffi::FI_CLASS_WAIT, "fi_close(wait set)", release) }
}

unsafe extern "C" fn wait_control(fid: *mut ffi::fid, command: c_int, arg: *mut c_void) -> c_int {
    crate::boundary::guard("wait set control", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract.
        let set = match unsafe { get(fid) } {
            Ok(s) => s,
            Err(e) => return e.code(),
        };
        // SAFETY: FI_GETWAIT and FI_GETWAITOBJ give `arg` as the caller's int / enum
        // fi_wait_obj to fill (fi_control(3)); NULL is refused.
        unsafe { waitfd::control(command, arg, ffi::FI_WAIT_FD, Some(set.fd.as_raw_fd())) }
    })
}

/// Arm every member of `set` (`fi_trywait` on the set, and `fi_wait` before it blocks): -FI_EAGAIN
/// if one has something to read now. The set's descriptor is drained once, before the first
/// member is armed: a member's ring after its arming must not be drained by the next one's.
pub fn try_arm(set: &WaitSet) -> FiResult<()> {
    wait_fd::drain(&set.fd);
    let members = members_of(&set.members).clone();
    for (shared, w) in members {
        waitfd::arm(&shared, w, false)?;
    }
    Ok(())
}

/// `fi_wait`: 0 once a member has something to read (at once if one has already), else
/// -FI_ETIMEDOUT after `timeout_ms` (negative: no limit).
fn wait(fid: *mut ffi::fid_wait, timeout_ms: c_int) -> FiResult<()> {
    // SAFETY: libfabric contract.
    let set = unsafe { get(fid.cast()) }?;
    match try_arm(set) {
        Err(FiError::AGAIN) => return Ok(()),
        other => other?,
    }
    let mut p = libc::pollfd { fd: set.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own, for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms.max(-1)) };
    match n {
        1 => Ok(()),
        0 => Err(FiError::TIMEDOUT),
        _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => Err(FiError::INTR),
        _ => Err(FiError::OTHER),
    }
}

unsafe extern "C" fn wait_wait(waitset: *mut ffi::fid_wait, timeout: c_int) -> c_int {
    crate::boundary::guard("fi_wait", FiError::OTHER.code(), || crate::error::int_ret(wait(waitset, timeout)))
}
