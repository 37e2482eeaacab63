//! What the provider calls in the libfabric core: logging, parameters, info allocation.
//!
//! # Safety
//! These are thin wrappers over the core's exported C functions; strings passed down are
//! NUL-terminated `CString`s that outlive the call.

use rshm_ffi as ffi;
use std::ffi::{c_char, CStr, CString};

/// Provider version reported to the core: 1.0.
pub const PROVIDER_VERSION: u32 = ffi::fi_version_make(1, 0);
pub const PROVIDER_NAME: &CStr = c"rshm";

/// The provider struct the core registers, whose entry points `fi_prov_ini` fills in. It must
/// be writable: the core stores into `context`.
static mut PROVIDER: ffi::fi_provider = ffi::fi_provider {
    version: PROVIDER_VERSION,
    fi_version: ffi::fi_version_make(1, 17),
    context: ffi::fi_context { internal: [std::ptr::null_mut(); 4] },
    name: PROVIDER_NAME.as_ptr() as *const c_char,
    getinfo: None,
    fabric: None,
    cleanup: None,
};

/// Pointer to our provider struct, for logging and parameter calls.
pub fn provider_ptr() -> *mut ffi::fi_provider {
    &raw mut PROVIDER
}

/// Log levels, as libfabric's enum.
#[derive(Clone, Copy)]
pub enum Level {
    Warn = ffi::FI_LOG_WARN as isize,
    Info = ffi::FI_LOG_INFO as isize,
    Debug = ffi::FI_LOG_DEBUG as isize,
}

/// Log subsystems we use.
#[derive(Clone, Copy)]
pub enum Subsys {
    Core = ffi::FI_LOG_CORE as isize,
    Fabric = ffi::FI_LOG_FABRIC as isize,
    Domain = ffi::FI_LOG_DOMAIN as isize,
    EpCtrl = ffi::FI_LOG_EP_CTRL as isize,
    EpData = ffi::FI_LOG_EP_DATA as isize,
    Av = ffi::FI_LOG_AV as isize,
    Cq = ffi::FI_LOG_CQ as isize,
    Mr = ffi::FI_LOG_MR as isize,
}

/// Log through the core, so FI_LOG_LEVEL and FI_LOG_PROV=rshm apply.
pub fn log(level: Level, subsys: Subsys, func: &str, line: u32, msg: &str) {
    let prov = provider_ptr();
    // SAFETY: `prov` is our registered provider struct; the core only reads it here.
    let enabled = unsafe { ffi::fi_log_enabled(prov, level as _, subsys as _) };
    if enabled == 0 {
        return;
    }
    let func = CString::new(func).unwrap_or_default();
    let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: format "%s\n" with one NUL-terminated string argument.
    unsafe { ffi::fi_log(prov, level as _, subsys as _, func.as_ptr(), line as i32, c"%s\n".as_ptr(), msg.as_ptr()) };
}

#[macro_export]
macro_rules! warn {
    ($subsys:ident, $($arg:tt)*) => {
        $crate::core_api::log($crate::core_api::Level::Warn, $crate::core_api::Subsys::$subsys,
            module_path!(), line!(), &format!($($arg)*))
    };
}

#[macro_export]
macro_rules! info {
    ($subsys:ident, $($arg:tt)*) => {
        $crate::core_api::log($crate::core_api::Level::Info, $crate::core_api::Subsys::$subsys,
            module_path!(), line!(), &format!($($arg)*))
    };
}

/// A debug line, formatted only when debug logging is on. Its arguments are taken by reference
/// even when it is off, which keeps the compiler from holding them in registers: on a per-message
/// path, give a cold function copies of the fields instead (`state::ep::sinks::log_completion`;
/// three such lines cost the receiver about 45 instructions per 8 B message).
#[macro_export]
macro_rules! debug {
    ($subsys:ident, $($arg:tt)*) => {
        if $crate::core_api::debug_enabled() {
            $crate::core_api::log($crate::core_api::Level::Debug, $crate::core_api::Subsys::$subsys,
                module_path!(), line!(), &format!($($arg)*))
        }
    };
}

/// Whether debug logging is on for us (0: not asked yet, 1: off, 2: on).
static DEBUG_STATE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether debug logging is on for us: asked once, so data paths pay one load (inline: the
/// debug! lines on them are not even a call) when it is off.
#[inline]
pub fn debug_enabled() -> bool {
    match DEBUG_STATE.load(std::sync::atomic::Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => debug_enabled_first(),
    }
}

#[cold]
fn debug_enabled_first() -> bool {
    // SAFETY: our registered provider struct; the core only reads it.
    let on = unsafe { ffi::fi_log_enabled(provider_ptr(), ffi::FI_LOG_DEBUG as _, ffi::FI_LOG_EP_DATA as _) } != 0;
    DEBUG_STATE.store(if on { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
    on
}

/// The running core's API version (`fi_version()`).
pub fn core_version() -> u32 {
    // SAFETY: no arguments, returns a constant.
    unsafe { ffi::fi_version() }
}

/// A core-allocated, core-sized `fi_info` with all sub-attributes (`fi_allocinfo`).
pub fn alloc_info() -> *mut ffi::fi_info {
    // SAFETY: fi_dupinfo(NULL) allocates a zeroed info with every attribute struct, sized by the
    // running core (bound to FABRIC_1.3 at link time, see ffi/build.rs).
    unsafe { ffi::fi_dupinfo(std::ptr::null()) }
}

/// Free an info list with the core's allocator.
///
/// # Safety
/// `info` must be NULL or a list allocated by the core (`alloc_info`), not used afterwards.
pub unsafe fn free_info(info: *mut ffi::fi_info) {
    if !info.is_null() {
        // SAFETY: `info` came from `alloc_info` (the core's allocator).
        unsafe { ffi::fi_freeinfo(info) };
    }
}

/// A string the core will `free()`: allocated with libc.
pub fn c_strdup(s: &str) -> *mut c_char {
    let c = CString::new(s).unwrap_or_default();
    // SAFETY: `c` is NUL-terminated; strdup copies it into malloc'd memory.
    unsafe { libc::strdup(c.as_ptr()) }
}

/// Copy `bytes` into malloc'd memory the core may `free()`.
pub fn c_memdup(bytes: &[u8]) -> *mut std::ffi::c_void {
    // SAFETY: malloc of a positive size; checked for NULL before writing.
    let p = unsafe { libc::malloc(bytes.len().max(1)) };
    if !p.is_null() {
        // SAFETY: `p` holds at least `bytes.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast(), bytes.len()) };
    }
    p
}

/// A borrowed C string as `&str`, if non-NULL and UTF-8.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string valid for `'a`.
pub unsafe fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the function contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// A positive FI_E* code with its text, for log lines: `22 (Invalid argument)`.
pub fn errname(code: u32) -> String {
    // SAFETY: fi_strerror returns a static NUL-terminated string for any value.
    let text = unsafe { CStr::from_ptr(ffi::fi_strerror(code as i32)) };
    format!("{code} ({})", text.to_string_lossy())
}

/// `fi_strerror(prov_errno)`, copied into the caller's buffer when it gives one (the contract
/// of both `fi_cq_strerror` and `fi_eq_strerror`).
///
/// # Safety
/// `buf` must be NULL or hold `len` writable bytes.
pub unsafe fn strerror_into(prov_errno: i32, buf: *mut c_char, len: usize) -> *const c_char {
    // SAFETY: fi_strerror returns a static string for any value.
    let msg = unsafe { ffi::fi_strerror(prov_errno) };
    if buf.is_null() || len == 0 {
        return msg;
    }
    // SAFETY: `msg` is NUL-terminated; we copy at most len-1 bytes into the caller's buffer.
    unsafe {
        let n = libc::strlen(msg).min(len - 1);
        std::ptr::copy_nonoverlapping(msg, buf, n);
        *buf.add(n) = 0;
    }
    buf
}
