//! One RDM endpoint of one provider, opened the way a latency-minded application opens it:
//! manual progress, `FI_THREAD_DOMAIN`, one CQ for both directions (busy-polled), one AV, and
//! for one-sided families a registered target buffer.

use super::fabric::{self, ffi, Av, Cq, Domain, Ep, Fabric, FiAddr, Hints, Info, Mr};
use std::alloc::Layout;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// Errors are plain text: the bench prints them (or reports the test as n/a).
pub type Result<T> = std::result::Result<T, String>;

/// How long a wait for a completion may take before the bench gives up (never hang).
const WAIT_LIMIT: Duration = Duration::from_secs(20);

/// The capability families measured; each opens its own endpoint with just those caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Tagged,
    Msg,
    Rma,
    Atomic,
}

impl Family {
    pub const ALL: [Family; 4] = [Family::Tagged, Family::Msg, Family::Rma, Family::Atomic];

    pub fn name(self) -> &'static str {
        match self {
            Family::Tagged => "tagged",
            Family::Msg => "msg",
            Family::Rma => "rma",
            Family::Atomic => "atomic",
        }
    }

    pub fn parse(s: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == s)
    }

    /// Caps asked for. One-sided families add FI_MSG: the initiator ends each run with a small
    /// message that the (otherwise passive, but progressing) target waits for.
    fn caps(self) -> u64 {
        match self {
            Family::Tagged => ffi::FI_TAGGED as u64,
            Family::Msg => ffi::FI_MSG as u64,
            Family::Rma => (ffi::FI_MSG | ffi::FI_RMA) as u64,
            Family::Atomic => (ffi::FI_MSG | ffi::FI_ATOMIC) as u64,
        }
    }

    pub fn one_sided(self) -> bool {
        matches!(self, Family::Rma | Family::Atomic)
    }
}

/// A page-aligned, pre-faulted buffer lent to the provider by raw pointer.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

impl Region {
    pub fn new(len: usize) -> Region {
        let len = len.max(64);
        let layout = Layout::from_size_align(len, 4096).expect("buffer layout");
        // SAFETY: `layout` has a non-zero size; alloc_zeroed returns zeroed memory or null.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else { std::alloc::handle_alloc_error(layout) };
        let mut r = Region { ptr, len };
        // Touch every page so no measurement pays the first-touch faults.
        r.bytes_mut().iter_mut().step_by(4096).for_each(|b| *b = 1);
        r
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes (only while no posted operation uses the buffer).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is our initialised allocation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable (only while no posted operation uses the buffer).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in bytes; &mut self gives exclusive access on our side.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, 4096).expect("buffer layout");
        // SAFETY: allocated in `new` with this very layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

// SAFETY: the region is plain heap memory owned by one value; moving it between threads is fine.
unsafe impl Send for Region {}

/// Fill `buf` with the bytes a peer expects for a message of this size (`seed` tells the two
/// directions apart), so that a transfer that moved nothing, or the wrong bytes, is caught.
pub fn fill_pattern(buf: &mut [u8], seed: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(i, seed);
    }
}

/// Where `buf` first differs from the pattern, if anywhere.
pub fn check_pattern(buf: &[u8], seed: u64) -> Option<usize> {
    buf.iter().enumerate().position(|(i, &b)| b != pattern_byte(i, seed))
}

fn pattern_byte(i: usize, seed: u64) -> u8 {
    (i as u64).wrapping_mul(131).wrapping_add(seed).wrapping_add((i >> 9) as u64) as u8 | 1
}

/// What a target publishes about its registered buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteMr {
    pub key: u64,
    /// The address to pass in RMA calls for offset 0 (the virtual address under FI_MR_VIRT_ADDR).
    pub addr: u64,
}

/// Context slots handed to the provider (FI_CONTEXT/FI_CONTEXT2 mode): enough that a slot is
/// never reused while its operation may still be outstanding.
const CONTEXTS: usize = 1024;

/// One open endpoint. Field order is drop order: MR and endpoint close before CQ and AV, those
/// before the domain and fabric; the buffers are freed last.
pub struct Endpoint {
    mr: Option<Mr>,
    ep: Ep,
    cq: Cq,
    av: Av,
    _domain: Domain,
    _fabric: Fabric,
    info: Info,
    pub family: Family,
    pub peer: FiAddr,
    /// Largest message the provider copies at post time (`fi_inject`), from tx_attr.
    pub inject_size: usize,
    pub tx: Region,
    pub rx: Region,
    /// Small buffer for acknowledgements and run-end messages.
    pub ack: Region,
    /// The buffer remote peers read, write and update (one-sided families).
    pub target: Region,
    /// Completions of sends and one-sided operations (tx) and of receives (rx) read so far.
    pub tx_done: u64,
    pub rx_done: u64,
    contexts: Vec<ffi::fi_context2>,
    next_ctx: usize,
    entries: Vec<ffi::fi_cq_tagged_entry>,
}

impl Endpoint {
    /// `fi_getinfo` for `prov` with the family's caps, then fabric, domain, CQ, AV, endpoint, and
    /// the target MR for one-sided families. `Err` means the provider does not offer what the
    /// family needs (the bench reports n/a).
    pub fn open(prov: &str, family: Family, max_size: usize) -> Result<Endpoint> {
        let info = find_info(prov, family)?;
        let fab = fabric::open_fabric(&info).map_err(|e| format!("fi_fabric: {e}"))?;
        let domain = Domain::open(&fab, &info).map_err(|e| format!("fi_domain: {e}"))?;
        let mut cq_attr = ffi::fi_cq_attr {
            size: 4096,
            format: ffi::FI_CQ_FORMAT_TAGGED,
            wait_obj: ffi::FI_WAIT_NONE,
            ..Default::default()
        };
        let cq = Cq::open(&domain, &mut cq_attr).map_err(|e| format!("fi_cq_open: {e}"))?;
        let mut av_attr = ffi::fi_av_attr { count: 4, ..Default::default() };
        let av = Av::open(&domain, &mut av_attr).map_err(|e| format!("fi_av_open: {e}"))?;
        let ep = Ep::open(&domain, &info).map_err(|e| format!("fi_endpoint: {e}"))?;
        fabric::check(ep.bind(av.fid(), 0) as isize).map_err(|e| format!("fi_ep_bind(av): {e}"))?;
        fabric::check(ep.bind(cq.fid(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64) as isize)
            .map_err(|e| format!("fi_ep_bind(cq): {e}"))?;
        fabric::check(ep.enable() as isize).map_err(|e| format!("fi_enable: {e}"))?;
        let inject_size = info.get().tx_attr().map_or(0, |t| t.inject_size);
        let target = Region::new(if family.one_sided() { max_size } else { 64 });
        let mr = if family.one_sided() {
            let access = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE | ffi::FI_READ | ffi::FI_WRITE) as u64;
            // SAFETY: `target` lives in the returned Endpoint and is freed after the MR closes
            // (field order).
            let mr = unsafe { Mr::reg(&domain, target.ptr(), target.len(), access, 0, 0x5eed, 0) }
                .map_err(|e| format!("fi_mr_reg: {e}"))?;
            Some(mr)
        } else {
            None
        };
        Ok(Endpoint {
            mr,
            ep,
            cq,
            av,
            _domain: domain,
            _fabric: fab,
            info,
            family,
            peer: fabric::FI_ADDR_NOTAVAIL,
            inject_size,
            tx: Region::new(max_size),
            rx: Region::new(max_size),
            ack: Region::new(64),
            target,
            tx_done: 0,
            rx_done: 0,
            contexts: vec![ffi::fi_context2::default(); CONTEXTS],
            next_ctx: 0,
            entries: vec![ffi::fi_cq_tagged_entry::default(); 64],
        })
    }

    /// This endpoint's address (`fi_getname`).
    pub fn name(&self) -> Result<Vec<u8>> {
        self.ep.getname().map_err(|e| format!("fi_getname: {e}"))
    }

    /// Insert the peer's address; later operations go to it.
    pub fn connect(&mut self, addr: &[u8]) -> Result<()> {
        let (ret, fa) = self.av.insert(addr, 0);
        if ret != 1 {
            return Err(format!("fi_av_insert returned {ret}"));
        }
        self.peer = fa;
        Ok(())
    }

    /// The target MR as peers must address it.
    pub fn remote_mr(&self) -> RemoteMr {
        let Some(mr) = &self.mr else { return RemoteMr::default() };
        let virt = self.mr_mode() & ffi::FI_MR_VIRT_ADDR as i32 != 0;
        RemoteMr { key: mr.key(), addr: if virt { self.target.ptr() as u64 } else { 0 } }
    }

    fn mr_mode(&self) -> i32 {
        self.info.get().domain_attr().map_or(0, |d| d.mr_mode)
    }

    /// The provider's name and version as getinfo reported them.
    pub fn describe(&self) -> String {
        let i = self.info.get();
        let v = i.fabric_attr().map_or(0, |f| f.prov_version);
        format!("{} {}.{}", i.prov_name().unwrap_or_default(), v >> 16, v & 0xffff)
    }

    /// Whether FI_SUM on one uint64 is offered (`fi_atomicvalid`).
    pub fn sum_u64_valid(&self) -> bool {
        let (ret, count) = self.ep.atomicvalid(ffi::FI_UINT64, ffi::FI_SUM);
        ret == 0 && count >= 1
    }

    pub fn ep(&self) -> &Ep {
        &self.ep
    }

    /// A fresh context pointer for one posted operation.
    pub fn ctx(&mut self) -> *mut c_void {
        let c = &mut self.contexts[self.next_ctx];
        self.next_ctx = (self.next_ctx + 1) % CONTEXTS;
        (c as *mut ffi::fi_context2).cast()
    }

    /// Read whatever completions are ready; counts them; an error entry is an error.
    pub fn progress(&mut self) -> Result<()> {
        let n = self.cq.read(&mut self.entries);
        if n > 0 {
            for e in &self.entries[..n as usize] {
                if e.flags & ffi::FI_RECV as u64 != 0 {
                    self.rx_done += 1;
                } else {
                    self.tx_done += 1;
                }
            }
            return Ok(());
        }
        match n as i32 {
            0 | fabric::EAGAIN => Ok(()),
            fabric::EAVAIL => {
                let mut err = ffi::fi_cq_err_entry::default();
                self.cq.readerr(&mut err, 0);
                Err(format!(
                    "completion error: {} (prov_errno {}, len {})",
                    fabric::errname(-err.err),
                    err.prov_errno,
                    err.len
                ))
            }
            other => Err(format!("fi_cq_read: {}", fabric::errname(other))),
        }
    }

    /// Busy-poll until `tx_done >= tx` and `rx_done >= rx`.
    pub fn wait(&mut self, tx: u64, rx: u64) -> Result<()> {
        let mut spins = 0u32;
        let mut start: Option<Instant> = None;
        while self.tx_done < tx || self.rx_done < rx {
            self.progress()?;
            spins = spins.wrapping_add(1);
            if spins & 0xffff == 0 {
                let s = *start.get_or_insert_with(Instant::now);
                if s.elapsed() > WAIT_LIMIT {
                    return Err(format!(
                        "no completion for {}s (tx {}/{tx}, rx {}/{rx})",
                        WAIT_LIMIT.as_secs(),
                        self.tx_done,
                        self.rx_done
                    ));
                }
            }
        }
        Ok(())
    }

    /// Call `post` until it stops answering -FI_EAGAIN, progressing in between.
    /// The clock is read from the first -FI_EAGAIN on, not per call: a clock read per post
    /// (a vDSO call) took 18% of the samples of an 8 B tagged stream over rshm, the same
    /// nanoseconds for every provider, which squeezed their ratios toward 1.
    pub fn retry(&mut self, what: &str, mut post: impl FnMut(&mut Endpoint) -> isize) -> Result<()> {
        let mut start: Option<Instant> = None;
        loop {
            let ret = post(self);
            if ret == 0 {
                return Ok(());
            }
            if ret as i32 != fabric::EAGAIN {
                return Err(format!("{what}: {}", fabric::errname(ret as i32)));
            }
            self.progress()?;
            if start.get_or_insert_with(Instant::now).elapsed() > WAIT_LIMIT {
                return Err(format!("{what}: -FI_EAGAIN for {}s", WAIT_LIMIT.as_secs()));
            }
        }
    }
}

/// The first fi_info of `prov` for an RDM endpoint with the family's caps, asking for manual
/// progress and FI_THREAD_DOMAIN, then (if the provider declines those) for its defaults.
fn find_info(prov: &str, family: Family) -> Result<Info> {
    let mut last = String::new();
    for strict in [true, false] {
        let mut h = Hints::for_provider(prov);
        h.caps(family.caps());
        h.mode(ffi::FI_CONTEXT | ffi::FI_CONTEXT2);
        h.ep_attr().type_ = ffi::FI_EP_RDM;
        let d = h.domain_attr();
        d.mr_mode = (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_PROV_KEY) as i32;
        if strict {
            d.threading = ffi::FI_THREAD_DOMAIN;
            d.control_progress = ffi::FI_PROGRESS_MANUAL;
            d.data_progress = ffi::FI_PROGRESS_MANUAL;
        }
        match fabric::getinfo(Some(&h)) {
            Ok(list) => match list.iter().find(|i| i.prov_name().as_deref() == Some(prov)) {
                Some(i) => return Ok(i.dup()),
                None => last = format!("no fi_info from provider {prov}"),
            },
            Err(e) => last = format!("fi_getinfo({prov}, {}): {e}", family.name()),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_catches_wrong_or_missing_bytes() {
        let mut b = vec![0u8; 10_000];
        assert_eq!(check_pattern(&b, 7), Some(0), "an untouched (zeroed) buffer never passes");
        fill_pattern(&mut b, 7);
        assert_eq!(check_pattern(&b, 7), None);
        assert!(check_pattern(&b, 8).is_some(), "the other direction's bytes do not pass");
        b[4097] ^= 0x10;
        assert_eq!(check_pattern(&b, 7), Some(4097));
    }

    #[test]
    fn regions_are_page_aligned_and_zeroed_past_the_touches() {
        let r = Region::new(3 * 4096 + 5);
        assert_eq!(r.ptr() as usize % 4096, 0);
        assert_eq!(r.bytes()[1], 0);
        assert!(r.len() >= 3 * 4096 + 5);
    }
}
