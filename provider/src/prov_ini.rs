//! `fi_prov_ini`, the entry point libfabric looks up after `dlopen`: it fills in our
//! `fi_provider` (`core_api::provider_ptr`) with the version we claim and the calls that open
//! everything else.

use crate::{core_api, fabric, getinfo, params};
use rshm_ffi as ffi;

/// The entry point libfabric looks up after `dlopen`.
///
/// # Safety
/// Called by the libfabric core, once, before any other entry point.
#[no_mangle]
pub unsafe extern "C" fn fi_prov_ini() -> *mut ffi::fi_provider {
    let prov = core_api::provider_ptr();
    let result = std::panic::catch_unwind(|| {
        // Claim the running core's API version: the core skips providers older than the
        // version a caller asks for, and callers ask for the core's own (see ABI.md).
        let version = core_api::core_version().max(ffi::fi_version_make(1, 17));
        // SAFETY: the core calls fi_prov_ini before using the struct; nothing else touches it.
        unsafe {
            (*prov).fi_version = version;
            (*prov).getinfo = Some(getinfo::rshm_getinfo);
            (*prov).fabric = Some(fabric::fabric_open);
            (*prov).cleanup = Some(rshm_cleanup);
        }
        params::define_all();
        smr_core::fd_limit::on_event(open_files_limit_event);
    });
    if result.is_err() {
        return std::ptr::null_mut();
    }
    prov
}

/// The engine ran out of descriptors for its peers (`smr_core::fd_limit`): it raised the soft
/// limit on open files to the hard one, or found nothing left to raise. Each said once, since
/// each concerns the whole process.
fn open_files_limit_event(event: smr_core::fd_limit::LimitEvent) {
    use smr_core::fd_limit::LimitEvent;
    match event {
        LimitEvent::Raised { old, new } => crate::warn!(
            EpCtrl,
            "out of file descriptors (about two per peer): raised this process's soft RLIMIT_NOFILE from {old} to its hard limit {new}"
        ),
        LimitEvent::Exhausted { limit } => crate::warn!(
            EpCtrl,
            "out of file descriptors at this process's hard RLIMIT_NOFILE ({limit}; about two per peer): opens for more peers fail with -FI_EMFILE until descriptors are closed or the hard limit is raised (ulimit -Hn, LimitNOFILE=)"
        ),
    }
}

/// Called by the core before it `dlclose`s us: our signal handlers go first (they would be left
/// pointing into unmapped code; `smr_core::signal_unlink::uninstall`).
unsafe extern "C" fn rshm_cleanup() {
    let _ = std::panic::catch_unwind(|| {
        let given_back = smr_core::signal_unlink::uninstall();
        if !given_back.is_empty() {
            crate::info!(Core, "signal handlers given back before unloading: {given_back:?}");
        }
    });
}
