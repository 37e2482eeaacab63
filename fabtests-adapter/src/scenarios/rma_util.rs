//! What the one-sided scenarios (`rma/*`, `atomic/*`, `cntr/*`, `progress/*`) need beyond
//! `harness::Node`: [`Peer`], an endpoint that matches every completion to its operation by
//! context (so vectored, message and atomic calls with their own buffers can be checked), with
//! counters bound before or after `fi_enable`, memory regions it owns (read through raw pointers
//! only, since a peer writes them), MRs bound to counters, domain hints (mr_mode,
//! data_progress), and the calls the fabric wrappers lack (`fi_writev`, `fi_writemsg`,
//! `fi_readv`, `fi_readmsg`, `fi_inject_writedata`, `fi_inject_atomic`, the fetch and compare
//! valid queries).

use crate::fabric::{
    self, ffi, Av, Cntr, Cq, Domain, Ep, Fabric, FiAddr, Hints, Info, Mr, EAGAIN, EAVAIL, ENODATA, ENOSYS,
    FI_ADDR_NOTAVAIL,
};
use crate::harness::{fi_fail, fi_ok, FiCtx, Rank, TResult, TestErr};
use crate::{bail, ensure};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

// Flags as u64 (the bindings give most of them as u32).
pub const RMA: u64 = ffi::FI_RMA as u64;
pub const ATOMIC: u64 = ffi::FI_ATOMIC as u64;
pub const MSG: u64 = ffi::FI_MSG as u64;
pub const READ: u64 = ffi::FI_READ as u64;
pub const WRITE: u64 = ffi::FI_WRITE as u64;
pub const REMOTE_READ: u64 = ffi::FI_REMOTE_READ as u64;
pub const REMOTE_WRITE: u64 = ffi::FI_REMOTE_WRITE as u64;
pub const REMOTE_CQ_DATA: u64 = ffi::FI_REMOTE_CQ_DATA as u64;
pub const DELIVERY_COMPLETE: u64 = ffi::FI_DELIVERY_COMPLETE as u64;
pub const TRANSMIT_COMPLETE: u64 = ffi::FI_TRANSMIT_COMPLETE as u64;
pub const INJECT_COMPLETE: u64 = ffi::FI_INJECT_COMPLETE as u64;
pub const COMPLETION: u64 = ffi::FI_COMPLETION as u64;
pub const FENCE: u64 = ffi::FI_FENCE as u64;
pub const RMA_EVENT: u64 = ffi::FI_RMA_EVENT;

/// mr_mode hints of the two modes the scenarios run in.
pub const SCALABLE: u8 = 0;
pub const BASIC: u8 = 1;

pub fn mode_name(mode: u8) -> &'static str {
    if mode == SCALABLE {
        "scalable"
    } else {
        "basic"
    }
}

/// The mr_mode hint of a mode: 0 (scalable: offsets, requested keys) or
/// FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY (basic).
pub fn mode_bits(mode: u8) -> i32 {
    if mode == SCALABLE {
        0
    } else {
        (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_PROV_KEY) as i32
    }
}

/// Call `(*table).field(args)`, or return `-FI_ENOSYS` if the slot is empty (as in obj.rs).
macro_rules! call {
    ($tbl:expr, $field:ident ( $($arg:expr),* $(,)? )) => {{
        let tbl = $tbl;
        match (*tbl).$field {
            Some(f) => f($($arg),*) as _,
            None => ENOSYS as _,
        }
    }};
}

/// The RMA and atomic calls `fabric::Ep` does not wrap.
pub trait EpExt {
    /// `fi_writev` (desc: an array of NULLs).
    ///
    /// # Safety
    /// Every iov's memory and `ctx` stay valid until the completion is read or the ep is closed.
    unsafe fn writev(&self, iov: &[ffi::iovec], dest: FiAddr, addr: u64, key: u64, ctx: *mut c_void) -> isize;
    /// `fi_readv`.
    ///
    /// # Safety
    /// As for `writev`.
    unsafe fn readv(&self, iov: &[ffi::iovec], src: FiAddr, addr: u64, key: u64, ctx: *mut c_void) -> isize;
    /// `fi_readmsg`.
    ///
    /// # Safety
    /// As for `Ep::writemsg`.
    unsafe fn readmsg(&self, msg: &ffi::fi_msg_rma, flags: u64) -> isize;
    /// `fi_inject_writedata`.
    fn inject_writedata(&self, buf: &[u8], data: u64, dest: FiAddr, addr: u64, key: u64) -> isize;
    /// `fi_inject_atomic` of `buf.len() / size(dt)` elements.
    fn inject_atomic(&self, buf: &[u8], count: usize, a: &Target, dt: ffi::fi_datatype, op: ffi::fi_op) -> isize;
    /// `fi_fetch_atomicvalid`.
    fn fetch_atomicvalid(&self, dt: ffi::fi_datatype, op: ffi::fi_op) -> (i32, usize);
    /// `fi_compare_atomicvalid`.
    fn compare_atomicvalid(&self, dt: ffi::fi_datatype, op: ffi::fi_op) -> (i32, usize);
}

impl EpExt for Ep {
    unsafe fn writev(&self, iov: &[ffi::iovec], dest: FiAddr, addr: u64, key: u64, ctx: *mut c_void) -> isize {
        let mut desc = vec![null_mut::<c_void>(); iov.len()];
        // SAFETY: ep open; the caller keeps the memory and ctx valid; iov and desc arrays are
        // read during the call only.
        unsafe {
            call!(
                (*self.raw()).rma,
                writev(self.raw(), iov.as_ptr(), desc.as_mut_ptr(), iov.len(), dest, addr, key, ctx)
            )
        }
    }

    unsafe fn readv(&self, iov: &[ffi::iovec], src: FiAddr, addr: u64, key: u64, ctx: *mut c_void) -> isize {
        let mut desc = vec![null_mut::<c_void>(); iov.len()];
        // SAFETY: as in writev.
        unsafe {
            call!((*self.raw()).rma, readv(self.raw(), iov.as_ptr(), desc.as_mut_ptr(), iov.len(), src, addr, key, ctx))
        }
    }

    unsafe fn readmsg(&self, msg: &ffi::fi_msg_rma, flags: u64) -> isize {
        // SAFETY: ep open; the caller keeps what msg points to valid.
        unsafe { call!((*self.raw()).rma, readmsg(self.raw(), msg, flags)) }
    }

    fn inject_writedata(&self, buf: &[u8], data: u64, dest: FiAddr, addr: u64, key: u64) -> isize {
        // SAFETY: ep open; inject calls copy the buffer before returning.
        unsafe {
            call!((*self.raw()).rma, injectdata(self.raw(), buf.as_ptr().cast(), buf.len(), data, dest, addr, key))
        }
    }

    fn inject_atomic(&self, buf: &[u8], count: usize, a: &Target, dt: ffi::fi_datatype, op: ffi::fi_op) -> isize {
        assert!(buf.len() >= count * dt_size(dt));
        // SAFETY: ep open; buf holds count elements and is copied before the call returns.
        unsafe {
            call!((*self.raw()).atomic, inject(self.raw(), buf.as_ptr().cast(), count, a.dest, a.addr, a.key, dt, op))
        }
    }

    fn fetch_atomicvalid(&self, dt: ffi::fi_datatype, op: ffi::fi_op) -> (i32, usize) {
        let mut count = 0usize;
        // SAFETY: ep open; count is a valid out-pointer.
        let ret: i32 = unsafe { call!((*self.raw()).atomic, readwritevalid(self.raw(), dt, op, &mut count)) };
        (ret, count)
    }

    fn compare_atomicvalid(&self, dt: ffi::fi_datatype, op: ffi::fi_op) -> (i32, usize) {
        let mut count = 0usize;
        // SAFETY: as in fetch_atomicvalid.
        let ret: i32 = unsafe { call!((*self.raw()).atomic, compwritevalid(self.raw(), dt, op, &mut count)) };
        (ret, count)
    }
}

/// Bytes of one element of an atomic datatype (FI_LONG_DOUBLE as the x86-64 ABI stores it).
pub fn dt_size(dt: ffi::fi_datatype) -> usize {
    match dt {
        ffi::FI_INT8 | ffi::FI_UINT8 => 1,
        ffi::FI_INT16 | ffi::FI_UINT16 => 2,
        ffi::FI_INT32 | ffi::FI_UINT32 | ffi::FI_FLOAT => 4,
        ffi::FI_INT64 | ffi::FI_UINT64 | ffi::FI_DOUBLE | ffi::FI_FLOAT_COMPLEX => 8,
        ffi::FI_DOUBLE_COMPLEX | ffi::FI_LONG_DOUBLE | ffi::FI_INT128 | ffi::FI_UINT128 => 16,
        ffi::FI_LONG_DOUBLE_COMPLEX => 32,
        _ => 8,
    }
}

// ---------------------------------------------------------------------------------------------
// Memory a peer reads and writes

/// Page-aligned zeroed memory, accessed only through raw pointers (peers write it with CMA, the
/// provider writes it during progress).
pub struct Region {
    ptr: *mut u8,
    len: usize,
    layout: std::alloc::Layout,
}

impl Region {
    fn new(len: usize) -> Region {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).expect("region layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for a {len}-byte region");
        Region { ptr, len, layout }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Copy `data` in at `off`.
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds (checked); the region is ours and never handed out as a reference.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) };
    }

    /// Copy `out.len()` bytes out from `off`.
    pub fn read_into(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: in bounds (checked); out does not overlap the region.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), out.len()) };
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.read_into(off, &mut v);
        v
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in new with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Guard bytes around every buffer a read or fetch writes into: they must stay untouched.
pub const CANARY: usize = 64;
pub const CANARY_BYTE: u8 = 0xC5;

/// A receive-side buffer of `len` bytes with canaries on both sides.
fn canaried(len: usize) -> Vec<u8> {
    vec![CANARY_BYTE; len + 2 * CANARY]
}

/// The `len` payload bytes of a canaried buffer, failing if a canary byte changed.
pub fn payload<'a>(what: &str, buf: &'a [u8], len: usize) -> TResult<&'a [u8]> {
    ensure!(buf.len() == len + 2 * CANARY, "{what}: buffer length {} != {}", buf.len(), len + 2 * CANARY);
    for (i, &b) in buf[..CANARY].iter().enumerate() {
        ensure!(b == CANARY_BYTE, "{what}: byte {} before the local buffer was overwritten", CANARY - i);
    }
    for (i, &b) in buf[CANARY + len..].iter().enumerate() {
        ensure!(b == CANARY_BYTE, "{what}: byte {i} past the end of the local buffer was overwritten");
    }
    Ok(&buf[CANARY..CANARY + len])
}

// ---------------------------------------------------------------------------------------------
// Peer

/// Where an RMA or atomic goes: the peer, the address it expects, the key.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub dest: FiAddr,
    pub addr: u64,
    pub key: u64,
}

impl Target {
    /// The same MR, `off` bytes further.
    pub fn at(&self, off: usize) -> Target {
        Target { addr: self.addr.wrapping_add(off as u64), ..*self }
    }
}

/// A registered MR as peers address it: its key and the RMA address of its first byte (its
/// virtual address under FI_MR_VIRT_ADDR, else 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    pub key: u64,
    pub addr: u64,
}

/// How to open a [`Peer`].
#[derive(Clone, Debug)]
pub struct Spec {
    pub caps: u64,
    pub mr_mode: i32,
    /// Hint domain_attr->data_progress = FI_PROGRESS_AUTO (n/s if getinfo refuses).
    pub auto_progress: bool,
    /// One counter per entry, bound to the endpoint with these flags before fi_enable.
    pub cntrs_before_enable: Vec<u64>,
    /// Wait object of every counter opened.
    pub cntr_wait: ffi::fi_wait_obj,
}

impl Spec {
    pub fn new(caps: u64, mode: u8) -> Spec {
        Spec {
            caps,
            mr_mode: mode_bits(mode),
            auto_progress: false,
            cntrs_before_enable: Vec::new(),
            cntr_wait: ffi::FI_WAIT_UNSPEC,
        }
    }
}

struct Op {
    id: u64,
    what: String,
    _ctx: Box<ffi::fi_context2>,
    bufs: Vec<Vec<u8>>,
}

/// A finished operation: its completion (or error entry) and its buffers.
#[derive(Debug)]
pub struct Done {
    pub id: u64,
    pub what: String,
    /// Positive FI_Exxx of the error entry, 0 for success.
    pub err: i32,
    pub prov_errno: i32,
    pub flags: u64,
    pub len: usize,
    pub bufs: Vec<Vec<u8>>,
}

impl Done {
    pub fn ok(self) -> TResult<Done> {
        if self.err != 0 {
            bail!("{}: error completion {} (prov_errno {})", self.what, fabric::errname(-self.err), self.prov_errno);
        }
        Ok(self)
    }

    /// Fail unless the completion flags hold every bit of `want`.
    pub fn flags_have(&self, want: u64, names: &str) -> TResult {
        ensure!(
            self.flags & want == want,
            "{}: completion flags {:#x} lack {names} ({:#x})",
            self.what,
            self.flags,
            want & !self.flags
        );
        Ok(())
    }
}

/// A completion that belongs to no operation of ours (remote CQ data at a target).
#[derive(Clone, Debug)]
pub struct Event {
    pub flags: u64,
    pub data: u64,
    pub err: i32,
    pub ctx: usize,
}

pub struct Peer {
    // Drop closes the endpoint first, then MRs, counters, CQ, AV, domain, fabric; the buffers
    // (ops, regions) are freed last.
    ep: Option<Ep>,
    mrs: Vec<Mr>,
    cntrs: Vec<Cntr>,
    cq: Option<Cq>,
    av: Option<Av>,
    /// Endpoints opened by `open_second_ep`, each with its CQ and AV (closed first, in Drop).
    extra: Vec<(Ep, Cq, Av)>,
    domain: Option<Domain>,
    fabric: Option<Fabric>,
    pub info: Info,
    ops: HashMap<usize, Op>,
    done: HashMap<u64, Done>,
    pub events: VecDeque<Event>,
    regions: Vec<Region>,
    next_id: u64,
    pub timeout: Duration,
    /// fi_addr of every rank (after `exchange`).
    pub addrs: Vec<FiAddr>,
    /// mr_mode getinfo returned.
    pub mr_mode: i32,
    spec: Spec,
}

/// `fi_getinfo` with the hints of `spec`; -FI_ENODATA is "not supported".
pub fn getinfo(prov: &str, spec: &Spec) -> TResult<Info> {
    let mut h = Hints::for_provider(prov);
    h.caps(spec.caps).mode(ffi::FI_CONTEXT | ffi::FI_CONTEXT2);
    h.ep_attr().type_ = ffi::FI_EP_RDM;
    h.domain_attr().mr_mode = spec.mr_mode;
    if spec.auto_progress {
        h.domain_attr().data_progress = ffi::FI_PROGRESS_AUTO;
    }
    let what = format!(
        "fi_getinfo(caps {:#x}, mr_mode {:#x}{})",
        spec.caps,
        spec.mr_mode,
        if spec.auto_progress { ", data_progress FI_PROGRESS_AUTO" } else { "" }
    );
    let list = match fabric::getinfo(Some(&h)) {
        Ok(l) => l,
        Err(e) if e.code() == ENODATA => return Err(TestErr::Nos(e.code(), format!("{what} returned -FI_ENODATA"))),
        Err(e) => return Err(fi_fail(&what, e.code() as i64)),
    };
    let Some(first) = list.first() else { bail!("{what} returned 0 but an empty list") };
    let name = first.prov_name().unwrap_or_default();
    ensure!(name == prov, "{what} returned provider {name:?}");
    ensure!(first.caps() & spec.caps == spec.caps, "{what} returned caps {:#x}", first.caps());
    let d = first.domain_attr().ok_or_else(|| TestErr::Fail(format!("{what}: no domain_attr")))?;
    // fi_mr(3): a provider leaves set the mr_mode bits it needs, among those the hints offer.
    ensure!(
        d.mr_mode & !spec.mr_mode == 0,
        "{what} returned mr_mode {:#x}, bits {:#x} beyond the hinted {:#x}",
        d.mr_mode,
        d.mr_mode & !spec.mr_mode,
        spec.mr_mode
    );
    if spec.auto_progress {
        ensure!(
            d.data_progress == ffi::FI_PROGRESS_AUTO,
            "{what} returned data_progress {} (hinted FI_PROGRESS_AUTO)",
            d.data_progress
        );
    }
    Ok(first.dup())
}

impl Peer {
    /// getinfo, fabric, domain, AV, CQ (FI_CQ_FORMAT_DATA), the counters of
    /// `spec.cntrs_before_enable`, endpoint, binds, fi_enable.
    pub fn open(r: &Rank, spec: &Spec) -> TResult<Peer> {
        let info = getinfo(&r.prov, spec)?;
        let mr_mode = info.get().domain_attr().map_or(0, |d| d.mr_mode);
        let fab = fabric::open_fabric(&info).ctx("fi_fabric")?;
        let dom = Domain::open(&fab, &info).ctx("fi_domain")?;
        let mut p = Peer {
            ep: None,
            mrs: Vec::new(),
            cntrs: Vec::new(),
            cq: None,
            av: None,
            extra: Vec::new(),
            domain: Some(dom),
            fabric: Some(fab),
            info,
            ops: HashMap::new(),
            done: HashMap::new(),
            events: VecDeque::new(),
            regions: Vec::new(),
            next_id: 1,
            timeout: r.timeout,
            addrs: Vec::new(),
            mr_mode,
            spec: spec.clone(),
        };
        let mut av_attr = ffi::fi_av_attr { type_: ffi::FI_AV_TABLE, count: 16, ..Default::default() };
        p.av = Some(Av::open(p.domain(), &mut av_attr).ctx("fi_av_open")?);
        let mut cq_attr = ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_DATA, ..Default::default() };
        p.cq = Some(Cq::open(p.domain(), &mut cq_attr).ctx("fi_cq_open")?);
        let mut before = Vec::new();
        for &flags in &spec.cntrs_before_enable {
            before.push((p.open_cntr()?, flags));
        }
        let ep = Ep::open(p.domain(), &p.info).ctx("fi_endpoint")?;
        fi_ok("fi_ep_bind(av)", ep.bind(p.av.as_ref().expect("av").fid(), 0))?;
        let cq = p.cq.as_ref().expect("cq").fid();
        fi_ok("fi_ep_bind(cq, FI_TRANSMIT|FI_RECV)", ep.bind(cq, (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64))?;
        for (i, flags) in before {
            fi_ok(&format!("fi_ep_bind(cntr, {})", cntr_flags_name(flags)), ep.bind(p.cntrs[i].fid(), flags))?;
        }
        fi_ok("fi_enable", ep.enable())?;
        p.ep = Some(ep);
        Ok(p)
    }

    pub fn ep(&self) -> &Ep {
        self.ep.as_ref().expect("endpoint open")
    }

    pub fn domain(&self) -> &Domain {
        self.domain.as_ref().expect("domain open")
    }

    fn cq(&self) -> &Cq {
        self.cq.as_ref().expect("cq open")
    }

    /// A progress probe: `fi_cq_read(cq, buf, 0)`, which can return no entry (SOS's
    /// `shmem_transport_probe`). Its return is not looked at, as SOS does not.
    pub fn probe(&self) {
        let _ = self.cq().read::<ffi::fi_cq_data_entry>(&mut []);
    }

    pub fn cntr(&self, i: usize) -> &Cntr {
        &self.cntrs[i]
    }

    pub fn prov_key(&self) -> bool {
        self.mr_mode & ffi::FI_MR_PROV_KEY as i32 != 0
    }

    pub fn virt_addr(&self) -> bool {
        self.mr_mode & ffi::FI_MR_VIRT_ADDR as i32 != 0
    }

    /// Must MRs that count RMA events be registered with FI_RMA_EVENT and enabled after binding?
    pub fn mr_rma_event(&self) -> bool {
        self.mr_mode & ffi::FI_MR_RMA_EVENT as i32 != 0
    }

    pub fn tx_attr(&self) -> &ffi::fi_tx_attr {
        self.info.get().tx_attr().expect("tx_attr")
    }

    fn open_cntr(&mut self) -> TResult<usize> {
        let mut a =
            ffi::fi_cntr_attr { events: ffi::FI_CNTR_EVENTS_COMP, wait_obj: self.spec.cntr_wait, ..Default::default() };
        let c = Cntr::open(self.domain(), &mut a).ctx("fi_cntr_open")?;
        self.cntrs.push(c);
        Ok(self.cntrs.len() - 1)
    }

    /// Open a counter and bind it to the (enabled) endpoint with `flags`, as SOS does.
    pub fn bind_cntr_after_enable(&mut self, flags: u64) -> TResult<usize> {
        let i = self.open_cntr()?;
        let ret = self.ep().bind(self.cntrs[i].fid(), flags);
        fi_ok(&format!("fi_ep_bind(cntr, {}) after fi_enable", cntr_flags_name(flags)), ret)?;
        Ok(i)
    }

    /// Open a counter bound to nothing yet (for fi_mr_bind).
    pub fn new_cntr(&mut self) -> TResult<usize> {
        self.open_cntr()
    }

    /// Publish our address, insert every rank's (rank order) into the AV.
    pub fn exchange(&mut self, r: &mut Rank) -> TResult {
        let name = self.ep().getname().ctx("fi_getname")?;
        r.pmi.step("exchange addresses");
        let all = r.pmi.allgather(&crate::pmi::hex(&name))?;
        for (i, a) in all.iter().enumerate() {
            let bytes = crate::pmi::unhex(a).ok_or_else(|| TestErr::Fail(format!("bad address from rank {i}")))?;
            let (ret, fa) = self.av.as_ref().expect("av").insert(&bytes, 0);
            ensure!(ret == 1, "fi_av_insert of rank {i} returned {}", fabric::errname(ret));
            ensure!(fa != FI_ADDR_NOTAVAIL, "fi_av_insert returned FI_ADDR_NOTAVAIL");
            self.addrs.push(fa);
        }
        Ok(())
    }

    /// Insert one more address (another endpoint's name) into our AV.
    pub fn insert_addr(&mut self, name: &[u8]) -> TResult<FiAddr> {
        let (ret, fa) = self.av.as_ref().expect("av").insert(name, 0);
        ensure!(ret == 1, "fi_av_insert returned {}", fabric::errname(ret));
        Ok(fa)
    }

    /// A second endpoint on this domain, with its own AV and CQ, enabled; returns its name.
    /// Kept (with its AV and CQ) until the peer closes.
    pub fn open_second_ep(&mut self) -> TResult<Vec<u8>> {
        let mut av_attr = ffi::fi_av_attr { type_: ffi::FI_AV_TABLE, count: 16, ..Default::default() };
        let av = Av::open(self.domain(), &mut av_attr).ctx("fi_av_open (second endpoint)")?;
        let mut cq_attr = ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_DATA, ..Default::default() };
        let cq = Cq::open(self.domain(), &mut cq_attr).ctx("fi_cq_open (second endpoint)")?;
        let ep = Ep::open(self.domain(), &self.info).ctx("fi_endpoint (second)")?;
        fi_ok("fi_ep_bind(av) (second endpoint)", ep.bind(av.fid(), 0))?;
        fi_ok("fi_ep_bind(cq) (second endpoint)", ep.bind(cq.fid(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64))?;
        fi_ok("fi_enable (second endpoint)", ep.enable())?;
        let name = ep.getname().ctx("fi_getname (second endpoint)")?;
        self.extra.push((ep, cq, av));
        Ok(name)
    }

    /// Allocate a zeroed, page-aligned region; returns its index.
    pub fn alloc(&mut self, len: usize) -> usize {
        self.regions.push(Region::new(len));
        self.regions.len() - 1
    }

    pub fn region(&self, i: usize) -> &Region {
        &self.regions[i]
    }

    /// Register `len` bytes of region `reg` from `off`. Checks fi_mr_key against the requested
    /// key unless the provider chooses keys (FI_MR_PROV_KEY). Returns the MR's index and how
    /// peers address it.
    pub fn reg(
        &mut self,
        reg: usize,
        off: usize,
        len: usize,
        access: u64,
        key: u64,
        flags: u64,
    ) -> TResult<(usize, MrInfo)> {
        let r = &self.regions[reg];
        assert!(off + len <= r.len());
        // SAFETY: off..off+len lies in the region, which outlives the MR (regions are freed
        // after every MR is closed, see Drop).
        let p = unsafe { r.ptr().add(off) };
        // SAFETY: as above.
        let mr = unsafe { Mr::reg(self.domain(), p, len, access, 0, key, flags) }.ctx("fi_mr_reg")?;
        let got = mr.key();
        if !self.prov_key() {
            ensure!(got == key, "fi_mr_key {got:#x} != the requested key {key:#x} (mr_mode without FI_MR_PROV_KEY)");
        }
        let addr = if self.virt_addr() { p as u64 } else { 0 };
        self.mrs.push(mr);
        Ok((self.mrs.len() - 1, MrInfo { key: got, addr }))
    }

    pub fn mr(&self, i: usize) -> &Mr {
        &self.mrs[i]
    }

    /// `fi_mr_bind(mr, cntr, flags)`; returns the code.
    pub fn mr_bind_cntr(&self, mr: usize, cntr: usize, flags: u64) -> i32 {
        self.mrs[mr].bind(self.cntrs[cntr].fid(), flags)
    }

    /// `fi_mr_bind(mr, cntr, flags)`, which must succeed; a provider that has no counters on
    /// registrations (-FI_ENOSYS, -FI_EOPNOTSUPP) declines the scenario.
    pub fn bind_mr_cntr(&self, mr: usize, cntr: usize, flags: u64) -> TResult {
        let what = format!("fi_mr_bind(mr, cntr, {})", cntr_flags_name(flags));
        let ret = self.mr_bind_cntr(mr, cntr, flags);
        if ret == fabric::ENOSYS || ret == fabric::EOPNOTSUPP {
            return Err(TestErr::Nos(ret, format!("{what} returned {}", fabric::errname(ret))));
        }
        fi_ok(&what, ret)
    }

    /// Every rank's MRs: all-gather of ours (`key:addr` pairs).
    pub fn share_mrs(&mut self, r: &mut Rank, mine: &[MrInfo]) -> TResult<Vec<Vec<MrInfo>>> {
        let v = if mine.is_empty() {
            "-".to_string()
        } else {
            mine.iter().map(|m| format!("{:x}:{:x}", m.key, m.addr)).collect::<Vec<_>>().join(",")
        };
        let all = r.pmi.allgather_with(&v, Some(&mut || self.progress().map(|_| ())))?;
        let bad = || TestErr::Fail("bad MR exchange".into());
        let mut out = Vec::new();
        for s in all {
            let mut l = Vec::new();
            if s != "-" {
                for kv in s.split(',') {
                    let (k, a) = kv.split_once(':').ok_or_else(bad)?;
                    let key = u64::from_str_radix(k, 16).map_err(|_| bad())?;
                    let addr = u64::from_str_radix(a, 16).map_err(|_| bad())?;
                    l.push(MrInfo { key, addr });
                }
            }
            out.push(l);
        }
        Ok(out)
    }

    /// Barrier with every rank, progressing meanwhile.
    pub fn barrier(&mut self, r: &mut Rank) -> TResult {
        r.pmi.barrier_with(&mut || self.progress().map(|_| ()))
    }

    // ---- completions ----

    /// Read the CQ until it is empty; returns how many entries arrived.
    pub fn progress(&mut self) -> TResult<usize> {
        let mut n = 0;
        loop {
            let mut ents = [ffi::fi_cq_data_entry::default(); 16];
            let ret = self.cq().read(&mut ents);
            if ret > 0 {
                let k = ret as usize;
                ensure!(k <= ents.len(), "fi_cq_read returned {k} for a buffer of {}", ents.len());
                for e in &ents[..k] {
                    self.on_entry(e.op_context as usize, e.flags, e.len, e.data, 0, 0);
                }
                n += k;
                if k < ents.len() {
                    break;
                }
            } else if ret == EAGAIN as isize {
                break;
            } else if ret == EAVAIL as isize {
                let mut e = ffi::fi_cq_err_entry::default();
                let r = self.cq().readerr(&mut e, 0);
                if r == EAGAIN as isize {
                    continue;
                }
                ensure!(r == 1, "fi_cq_readerr after -FI_EAVAIL returned {}", fabric::errname(r as i32));
                ensure!(e.err != 0, "fi_cq_readerr returned an entry with err 0");
                self.on_entry(e.op_context as usize, e.flags, e.len, e.data, e.err, e.prov_errno);
                n += 1;
            } else {
                bail!("fi_cq_read returned {}", fabric::errname(ret as i32));
            }
        }
        Ok(n)
    }

    fn on_entry(&mut self, ctx: usize, flags: u64, len: usize, data: u64, err: i32, prov_errno: i32) {
        match self.ops.remove(&ctx) {
            Some(op) => {
                let d = Done { id: op.id, what: op.what, err, prov_errno, flags, len, bufs: op.bufs };
                self.done.insert(d.id, d);
            }
            None => self.events.push_back(Event { flags, data, err, ctx }),
        }
    }

    /// Progress until op `id` has completed (or the deadline).
    pub fn wait(&mut self, id: u64) -> TResult<Done> {
        match self.wait_for(id, self.timeout)? {
            Some(d) => Ok(d),
            None => {
                let what = self.ops.values().find(|o| o.id == id).map_or("?".into(), |o| o.what.clone());
                let stray: Vec<String> = self
                    .events
                    .iter()
                    .map(|e| format!("context {:#x} flags {:#x} err {}", e.ctx, e.flags, fabric::errname(-e.err)))
                    .collect();
                if stray.is_empty() {
                    bail!("{what}: no completion within {:?}", self.timeout)
                }
                bail!(
                    "{what}: no completion within {:?}; entries with unknown contexts: {}",
                    self.timeout,
                    stray.join("; ")
                )
            }
        }
    }

    /// Progress until op `id` has completed; `None` after `limit`.
    pub fn wait_for(&mut self, id: u64, limit: Duration) -> TResult<Option<Done>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(d) = self.done.remove(&id) {
                return Ok(Some(d));
            }
            if self.progress()? == 0 {
                if Instant::now() > deadline {
                    return Ok(None);
                }
                std::thread::yield_now();
            }
        }
    }

    pub fn wait_ok(&mut self, id: u64) -> TResult<Done> {
        self.wait(id)?.ok()
    }

    /// Progress until an entry that belongs to no op of ours arrives.
    pub fn wait_event(&mut self, what: &str) -> TResult<Event> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(e) = self.events.pop_front() {
                return Ok(e);
            }
            if self.progress()? == 0 {
                ensure!(Instant::now() < deadline, "{what}: nothing arrived within {:?}", self.timeout);
                std::thread::yield_now();
            }
        }
    }

    /// Keep progressing for `d`.
    pub fn progress_for(&mut self, d: Duration) -> TResult {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.progress()? == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    // ---- posting ----

    /// Post an operation that owns `bufs` until it completes: `f` gets the endpoint, the
    /// context and the buffers' addresses. -FI_EAGAIN is retried (progressing) until the
    /// deadline; any other non-zero return is given back as `Err(code)`.
    pub fn post(
        &mut self,
        what: &str,
        mut bufs: Vec<Vec<u8>>,
        mut f: impl FnMut(&Ep, *mut c_void, &[*mut u8]) -> isize,
    ) -> TResult<Result<u64, i32>> {
        // A real allocation even for empty buffers (never a dangling pointer).
        bufs.iter_mut().for_each(|b| b.reserve(1));
        let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let mut ctx: Box<ffi::fi_context2> = Box::default();
        let cp: *mut c_void = (&mut *ctx as *mut ffi::fi_context2).cast();
        let id = self.next_id;
        self.next_id += 1;
        // Moving the Vecs and the Box into the map does not move their heap memory.
        self.ops.insert(cp as usize, Op { id, what: what.to_string(), _ctx: ctx, bufs });
        let deadline = Instant::now() + self.timeout;
        loop {
            let ret = f(self.ep(), cp, &ptrs);
            if ret == 0 {
                return Ok(Ok(id));
            }
            if ret != EAGAIN as isize {
                self.ops.remove(&(cp as usize));
                return Ok(Err(ret as i32));
            }
            self.progress()?;
            if Instant::now() > deadline {
                bail!("{what}: -FI_EAGAIN until the deadline ({:?})", self.timeout);
            }
            std::thread::yield_now();
        }
    }

    /// An inject-style call (no completion): retried on -FI_EAGAIN; returns its final code.
    pub fn inject(&mut self, what: &str, mut f: impl FnMut(&Ep) -> isize) -> TResult<isize> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let ret = f(self.ep());
            if ret != EAGAIN as isize {
                return Ok(ret);
            }
            self.progress()?;
            ensure!(Instant::now() < deadline, "{what}: -FI_EAGAIN until the deadline ({:?})", self.timeout);
            std::thread::yield_now();
        }
    }

    /// `fi_write` (or `fi_writedata` with `cq_data`).
    pub fn write(&mut self, what: &str, data: Vec<u8>, t: Target, cq_data: Option<u64>) -> TResult<Result<u64, i32>> {
        let len = data.len();
        self.post(what, vec![data], |ep, ctx, p| {
            // SAFETY: buffer and context belong to the op, kept until its completion.
            unsafe {
                match cq_data {
                    Some(d) => ep.writedata(p[0], len, null_mut(), d, t.dest, t.addr, t.key, ctx),
                    None => ep.write(p[0], len, null_mut(), t.dest, t.addr, t.key, ctx),
                }
            }
        })
    }

    /// `fi_writev` of `parts`.
    pub fn writev(&mut self, what: &str, parts: Vec<Vec<u8>>, t: Target) -> TResult<Result<u64, i32>> {
        let lens: Vec<usize> = parts.iter().map(Vec::len).collect();
        self.post(what, parts, |ep, ctx, p| {
            let iov = iovs(p, &lens, 0);
            // SAFETY: buffers and context belong to the op.
            unsafe { ep.writev(&iov, t.dest, t.addr, t.key, ctx) }
        })
    }

    /// `fi_writemsg` of `parts` to the remote segments `rma`.
    pub fn writemsg(
        &mut self,
        what: &str,
        parts: Vec<Vec<u8>>,
        dest: FiAddr,
        rma: &[ffi::fi_rma_iov],
        flags: u64,
        cq_data: u64,
    ) -> TResult<Result<u64, i32>> {
        let lens: Vec<usize> = parts.iter().map(Vec::len).collect();
        self.post(what, parts, |ep, ctx, p| {
            let iov = iovs(p, &lens, 0);
            let mut desc = vec![null_mut::<c_void>(); iov.len()];
            let m = ffi::fi_msg_rma {
                msg_iov: iov.as_ptr(),
                desc: desc.as_mut_ptr(),
                iov_count: iov.len(),
                addr: dest,
                rma_iov: rma.as_ptr(),
                rma_iov_count: rma.len(),
                context: ctx,
                data: cq_data,
            };
            // SAFETY: buffers and context belong to the op; the arrays live through the call.
            unsafe { ep.writemsg(&m, flags) }
        })
    }

    /// `fi_read` of `len` bytes into a canaried buffer (see [`payload`]).
    pub fn read(&mut self, what: &str, len: usize, t: Target) -> TResult<Result<u64, i32>> {
        self.post(what, vec![canaried(len)], |ep, ctx, p| {
            // SAFETY: buffer (payload after the leading canary) and context belong to the op.
            unsafe { ep.read(p[0].add(CANARY), len, null_mut(), t.dest, t.addr, t.key, ctx) }
        })
    }

    /// `fi_readv` into canaried buffers of `lens`.
    pub fn readv(&mut self, what: &str, lens: &[usize], t: Target) -> TResult<Result<u64, i32>> {
        let bufs = lens.iter().map(|&l| canaried(l)).collect();
        self.post(what, bufs, |ep, ctx, p| {
            let iov = iovs(p, lens, CANARY);
            // SAFETY: buffers and context belong to the op.
            unsafe { ep.readv(&iov, t.dest, t.addr, t.key, ctx) }
        })
    }

    /// `fi_readmsg` into canaried buffers of `lens` from the remote segments `rma`.
    pub fn readmsg(
        &mut self,
        what: &str,
        lens: &[usize],
        dest: FiAddr,
        rma: &[ffi::fi_rma_iov],
        flags: u64,
    ) -> TResult<Result<u64, i32>> {
        let bufs = lens.iter().map(|&l| canaried(l)).collect();
        self.post(what, bufs, |ep, ctx, p| {
            let iov = iovs(p, lens, CANARY);
            let mut desc = vec![null_mut::<c_void>(); iov.len()];
            let m = ffi::fi_msg_rma {
                msg_iov: iov.as_ptr(),
                desc: desc.as_mut_ptr(),
                iov_count: iov.len(),
                addr: dest,
                rma_iov: rma.as_ptr(),
                rma_iov_count: rma.len(),
                context: ctx,
                data: 0,
            };
            // SAFETY: buffers and context belong to the op; the arrays live through the call.
            unsafe { ep.readmsg(&m, flags) }
        })
    }

    /// One atomic call of `count` elements: `fi_atomic`, `fi_fetch_atomic` or
    /// `fi_compare_atomic` by `kind`. Buffers: operand, compare, canaried result.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        what: &str,
        kind: AKind,
        dt: ffi::fi_datatype,
        op: ffi::fi_op,
        count: usize,
        operand: Vec<u8>,
        compare: Vec<u8>,
        t: Target,
    ) -> TResult<Result<u64, i32>> {
        let n = count * dt_size(dt);
        assert!(operand.len() >= n && (kind != AKind::Compare || compare.len() >= n));
        self.post(what, vec![operand, compare, canaried(n)], |ep, ctx, p| {
            // SAFETY: buffers and context belong to the op (result: past its leading canary).
            unsafe {
                let res = p[2].add(CANARY);
                match kind {
                    AKind::Base => ep.atomic(p[0], count, null_mut(), t.dest, t.addr, t.key, dt, op, ctx),
                    AKind::Fetch => {
                        ep.fetch_atomic(p[0], count, null_mut(), res, null_mut(), t.dest, t.addr, t.key, dt, op, ctx)
                    }
                    AKind::Compare => ep.compare_atomic(p[0], count, p[1], res, t.dest, t.addr, t.key, dt, op, ctx),
                }
            }
        })
    }

    /// `fi_atomicmsg` (`kind` Base) or `fi_fetch_atomicmsg` (Fetch) of one fi_ioc of `count`
    /// elements with `flags`. Buffers: the operand, and a fetch's canaried result.
    #[allow(clippy::too_many_arguments)]
    pub fn atomicmsg(
        &mut self,
        what: &str,
        kind: AKind,
        dt: ffi::fi_datatype,
        op: ffi::fi_op,
        count: usize,
        operand: Vec<u8>,
        t: Target,
        flags: u64,
    ) -> TResult<Result<u64, i32>> {
        assert!(kind != AKind::Compare, "atomicmsg: base and fetch atomics only");
        let fetch = kind == AKind::Fetch;
        let n = count * dt_size(dt);
        assert!(operand.len() >= n);
        let bufs = if fetch { vec![operand, canaried(n)] } else { vec![operand] };
        self.post(what, bufs, |ep, ctx, p| {
            let ioc = ffi::fi_ioc { addr: p[0].cast(), count };
            let rma = ffi::fi_rma_ioc { addr: t.addr, count, key: t.key };
            let mut desc = null_mut::<c_void>();
            let msg = ffi::fi_msg_atomic {
                msg_iov: &ioc,
                desc: &mut desc,
                iov_count: 1,
                addr: t.dest,
                rma_iov: &rma,
                rma_iov_count: 1,
                datatype: dt,
                op,
                context: ctx,
                data: 0,
            };
            if !fetch {
                // SAFETY: the operand and the context belong to the op; the message lives
                // through the call.
                return unsafe { ep.atomicmsg(&msg, flags) };
            }
            // SAFETY: the result buffer is past its leading canary, `n` bytes long.
            let mut result = ffi::fi_ioc { addr: unsafe { p[1].add(CANARY) }.cast(), count };
            // SAFETY: the buffers and the context belong to the op; the message and the result
            // ioc live through the call.
            unsafe { ep.fetch_atomicmsg(&msg, &mut result, 1, flags) }
        })
    }

    /// `fi_recv` of up to `len` bytes from anyone.
    pub fn recv(&mut self, len: usize) -> TResult<u64> {
        let r = self.post("fi_recv", vec![vec![0u8; len]], |ep, ctx, p| {
            // SAFETY: buffer and context belong to the op.
            unsafe { ep.recv(p[0], len, null_mut(), fabric::FI_ADDR_UNSPEC, ctx) }
        })?;
        must("fi_recv", r)
    }

    /// `fi_send` of `data`.
    pub fn send(&mut self, data: Vec<u8>, dest: FiAddr) -> TResult<u64> {
        let len = data.len();
        let r = self.post("fi_send", vec![data], |ep, ctx, p| {
            // SAFETY: buffer and context belong to the op.
            unsafe { ep.send(p[0], len, null_mut(), dest, ctx) }
        })?;
        must("fi_send", r)
    }

    /// Poll counter `i` (progressing the CQ) until it reads at least `want`; returns its value.
    pub fn wait_cntr(&mut self, i: usize, want: u64, what: &str) -> TResult<u64> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let v = self.cntrs[i].read();
            if v >= want {
                return Ok(v);
            }
            if self.progress()? == 0 {
                ensure!(Instant::now() < deadline, "{what}: counter at {v}, expected {want} within {:?}", self.timeout);
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Endpoint before its CQ and AV (tuple fields drop in order).
        self.extra.clear();
        let closed = self.ep.as_mut().is_none_or(|ep| ep.try_close() == 0);
        if closed {
            self.ep = None;
        } else {
            // The provider may still own our buffers: leak them rather than free them.
            std::mem::forget(self.ep.take());
            std::mem::forget(std::mem::take(&mut self.ops));
            std::mem::forget(std::mem::take(&mut self.regions));
        }
        for mr in self.mrs.drain(..) {
            let _ = mr.close();
        }
        self.cntrs.clear();
        self.cq = None;
        self.av = None;
        self.domain = None;
        self.fabric = None;
    }
}

/// An operation that its target must refuse (`try_refused`).
#[derive(Clone, Copy)]
pub enum AccessOp {
    Write(usize),
    Read(usize),
    /// One FI_UINT64 element.
    Atomic(AKind, ffi::fi_op),
}

/// What became of an operation that must fail (`try_refused`).
pub enum Refusal {
    /// Refused, by the call or its completion: the error, for the notes.
    Refused(String),
    /// It completed successfully.
    Succeeded(String),
    /// No completion in time, or the call failed the test: the endpoint looks stuck.
    Stuck(String),
}

/// Post `op` at `t` and wait up to `wait` for its completion. Writes and base atomics ask for
/// FI_DELIVERY_COMPLETE: only a completion that waits for the target can carry its refusal
/// (fi_cq(3); rma/*/err_unacked covers the plain calls, which may complete when queued).
pub fn try_refused(p: &mut Peer, what: &str, op: AccessOp, t: Target, wait: Duration) -> TResult<Refusal> {
    let one = 1u64.to_le_bytes().to_vec();
    let dc = COMPLETION | DELIVERY_COMPLETE;
    let res = match op {
        AccessOp::Write(len) => {
            let rma = [ffi::fi_rma_iov { addr: t.addr, len, key: t.key }];
            p.writemsg(what, vec![crate::harness::pattern(7, len)], t.dest, &rma, dc, 0)
        }
        AccessOp::Read(len) => p.read(what, len, t),
        AccessOp::Atomic(AKind::Base, aop) => p.atomicmsg(what, AKind::Base, ffi::FI_UINT64, aop, 1, one, t, dc),
        AccessOp::Atomic(kind, aop) => p.atomic(what, kind, ffi::FI_UINT64, aop, 1, one.clone(), one, t),
    };
    let id = match res {
        Ok(Ok(id)) => id,
        Ok(Err(code)) => return Ok(Refusal::Refused(format!("{what}: refused {}", fabric::errname(code)))),
        Err(TestErr::Fail(m)) => return Ok(Refusal::Stuck(m)),
        Err(e) => return Err(e),
    };
    Ok(match p.wait_for(id, wait)? {
        None => Refusal::Stuck(format!("{what}: no completion within {} s", wait.as_secs())),
        Some(d) if d.err == 0 => Refusal::Succeeded(format!("{what}: completed successfully")),
        Some(d) => Refusal::Refused(format!("{what}: {}", fabric::errname(d.err))),
    })
}

/// Which atomic call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AKind {
    Base,
    Fetch,
    Compare,
}

impl AKind {
    pub fn call(self) -> &'static str {
        match self {
            AKind::Base => "fi_atomic",
            AKind::Fetch => "fi_fetch_atomic",
            AKind::Compare => "fi_compare_atomic",
        }
    }

    /// The matching valid query: (code, count).
    pub fn valid(self, ep: &Ep, dt: ffi::fi_datatype, op: ffi::fi_op) -> (i32, usize) {
        match self {
            AKind::Base => ep.atomicvalid(dt, op),
            AKind::Fetch => ep.fetch_atomicvalid(dt, op),
            AKind::Compare => ep.compare_atomicvalid(dt, op),
        }
    }
}

fn iovs(p: &[*mut u8], lens: &[usize], skip: usize) -> Vec<ffi::iovec> {
    p.iter()
        .zip(lens)
        // SAFETY: skip is within each buffer (canaried buffers have CANARY bytes before the payload).
        .map(|(&b, &l)| ffi::iovec { iov_base: unsafe { b.add(skip) }.cast(), iov_len: l })
        .collect()
}

/// The op id, or a failure naming the call and the code it returned.
pub fn must(what: &str, r: Result<u64, i32>) -> TResult<u64> {
    r.map_err(|code| fi_fail(what, code as i64))
}

pub fn cntr_flags_name(flags: u64) -> String {
    let names =
        [(READ, "FI_READ"), (WRITE, "FI_WRITE"), (REMOTE_READ, "FI_REMOTE_READ"), (REMOTE_WRITE, "FI_REMOTE_WRITE")];
    let v: Vec<&str> = names.iter().filter(|(f, _)| flags & f != 0).map(|(_, n)| *n).collect();
    if v.is_empty() {
        format!("{flags:#x}")
    } else {
        v.join("|")
    }
}

/// Split `total` bytes into `parts` uneven lengths (a small first piece, the rest spread), all
/// non-zero when `total >= parts`.
pub fn split(total: usize, parts: usize) -> Vec<usize> {
    let parts = parts.max(1);
    if parts == 1 || total < parts {
        return vec![total];
    }
    let mut v = vec![0usize; parts];
    v[0] = 1 + (total / 7) % 5;
    let rest = total - v[0];
    let each = rest / (parts - 1);
    for x in v.iter_mut().skip(1) {
        *x = each;
    }
    v[parts - 1] += rest - each * (parts - 1);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers() {
        for (t, p) in [(1usize, 1usize), (8, 2), (200, 3), (4097, 4), (1 << 20, 4), (2, 3)] {
            let v = split(t, p);
            assert_eq!(v.iter().sum::<usize>(), t);
            if t >= p {
                assert_eq!(v.len(), p);
                assert!(v.iter().all(|&x| x > 0), "{v:?}");
            }
        }
    }

    #[test]
    fn canaries_detect_overflow() {
        let mut b = canaried(10);
        b[CANARY..CANARY + 10].fill(1);
        assert!(payload("t", &b, 10).is_ok());
        b[CANARY + 10] = 0;
        assert!(payload("t", &b, 10).is_err());
    }
}
