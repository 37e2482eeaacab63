//! The fabric: the root object. It only counts its domains, so it cannot close under them.

use crate::error::{int_ret, FiError, FiResult};
use crate::object::{self, put};
use crate::stubs;
use rshm_ffi as ffi;
use std::ffi::c_void;

/// The fabric: a parent of the domains and EQs opened on it (`object::Parent`).
pub type Fabric = object::Parent<ffi::fid_fabric>;

static FI_OPS: ffi::fi_ops = object::fi_ops(fabric_close, None, None);

static FABRIC_OPS: ffi::fi_ops_fabric = ffi::fi_ops_fabric {
    size: size_of::<ffi::fi_ops_fabric>(),
    domain: Some(crate::domain::domain_open),
    passive_ep: Some(stubs::passive_ep),
    eq_open: Some(crate::eq::eq_open),
    wait_open: Some(crate::waitset::wait_open),
    trywait: Some(crate::wait::trywait),
    domain2: Some(stubs::domain2),
};

/// `fi_provider::fabric`.
pub(crate) unsafe extern "C" fn fabric_open(
    attr: *mut ffi::fi_fabric_attr,
    fabric: *mut *mut ffi::fid_fabric,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_fabric", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: the core passes a valid attr (or NULL).
            let attr = unsafe { attr.as_ref() }.ok_or(FiError::INVAL)?;
            // SAFETY: attr.name is NULL or a C string.
            if let Some(name) = unsafe { crate::core_api::opt_str(attr.name) } {
                if name != crate::getinfo::FABRIC_NAME {
                    return Err(FiError::NODATA);
                }
            }
            let obj = object::into_raw(Fabric::new(ffi::fid_fabric {
                fid: object::fid(ffi::FI_CLASS_FABRIC, context, &FI_OPS),
                ops: &FABRIC_OPS as *const _ as *mut _,
                api_version: attr.api_version,
            }));
            // SAFETY: `fabric` is the caller's out-pointer.
            unsafe { put(fabric, obj.cast::<ffi::fid_fabric>()) }
        })())
    })
}

unsafe extern "C" fn fabric_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Fabric| -> FiResult<()> {
        if obj.has_children() {
            crate::warn!(Fabric, "fi_close(fabric): domains or EQs still open");
            return Err(FiError::BUSY);
        }
        Ok(())
    };
    // SAFETY: the libfabric contract: a live fabric of ours.
    unsafe { object::close::<Fabric>(fid, ffi::FI_CLASS_FABRIC, "fi_close(fabric)", release) }
}
