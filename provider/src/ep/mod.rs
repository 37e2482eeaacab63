//! Endpoints (FI_EP_RDM and FI_EP_DGRAM): lifecycle, bindings, names and options, and the data
//! entry points (`ops`, `rma_ops`).
//!
//! An endpoint's state lives in the domain's slab (`state::ep::EpState`); the `Ep` object handed
//! to the application (`handle`) holds the domain handle and the slab key. The engine endpoint (and with it the
//! shared-memory region) is created by `fi_enable`, under the name from `info->src_addr`,
//! `fi_setname`, or a generated one.

mod handle;
mod ops;
pub(crate) mod published;
mod rma_ops;
mod rma_start;

use crate::error::{int_ret, FiError, FiResult};
use crate::getinfo::{decode_addr, encode_addr, ADDR_LEN};
use crate::object::{self, put};
use crate::params::config;
use crate::state::ep::rma::RmaState;
use crate::state::ep::rx::RxState;
use crate::state::ep::sinks::{Bindings, Bound, Sinks};
use crate::state::ep::EpState;
use crate::state::DomainState;
use crate::stubs;
use handle::{get, Ep};
use rshm_ffi as ffi;
use slab::Slab;
use smr_core::endpoint::Endpoint;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

pub(crate) use rma_ops::query_atomic;

static FI_OPS: ffi::fi_ops = object::fi_ops(ep_close, Some(ep_bind), Some(ep_control));

static EP_OPS: ffi::fi_ops_ep = ffi::fi_ops_ep {
    size: size_of::<ffi::fi_ops_ep>(),
    cancel: Some(ep_cancel),
    getopt: Some(ep_getopt),
    setopt: Some(ep_setopt),
    tx_ctx: Some(stubs::tx_ctx),
    rx_ctx: Some(stubs::rx_ctx),
    rx_size_left: Some(ep_rx_size_left),
    tx_size_left: Some(ep_tx_size_left),
};

static CM_OPS: ffi::fi_ops_cm = ffi::fi_ops_cm {
    size: size_of::<ffi::fi_ops_cm>(),
    setname: Some(ep_setname),
    getname: Some(ep_getname),
    getpeer: Some(stubs::getpeer),
    connect: Some(stubs::connect),
    listen: Some(stubs::listen),
    accept: Some(stubs::accept),
    reject: Some(stubs::reject),
    shutdown: Some(stubs::shutdown),
    join: Some(stubs::join),
};

/// `fi_endpoint`.
pub(crate) unsafe extern "C" fn endpoint_open(
    domain: *mut ffi::fid_domain,
    info: *mut ffi::fi_info,
    ep: *mut *mut ffi::fid_ep,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_endpoint", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let dom = unsafe { crate::state::get(domain) }?;
            // SAFETY: the caller's info.
            let info = unsafe { info.as_ref() }.ok_or(FiError::INVAL)?;
            // SAFETY: attribute pointers of the caller's info are NULL or valid.
            let (ep_attr, tx_attr, rx_attr) =
                unsafe { (info.ep_attr.as_ref(), info.tx_attr.as_ref(), info.rx_attr.as_ref()) };
            if let Some(a) = ep_attr {
                if a.type_ != ffi::FI_EP_RDM && a.type_ != ffi::FI_EP_DGRAM {
                    return Err(FiError::INVAL);
                }
            }
            let caps = if info.caps != 0 { info.caps } else { crate::getinfo::all_caps() };
            if caps & !crate::getinfo::all_caps() != 0 {
                return Err(FiError::OPNOTSUPP);
            }
            let given = if info.src_addr.is_null() || info.src_addrlen == 0 {
                None
            } else {
                // SAFETY: the caller's src_addr of `src_addrlen` bytes.
                Some(unsafe { crate::getinfo::decode_addr_len(info.src_addr.cast(), info.src_addrlen) }?)
            };
            // A name getinfo generated for this process stands for "any name": several
            // endpoints may be opened from one info, so each gets its own.
            let name = match given {
                Some(n) if !n.starts_with(&crate::names::generated_prefix()) => n,
                _ => crate::names::generated_name(),
            };
            let state = EpState {
                engine: None,
                name,
                caps,
                tx_op_flags: tx_attr.map_or(0, |t| t.op_flags),
                rx_op_flags: rx_attr.map_or(0, |r| r.op_flags),
                av: None,
                bindings: Bindings::default(),
                bound: Bound::default(),
                peers: Vec::new(),
                src_addrs: Vec::new(),
                rx: RxState::default(),
                tx_ops: Slab::new(),
                rma: RmaState::default(),
                tx_size: tx_attr.map_or(0, |t| t.size).max(crate::getinfo::QUEUE_SIZE),
                rx_size: rx_attr.map_or(0, |r| r.size).max(crate::getinfo::QUEUE_SIZE),
                driven: 0,
                idle: Default::default(),
                published: Default::default(),
            };
            let id = dom.shared.lock().eps.insert(state);
            let obj = object::into_raw(Ep {
                fid: ffi::fid_ep {
                    fid: object::fid(ffi::FI_CLASS_EP, context, &FI_OPS),
                    ops: &EP_OPS as *const _ as *mut _,
                    cm: &CM_OPS as *const _ as *mut _,
                    msg: &ops::MSG_OPS as *const _ as *mut _,
                    rma: &rma_ops::RMA_OPS as *const _ as *mut _,
                    tagged: &ops::TAGGED_OPS as *const _ as *mut _,
                    atomic: &rma_ops::ATOMIC_OPS as *const _ as *mut _,
                    collective: std::ptr::null_mut(),
                },
                shared: Arc::clone(&dom.shared),
                id,
            });
            // SAFETY: the caller's out-pointer.
            unsafe { put(ep, obj.cast::<ffi::fid_ep>()) }
        })())
    })
}

fn unbind_all(st: &mut DomainState, id: usize) {
    let ep = &mut st.eps[id];
    let bound = std::mem::take(&mut ep.bound);
    let av = ep.av.take();
    for cq in bound.cqs {
        if let Some(c) = st.cqs.get_mut(cq) {
            c.unbind_ep(id);
        }
    }
    for cntr in bound.cntrs {
        if let Some(c) = st.cntrs.get_mut(cntr) {
            c.eps.retain(|&e| e != id);
        }
    }
    if let Some(av) = av.and_then(|a| st.avs.get_mut(a)) {
        av.eps.retain(|&e| e != id);
    }
}

unsafe extern "C" fn ep_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Ep| -> FiResult<()> {
        let mut st = obj.shared.lock();
        // Peers' counted copies made since our last pass count before the counters are unbound.
        let DomainState { eps, cntrs, .. } = &mut *st;
        if let Some(ep) = eps.get_mut(obj.id) {
            if let Some(engine) = ep.engine.as_mut() {
                ep.published.withdraw_all(engine, cntrs);
            }
        }
        unbind_all(&mut st, obj.id);
        if let Some((engine, rma)) = st.eps.get(obj.id).and_then(|e| Some((e.engine.as_ref()?, &e.rma))) {
            let s = engine.stats();
            crate::info!(
                EpCtrl,
                "endpoint {} closed: sent {} inline, {} inject, {} CMA, {} SAR; received {} by CMA; {} CMA fallbacks; \
                 one-sided {} issued, {} served; {} reads and {} writes of published registrations, \
                 {} reads answered by CMA write; {} answers finishing several operations; \
                 {} FI_MORE batches; split copies: {} offered, {} taken by their senders, {} written for receivers \
                 ({} calls reading several heads, {} writing several tails)",
                engine.name(),
                s.sent_inline,
                s.sent_inject,
                s.sent_cma,
                s.sent_sar,
                s.cma_reads,
                s.cma_fallbacks,
                rma.issued,
                rma.served,
                s.published_reads,
                s.published_writes,
                s.cma_writes,
                s.ok_runs,
                s.batches,
                s.splits_offered,
                s.splits_taken,
                s.splits_written,
                s.split_heads_together,
                s.split_tails_together
            );
        }
        // Dropping the engine endpoint tells connected peers and unlinks the region.
        st.eps.remove(obj.id);
        drop(st);
        crate::progress::endpoints_changed(&obj.shared);
        Ok(())
    };
    // SAFETY: the libfabric contract: a live ep of ours.
    unsafe { object::close::<Ep>(fid, ffi::FI_CLASS_EP, "fi_close(ep)", release) }
}

fn bind(ep: &Ep, bfid: *mut ffi::fid, flags: u64) -> FiResult<()> {
    if bfid.is_null() {
        return Err(FiError::INVAL);
    }
    // SAFETY: a live fid of ours, per the libfabric contract.
    let class = unsafe { (*bfid).fclass } as u32;
    let mut st = ep.shared.lock();
    // Counters may be bound to an enabled endpoint (OpenSHMEM binds its put and get counters
    // after fi_enable); everything else is fixed by fi_enable.
    if st.eps[ep.id].engine.is_some() && class != ffi::FI_CLASS_CNTR {
        crate::warn!(EpCtrl, "fi_ep_bind after fi_enable");
        return Err(FiError::BUSY);
    }
    match class {
        ffi::FI_CLASS_CQ => {
            // SAFETY: class checked.
            let cq = unsafe { crate::cq::get(bfid) }?;
            if !Arc::ptr_eq(&cq.shared, &ep.shared) {
                return Err(FiError::INVAL);
            }
            if flags & !(ffi::FI_TRANSMIT as u64 | ffi::FI_RECV as u64 | ffi::FI_SELECTIVE_COMPLETION) != 0 {
                return Err(FiError::BADFLAGS);
            }
            let selective = flags & ffi::FI_SELECTIVE_COMPLETION != 0;
            let b = &mut st.eps[ep.id].bindings;
            if flags & ffi::FI_TRANSMIT as u64 != 0 {
                b.tx_cq = Some(cq.id);
                b.tx_selective = selective;
            }
            if flags & ffi::FI_RECV as u64 != 0 {
                b.rx_cq = Some(cq.id);
                b.rx_selective = selective;
            }
            if st.cqs[cq.id].bind_ep(ep.id) {
                st.eps[ep.id].bound.cqs.push(cq.id);
            }
        }
        ffi::FI_CLASS_CNTR => {
            // SAFETY: class checked.
            let cntr = unsafe { crate::cntr::get(bfid) }?;
            if !Arc::ptr_eq(&cntr.shared, &ep.shared) {
                return Err(FiError::INVAL);
            }
            let known = (ffi::FI_SEND
                | ffi::FI_RECV
                | ffi::FI_WRITE
                | ffi::FI_READ
                | ffi::FI_REMOTE_WRITE
                | ffi::FI_REMOTE_READ) as u64;
            if flags & !known != 0 {
                return Err(FiError::BADFLAGS);
            }
            let b = &mut st.eps[ep.id].bindings;
            let has = |bit: u32| flags & bit as u64 != 0;
            for (bit, slot) in [
                (ffi::FI_SEND, &mut b.send_cntr),
                (ffi::FI_RECV, &mut b.recv_cntr),
                (ffi::FI_WRITE, &mut b.write_cntr),
                (ffi::FI_READ, &mut b.read_cntr),
                (ffi::FI_REMOTE_WRITE, &mut b.remote_write_cntr),
                (ffi::FI_REMOTE_READ, &mut b.remote_read_cntr),
            ] {
                if has(bit) {
                    *slot = Some(cntr.id);
                }
            }
            let eps = &mut st.cntrs[cntr.id].eps;
            if !eps.contains(&ep.id) {
                eps.push(ep.id);
                st.eps[ep.id].bound.cntrs.push(cntr.id);
            }
            if has(ffi::FI_REMOTE_READ) || has(ffi::FI_REMOTE_WRITE) {
                // Peers' copies of our registrations must now be counted (SOS binds its target
                // counter after fi_enable).
                published::sync(&mut st);
            }
        }
        ffi::FI_CLASS_AV => {
            // SAFETY: class checked.
            let av = unsafe { crate::av::get(bfid) }?;
            if !Arc::ptr_eq(&av.shared, &ep.shared) {
                return Err(FiError::INVAL);
            }
            if st.eps[ep.id].av.is_some() {
                return Err(FiError::BUSY);
            }
            st.eps[ep.id].av = Some(av.id);
            st.avs[av.id].eps.push(ep.id);
        }
        // An EQ is accepted: rshm endpoints raise no connection events. MRs bind to endpoints
        // with FI_MR_ENDPOINT-style applications.
        ffi::FI_CLASS_EQ | ffi::FI_CLASS_MR => {}
        _ => return Err(FiError::INVAL),
    }
    Ok(())
}

unsafe extern "C" fn ep_bind(fid: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32 {
    crate::boundary::guard("fi_ep_bind", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract.
        int_ret(unsafe { get(fid) }.and_then(|ep| bind(ep, bfid, flags)))
    })
}

fn enable(ep: &Ep) -> FiResult<()> {
    // Before the domain's lock: its file-system work holds up no other thread.
    crate::reap::before_first_endpoint();
    let mut st = ep.shared.lock();
    let state = &mut st.eps[ep.id];
    if state.engine.is_some() {
        return Ok(());
    }
    if state.bindings.tx_cq.is_none() && state.bindings.send_cntr.is_none() && state.caps & ffi::FI_SEND as u64 != 0 {
        crate::warn!(EpCtrl, "fi_enable: no CQ or counter bound for transmit");
        return Err(FiError::NOCQ);
    }
    let engine = Endpoint::create(&state.name, config().engine.clone()).map_err(|e| {
        if e == smr_core::Error::Os(libc::ENOSPC) {
            // The pools are reserved later, when first used (`Region::map_inject_pool`,
            // `map_sar_pool`): the region needs `now` bytes to open and `size` once they are.
            let (now, size) = smr_core::layout::Geometry::compute(config().engine.counts)
                .map(|g| (g.reserved_at_creation(), g.size))
                .unwrap_or((0, 0));
            crate::warn!(
                EpCtrl,
                "fi_enable: no room in /dev/shm for region {} ({now} bytes now, {size} once its message \
                 buffers are used): enlarge /dev/shm \
                 (e.g. mount -o remount,size=... /dev/shm, or docker --shm-size) or shrink the region \
                 with FI_RSHM_QUEUE_LEN, FI_RSHM_INJECT_COUNT, FI_RSHM_SAR_COUNT, FI_RSHM_SAR_SIZE, FI_RSHM_MAX_PEERS",
                state.name
            );
        } else {
            crate::warn!(EpCtrl, "fi_enable: cannot create region {}: {e}", state.name);
        }
        FiError::from(e)
    })?;
    let cma_min = engine.params().cma_min;
    let large = match (engine.cma_enabled(), cma_min) {
        (true, _) if engine.params().measure_protocol => {
            format!(
                "inline or inject up to {} B, above it SAR or CMA as measured (FI_RSHM_CMA_MIN unset)",
                smr_core::endpoint::measured::MEASURED_ABOVE
            )
        }
        (true, usize::MAX) => "SAR".to_string(),
        (true, n) => format!("CMA from {} B, SAR below", n.max(engine.params().inject_max + 1)),
        (false, _) => "SAR".to_string(),
    };
    crate::info!(
        EpCtrl,
        "endpoint {} enabled (CMA {}), messages above the inject size by {large}",
        state.name,
        if engine.cma_enabled() { "on" } else { "off" }
    );
    if engine.params().cma && !engine.cma_enabled() {
        // Once per process: CMA was wanted but this host forbids it.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            let why = smr_core::cma::why_denied().unwrap_or("unknown");
            crate::warn!(
                EpCtrl,
                "CMA is not permitted here ({why}): messages above the inject size go through SAR bounce buffers"
            );
        });
    }
    state.engine = Some(engine);
    published::sync(&mut st);
    drop(st);
    crate::progress::endpoints_changed(&ep.shared);
    Ok(())
}

unsafe extern "C" fn ep_control(fid: *mut ffi::fid, command: c_int, arg: *mut c_void) -> i32 {
    crate::boundary::guard("fi_control(ep)", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract.
        let ep = match unsafe { get(fid) } {
            Ok(e) => e,
            Err(e) => return e.code(),
        };
        match command as u32 {
            ffi::FI_ENABLE => int_ret(enable(ep)),
            ffi::FI_GETOPSFLAG | ffi::FI_SETOPSFLAG => {
                if arg.is_null() {
                    return FiError::INVAL.code();
                }
                let mut st = ep.shared.lock();
                let s = &mut st.eps[ep.id];
                // SAFETY: `arg` points to the caller's u64 flags.
                let flags = unsafe { &mut *arg.cast::<u64>() };
                let tx = *flags & ffi::FI_TRANSMIT as u64 != 0;
                let rx = *flags & ffi::FI_RECV as u64 != 0;
                if tx == rx {
                    return FiError::BADFLAGS.code();
                }
                let slot = if tx { &mut s.tx_op_flags } else { &mut s.rx_op_flags };
                if command as u32 == ffi::FI_GETOPSFLAG {
                    *flags = *slot;
                } else {
                    *slot = *flags & !(ffi::FI_TRANSMIT | ffi::FI_RECV) as u64;
                }
                0
            }
            _ => FiError::NOSYS.code(),
        }
    })
}

unsafe extern "C" fn ep_getname(fid: ffi::fid_t, addr: *mut c_void, addrlen: *mut usize) -> i32 {
    crate::boundary::guard("fi_getname", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let ep = unsafe { get(fid) }?;
            if addrlen.is_null() {
                return Err(FiError::INVAL);
            }
            let bytes = encode_addr(&ep.shared.lock().eps[ep.id].name);
            // SAFETY: `addrlen` is the caller's in/out size of `addr`.
            unsafe {
                let room = *addrlen;
                *addrlen = ADDR_LEN;
                if !addr.is_null() {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr.cast::<u8>(), room.min(ADDR_LEN));
                }
                if room < ADDR_LEN {
                    return Err(FiError::TOOSMALL);
                }
            }
            Ok(())
        })())
    })
}

unsafe extern "C" fn ep_setname(fid: ffi::fid_t, addr: *mut c_void, addrlen: usize) -> i32 {
    crate::boundary::guard("fi_setname", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let ep = unsafe { get(fid) }?;
            if addr.is_null() || addrlen == 0 {
                return Err(FiError::INVAL);
            }
            // SAFETY: the caller's address of `addrlen` bytes holding a NUL-terminated name.
            let name = unsafe { decode_addr(addr.cast()) }?;
            let mut st = ep.shared.lock();
            let s = &mut st.eps[ep.id];
            if s.engine.is_some() {
                crate::warn!(EpCtrl, "fi_setname after fi_enable");
                return Err(FiError::BUSY);
            }
            s.name = name;
            Ok(())
        })())
    })
}

unsafe extern "C" fn ep_getopt(
    fid: ffi::fid_t,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> i32 {
    crate::boundary::guard("fi_getopt", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let ep = unsafe { get(fid) }?;
            if level != ffi::FI_OPT_ENDPOINT as c_int || optval.is_null() || optlen.is_null() {
                return Err(FiError::NOPROTOOPT);
            }
            let st = ep.shared.lock();
            let s = &st.eps[ep.id];
            let value = match optname as u32 {
                ffi::FI_OPT_MIN_MULTI_RECV => s.rx.min_multi_recv,
                ffi::FI_OPT_CM_DATA_SIZE => 0,
                ffi::FI_OPT_TX_SIZE => s.tx_size,
                ffi::FI_OPT_RX_SIZE => s.rx_size,
                _ => return Err(FiError::NOPROTOOPT),
            };
            // SAFETY: the caller's option buffer and its length.
            unsafe {
                if *optlen < size_of::<usize>() {
                    *optlen = size_of::<usize>();
                    return Err(FiError::TOOSMALL);
                }
                optval.cast::<usize>().write_unaligned(value);
                *optlen = size_of::<usize>();
            }
            Ok(())
        })())
    })
}

unsafe extern "C" fn ep_setopt(
    fid: ffi::fid_t,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: usize,
) -> i32 {
    crate::boundary::guard("fi_setopt", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let ep = unsafe { get(fid) }?;
            if level != ffi::FI_OPT_ENDPOINT as c_int || optval.is_null() {
                return Err(FiError::NOPROTOOPT);
            }
            if optlen < size_of::<usize>() {
                return Err(FiError::INVAL);
            }
            // SAFETY: the caller's option value, at least a size_t (checked).
            let value = unsafe { optval.cast::<usize>().read_unaligned() };
            let mut st = ep.shared.lock();
            let s = &mut st.eps[ep.id];
            match optname as u32 {
                ffi::FI_OPT_MIN_MULTI_RECV => s.rx.min_multi_recv = value,
                ffi::FI_OPT_TX_SIZE => s.tx_size = value.max(1),
                ffi::FI_OPT_RX_SIZE => s.rx_size = value.max(1),
                _ => return Err(FiError::NOPROTOOPT),
            }
            Ok(())
        })())
    })
}

unsafe extern "C" fn ep_cancel(fid: ffi::fid_t, context: *mut c_void) -> isize {
    crate::boundary::guard("fi_cancel", FiError::OTHER.code() as isize, || {
        // SAFETY: libfabric contract.
        let ep = match unsafe { get(fid) } {
            Ok(e) => e,
            Err(e) => return e.code() as isize,
        };
        let mut st = ep.shared.lock();
        let DomainState { eps, cqs, cntrs, .. } = &mut *st;
        let s = &mut eps[ep.id];
        let mut sinks = Sinks::new(cqs, cntrs, &s.bindings);
        if s.rx.cancel(context as usize, &mut sinks) {
            0
        } else {
            FiError::NOENT.code() as isize
        }
    })
}

unsafe extern "C" fn ep_rx_size_left(ep: *mut ffi::fid_ep) -> isize {
    crate::boundary::guard("fi_rx_size_left", FiError::OTHER.code() as isize, || {
        // SAFETY: libfabric contract.
        match unsafe { get(ep.cast()) } {
            Ok(ep) => {
                let st = ep.shared.lock();
                let s = &st.eps[ep.id];
                s.rx_size.saturating_sub(s.rx.posted_count()) as isize
            }
            Err(e) => e.code() as isize,
        }
    })
}

unsafe extern "C" fn ep_tx_size_left(ep: *mut ffi::fid_ep) -> isize {
    crate::boundary::guard("fi_tx_size_left", FiError::OTHER.code() as isize, || {
        // SAFETY: libfabric contract.
        match unsafe { get(ep.cast()) } {
            Ok(ep) => {
                let st = ep.shared.lock();
                let s = &st.eps[ep.id];
                s.tx_size.saturating_sub(s.tx_outstanding()) as isize
            }
            Err(e) => e.code() as isize,
        }
    })
}
