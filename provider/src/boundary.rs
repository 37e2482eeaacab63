//! The C boundary: every entry point runs its work through `guard`, which turns a panic into
//! an error code instead of unwinding into C and logs the error codes it returns.

use crate::core_api;
use crate::error;
use crate::{info, warn};
use rshm_ffi as ffi;

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
