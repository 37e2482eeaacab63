//! The domain object (`fi_domain`): opens endpoints, CQs, counters, AVs, poll sets and
//! registrations over one shared state (`state`), and closes once they are all gone.

use crate::error::{int_ret, FiError, FiResult};
use crate::object::{self, put, Parent};
use crate::state::{Domain, DomainConfig, DomainShared, DomainState};
use crate::stubs;
use rshm_ffi as ffi;
use std::ffi::c_void;
use std::sync::Arc;

static FI_OPS: ffi::fi_ops = object::fi_ops(domain_close, None, None);

static DOMAIN_OPS: ffi::fi_ops_domain = ffi::fi_ops_domain {
    size: size_of::<ffi::fi_ops_domain>(),
    av_open: Some(crate::av::av_open),
    cq_open: Some(crate::cq::cq_open),
    endpoint: Some(crate::ep::endpoint_open),
    scalable_ep: Some(stubs::scalable_ep),
    cntr_open: Some(crate::cntr::cntr_open),
    poll_open: Some(crate::poll::poll_open),
    stx_ctx: Some(stubs::stx_ctx),
    srx_ctx: Some(stubs::srx_ctx),
    query_atomic: Some(crate::ep::query_atomic),
    query_collective: Some(stubs::query_collective),
    endpoint2: Some(stubs::endpoint2),
};

static MR_OPS: ffi::fi_ops_mr = ffi::fi_ops_mr {
    size: size_of::<ffi::fi_ops_mr>(),
    reg: Some(crate::mr::mr_reg),
    regv: Some(crate::mr::mr_regv),
    regattr: Some(crate::mr::mr_regattr),
};

/// `fi_domain`.
pub(crate) unsafe extern "C" fn domain_open(
    fabric: *mut ffi::fid_fabric,
    info: *mut ffi::fi_info,
    domain: *mut *mut ffi::fid_domain,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_domain", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract: a live fabric of ours.
            let fab = unsafe { object::get::<Parent<ffi::fid_fabric>>(fabric.cast(), ffi::FI_CLASS_FABRIC) }?;
            // SAFETY: the caller's info, valid for the call.
            let info = unsafe { info.as_ref() }.ok_or(FiError::INVAL)?;
            // SAFETY: attribute pointers of a caller's info are NULL or valid.
            let dom_attr = unsafe { info.domain_attr.as_ref() };
            if let Some(attr) = dom_attr {
                // SAFETY: C string or NULL.
                if unsafe { crate::core_api::opt_str(attr.name) }.is_some_and(|n| n != crate::getinfo::DOMAIN_NAME) {
                    return Err(FiError::NODATA);
                }
            }
            let config = DomainConfig {
                api_version: fab.fid.api_version,
                threading: dom_attr.map_or(ffi::FI_THREAD_SAFE, |a| a.threading),
                av_type: dom_attr.map_or(ffi::FI_AV_UNSPEC, |a| a.av_type),
                auto_progress: dom_attr.is_some_and(|a| a.data_progress == ffi::FI_PROGRESS_AUTO),
            };
            let mut state = DomainState::default();
            let mr_mode = dom_attr.map_or(0, |a| a.mr_mode);
            (state.mrs.virt_addr, state.mrs.prov_key) = mr_addressing(mr_mode, fab.fid.api_version);
            let shared = Arc::new(DomainShared::new(state, config));
            crate::info!(
                Domain,
                "{}, {} progress: {}",
                threading_name(shared.config.threading),
                if shared.config.auto_progress { "auto" } else { "manual" },
                if shared.serialized() {
                    "the application serializes the calls, none takes a lock"
                } else {
                    "calls take the domain's lock"
                }
            );
            let obj = object::into_raw(Domain {
                fid: ffi::fid_domain {
                    fid: object::fid(ffi::FI_CLASS_DOMAIN, context, &FI_OPS),
                    ops: &DOMAIN_OPS as *const _ as *mut _,
                    mr: &MR_OPS as *const _ as *mut _,
                },
                fabric: fabric.cast(),
                shared,
            });
            fab.adopt();
            // SAFETY: the caller's out-pointer.
            unsafe { put(domain, obj.cast::<ffi::fid_domain>()) }
        })())
    })
}

/// (virtual addresses, provider keys) for a domain's mr_mode: before API 1.5 the field was an
/// enum (FI_MR_BASIC meant both; FI_MR_SCALABLE and FI_MR_UNSPEC neither).
fn mr_addressing(mr_mode: i32, api_version: u32) -> (bool, bool) {
    if api_version < ffi::fi_version_make(1, 5) {
        let basic = mr_mode == ffi::FI_MR_BASIC as i32;
        return (basic, basic);
    }
    let mode = mr_mode as u32;
    if mode == ffi::FI_MR_BASIC {
        return (true, true);
    }
    (mode & ffi::FI_MR_VIRT_ADDR != 0, mode & ffi::FI_MR_PROV_KEY != 0)
}

unsafe extern "C" fn domain_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Domain| -> FiResult<()> {
        // The thread briefly holds a reference while it works: stop it before counting.
        crate::progress::stop_threads(&obj.shared);
        if Arc::strong_count(&obj.shared) > 1 {
            crate::progress::endpoints_changed(&obj.shared);
            crate::warn!(Domain, "fi_close(domain): endpoints, CQs, counters, AVs or MRs still open");
            return Err(FiError::BUSY);
        }
        // SAFETY: the fabric outlives its domains (it refuses to close while we count).
        unsafe { (*obj.fabric).release() };
        Ok(())
    };
    // SAFETY: the libfabric contract: a live domain of ours.
    unsafe { object::close::<Domain>(fid, ffi::FI_CLASS_DOMAIN, "fi_close(domain)", release) }
}

/// The libfabric name of a threading level, for the log.
fn threading_name(t: ffi::fi_threading) -> &'static str {
    match t {
        ffi::FI_THREAD_SAFE => "FI_THREAD_SAFE",
        ffi::FI_THREAD_FID => "FI_THREAD_FID",
        ffi::FI_THREAD_DOMAIN => "FI_THREAD_DOMAIN",
        ffi::FI_THREAD_COMPLETION => "FI_THREAD_COMPLETION",
        ffi::FI_THREAD_ENDPOINT => "FI_THREAD_ENDPOINT",
        _ => "FI_THREAD_UNSPEC",
    }
}
