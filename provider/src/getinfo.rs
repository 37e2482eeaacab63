//! `fi_getinfo` for rshm: what we offer, filtered by the caller's hints.
//!
//! Everything returned is allocated by the core's allocator (`fi_dupinfo(NULL)` and libc
//! strings), because the core frees it with `free()`. Hints are read only up to what the
//! caller's API version defines; we write only fields libfabric 1.17 defines.

use crate::core_api::{alloc_info, c_memdup, c_strdup, free_info, opt_str};
use crate::error::{FiError, FiResult};
use crate::names::{generated_name, service_name};
use crate::params::config;
use rshm_ffi as ffi;
use std::ffi::c_char;

/// Addresses are region names, NUL-padded to a fixed length so address arrays have one stride.
pub const ADDR_LEN: usize = 64;
pub const FABRIC_NAME: &str = "rshm";
pub const DOMAIN_NAME: &str = "rshm";
const TAG_GENERIC: u64 = 0xaaaa_aaaa_aaaa_aaaa;
/// Flag bit with which utility providers (rxm, rxd) query core providers (libfabric's internal
/// OFI_CORE_PROV_ONLY): we serve applications directly, not as a layer's transport.
const UTIL_QUERY: u64 = 1 << 59;

pub const PRIMARY_CAPS: u64 = (ffi::FI_MSG | ffi::FI_TAGGED | ffi::FI_RMA | ffi::FI_ATOMIC) as u64;
pub const SECONDARY_CAPS: u64 = (ffi::FI_SEND | ffi::FI_RECV | ffi::FI_MULTI_RECV | ffi::FI_FENCE) as u64
    | ONE_SIDED_ACCESS
    | ffi::FI_RMA_EVENT
    | ffi::FI_SOURCE
    | ffi::FI_DIRECTED_RECV
    | ffi::FI_LOCAL_COMM;
/// The access capabilities FI_RMA and FI_ATOMIC imply when none of them is named.
const ONE_SIDED_ACCESS: u64 = (ffi::FI_READ | ffi::FI_WRITE | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
/// Capabilities that only make sense on one side of an endpoint.
const RX_ONLY_CAPS: u64 = (ffi::FI_RECV | ffi::FI_MULTI_RECV | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64
    | ffi::FI_DIRECTED_RECV
    | ffi::FI_SOURCE
    | ffi::FI_RMA_EVENT;
const TX_ONLY_CAPS: u64 = (ffi::FI_SEND | ffi::FI_READ | ffi::FI_WRITE | ffi::FI_FENCE) as u64;
/// Capabilities of the domain, reported in `caps` and `domain_attr`, not per side.
const DOMAIN_CAPS: u64 = ffi::FI_LOCAL_COMM | ffi::FI_REMOTE_COMM;
pub const TX_OP_FLAGS: u64 = (ffi::FI_COMPLETION
    | ffi::FI_INJECT
    | ffi::FI_INJECT_COMPLETE
    | ffi::FI_TRANSMIT_COMPLETE
    | ffi::FI_DELIVERY_COMPLETE) as u64;
pub const RX_OP_FLAGS: u64 = (ffi::FI_COMPLETION | ffi::FI_MULTI_RECV) as u64;
/// Operations from one endpoint to one peer are handled in order (one FIFO ring per receiver,
/// and the target finishes each operation that fits an inject buffer before it takes the next).
/// Larger writes through SAR bounce buffers may overlap later operations, so ordering between
/// RMA and atomic operations is promised up to `MAX_ORDER_SIZE`.
pub const MSG_ORDER: u64 = ffi::FI_ORDER_STRICT as u64
    | ffi::FI_ORDER_RMA_RAR
    | ffi::FI_ORDER_RMA_RAW
    | ffi::FI_ORDER_RMA_WAR
    | ffi::FI_ORDER_RMA_WAW
    | ffi::FI_ORDER_ATOMIC_RAR
    | ffi::FI_ORDER_ATOMIC_RAW
    | ffi::FI_ORDER_ATOMIC_WAR
    | ffi::FI_ORDER_ATOMIC_WAW;
pub const MAX_ORDER_SIZE: usize = INJECT_SIZE;
pub const QUEUE_SIZE: usize = 1024;
pub const IOV_LIMIT: usize = smr_core::cmd::IOV_MAX;
/// Remote ranges one RMA or atomic operation may name (`rma_iov_limit`, as the C shm's):
/// `state::ep::rma::segments` carries them.
pub const RMA_IOV_LIMIT: usize = 4;
pub const INJECT_SIZE: usize = 4096;

/// Capabilities this load offers (FI_REMOTE_COMM only when asked for by parameter).
pub fn all_caps() -> u64 {
    let remote = if config().remote_comm { ffi::FI_REMOTE_COMM } else { 0 };
    PRIMARY_CAPS | SECONDARY_CAPS | remote
}

/// The domain capabilities this load offers.
fn domain_caps() -> u64 {
    all_caps() & DOMAIN_CAPS
}

/// Whether `node` names this machine: NULL, or an address we could bind to.
pub fn node_is_local(node: Option<&str>) -> bool {
    use std::net::{ToSocketAddrs, UdpSocket};
    let Some(node) = node else { return true };
    if node.is_empty() || node == "localhost" {
        return true;
    }
    match (node, 0).to_socket_addrs() {
        Ok(addrs) => addrs.into_iter().any(|a| UdpSocket::bind((a.ip(), 0)).is_ok()),
        Err(_) => false,
    }
}

/// An address buffer holding `name`, NUL-padded to `ADDR_LEN`.
pub fn encode_addr(name: &str) -> [u8; ADDR_LEN] {
    let mut out = [0u8; ADDR_LEN];
    let n = name.len().min(ADDR_LEN - 1);
    out[..n].copy_from_slice(&name.as_bytes()[..n]);
    out
}

/// Read an address the caller gave with its length: at most `len` (and `ADDR_LEN`) bytes.
///
/// # Safety
/// `addr` must be readable for `len` bytes.
pub unsafe fn decode_addr_len(addr: *const u8, len: usize) -> FiResult<String> {
    if addr.is_null() || len == 0 {
        return Err(FiError::INVAL);
    }
    let mut buf = [0u8; ADDR_LEN];
    let n = len.min(ADDR_LEN - 1);
    // SAFETY: the caller's buffer holds `len >= n` bytes; `buf` has room for them and a NUL.
    unsafe { std::ptr::copy_nonoverlapping(addr, buf.as_mut_ptr(), n) };
    // SAFETY: `buf` is ours and NUL-terminated within ADDR_LEN.
    unsafe { decode_addr(buf.as_ptr()) }
}

/// Read one address: a NUL-terminated name within `ADDR_LEN` bytes.
///
/// # Safety
/// `addr` must be readable up to its NUL or `ADDR_LEN` bytes, whichever comes first.
pub unsafe fn decode_addr(addr: *const u8) -> FiResult<String> {
    if addr.is_null() {
        return Err(FiError::INVAL);
    }
    let mut bytes = Vec::with_capacity(ADDR_LEN);
    for i in 0..ADDR_LEN {
        // SAFETY: per the contract, bytes up to the first NUL (or ADDR_LEN) are readable.
        let b = unsafe { *addr.add(i) };
        if b == 0 {
            break;
        }
        bytes.push(b);
    }
    let name = String::from_utf8(bytes).map_err(|_| FiError::INVAL)?;
    smr_core::region::check_name(&name).map_err(|_| FiError::INVAL)?;
    Ok(name)
}

/// Hints, read defensively.
struct Hints<'a> {
    info: &'a ffi::fi_info,
}

impl Hints<'_> {
    /// Why these hints rule out `ep_type`, if they do.
    fn reject(&self, ep_type: ffi::fi_ep_type) -> Option<&'static str> {
        let h = self.info;
        let caps = h.caps;
        if caps & !all_caps() != 0 {
            return Some("hints ask for capabilities rshm does not offer");
        }
        if h.addr_format != ffi::FI_FORMAT_UNSPEC && h.addr_format != ffi::FI_ADDR_STR {
            return Some("unsupported address format");
        }
        // SAFETY: attribute pointers in hints are NULL or valid for the duration of the call.
        let ep = unsafe { h.ep_attr.as_ref() };
        if let Some(ep) = ep {
            if ep.type_ != ffi::FI_EP_UNSPEC && ep.type_ != ep_type {
                return Some("endpoint type not served");
            }
            if ep.max_msg_size > config().engine.max_msg_size as usize {
                return Some("max_msg_size too large");
            }
            if ep.tx_ctx_cnt > 1 || ep.rx_ctx_cnt > 1 {
                return Some("scalable or shared contexts not supported");
            }
            if ep.protocol != ffi::FI_PROTO_UNSPEC && ep.protocol != ffi::FI_PROTO_SHM {
                return Some("protocol not served");
            }
        }
        // SAFETY: as above.
        if let Some(tx) = unsafe { h.tx_attr.as_ref() } {
            if tx.caps & !all_caps() != 0
                || tx.inject_size > INJECT_SIZE
                || tx.size > QUEUE_SIZE * 64
                || tx.iov_limit > IOV_LIMIT
                || tx.rma_iov_limit > RMA_IOV_LIMIT
            {
                return Some("tx attributes beyond what rshm offers");
            }
            if tx.msg_order & !(MSG_ORDER | ffi::FI_ORDER_NONE as u64) != 0 {
                return Some("message ordering not provided");
            }
        }
        // SAFETY: as above.
        if let Some(rx) = unsafe { h.rx_attr.as_ref() } {
            if rx.caps & !all_caps() != 0 || rx.iov_limit > IOV_LIMIT {
                return Some("rx attributes beyond what rshm offers");
            }
            if rx.msg_order & !(MSG_ORDER | ffi::FI_ORDER_NONE as u64) != 0 {
                return Some("message ordering not provided");
            }
        }
        // SAFETY: as above.
        if let Some(dom) = unsafe { h.domain_attr.as_ref() } {
            // SAFETY: `name` is NULL or a C string owned by the caller.
            if let Some(name) = unsafe { opt_str(dom.name) } {
                if name != DOMAIN_NAME {
                    return Some("domain name does not match");
                }
            }
            if dom.av_type > ffi::FI_AV_TABLE {
                return Some("AV type not served");
            }
            if dom.caps & !domain_caps() != 0 {
                return Some("domain capabilities not offered (e.g. FI_SHARED_AV)");
            }
        }
        // SAFETY: as above.
        if let Some(fab) = unsafe { h.fabric_attr.as_ref() } {
            // SAFETY: C strings owned by the caller.
            if unsafe { opt_str(fab.name) }.is_some_and(|n| n != FABRIC_NAME) {
                return Some("fabric name does not match");
            }
            // SAFETY: as above.
            if unsafe { opt_str(fab.prov_name) }.is_some_and(|n| n != "rshm") {
                return Some("provider name does not match");
            }
        }
        None
    }
}

/// Addresses resolved from node/service and hints.
struct Addrs {
    src: Option<String>,
    dest: Option<String>,
}

fn resolve(node: Option<&str>, service: Option<&str>, flags: u64, hints: Option<&ffi::fi_info>) -> FiResult<Addrs> {
    if !node_is_local(node) {
        return Err(FiError::NODATA);
    }
    let mut addrs = Addrs { src: None, dest: None };
    if let Some(service) = service {
        let name = service_name(service)?;
        if flags & ffi::FI_SOURCE != 0 {
            addrs.src = Some(name);
        } else {
            addrs.dest = Some(name);
        }
    }
    if let Some(h) = hints {
        // An empty address (fabtests copies a zero-length one from a first getinfo) is none.
        if addrs.src.is_none() && !h.src_addr.is_null() && h.src_addrlen > 0 {
            // SAFETY: the caller's src_addr holds `src_addrlen` bytes.
            addrs.src = Some(unsafe { decode_addr_len(h.src_addr.cast(), h.src_addrlen) }?);
        }
        if addrs.dest.is_none() && !h.dest_addr.is_null() && h.dest_addrlen > 0 {
            // SAFETY: as above, for dest_addr.
            addrs.dest = Some(unsafe { decode_addr_len(h.dest_addr.cast(), h.dest_addrlen) }?);
        }
    }
    Ok(addrs)
}

/// Fill one core-allocated info for `ep_type`.
fn fill(info: &mut ffi::fi_info, ep_type: ffi::fi_ep_type, version: u32, hints: Option<&ffi::fi_info>, addrs: &Addrs) {
    // With caps in the hints, return exactly those (plus FI_SEND|FI_RECV, which they imply
    // when neither is named); callers check that no capability they did not ask for appears.
    let requested = hints.map(|h| h.caps).filter(|&c| c != 0);
    let mut caps = requested.unwrap_or_else(all_caps);
    if caps & (ffi::FI_SEND | ffi::FI_RECV) as u64 == 0 {
        caps |= (ffi::FI_SEND | ffi::FI_RECV) as u64;
    }
    if caps & (ffi::FI_RMA | ffi::FI_ATOMIC) as u64 != 0 && caps & ONE_SIDED_ACCESS == 0 {
        caps |= ONE_SIDED_ACCESS;
    }
    info.caps = caps;
    info.mode = 0;
    info.addr_format = ffi::FI_ADDR_STR;
    // Always name a source, as callers expect: a generated name stands for "any name of this
    // process", and each endpoint opened with it gets a fresh one (see `ep::endpoint_open`).
    let src = addrs.src.clone().unwrap_or_else(generated_name);
    info.src_addr = c_memdup(&encode_addr(&src));
    info.src_addrlen = ADDR_LEN;
    if let Some(dest) = &addrs.dest {
        info.dest_addr = c_memdup(&encode_addr(dest));
        info.dest_addrlen = ADDR_LEN;
    }
    // SAFETY: fi_dupinfo(NULL) allocated every attribute struct.
    let (tx, rx, ep, dom, fab) = unsafe {
        (&mut *info.tx_attr, &mut *info.rx_attr, &mut *info.ep_attr, &mut *info.domain_attr, &mut *info.fabric_attr)
    };
    let (h_tx, h_rx, h_ep, h_dom) = match hints {
        // SAFETY: hint attribute pointers are NULL or valid for the call.
        Some(h) => unsafe { (h.tx_attr.as_ref(), h.rx_attr.as_ref(), h.ep_attr.as_ref(), h.domain_attr.as_ref()) },
        None => (None, None, None, None),
    };
    // Each side lists only what applies to it: no receive capabilities on the transmit side,
    // no send capabilities on the receive side (callers check for extra caps).
    tx.caps = caps & !(RX_ONLY_CAPS | DOMAIN_CAPS);
    tx.mode = 0;
    tx.op_flags = h_tx.map_or(0, |t| t.op_flags & TX_OP_FLAGS);
    tx.msg_order = MSG_ORDER;
    tx.comp_order = ffi::FI_ORDER_NONE as u64;
    tx.inject_size = INJECT_SIZE;
    tx.size = QUEUE_SIZE;
    tx.iov_limit = IOV_LIMIT;
    tx.rma_iov_limit = RMA_IOV_LIMIT;
    rx.caps = caps & !(TX_ONLY_CAPS | DOMAIN_CAPS);
    rx.mode = 0;
    rx.op_flags = h_rx.map_or(0, |r| r.op_flags & RX_OP_FLAGS);
    rx.msg_order = MSG_ORDER;
    rx.comp_order = ffi::FI_ORDER_NONE as u64;
    rx.total_buffered_recv = 0;
    rx.size = QUEUE_SIZE;
    rx.iov_limit = IOV_LIMIT;
    ep.type_ = ep_type;
    ep.protocol = ffi::FI_PROTO_SHM;
    ep.protocol_version = 1;
    ep.max_msg_size = config().engine.max_msg_size as usize;
    ep.msg_prefix_size = 0;
    ep.max_order_raw_size = MAX_ORDER_SIZE;
    ep.max_order_war_size = MAX_ORDER_SIZE;
    ep.max_order_waw_size = MAX_ORDER_SIZE;
    ep.mem_tag_format = h_ep.map(|e| e.mem_tag_format).filter(|&f| f != 0).unwrap_or(TAG_GENERIC);
    ep.tx_ctx_cnt = 1;
    ep.rx_ctx_cnt = 1;
    dom.name = c_strdup(DOMAIN_NAME);
    dom.threading = h_dom.map(|d| d.threading).filter(|&t| t != ffi::FI_THREAD_UNSPEC).unwrap_or(ffi::FI_THREAD_SAFE);
    dom.control_progress = h_dom.map(|d| d.control_progress).filter(|&p| p != 0).unwrap_or(ffi::FI_PROGRESS_MANUAL);
    dom.data_progress = h_dom.map(|d| d.data_progress).filter(|&p| p != 0).unwrap_or(ffi::FI_PROGRESS_MANUAL);
    dom.resource_mgmt = ffi::FI_RM_ENABLED;
    dom.av_type = h_dom.map_or(ffi::FI_AV_UNSPEC, |d| d.av_type);
    // Before 1.5, mr_mode was an enum: "basic" when asked for, else "scalable". Since then a
    // provider clears the bits it does not need (fi_domain(3)), and rshm needs none: it takes the
    // application's keys (no FI_MR_PROV_KEY) and offsets from the region start (no
    // FI_MR_VIRT_ADDR); the legacy enum values are echoed.
    let hinted = h_dom.map_or(0, |d| d.mr_mode);
    let legacy = hinted == ffi::FI_MR_BASIC as i32 || hinted == ffi::FI_MR_SCALABLE as i32;
    dom.mr_mode = match (version < ffi::fi_version_make(1, 5), legacy) {
        (_, true) => hinted,
        (true, false) => ffi::FI_MR_SCALABLE as i32,
        (false, false) => 0,
    };
    dom.mr_key_size = 8;
    dom.cq_data_size = 8;
    dom.cq_cnt = 1024;
    dom.ep_cnt = 1024;
    dom.tx_ctx_cnt = 1024;
    dom.rx_ctx_cnt = 1024;
    dom.max_ep_tx_ctx = 1;
    dom.max_ep_rx_ctx = 1;
    dom.max_ep_stx_ctx = 0;
    dom.max_ep_srx_ctx = 0;
    dom.cntr_cnt = 1024;
    dom.mr_iov_limit = IOV_LIMIT;
    dom.caps = domain_caps();
    dom.mode = 0;
    dom.max_err_data = 0;
    dom.mr_cnt = 1 << 16;
    fab.name = c_strdup(FABRIC_NAME);
    fab.prov_name = std::ptr::null_mut();
    fab.prov_version = crate::core_api::PROVIDER_VERSION;
    fab.api_version = version;
}

/// Build the info list (RDM first, then DGRAM) for these arguments.
pub fn getinfo(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&ffi::fi_info>,
) -> FiResult<*mut ffi::fi_info> {
    if flags & UTIL_QUERY != 0 {
        // A utility provider looking for a core provider to layer on: we serve applications.
        return Err(FiError::NODATA);
    }
    let addrs = resolve(node, service, flags, hints)?;
    let mut head: *mut ffi::fi_info = std::ptr::null_mut();
    let mut tail: *mut ffi::fi_info = std::ptr::null_mut();
    for ep_type in [ffi::FI_EP_RDM, ffi::FI_EP_DGRAM] {
        if let Some(h) = hints {
            if let Some(why) = (Hints { info: h }).reject(ep_type) {
                crate::info!(Core, "{}: {why}", if ep_type == ffi::FI_EP_RDM { "RDM" } else { "DGRAM" });
                continue;
            }
        }
        let info = alloc_info();
        if info.is_null() {
            // SAFETY: `head` is NULL or the list we built from core allocations.
            unsafe { free_info(head) };
            return Err(FiError::NOMEM);
        }
        // SAFETY: freshly allocated by the core and exclusively ours.
        fill(unsafe { &mut *info }, ep_type, version, hints, &addrs);
        if tail.is_null() {
            head = info;
        } else {
            // SAFETY: `tail` is the last info we allocated.
            unsafe { (*tail).next = info };
        }
        tail = info;
    }
    if head.is_null() {
        return Err(FiError::NODATA);
    }
    Ok(head)
}

/// `fi_provider::getinfo`.
pub(crate) unsafe extern "C" fn rshm_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const ffi::fi_info,
    info: *mut *mut ffi::fi_info,
) -> i32 {
    crate::boundary::guard("getinfo", FiError::OTHER.code(), || {
        if info.is_null() {
            return FiError::INVAL.code();
        }
        // SAFETY: the core passes NULL or valid C strings and hints for the call's duration.
        let (node, service, hints) = unsafe { (opt_str(node), opt_str(service), hints.as_ref()) };
        match getinfo(version, node, service, flags, hints) {
            Ok(list) => {
                // SAFETY: `info` is a valid out-pointer (checked non-NULL).
                unsafe { *info = list };
                0
            }
            Err(e) => e.code(),
        }
    })
}
