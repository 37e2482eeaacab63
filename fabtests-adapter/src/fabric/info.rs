//! `struct fi_info`: hints built by the application, lists returned by `fi_getinfo`.

use super::ffi;
use std::ffi::{CStr, CString};
use std::marker::PhantomData;

/// Hints allocated by `fi_dupinfo(NULL)` (= `fi_allocinfo()`), freed by `fi_freeinfo`; strings in
/// it are `malloc`ed because `fi_freeinfo` frees them with `free()`.
pub struct Hints {
    ptr: *mut ffi::fi_info,
}

impl Hints {
    pub fn new() -> Hints {
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with every attribute struct.
        let ptr = unsafe { ffi::fi_dupinfo(std::ptr::null()) };
        assert!(!ptr.is_null(), "fi_allocinfo failed");
        let h = Hints { ptr };
        assert!(
            !h.info().tx_attr.is_null()
                && !h.info().rx_attr.is_null()
                && !h.info().ep_attr.is_null()
                && !h.info().domain_attr.is_null()
                && !h.info().fabric_attr.is_null(),
            "fi_allocinfo returned an incomplete fi_info"
        );
        h
    }

    /// Hints that select one provider by name (`fabric_attr->prov_name`).
    pub fn for_provider(prov: &str) -> Hints {
        let mut h = Hints::new();
        h.set_prov_name(prov);
        h
    }

    fn info(&self) -> &ffi::fi_info {
        // SAFETY: ptr is a valid fi_info owned by self for its whole life.
        unsafe { &*self.ptr }
    }

    pub fn raw_mut(&mut self) -> &mut ffi::fi_info {
        // SAFETY: as in info(); &mut self gives exclusive access.
        unsafe { &mut *self.ptr }
    }

    pub fn as_ptr(&self) -> *const ffi::fi_info {
        self.ptr
    }

    pub fn set_prov_name(&mut self, prov: &str) {
        let c = CString::new(prov).expect("provider name without NUL");
        // SAFETY: fabric_attr is non-null (checked in new); strdup returns a malloc'ed copy that
        // fi_freeinfo frees; the previous value (if any) was malloc'ed too.
        unsafe {
            let fa = &mut *self.raw_mut().fabric_attr;
            if !fa.prov_name.is_null() {
                libc::free(fa.prov_name.cast());
            }
            fa.prov_name = libc::strdup(c.as_ptr());
        }
    }

    pub fn caps(&mut self, caps: u64) -> &mut Self {
        self.raw_mut().caps = caps;
        self
    }

    pub fn mode(&mut self, mode: u64) -> &mut Self {
        self.raw_mut().mode = mode;
        self
    }

    pub fn ep_attr(&mut self) -> &mut ffi::fi_ep_attr {
        // SAFETY: non-null (checked in new) and owned by self.
        unsafe { &mut *self.raw_mut().ep_attr }
    }

    pub fn domain_attr(&mut self) -> &mut ffi::fi_domain_attr {
        // SAFETY: non-null (checked in new) and owned by self.
        unsafe { &mut *self.raw_mut().domain_attr }
    }

    pub fn tx_attr(&mut self) -> &mut ffi::fi_tx_attr {
        // SAFETY: non-null (checked in new) and owned by self.
        unsafe { &mut *self.raw_mut().tx_attr }
    }

    pub fn rx_attr(&mut self) -> &mut ffi::fi_rx_attr {
        // SAFETY: non-null (checked in new) and owned by self.
        unsafe { &mut *self.raw_mut().rx_attr }
    }
}

impl Default for Hints {
    fn default() -> Self {
        Hints::new()
    }
}

impl Drop for Hints {
    fn drop(&mut self) {
        // SAFETY: allocated by fi_dupinfo, freed once here.
        unsafe { ffi::fi_freeinfo(self.ptr) };
    }
}

/// The list `fi_getinfo` returned.
pub struct InfoList {
    head: *mut ffi::fi_info,
}

impl InfoList {
    pub(super) fn from_raw(head: *mut ffi::fi_info) -> InfoList {
        InfoList { head }
    }

    pub fn iter(&self) -> impl Iterator<Item = InfoRef<'_>> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            let r = InfoRef { ptr: cur, _list: PhantomData };
            // SAFETY: cur is a node of the list owned by self, alive while the borrow lasts.
            cur = unsafe { (*cur).next };
            Some(r)
        })
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    pub fn first(&self) -> Option<InfoRef<'_>> {
        self.iter().next()
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: the list came from fi_getinfo and is freed once here.
            unsafe { ffi::fi_freeinfo(self.head) };
        }
    }
}

/// One entry of an [`InfoList`] (or the single entry of an [`Info`]).
#[derive(Clone, Copy)]
pub struct InfoRef<'a> {
    ptr: *const ffi::fi_info,
    _list: PhantomData<&'a ffi::fi_info>,
}

fn cstr(p: *const std::ffi::c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: strings in an fi_info from libfabric are NUL-terminated.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

impl<'a> InfoRef<'a> {
    pub fn raw(&self) -> &'a ffi::fi_info {
        // SAFETY: the node is alive for 'a (owned by the list or Info it was taken from).
        unsafe { &*self.ptr }
    }

    pub fn caps(&self) -> u64 {
        self.raw().caps
    }

    pub fn mode(&self) -> u64 {
        self.raw().mode
    }

    pub fn tx_attr(&self) -> Option<&'a ffi::fi_tx_attr> {
        // SAFETY: NULL or a valid attribute struct owned by the same fi_info.
        unsafe { self.raw().tx_attr.as_ref() }
    }

    pub fn rx_attr(&self) -> Option<&'a ffi::fi_rx_attr> {
        // SAFETY: as in tx_attr.
        unsafe { self.raw().rx_attr.as_ref() }
    }

    pub fn ep_attr(&self) -> Option<&'a ffi::fi_ep_attr> {
        // SAFETY: as in tx_attr.
        unsafe { self.raw().ep_attr.as_ref() }
    }

    pub fn domain_attr(&self) -> Option<&'a ffi::fi_domain_attr> {
        // SAFETY: as in tx_attr.
        unsafe { self.raw().domain_attr.as_ref() }
    }

    pub fn fabric_attr(&self) -> Option<&'a ffi::fi_fabric_attr> {
        // SAFETY: as in tx_attr.
        unsafe { self.raw().fabric_attr.as_ref() }
    }

    pub fn ep_type(&self) -> Option<ffi::fi_ep_type> {
        self.ep_attr().map(|a| a.type_)
    }

    pub fn prov_name(&self) -> Option<String> {
        self.fabric_attr().and_then(|f| cstr(f.prov_name))
    }

    pub fn fabric_name(&self) -> Option<String> {
        self.fabric_attr().and_then(|f| cstr(f.name))
    }

    pub fn domain_name(&self) -> Option<String> {
        self.domain_attr().and_then(|d| cstr(d.name))
    }

    /// An owned copy of this one entry (`fi_dupinfo`).
    pub fn dup(&self) -> Info {
        // SAFETY: ptr is a valid fi_info; fi_dupinfo copies this node only (next = NULL).
        let p = unsafe { ffi::fi_dupinfo(self.ptr) };
        assert!(!p.is_null(), "fi_dupinfo failed");
        Info { ptr: p }
    }
}

/// One owned fi_info (from `fi_dupinfo`), used to open fabric, domain and endpoints.
pub struct Info {
    ptr: *mut ffi::fi_info,
}

impl Info {
    pub fn get(&self) -> InfoRef<'_> {
        InfoRef { ptr: self.ptr, _list: PhantomData }
    }

    pub fn raw(&self) -> &ffi::fi_info {
        // SAFETY: owned, valid for the life of self.
        unsafe { &*self.ptr }
    }

    pub fn as_mut_ptr(&self) -> *mut ffi::fi_info {
        self.ptr
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: allocated by fi_dupinfo, freed once.
        unsafe { ffi::fi_freeinfo(self.ptr) };
    }
}
