//! What scenarios are written with: test outcomes, data patterns, and `Node`, one endpoint with
//! its fabric, domain, AV, CQs and counters, which owns every buffer and context it hands to the
//! provider until the provider is done with them.

use crate::fabric::{
    self, ffi, Av, Cntr, Cq, CqEntry, Domain, Ep, Fabric, FiAddr, FiError, Hints, Info, Mr, EAGAIN, EAVAIL, ENODATA,
    FI_ADDR_NOTAVAIL, FI_ADDR_UNSPEC,
};
use crate::pmi::Pmi;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use crate::outcome::{TResult, TestErr};

#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::harness::failure(format!($($t)*))) };
}

thread_local! {
    /// Set once this rank has produced a failure (see [`failure`]).
    static FAILED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A scenario failure; also notes that this rank is failing, so that `Node::drop` does not
/// call into a provider that may be in a bad state (and crash the rank before it reports the
/// real reason).
pub fn failure(msg: String) -> TestErr {
    FAILED.with(|f| f.set(true));
    TestErr::Fail(msg)
}

#[macro_export]
macro_rules! ensure {
    ($c:expr, $($t:tt)*) => { if !($c) { $crate::bail!($($t)*) } };
}

/// Failure for a libfabric call that returned `code`.
pub fn fi_fail(what: &str, code: i64) -> TestErr {
    failure(format!("{what} returned {}", fabric::errname(code as i32)))
}

/// `Ok` for a zero/positive return code, a failure naming the call otherwise.
pub fn fi_ok(what: &str, code: impl Into<i64>) -> TResult {
    let c = code.into();
    if c < 0 {
        Err(fi_fail(what, c))
    } else {
        Ok(())
    }
}

pub trait FiCtx<T> {
    /// A libfabric error as a scenario failure naming the call.
    fn ctx(self, what: &str) -> TResult<T>;
    /// `-FI_ENOSYS`/`-FI_EOPNOTSUPP`/`-FI_ENODATA` as "not supported", other errors as failures.
    fn nos(self, what: &str) -> TResult<T>;
}

impl<T> FiCtx<T> for Result<T, FiError> {
    fn ctx(self, what: &str) -> TResult<T> {
        self.map_err(|e| fi_fail(what, e.code() as i64))
    }

    fn nos(self, what: &str) -> TResult<T> {
        self.map_err(|e| {
            if [fabric::ENOSYS, fabric::EOPNOTSUPP, ENODATA].contains(&e.code()) {
                TestErr::Nos(e.code(), format!("{what} returned {}", fabric::errname(e.code())))
            } else {
                fi_fail(what, e.code() as i64)
            }
        })
    }
}

/// Everything a rank of a scenario gets.
pub struct Rank {
    pub prov: String,
    pub rank: usize,
    pub nprocs: usize,
    pub pmi: Pmi,
    /// Deadline for any single wait on the provider.
    pub timeout: Duration,
}

// ---------------------------------------------------------------------------------------------
// Watchdog for blocking calls

/// Fails the rank (RESULT line, then `_exit`) if not dropped within `limit`: for blocking calls
/// such as `fi_cq_sread` that a provider may never return from.
/// Exit code of a rank ended by its watchdog.
pub const WATCHDOG_EXIT: i32 = 3;

pub struct Watchdog {
    _disarm: std::sync::mpsc::Sender<()>,
}

pub fn watchdog(limit: Duration, what: &str) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let what = crate::pmi::oneline(what);
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            use std::io::Write;
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "RESULT FAIL {what}: still blocked after {limit:?}");
            let _ = o.flush();
            // SAFETY: _exit ends the process at once (no atexit handlers that could deadlock
            // against the thread stuck inside the provider). Code 3 tells the suite why.
            unsafe { libc::_exit(WATCHDOG_EXIT) };
        }
    });
    Watchdog { _disarm: tx }
}

// ---------------------------------------------------------------------------------------------
// Data patterns

/// CPU time this process has used so far (user and system).
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage fills one rusage we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The next number of the generator at `state` (splitmix64).
pub fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of a run that kills a process at a random point: `RSHM_KILL_SEED` (to replay a
/// run, whose seed its steps print), else the clock.
pub fn kill_seed() -> u64 {
    std::env::var("RSHM_KILL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    })
}

/// /dev/shm entries whose name carries `pid` as a token (rshm: rshm_<uid>_p<pidns>_<pid>_<n>,
/// shm: <pid>:<n>:<n>).
pub fn shm_files_of(pid: u32) -> Vec<String> {
    let p = pid.to_string();
    let Ok(rd) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.split(['_', ':']).any(|t| t == p))
        .collect()
}

/// This process's private resident memory (RssAnon, KiB).
pub fn rss_anon_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Deterministic bytes for (seed, len): every offset of every message differs.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut st = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (len as u64);
    while v.len() < len {
        v.extend_from_slice(&splitmix(&mut st).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Compare `got` with `pattern(seed, expect_len)`; the error names the first bad offset.
pub fn check_pattern(what: &str, seed: u64, got: &[u8], expect_len: usize) -> TResult {
    if got.len() != expect_len {
        bail!("{what}: received {} bytes, expected {expect_len}", got.len());
    }
    let want = pattern(seed, expect_len);
    if let Some(off) = got.iter().zip(&want).position(|(a, b)| a != b) {
        bail!("{what}: data mismatch at offset {off} of {expect_len} (got {:#04x}, want {:#04x})", got[off], want[off]);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Node

#[derive(Clone, Debug)]
pub struct NodeCfg {
    pub caps: u64,
    /// Mode bits we accept (we always pass an fi_context2 as context).
    pub mode: u64,
    pub ep_type: ffi::fi_ep_type,
    pub av_type: ffi::fi_av_type,
    pub mr_mode: i32,
    pub threading: ffi::fi_threading,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub cq_size: usize,
    pub cq_format: ffi::fi_cq_format,
    pub cq_wait: ffi::fi_wait_obj,
    /// Separate transmit and receive CQs.
    pub separate_cqs: bool,
    /// Bind the transmit CQ with FI_SELECTIVE_COMPLETION.
    pub selective: bool,
    /// Open and bind a send and a receive counter.
    pub counters: bool,
    pub cntr_wait: ffi::fi_wait_obj,
    /// Open a wait set (FI_WAIT_UNSPEC) on the fabric and put the CQs and counters in it
    /// (FI_WAIT_SET; `cq_wait` and `cntr_wait` are then ignored).
    pub wait_set: bool,
    pub min_multi_recv: Option<usize>,
    /// Size of the AV to open.
    pub av_count: usize,
    /// The domain's data progress (FI_PROGRESS_UNSPEC: the provider's choice).
    pub progress: ffi::fi_progress,
}

impl Default for NodeCfg {
    fn default() -> Self {
        NodeCfg {
            caps: (ffi::FI_MSG | ffi::FI_TAGGED) as u64,
            mode: ffi::FI_CONTEXT | ffi::FI_CONTEXT2,
            ep_type: ffi::FI_EP_RDM,
            av_type: ffi::FI_AV_TABLE,
            mr_mode: 0,
            // What MPICH, OpenSHMEM and the bench ask for; scenarios with threads of their
            // own ask for FI_THREAD_SAFE.
            threading: ffi::FI_THREAD_DOMAIN,
            tx_op_flags: 0,
            rx_op_flags: 0,
            cq_size: 0,
            cq_format: ffi::FI_CQ_FORMAT_TAGGED,
            cq_wait: ffi::FI_WAIT_NONE,
            separate_cqs: false,
            selective: false,
            counters: false,
            cntr_wait: ffi::FI_WAIT_NONE,
            wait_set: false,
            min_multi_recv: None,
            av_count: 64,
            progress: ffi::FI_PROGRESS_UNSPEC,
        }
    }
}

impl NodeCfg {
    pub fn caps(caps: u64) -> NodeCfg {
        NodeCfg { caps, ..Default::default() }
    }
}

/// `fi_getinfo` for one provider with the usual hints; `-FI_ENODATA` means "not supported".
pub fn getinfo_for(prov: &str, cfg: &NodeCfg) -> TResult<Info> {
    let mut h = Hints::for_provider(prov);
    h.caps(cfg.caps).mode(cfg.mode);
    h.ep_attr().type_ = cfg.ep_type;
    h.domain_attr().mr_mode = cfg.mr_mode;
    h.domain_attr().threading = cfg.threading;
    h.domain_attr().data_progress = cfg.progress;
    h.tx_attr().op_flags = cfg.tx_op_flags;
    h.rx_attr().op_flags = cfg.rx_op_flags;
    let list = match fabric::getinfo(Some(&h)) {
        Ok(l) => l,
        Err(e) if e.code() == ENODATA => {
            return Err(TestErr::Nos(e.code(), format!("fi_getinfo(caps {:#x}) returned -FI_ENODATA", cfg.caps)))
        }
        Err(e) => return Err(fi_fail("fi_getinfo", e.code() as i64)),
    };
    let Some(first) = list.first() else { bail!("fi_getinfo returned 0 but an empty list") };
    let name = first.prov_name().unwrap_or_default();
    ensure!(name == prov, "fi_getinfo for provider {prov} returned provider {name:?}");
    ensure!(
        first.caps() & cfg.caps == cfg.caps,
        "fi_getinfo returned caps {:#x} without the hinted {:#x}",
        first.caps(),
        cfg.caps
    );
    Ok(first.dup())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Send,
    Recv,
    Peek,
    RmaWrite,
    RmaRead,
    Atomic,
}

/// Why an operation's context no longer belongs to a pending operation.
#[derive(Clone, Copy, Debug)]
enum Retired {
    /// Its (last) completion was read.
    Completed,
    /// The post returned an error: the provider must never complete it.
    Refused,
}

struct Pending {
    ctx: Box<ffi::fi_context2>,
    bufs: Vec<Box<[u8]>>,
    lens: Vec<usize>,
    kind: OpKind,
    multi: bool,
    keep_ctx: bool,
}

/// One completion, successful (`err == 0`) or from `fi_cq_readerr`.
#[derive(Clone, Debug, Default)]
pub struct Completion {
    pub op: Option<u64>,
    pub kind: Option<OpKind>,
    pub flags: u64,
    pub len: usize,
    pub data: u64,
    pub tag: u64,
    pub src: FiAddr,
    /// Positive FI_Exxx from the error entry, 0 for success.
    pub err: i32,
    pub prov_errno: i32,
    pub olen: usize,
    /// Received bytes (receives and RMA reads).
    pub payload: Vec<u8>,
    /// For multi-receive completions: offset of the message in the posted buffer.
    pub buf_off: Option<usize>,
}

impl Completion {
    pub fn ok(&self, what: &str) -> TResult<&Completion> {
        if self.err != 0 {
            bail!("{what}: error completion {} (prov_errno {})", fabric::errname(-self.err), self.prov_errno);
        }
        Ok(self)
    }
}

/// How to send.
#[derive(Clone, Debug, Default)]
pub struct Tx {
    pub tag: Option<u64>,
    /// Remote CQ data (fi_senddata / FI_REMOTE_CQ_DATA).
    pub data: Option<u64>,
    /// Use fi_sendmsg with these flags.
    pub flags: Option<u64>,
    /// Split the payload over this many iovs (fi_sendv / msg iov).
    pub iov: usize,
}

impl Tx {
    pub fn tagged(tag: u64) -> Tx {
        Tx { tag: Some(tag), ..Default::default() }
    }
}

/// How to receive.
#[derive(Clone, Debug, Default)]
pub struct Rx {
    /// (tag, ignore) for a tagged receive.
    pub tag: Option<(u64, u64)>,
    /// Use fi_recvmsg with these flags.
    pub flags: Option<u64>,
    pub iov: usize,
    /// FI_MULTI_RECV buffer.
    pub multi: bool,
}

impl Rx {
    pub fn tagged(tag: u64, ignore: u64) -> Rx {
        Rx { tag: Some((tag, ignore)), ..Default::default() }
    }
}

fn alloc(len: usize) -> Box<[u8]> {
    // Never hand out a zero-length (dangling) allocation.
    vec![0u8; len.max(1)].into_boxed_slice()
}

fn split_lens(total: usize, parts: usize) -> Vec<usize> {
    let parts = parts.max(1);
    let base = total / parts;
    let mut v = vec![base; parts];
    v[parts - 1] += total - base * parts;
    v
}

/// `len` of a completion read in FI_CQ_FORMAT_CONTEXT (or UNSPEC), which has no length.
pub const LEN_UNKNOWN: usize = usize::MAX;

fn read_as<T: CqEntry>(
    cq: &Cq,
    source: bool,
    n: usize,
    conv: impl Fn(&T) -> ffi::fi_cq_tagged_entry,
    out: &mut Vec<(ffi::fi_cq_tagged_entry, FiAddr)>,
) -> isize {
    let mut ents = vec![T::default(); n];
    let mut srcs = vec![FI_ADDR_NOTAVAIL; n];
    let ret = if source { cq.readfrom(&mut ents, &mut srcs) } else { cq.read(&mut ents) };
    if ret > 0 {
        for i in 0..(ret as usize).min(n) {
            out.push((conv(&ents[i]), srcs[i]));
        }
    }
    ret
}

/// Read up to a batch of completions in the CQ's format, converted to tagged entries.
fn read_cq(
    cq: &Cq,
    format: ffi::fi_cq_format,
    source: bool,
    out: &mut Vec<(ffi::fi_cq_tagged_entry, FiAddr)>,
) -> (isize, usize) {
    let t = |op_context, flags, len, buf, data, tag| ffi::fi_cq_tagged_entry { op_context, flags, len, buf, data, tag };
    let null = std::ptr::null_mut();
    match format {
        ffi::FI_CQ_FORMAT_TAGGED => (read_as(cq, source, 8, |e: &ffi::fi_cq_tagged_entry| *e, out), 8),
        ffi::FI_CQ_FORMAT_DATA => (
            read_as(cq, source, 8, |e: &ffi::fi_cq_data_entry| t(e.op_context, e.flags, e.len, e.buf, e.data, 0), out),
            8,
        ),
        ffi::FI_CQ_FORMAT_MSG => {
            (read_as(cq, source, 8, |e: &ffi::fi_cq_msg_entry| t(e.op_context, e.flags, e.len, null, 0, 0), out), 8)
        }
        ffi::FI_CQ_FORMAT_CONTEXT => {
            (read_as(cq, source, 8, |e: &ffi::fi_cq_entry| t(e.op_context, 0, LEN_UNKNOWN, null, 0, 0), out), 8)
        }
        // UNSPEC: the provider chose the format; read one entry into the largest type and trust
        // only op_context (the first member of every format).
        _ => {
            (read_as(cq, source, 1, |e: &ffi::fi_cq_tagged_entry| t(e.op_context, 0, LEN_UNKNOWN, null, 0, 0), out), 1)
        }
    }
}

pub struct Node {
    // Field order is drop order after Drop::drop has closed the endpoint.
    ep: Option<Ep>,
    pub av: Option<Av>,
    tx_cq: Option<Cq>,
    rx_cq: Option<Cq>,
    pub tx_cntr: Option<Cntr>,
    pub rx_cntr: Option<Cntr>,
    mrs: Vec<Mr>,
    /// Closed after the CQs and counters in it, before the fabric.
    pub wait_set: Option<crate::fabric::WaitSet>,
    pub domain: Option<Domain>,
    /// Held so it closes after the domain.
    _fabric: Option<Fabric>,
    pub info: Info,
    targets: Vec<Box<[u8]>>,
    pending: HashMap<u64, Pending>,
    ctx_map: HashMap<usize, u64>,
    /// Contexts of finished operations, by address: a later completion with one of them is a
    /// duplicate. The boxes stay allocated (`retired_ctx`) so that no new operation gets the
    /// same address.
    retired: HashMap<usize, (u64, OpKind, Retired)>,
    // Boxed on purpose: the provider was given these addresses, which must not move.
    #[allow(clippy::vec_box)]
    retired_ctx: Vec<Box<ffi::fi_context2>>,
    completions: VecDeque<Completion>,
    next_id: u64,
    source: bool,
    pub timeout: Duration,
    pub name: Vec<u8>,
    pub cfg: NodeCfg,
}

impl Node {
    /// getinfo + fabric + domain + AV + CQ(s) + counters + endpoint, bound and enabled.
    pub fn open(prov: &str, cfg: &NodeCfg, timeout: Duration) -> TResult<Node> {
        let info = getinfo_for(prov, cfg)?;
        Node::open_with_info(info, cfg, timeout)
    }

    pub fn open_with_info(info: Info, cfg: &NodeCfg, timeout: Duration) -> TResult<Node> {
        let fab = fabric::open_fabric(&info).ctx("fi_fabric")?;
        let dom = Domain::open(&fab, &info).ctx("fi_domain")?;
        let mut node = Node {
            ep: None,
            av: None,
            tx_cq: None,
            rx_cq: None,
            tx_cntr: None,
            rx_cntr: None,
            mrs: Vec::new(),
            wait_set: None,
            domain: Some(dom),
            _fabric: Some(fab),
            source: info.raw().caps & ffi::FI_SOURCE != 0,
            info,
            targets: Vec::new(),
            pending: HashMap::new(),
            ctx_map: HashMap::new(),
            retired: HashMap::new(),
            retired_ctx: Vec::new(),
            completions: VecDeque::new(),
            next_id: 1,
            timeout,
            name: Vec::new(),
            cfg: cfg.clone(),
        };
        if cfg.wait_set {
            let mut attr = ffi::fi_wait_attr { wait_obj: ffi::FI_WAIT_UNSPEC, ..Default::default() };
            node.wait_set = Some(crate::fabric::WaitSet::open(node.fabric(), &mut attr).nos("fi_wait_open")?);
        }
        let set = node.wait_set.as_ref().map_or(std::ptr::null_mut(), |w| w.raw());
        let (cq_wait, cntr_wait) =
            if set.is_null() { (cfg.cq_wait, cfg.cntr_wait) } else { (ffi::FI_WAIT_SET, ffi::FI_WAIT_SET) };
        let dom = node.domain.as_ref().expect("domain");
        let mut av_attr = ffi::fi_av_attr { type_: cfg.av_type, count: cfg.av_count, ..Default::default() };
        let av = Av::open(dom, &mut av_attr).ctx("fi_av_open")?;
        let mut cq_attr = ffi::fi_cq_attr {
            size: cfg.cq_size,
            format: cfg.cq_format,
            wait_obj: cq_wait,
            wait_set: set,
            ..Default::default()
        };
        let tx_cq = Cq::open(dom, &mut cq_attr).ctx("fi_cq_open")?;
        let rx_cq = if cfg.separate_cqs || cfg.selective {
            Some(Cq::open(dom, &mut cq_attr).ctx("fi_cq_open (rx)")?)
        } else {
            None
        };
        let (tx_cntr, rx_cntr) = if cfg.counters {
            let mut a = ffi::fi_cntr_attr {
                events: ffi::FI_CNTR_EVENTS_COMP,
                wait_obj: cntr_wait,
                wait_set: set,
                ..Default::default()
            };
            let t = Cntr::open(dom, &mut a).ctx("fi_cntr_open")?;
            let r = Cntr::open(dom, &mut a).ctx("fi_cntr_open")?;
            (Some(t), Some(r))
        } else {
            (None, None)
        };
        let ep = Ep::open(dom, &node.info).ctx("fi_endpoint")?;
        fi_ok("fi_ep_bind(av)", ep.bind(av.fid(), 0))?;
        let sel = if cfg.selective { ffi::FI_SELECTIVE_COMPLETION } else { 0 };
        if let Some(rx) = &rx_cq {
            fi_ok("fi_ep_bind(cq, FI_TRANSMIT)", ep.bind(tx_cq.fid(), ffi::FI_TRANSMIT as u64 | sel))?;
            fi_ok("fi_ep_bind(cq, FI_RECV)", ep.bind(rx.fid(), ffi::FI_RECV as u64))?;
        } else {
            fi_ok(
                "fi_ep_bind(cq, FI_TRANSMIT|FI_RECV)",
                ep.bind(tx_cq.fid(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64 | sel),
            )?;
        }
        if let (Some(t), Some(r)) = (&tx_cntr, &rx_cntr) {
            fi_ok("fi_ep_bind(cntr, FI_SEND)", ep.bind(t.fid(), ffi::FI_SEND as u64))?;
            fi_ok("fi_ep_bind(cntr, FI_RECV)", ep.bind(r.fid(), ffi::FI_RECV as u64))?;
        }
        if let Some(m) = cfg.min_multi_recv {
            crate::pmi::step("fi_setopt(FI_OPT_MIN_MULTI_RECV) before fi_enable");
            fi_ok(
                "fi_setopt(FI_OPT_MIN_MULTI_RECV)",
                ep.setopt_usize(ffi::FI_OPT_ENDPOINT, ffi::FI_OPT_MIN_MULTI_RECV, m),
            )?;
        }
        fi_ok("fi_enable", ep.enable())?;
        node.name = ep.getname().ctx("fi_getname")?;
        ensure!(!node.name.is_empty(), "fi_getname returned an empty address");
        node.av = Some(av);
        node.tx_cq = Some(tx_cq);
        node.rx_cq = rx_cq;
        node.tx_cntr = tx_cntr;
        node.rx_cntr = rx_cntr;
        node.ep = Some(ep);
        Ok(node)
    }

    pub fn ep(&self) -> &Ep {
        self.ep.as_ref().expect("endpoint open")
    }

    pub fn av(&self) -> &Av {
        self.av.as_ref().expect("av open")
    }

    pub fn fabric(&self) -> &crate::fabric::Fabric {
        self._fabric.as_ref().expect("fabric open")
    }

    pub fn domain(&self) -> &Domain {
        self.domain.as_ref().expect("domain open")
    }

    pub fn tx_cq(&self) -> &Cq {
        self.tx_cq.as_ref().expect("cq open")
    }

    /// Insert one address; fails unless exactly one was inserted.
    pub fn insert(&mut self, addr: &[u8]) -> TResult<FiAddr> {
        let (ret, fa) = self.av().insert(addr, 0);
        ensure!(ret == 1, "fi_av_insert returned {} (expected 1)", fabric::errname(ret));
        ensure!(fa != FI_ADDR_NOTAVAIL, "fi_av_insert returned 1 but fi_addr FI_ADDR_NOTAVAIL");
        Ok(fa)
    }

    /// Publish our address, learn everybody's, insert all of them (rank order); returns the
    /// fi_addrs by rank.
    pub fn exchange(&mut self, r: &mut Rank) -> TResult<Vec<FiAddr>> {
        let name = crate::pmi::hex(&self.name);
        let all = r.pmi.allgather(&name)?;
        let mut out = Vec::new();
        for (i, a) in all.iter().enumerate() {
            let bytes = crate::pmi::unhex(a).ok_or_else(|| TestErr::Fail(format!("bad address from rank {i}")))?;
            out.push(self.insert(&bytes)?);
        }
        Ok(out)
    }

    /// Drive progress: read every CQ until empty; returns how many completions arrived.
    pub fn progress(&mut self) -> TResult<usize> {
        let mut n = 0;
        for which in 0..2 {
            loop {
                let cq = if which == 0 { self.tx_cq.as_ref() } else { self.rx_cq.as_ref() };
                let Some(cq) = cq else { break };
                let mut got = Vec::new();
                let (ret, batch) = read_cq(cq, self.cfg.cq_format, self.source, &mut got);
                if ret > 0 {
                    let k = ret as usize;
                    ensure!(k <= batch, "fi_cq_read returned {k} entries for a buffer of {batch}");
                    for (e, src) in got {
                        self.on_entry(&e, src, None)?;
                    }
                    n += k;
                    if k < batch {
                        break;
                    }
                } else if ret == EAGAIN as isize {
                    break;
                } else if ret == EAVAIL as isize {
                    let mut e = ffi::fi_cq_err_entry::default();
                    let r = cq.readerr(&mut e, 0);
                    if r == EAGAIN as isize {
                        continue;
                    }
                    ensure!(r == 1, "fi_cq_readerr after -FI_EAVAIL returned {}", fabric::errname(r as i32));
                    let t = ffi::fi_cq_tagged_entry {
                        op_context: e.op_context,
                        flags: e.flags,
                        len: e.len,
                        buf: e.buf,
                        data: e.data,
                        tag: e.tag,
                    };
                    self.on_entry(&t, FI_ADDR_NOTAVAIL, Some((e.err, e.prov_errno, e.olen)))?;
                    n += 1;
                } else {
                    bail!("fi_cq_read returned {}", fabric::errname(ret as i32));
                }
            }
        }
        Ok(n)
    }

    /// What an entry's context is: for failure messages.
    fn describe_ctx(&self, ctx: usize) -> String {
        if let Some(id) = self.ctx_map.get(&ctx) {
            let kind = self.pending.get(id).map_or("?".to_string(), |p| format!("{:?}", p.kind));
            return format!("op {id} ({kind}, not yet completed)");
        }
        match self.retired.get(&ctx) {
            Some((id, kind, Retired::Completed)) => format!("op {id} ({kind:?}) that had already completed"),
            Some((id, kind, Retired::Refused)) => format!("op {id} ({kind:?}) whose post had returned an error"),
            None if ctx == 0 => "a NULL context".into(),
            None => format!("context {ctx:#x}, which no operation of this endpoint was given"),
        }
    }

    fn on_entry(&mut self, e: &ffi::fi_cq_tagged_entry, src: FiAddr, err: Option<(i32, i32, usize)>) -> TResult {
        let key = e.op_context as usize;
        let op = self.ctx_map.get(&key).copied();
        let (errno, prov_errno, olen) = err.unwrap_or((0, 0, 0));
        // Every entry must belong to an operation this endpoint posted and that is still
        // outstanding; the one exception is a target-side RMA event (remote CQ data of an
        // fi_writedata), which has no local context (fi_cq(3)). Multi-receive buffers complete
        // several times (until FI_MULTI_RECV), FI_PEEK|FI_CLAIM keeps its context for the
        // claim: both stay in `pending` until then.
        let remote_event = (ffi::FI_REMOTE_WRITE | ffi::FI_REMOTE_READ) as u64;
        if op.is_none() && !(key == 0 && e.flags & remote_event != 0) {
            let what = if self.retired.contains_key(&key) { "duplicate completion" } else { "stray completion" };
            bail!(
                "{what}: CQ entry for {} (flags {:#x}, len {}, {})",
                self.describe_ctx(key),
                e.flags,
                e.len,
                if errno == 0 { "success".to_string() } else { format!("error {}", fabric::errname(-errno)) }
            );
        }
        let mut c = Completion {
            op,
            kind: None,
            flags: e.flags,
            len: e.len,
            data: e.data,
            tag: e.tag,
            src,
            err: errno,
            prov_errno,
            olen,
            payload: Vec::new(),
            buf_off: None,
        };
        if let Some(id) = op {
            let p = self.pending.get(&id).expect("pending op for a known context");
            c.kind = Some(p.kind);
            let recv_like = matches!(p.kind, OpKind::Recv | OpKind::RmaRead | OpKind::Atomic);
            if recv_like && (errno == 0 || errno == ffi::FI_ETRUNC as i32) {
                if p.multi {
                    let base = p.bufs[0].as_ptr() as usize;
                    let end = base + p.lens[0];
                    let b = e.buf as usize;
                    if errno == 0 && e.len > 0 {
                        ensure!(
                            b >= base && b.checked_add(e.len).is_some_and(|x| x <= end),
                            "multi-recv completion buf {b:#x}+{} is outside the posted buffer {base:#x}..{end:#x}",
                            e.len
                        );
                        // SAFETY: [b, b+len) lies inside the posted buffer (checked above), which
                        // we own and the provider has finished writing for this completion.
                        c.payload = unsafe { std::slice::from_raw_parts(b as *const u8, e.len) }.to_vec();
                        c.buf_off = Some(b - base);
                    }
                } else {
                    let total: usize = p.lens.iter().sum();
                    let want = if p.kind == OpKind::Recv && e.len != LEN_UNKNOWN { e.len } else { total };
                    let mut left = want;
                    for (b, l) in p.bufs.iter().zip(&p.lens) {
                        let take = left.min(*l);
                        c.payload.extend_from_slice(&b[..take]);
                        left -= take;
                    }
                }
            }
            // A multi-receive buffer is done when the provider says so (FI_MULTI_RECV), or when
            // it was cancelled; an error for one message (FI_ETRUNC) need not release it.
            let finished = if p.multi {
                e.flags & ffi::FI_MULTI_RECV as u64 != 0 || errno == ffi::FI_ECANCELED as i32
            } else {
                true
            };
            let keep = p.keep_ctx && errno == 0;
            if finished && !keep {
                self.retire(id, Retired::Completed);
            }
        }
        self.completions.push_back(c);
        Ok(())
    }

    fn new_op(&mut self, kind: OpKind, lens: Vec<usize>, fill: Option<&[u8]>, multi: bool) -> (u64, *mut c_void) {
        let mut bufs: Vec<Box<[u8]>> = lens.iter().map(|&l| alloc(l)).collect();
        if let Some(data) = fill {
            let mut off = 0;
            for (b, &l) in bufs.iter_mut().zip(&lens) {
                b[..l].copy_from_slice(&data[off..off + l]);
                off += l;
            }
        }
        let mut ctx: Box<ffi::fi_context2> = Box::default();
        let cp: *mut c_void = (&mut *ctx as *mut ffi::fi_context2).cast();
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, Pending { ctx, bufs, lens, kind, multi, keep_ctx: false });
        self.ctx_map.insert(cp as usize, id);
        (id, cp)
    }

    fn forget_op(&mut self, id: u64) {
        self.retire(id, Retired::Refused);
    }

    /// Op `id` is finished: its buffers go, its context stays allocated and known as retired.
    fn retire(&mut self, id: u64, why: Retired) {
        if let Some(p) = self.pending.remove(&id) {
            let key = &*p.ctx as *const ffi::fi_context2 as usize;
            self.ctx_map.remove(&key);
            self.retired.insert(key, (id, p.kind, why));
            self.retired_ctx.push(p.ctx);
        }
    }

    /// Nothing may be left once a scenario is done with this endpoint: no completion that was
    /// read but never taken, and a final read of every CQ returns -FI_EAGAIN.
    pub fn check_drained(&mut self) -> TResult {
        if !self.completions.is_empty() {
            let n = self.completions.len();
            let first: Vec<String> = self
                .completions
                .iter()
                .take(4)
                .map(|c| {
                    let who = match (c.op, c.kind) {
                        (Some(id), Some(k)) => format!("op {id} ({k:?})"),
                        (Some(id), None) => format!("op {id}"),
                        _ => "no context".into(),
                    };
                    let how =
                        if c.err == 0 { "success".to_string() } else { format!("error {}", fabric::errname(-c.err)) };
                    format!("{who}: flags {:#x} len {} {how}", c.flags, c.len)
                })
                .collect();
            bail!(
                "{n} completion(s) were read but never taken by the scenario (first: {}{})",
                first.join("; "),
                if n > first.len() { "; ..." } else { "" }
            );
        }
        for (which, cq) in [("CQ", self.tx_cq.as_ref()), ("receive CQ", self.rx_cq.as_ref())] {
            let Some(cq) = cq else { continue };
            let mut got = Vec::new();
            let (ret, _) = read_cq(cq, self.cfg.cq_format, self.source, &mut got);
            if ret == EAGAIN as isize {
                continue;
            }
            if ret > 0 {
                let e = &got[0].0;
                bail!(
                    "final fi_cq_read of the {which} returned {ret} entr{} (expected -FI_EAGAIN); the first for {} \
                     (flags {:#x}, len {})",
                    if ret == 1 { "y" } else { "ies" },
                    self.describe_ctx(e.op_context as usize),
                    e.flags,
                    e.len
                );
            }
            if ret == EAVAIL as isize {
                let mut e = ffi::fi_cq_err_entry::default();
                let r = cq.readerr(&mut e, 0);
                bail!(
                    "final fi_cq_read of the {which} returned -FI_EAVAIL (expected -FI_EAGAIN): fi_cq_readerr gave {} \
                     for {} (flags {:#x})",
                    if r == 1 { fabric::errname(-e.err) } else { fabric::errname(r as i32) },
                    self.describe_ctx(e.op_context as usize),
                    e.flags
                );
            }
            bail!("final fi_cq_read of the {which} returned {} (expected -FI_EAGAIN)", fabric::errname(ret as i32));
        }
        Ok(())
    }

    fn iovs(&mut self, id: u64) -> Vec<ffi::iovec> {
        let p = self.pending.get_mut(&id).expect("pending");
        p.bufs
            .iter_mut()
            .zip(&p.lens)
            .map(|(b, &l)| ffi::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: l })
            .collect()
    }

    /// Call `op` until it does not return -FI_EAGAIN (progressing meanwhile) or the deadline.
    fn retry(&mut self, what: &str, op: impl FnMut(&Ep) -> isize) -> TResult<isize> {
        self.retry_hook(what, op, &mut || Ok(()))
    }

    /// `retry` that also runs `hook` (e.g. progress of another endpoint in this process).
    fn retry_hook(
        &mut self,
        what: &str,
        mut op: impl FnMut(&Ep) -> isize,
        hook: &mut dyn FnMut() -> TResult,
    ) -> TResult<isize> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let ret = op(self.ep());
            if ret != EAGAIN as isize {
                return Ok(ret);
            }
            self.progress()?;
            hook()?;
            if Instant::now() > deadline {
                bail!("{what}: -FI_EAGAIN until timeout ({:?})", self.timeout);
            }
            std::thread::yield_now();
        }
    }

    /// Post a send once (retrying only -FI_EAGAIN); returns the op id or the provider's code.
    pub fn try_send(&mut self, payload: &[u8], dest: FiAddr, tx: &Tx) -> TResult<Result<u64, i32>> {
        self.try_send_with(payload, dest, tx, &mut || Ok(()))
    }

    /// `try_send` that runs `hook` while retrying -FI_EAGAIN.
    pub fn try_send_with(
        &mut self,
        payload: &[u8],
        dest: FiAddr,
        tx: &Tx,
        hook: &mut dyn FnMut() -> TResult,
    ) -> TResult<Result<u64, i32>> {
        let lens = split_lens(payload.len(), tx.iov);
        let (id, ctx) = self.new_op(OpKind::Send, lens, Some(payload), false);
        let iov = self.iovs(id);
        let mut desc = vec![std::ptr::null_mut::<c_void>(); iov.len()];
        let (buf, len) = (iov[0].iov_base as *const u8, payload.len());
        let op = |ep: &Ep| {
            // SAFETY: the buffers and the context belong to pending op `id`, which the node keeps
            // until its completion is read or the endpoint is closed.
            unsafe {
                if let Some(flags) = tx.flags {
                    let fl = flags | if tx.data.is_some() { ffi::FI_REMOTE_CQ_DATA as u64 } else { 0 };
                    if let Some(tag) = tx.tag {
                        let m = ffi::fi_msg_tagged {
                            msg_iov: iov.as_ptr(),
                            desc: desc.as_mut_ptr(),
                            iov_count: iov.len(),
                            addr: dest,
                            tag,
                            ignore: 0,
                            context: ctx,
                            data: tx.data.unwrap_or(0),
                        };
                        ep.tsendmsg(&m, fl)
                    } else {
                        let m = ffi::fi_msg {
                            msg_iov: iov.as_ptr(),
                            desc: desc.as_mut_ptr(),
                            iov_count: iov.len(),
                            addr: dest,
                            context: ctx,
                            data: tx.data.unwrap_or(0),
                        };
                        ep.sendmsg(&m, fl)
                    }
                } else if iov.len() > 1 {
                    match tx.tag {
                        Some(tag) => ep.tsendv(&iov, desc.as_mut_ptr(), dest, tag, ctx),
                        None => ep.sendv(&iov, desc.as_mut_ptr(), dest, ctx),
                    }
                } else {
                    match (tx.tag, tx.data) {
                        (Some(tag), Some(d)) => ep.tsenddata(buf, len, std::ptr::null_mut(), d, dest, tag, ctx),
                        (Some(tag), None) => ep.tsend(buf, len, std::ptr::null_mut(), dest, tag, ctx),
                        (None, Some(d)) => ep.senddata(buf, len, std::ptr::null_mut(), d, dest, ctx),
                        (None, None) => ep.send(buf, len, std::ptr::null_mut(), dest, ctx),
                    }
                }
            }
        };
        let ret = self.retry_hook("send", op, hook)?;
        if ret != 0 {
            self.forget_op(id);
            return Ok(Err(ret as i32));
        }
        Ok(Ok(id))
    }

    /// Post a send; any error but -FI_EAGAIN (retried) fails the scenario.
    pub fn send(&mut self, payload: &[u8], dest: FiAddr, tx: &Tx) -> TResult<u64> {
        self.send_with(payload, dest, tx, &mut || Ok(()))
    }

    /// `send` that runs `hook` while retrying -FI_EAGAIN.
    pub fn send_with(
        &mut self,
        payload: &[u8],
        dest: FiAddr,
        tx: &Tx,
        hook: &mut dyn FnMut() -> TResult,
    ) -> TResult<u64> {
        match self.try_send_with(payload, dest, tx, hook)? {
            Ok(id) => Ok(id),
            Err(code) => Err(fi_fail(if tx.tag.is_some() { "fi_tsend" } else { "fi_send" }, code as i64)),
        }
    }

    /// Post a receive once (retrying only -FI_EAGAIN).
    pub fn try_recv(&mut self, len: usize, src: FiAddr, rx: &Rx) -> TResult<Result<u64, i32>> {
        let lens = split_lens(len, if rx.multi { 1 } else { rx.iov });
        let (id, ctx) = self.new_op(OpKind::Recv, lens, None, rx.multi);
        let iov = self.iovs(id);
        let mut desc = vec![std::ptr::null_mut::<c_void>(); iov.len()];
        let buf = iov[0].iov_base as *mut u8;
        let ret = self.retry("recv", |ep| {
            // SAFETY: the buffers and context belong to pending op `id`, kept until completion
            // or endpoint close.
            unsafe {
                if rx.flags.is_some() || rx.multi {
                    let fl = rx.flags.unwrap_or(0) | if rx.multi { ffi::FI_MULTI_RECV as u64 } else { 0 };
                    if let Some((tag, ignore)) = rx.tag {
                        let m = ffi::fi_msg_tagged {
                            msg_iov: iov.as_ptr(),
                            desc: desc.as_mut_ptr(),
                            iov_count: iov.len(),
                            addr: src,
                            tag,
                            ignore,
                            context: ctx,
                            data: 0,
                        };
                        ep.trecvmsg(&m, fl)
                    } else {
                        let m = ffi::fi_msg {
                            msg_iov: iov.as_ptr(),
                            desc: desc.as_mut_ptr(),
                            iov_count: iov.len(),
                            addr: src,
                            context: ctx,
                            data: 0,
                        };
                        ep.recvmsg(&m, fl)
                    }
                } else if iov.len() > 1 {
                    match rx.tag {
                        Some((tag, ignore)) => ep.trecvv(&iov, desc.as_mut_ptr(), src, tag, ignore, ctx),
                        None => ep.recvv(&iov, desc.as_mut_ptr(), src, ctx),
                    }
                } else {
                    match rx.tag {
                        Some((tag, ignore)) => ep.trecv(buf, len, std::ptr::null_mut(), src, tag, ignore, ctx),
                        None => ep.recv(buf, len, std::ptr::null_mut(), src, ctx),
                    }
                }
            }
        })?;
        if ret != 0 {
            self.forget_op(id);
            return Ok(Err(ret as i32));
        }
        Ok(Ok(id))
    }

    pub fn recv(&mut self, len: usize, src: FiAddr, rx: &Rx) -> TResult<u64> {
        match self.try_recv(len, src, rx)? {
            Ok(id) => Ok(id),
            Err(code) => Err(fi_fail(if rx.tag.is_some() { "fi_trecv" } else { "fi_recv" }, code as i64)),
        }
    }

    /// `fi_trecvmsg(FI_PEEK | extra)` with no buffer; with FI_CLAIM in `extra` the context is kept
    /// for [`claim`](Self::claim).
    pub fn peek(&mut self, tag: u64, ignore: u64, src: FiAddr, extra: u64) -> TResult<u64> {
        let (id, ctx) = self.new_op(OpKind::Peek, vec![], None, false);
        if extra & ffi::FI_CLAIM != 0 {
            self.pending.get_mut(&id).expect("pending").keep_ctx = true;
        }
        let ret = self.retry("fi_trecvmsg(FI_PEEK)", |ep| {
            let m = ffi::fi_msg_tagged {
                msg_iov: std::ptr::null(),
                desc: std::ptr::null_mut(),
                iov_count: 0,
                addr: src,
                tag,
                ignore,
                context: ctx,
                data: 0,
            };
            // SAFETY: no buffer; the context belongs to pending op `id`.
            unsafe { ep.trecvmsg(&m, ffi::FI_PEEK as u64 | extra) }
        })?;
        if ret != 0 {
            self.forget_op(id);
            return Err(fi_fail("fi_trecvmsg(FI_PEEK)", ret as i64));
        }
        Ok(id)
    }

    /// Claim (or with `discard`, drop) the message a successful FI_PEEK|FI_CLAIM found, reusing
    /// its context as the API requires.
    pub fn claim(&mut self, peek_op: u64, len: usize, tag: u64, discard: bool) -> TResult<()> {
        let p = self.pending.get_mut(&peek_op).ok_or_else(|| TestErr::Fail("claim of an unknown peek".into()))?;
        p.kind = OpKind::Recv;
        p.keep_ctx = false;
        p.bufs = if discard { vec![] } else { vec![alloc(len)] };
        p.lens = if discard { vec![] } else { vec![len] };
        let ctx: *mut c_void = (&mut *p.ctx as *mut ffi::fi_context2).cast();
        let iov = self.iovs(peek_op);
        let flags = ffi::FI_CLAIM | if discard { ffi::FI_DISCARD } else { 0 };
        let ret = self.retry("fi_trecvmsg(FI_CLAIM)", |ep| {
            let m = ffi::fi_msg_tagged {
                msg_iov: if iov.is_empty() { std::ptr::null() } else { iov.as_ptr() },
                desc: std::ptr::null_mut(),
                iov_count: iov.len(),
                addr: FI_ADDR_UNSPEC,
                tag,
                ignore: 0,
                context: ctx,
                data: 0,
            };
            // SAFETY: buffer and context belong to pending op `peek_op`.
            unsafe { ep.trecvmsg(&m, flags) }
        })?;
        if ret != 0 {
            self.forget_op(peek_op);
            return Err(fi_fail("fi_trecvmsg(FI_CLAIM)", ret as i64));
        }
        Ok(())
    }

    /// `fi_inject`/`fi_tinject`/`fi_injectdata`/`fi_tinjectdata` once (retrying -FI_EAGAIN).
    pub fn try_inject(&mut self, payload: &[u8], dest: FiAddr, tag: Option<u64>, data: Option<u64>) -> TResult<isize> {
        self.try_inject_with(payload, dest, tag, data, &mut || Ok(()))
    }

    /// `try_inject` that runs `hook` while retrying -FI_EAGAIN.
    pub fn try_inject_with(
        &mut self,
        payload: &[u8],
        dest: FiAddr,
        tag: Option<u64>,
        data: Option<u64>,
        hook: &mut dyn FnMut() -> TResult,
    ) -> TResult<isize> {
        let op = |ep: &Ep| match (tag, data) {
            (Some(t), Some(d)) => ep.tinjectdata(payload, d, dest, t),
            (Some(t), None) => ep.tinject(payload, dest, t),
            (None, Some(d)) => ep.injectdata(payload, d, dest),
            (None, None) => ep.inject(payload, dest),
        };
        self.retry_hook("inject", op, hook)
    }

    pub fn inject(&mut self, payload: &[u8], dest: FiAddr, tag: Option<u64>, data: Option<u64>) -> TResult {
        let r = self.try_inject(payload, dest, tag, data)?;
        fi_ok("fi_inject", r as i64)
    }

    /// `fi_cancel` of a pending op.
    pub fn cancel(&mut self, id: u64) -> TResult<isize> {
        let p = self.pending.get_mut(&id).ok_or_else(|| TestErr::Fail("cancel of an unknown op".into()))?;
        let ctx: *mut c_void = (&mut *p.ctx as *mut ffi::fi_context2).cast();
        Ok(self.ep().cancel(ctx))
    }

    /// The next completion of op `id` (other completions stay queued).
    pub fn wait_op(&mut self, id: u64) -> TResult<Completion> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(pos) = self.completions.iter().position(|c| c.op == Some(id)) {
                return Ok(self.completions.remove(pos).expect("position is valid"));
            }
            if self.progress()? == 0 {
                if Instant::now() > deadline {
                    let kind = self.pending.get(&id).map(|p| p.kind);
                    bail!("timeout ({:?}) waiting for the completion of op {id} ({kind:?})", self.timeout);
                }
                std::thread::yield_now();
            }
        }
    }

    /// Like `wait_op`, failing on an error completion.
    pub fn wait_ok(&mut self, id: u64, what: &str) -> TResult<Completion> {
        let c = self.wait_op(id)?;
        c.ok(what)?;
        Ok(c)
    }

    /// A completion of op `id` if one has arrived (after one progress pass).
    pub fn poll_op(&mut self, id: u64) -> TResult<Option<Completion>> {
        self.progress()?;
        Ok(self.completions.iter().position(|c| c.op == Some(id)).and_then(|p| self.completions.remove(p)))
    }

    /// Completions read so far and not yet taken.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        self.completions.drain(..).collect()
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

    /// The context pointer the provider was given for op `id`.
    pub fn ctx_ptr(&mut self, id: u64) -> Option<*mut c_void> {
        self.pending.get_mut(&id).map(|p| (&mut *p.ctx as *mut ffi::fi_context2).cast())
    }

    /// The current bytes of a pending receive's buffer (before its completion was read).
    pub fn peek_buf(&self, id: u64) -> Option<Vec<u8>> {
        self.pending.get(&id).map(|p| p.bufs.iter().zip(&p.lens).flat_map(|(b, &l)| b[..l].to_vec()).collect())
    }

    /// Overwrite the buffers of pending op `id` with `byte`: the application reusing a send
    /// buffer that the provider promised to be done with (FI_INJECT). False if `id` is not pending.
    pub fn scribble(&mut self, id: u64, byte: u8) -> bool {
        let Some(p) = self.pending.get_mut(&id) else { return false };
        p.bufs.iter_mut().for_each(|b| b.fill(byte));
        true
    }

    /// Is op `id` still outstanding?
    pub fn is_pending(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }

    /// A closure for out-of-band waits that keeps this node progressing.
    pub fn progressor(&mut self) -> impl FnMut() -> TResult + '_ {
        move || self.progress().map(|_| ())
    }

    // ---- memory registration and RMA ----

    /// Register a node-owned target buffer filled with `init`; returns (index, key, address to
    /// use in RMA: the virtual address under FI_MR_VIRT_ADDR, 0 otherwise).
    pub fn reg_target(&mut self, init: &[u8], access: u64, requested_key: u64) -> TResult<(usize, u64, u64)> {
        let mut b = alloc(init.len());
        b[..init.len()].copy_from_slice(init);
        let mr_mode = self.info.get().domain_attr().map_or(0, |d| d.mr_mode);
        // SAFETY: the buffer is kept in self.targets (heap memory that does not move) until the
        // node is dropped, after the MR is closed.
        let mr =
            unsafe { Mr::reg(self.domain(), b.as_ptr(), init.len(), access, 0, requested_key, 0) }.ctx("fi_mr_reg")?;
        if mr_mode & ffi::FI_MR_ENDPOINT as i32 != 0 {
            fi_ok("fi_mr_bind(ep)", mr.bind(self.ep().fid(), 0))?;
            fi_ok("fi_mr_enable", mr.enable())?;
        }
        let addr = if mr_mode & ffi::FI_MR_VIRT_ADDR as i32 != 0 { b.as_ptr() as u64 } else { 0 };
        let key = mr.key();
        self.mrs.push(mr);
        self.targets.push(b);
        Ok((self.targets.len() - 1, key, addr))
    }

    pub fn target(&self, idx: usize) -> &[u8] {
        &self.targets[idx]
    }

    /// `fi_write` from a node-owned copy of `payload`.
    pub fn rma_write(&mut self, payload: &[u8], dest: FiAddr, addr: u64, key: u64, data: Option<u64>) -> TResult<u64> {
        let (id, ctx) = self.new_op(OpKind::RmaWrite, vec![payload.len()], Some(payload), false);
        let buf = self.iovs(id)[0].iov_base as *const u8;
        let len = payload.len();
        let ret = self.retry("fi_write", |ep| {
            // SAFETY: buffer and context belong to pending op `id`.
            unsafe {
                match data {
                    Some(d) => ep.writedata(buf, len, std::ptr::null_mut(), d, dest, addr, key, ctx),
                    None => ep.write(buf, len, std::ptr::null_mut(), dest, addr, key, ctx),
                }
            }
        })?;
        if ret != 0 {
            self.forget_op(id);
            return Err(fi_fail("fi_write", ret as i64));
        }
        Ok(id)
    }

    /// `fi_read` into a node-owned buffer; the completion's payload has the data.
    pub fn rma_read(&mut self, len: usize, src: FiAddr, addr: u64, key: u64) -> TResult<u64> {
        let (id, ctx) = self.new_op(OpKind::RmaRead, vec![len], None, false);
        let buf = self.iovs(id)[0].iov_base as *mut u8;
        let ret = self.retry("fi_read", |ep| {
            // SAFETY: buffer and context belong to pending op `id`.
            unsafe { ep.read(buf, len, std::ptr::null_mut(), src, addr, key, ctx) }
        })?;
        if ret != 0 {
            self.forget_op(id);
            return Err(fi_fail("fi_read", ret as i64));
        }
        Ok(id)
    }

    /// One-element u64 atomic: `fi_atomic` (fetch = None) or `fi_fetch_atomic`; the completion's
    /// payload holds the fetched value.
    pub fn atomic_u64(
        &mut self,
        op: ffi::fi_op,
        operand: u64,
        fetch: bool,
        dest: FiAddr,
        addr: u64,
        key: u64,
    ) -> TResult<u64> {
        let operand_bytes = operand.to_ne_bytes();
        // bufs[0] = operand, bufs[1] = result
        let (id, ctx) = self.new_op(OpKind::Atomic, vec![8, 8], Some(&[operand_bytes, [0u8; 8]].concat()), false);
        let iov = self.iovs(id);
        let (b, r) = (iov[0].iov_base as *const u8, iov[1].iov_base as *mut u8);
        let ret = self.retry("fi_atomic", |ep| {
            // SAFETY: operand/result buffers and context belong to pending op `id`.
            unsafe {
                if fetch {
                    ep.fetch_atomic(
                        b,
                        1,
                        std::ptr::null_mut(),
                        r,
                        std::ptr::null_mut(),
                        dest,
                        addr,
                        key,
                        ffi::FI_UINT64,
                        op,
                        ctx,
                    )
                } else {
                    ep.atomic(b, 1, std::ptr::null_mut(), dest, addr, key, ffi::FI_UINT64, op, ctx)
                }
            }
        })?;
        if ret != 0 {
            self.forget_op(id);
            return Err(fi_fail(if fetch { "fi_fetch_atomic" } else { "fi_atomic" }, ret as i64));
        }
        Ok(id)
    }

    /// `fi_compare_atomic` on one u64; the payload of the completion is operand ++ result.
    pub fn cswap_u64(&mut self, compare: u64, swap: u64, dest: FiAddr, addr: u64, key: u64) -> TResult<u64> {
        let init = [swap.to_ne_bytes(), compare.to_ne_bytes(), [0u8; 8]].concat();
        let (id, ctx) = self.new_op(OpKind::Atomic, vec![8, 8, 8], Some(&init), false);
        let iov = self.iovs(id);
        let (b, c, r) = (iov[0].iov_base as *const u8, iov[1].iov_base as *const u8, iov[2].iov_base as *mut u8);
        let ret = self.retry("fi_compare_atomic", |ep| {
            // SAFETY: buffers and context belong to pending op `id`.
            unsafe { ep.compare_atomic(b, 1, c, r, dest, addr, key, ffi::FI_UINT64, ffi::FI_CSWAP, ctx) }
        })?;
        if ret != 0 {
            self.forget_op(id);
            return Err(fi_fail("fi_compare_atomic", ret as i64));
        }
        Ok(id)
    }

    /// Close the endpoint now (the rest closes on drop); returns fi_close's code.
    pub fn close_ep(&mut self) -> i32 {
        match self.ep.as_mut() {
            Some(ep) => {
                let r = ep.try_close();
                if r == 0 {
                    self.ep = None;
                }
                r
            }
            None => 0,
        }
    }
}

/// Failures found when a `Node` was dropped (see [`take_drop_failures`]).
static DROP_FAILURES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// What `Node::drop` found left over (completions nobody took, entries still in a CQ), for
/// scenarios that end without `finish`: the rank fails with it if the scenario passed.
pub fn take_drop_failures() -> Vec<String> {
    DROP_FAILURES.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default()
}

impl Drop for Node {
    fn drop(&mut self) {
        if !std::thread::panicking() && !FAILED.with(|f| f.get()) {
            if let Err(TestErr::Fail(m)) = self.check_drained() {
                if let Ok(mut v) = DROP_FAILURES.lock() {
                    v.push(format!("endpoint closed with leftovers: {m}"));
                }
            }
        }
        // Close the endpoint first: only then may the buffers it was given be freed.
        if self.close_ep() != 0 {
            std::mem::forget(std::mem::take(&mut self.pending));
            std::mem::forget(std::mem::take(&mut self.retired_ctx));
            std::mem::forget(std::mem::take(&mut self.targets));
        }
        for mr in self.mrs.drain(..) {
            let _ = mr.close();
        }
        // The remaining fields drop in declaration order: AV, CQs, counters, domain, fabric.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_distinct() {
        assert_eq!(pattern(1, 100), pattern(1, 100));
        assert_ne!(pattern(1, 100), pattern(2, 100));
        assert_ne!(pattern(1, 100)[..50], pattern(1, 50)[..]);
        assert!(pattern(3, 0).is_empty());
        assert!(check_pattern("t", 5, &pattern(5, 4097), 4097).is_ok());
        let mut bad = pattern(5, 4097);
        bad[4000] ^= 1;
        match check_pattern("t", 5, &bad, 4097) {
            Err(TestErr::Fail(m)) => assert!(m.contains("offset 4000"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(check_pattern("t", 5, &pattern(5, 10), 11).is_err());
    }

    #[test]
    fn split_lens_covers_total() {
        for (t, p) in [(0, 1), (10, 3), (1 << 20, 3), (5, 8)] {
            let v = split_lens(t, p);
            assert_eq!(v.len(), p);
            assert_eq!(v.iter().sum::<usize>(), t);
        }
    }
}
