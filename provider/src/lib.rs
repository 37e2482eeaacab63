//! librshm-fi.so: libfabric's shared-memory provider on top of smr-core.
//!
//! libfabric loads this library as a DL provider and calls `fi_prov_ini`, which returns our
//! `fi_provider`. Every libfabric object is a `#[repr(C)]` struct whose first field is the
//! libfabric `fid_*`, so the `fid` pointer the application hands back converts to our object.
//! Every `extern "C"` entry point is a thin trampoline (`guard`) that catches panics and turns
//! errors into `-FI_E*` codes; the logic behind it is safe Rust.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod atomic;
pub mod av;
pub mod block;
pub mod cntr;
pub mod core_api;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod eq;
pub mod error;
pub mod fabric;
pub mod getinfo;
pub mod iov;
pub mod mr;
pub mod object;
pub mod params;
pub mod poll;
pub mod progress;
pub mod state;
pub mod stubs;
pub mod wait;
pub mod waitfd;
pub mod waitset;

use rshm_ffi as ffi;
use std::ffi::c_char;

/// Provider version reported to the core: 1.0.
pub const PROVIDER_VERSION: u32 = ffi::fi_version_make(1, 0);
pub const PROVIDER_NAME: &std::ffi::CStr = c"rshm";

/// The provider struct the core registers. It must be writable: the core stores into `context`.
static mut PROVIDER: ffi::fi_provider = ffi::fi_provider {
    version: PROVIDER_VERSION,
    fi_version: ffi::fi_version_make(1, 17),
    context: ffi::fi_context { internal: [std::ptr::null_mut(); 4] },
    name: PROVIDER_NAME.as_ptr() as *const c_char,
    getinfo: Some(getinfo::rshm_getinfo),
    fabric: Some(fabric::fabric_open),
    cleanup: Some(rshm_cleanup),
};

/// Pointer to our provider struct, for logging and parameter calls.
pub fn provider_ptr() -> *const ffi::fi_provider {
    &raw const PROVIDER
}

/// The entry point libfabric looks up after `dlopen`.
///
/// # Safety
/// Called by the libfabric core, once, before any other entry point.
#[no_mangle]
pub unsafe extern "C" fn fi_prov_ini() -> *mut ffi::fi_provider {
    let prov = &raw mut PROVIDER;
    let result = std::panic::catch_unwind(|| {
        // Claim the running core's API version: the core skips providers older than the
        // version a caller asks for, and callers ask for the core's own (see ABI.md).
        let version = core_api::core_version().max(ffi::fi_version_make(1, 17));
        // SAFETY: the core calls fi_prov_ini before using the struct; nothing else touches it.
        unsafe { (*prov).fi_version = version };
        params::define_all();
    });
    if result.is_err() {
        return std::ptr::null_mut();
    }
    prov
}

unsafe extern "C" fn rshm_cleanup() {}

/// Run `f`, turning a panic into `-FI_EOTHER` (with a log line) instead of unwinding into C.
/// An error it returns is logged once here, where it becomes the caller's return code (see
/// `RetCode`): misuse always leaves a trace in the log.
pub fn guard<T: RetCode>(what: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => {
            // -FI_EAGAIN is what an empty poll returns, millions of times: no call for it.
            if let Some(code) = v.fi_error().filter(|&c| c != ffi::FI_EAGAIN) {
                log_error(what, code);
            }
            v
        }
        Err(_) => {
            warn!(Core, "{what}: internal error (panic caught at the C boundary)");
            on_panic
        }
    }
}

/// What an entry point returns, as far as its error code goes.
pub trait RetCode {
    /// The positive FI_E* code if this is an error return.
    fn fi_error(&self) -> Option<u32>;
}

impl RetCode for i32 {
    fn fi_error(&self) -> Option<u32> {
        (*self < 0).then(|| self.unsigned_abs())
    }
}

impl RetCode for isize {
    fn fi_error(&self) -> Option<u32> {
        (*self < 0).then(|| self.unsigned_abs() as u32)
    }
}

impl RetCode for () {
    fn fi_error(&self) -> Option<u32> {
        None
    }
}

impl RetCode for u64 {
    fn fi_error(&self) -> Option<u32> {
        None
    }
}

impl<T> RetCode for *const T {
    fn fi_error(&self) -> Option<u32> {
        None
    }
}

/// Log an error return: not the ones that are part of normal operation (try again, an error
/// entry is waiting, a timed-out wait, nothing matched); at info level the answers that callers
/// use to probe what a provider offers; at warn level the rest, which are the caller's mistakes
/// (invalid arguments, flags, sizes, keys) or failures (a dead peer, a busy object).
#[cold]
fn log_error(what: &str, code: u32) {
    use error::FiError as E;
    const QUIET: &[E] = &[E::AGAIN, E::AVAIL, E::TIMEDOUT, E::NOMSG, E::NOENT, E::CANCELED];
    const PROBES: &[E] = &[E::NOSYS, E::NOPROTOOPT, E::OPNOTSUPP, E::TOOSMALL, E::NODATA];
    let code = E(code);
    if QUIET.contains(&code) {
        return;
    }
    let code = code.0;
    let name = core_api::errname(code);
    if PROBES.contains(&E(code)) {
        info!(Core, "{what}: returns -{name}");
    } else {
        warn!(Core, "{what}: returns -{name}");
    }
}
