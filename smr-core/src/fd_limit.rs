//! Descriptors per peer, and the process's limit on them.
//!
//! An endpoint holds descriptors for every peer it knows: the mapping of the peer's region keeps
//! its file open (a pool's pages are reserved through it on first use, the file's size is
//! checked on the liveness tick, a peer of another pid namespace is judged by the owner lock on
//! it; one mapping serves both directions: `Endpoint::mapped_region`), and a pidfd watches the
//! peer's process (one per process, however many endpoints and directions watch it:
//! `liveness`). That is about two per peer, so an endpoint that sends to and receives from 500
//! others holds about 1,000: the soft limit most systems give a process (1,024), whose hard
//! limit is usually far higher (524,288 under systemd). A descriptor that cannot be opened for EMFILE therefore raises the soft limit to
//! the hard one, once per process, and is opened again (`retry_emfile`): what systemd.exec(5)
//! advises a program that needs many descriptors to do, and what the Go runtime does at start;
//! here only once the need comes, so that a process with few peers keeps its limit. Where the
//! hard limit is reached too, the open fails with EMFILE as before.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static RAISED: AtomicBool = AtomicBool::new(false);
static EXHAUSTED_TOLD: AtomicBool = AtomicBool::new(false);
static ON_EVENT: OnceLock<fn(LimitEvent)> = OnceLock::new();

/// What the process's hook hears (`on_event`), each once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitEvent {
    /// The soft limit on open files was raised from `old` to the hard limit, `new`.
    Raised { old: u64, new: u64 },
    /// An open failed with EMFILE with nothing left to raise: the soft limit is `limit`.
    Exhausted { limit: u64 },
}

/// Have `hook` told of the events on the limit: the provider logs them. The first hook set
/// stays.
pub fn on_event(hook: fn(LimitEvent)) {
    let _ = ON_EVENT.set(hook);
}

/// The descriptor `open` returns (a system call that returns a new descriptor, or -1 with
/// errno set), owned; `open` is called once more after raising the soft limit on open files if
/// it failed with EMFILE (see the module).
///
/// # Safety
/// A descriptor `open` returns must be new and owned by nobody else: the result closes it.
pub unsafe fn retry_emfile(mut open: impl FnMut() -> i64) -> std::io::Result<OwnedFd> {
    retry_io(|| match open() {
        fd if fd < 0 => Err(std::io::Error::last_os_error()),
        // SAFETY: a new descriptor owned by nobody else (the caller's promise).
        fd => Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
    })
}

/// `open` (anything that opens a descriptor for a while: reading a file of /proc, listing a
/// directory), and once more after raising the soft limit on open files if it failed with
/// EMFILE. Every open on an endpoint's paths goes through here or `retry_emfile`: whichever of
/// them comes to the limit first must not fail where the others would have raised it.
pub fn retry_io<T>(mut open: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    match open() {
        Err(e) if worth_retrying(&e) => open(),
        done => done,
    }
}

/// Whether `e` is EMFILE and the soft limit was raised on it just now, so that the open may
/// pass the second time. An EMFILE with nothing left to raise is told to the hook, once.
fn worth_retrying(e: &std::io::Error) -> bool {
    if e.raw_os_error() != Some(libc::EMFILE) {
        return false;
    }
    if raise_soft_limit() {
        return true;
    }
    if !EXHAUSTED_TOLD.swap(true, Ordering::AcqRel) {
        if let (Some(hook), Some(lim)) = (ON_EVENT.get(), open_files_limit()) {
            hook(LimitEvent::Exhausted { limit: lim.rlim_cur });
        }
    }
    false
}

/// This process's limits on open files (soft, hard); None if getrlimit fails.
pub fn open_files_limit() -> Option<libc::rlimit> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim)
}

/// Raise the soft limit on open files to the hard limit, once per process. True if this call
/// raised it, so that an open is worth trying again. (A thread whose open failed at the old
/// limit while another thread was raising it fails as it would have without the raise.)
fn raise_soft_limit() -> bool {
    if RAISED.swap(true, Ordering::AcqRel) {
        // Raised already (by another thread maybe): the limit is as high as it goes.
        return false;
    }
    let Some(mut lim) = open_files_limit().filter(|lim| lim.rlim_cur < lim.rlim_max) else {
        return false;
    };
    let old = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: a valid rlimit whose soft limit does not exceed its hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return false;
    }
    if let Some(hook) = ON_EVENT.get() {
        hook(LimitEvent::Raised { old, new: lim.rlim_cur });
    }
    true
}
