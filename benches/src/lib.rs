//! Cross-process ping-pong harness for the engine benchmarks.
//!
//! A [`Session`] is two processes: this one (the "parent") and an echo child, which is this same
//! executable started again with [`CHILD_ARG`] (every binary that uses a `Session` calls
//! [`run_child_if_requested`] first thing in `main`). Each process owns an `smr_core` endpoint
//! with a unique name; the parent sends a message, the child answers with a message of the same
//! size, and one-way latency is the round-trip time divided by two.
//!
//! The two processes also share a small control file in /dev/shm. It carries the mode the
//! parent wants the child in (idle, echo, cache-line ping-pong, quit), the child's answer, and a
//! lone `AtomicU64` on its own 128-byte line for the bare cache-line handoff: the parent stores
//! an odd `i`, the child waits for it and stores `i + 1`. That handoff is the floor any
//! shared-memory message transport between the same two cores pays.
//!
//! Both processes are pinned to different CPUs when at least two are allowed, and both
//! busy-poll: no sleeps, no futex waits, so the figures are the transport's, not the scheduler's.

pub mod fi;

use smr_core::endpoint::{Disposition, Endpoint, Handler, Incoming, Params, PeerId, SendOpts, SendStatus};
use smr_core::iov::LocalIov;
use smr_core::pod::CachePadded;
use smr_core::shm::{Mapping, SharedSafe};
use smr_core::{cmd::MsgHeader, Error as EngineError};
use std::alloc::Layout;
use std::process::{Child, Command, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// First argument that turns an executable into the echo child of a [`Session`].
pub const CHILD_ARG: &str = "--rshm-bench-echo-child";

/// Errors of the harness: plain text, the benchmarks only print them.
pub type Result<T> = std::result::Result<T, String>;

/// Messages larger than this go through CMA or SAR; smaller ones are inline or inject.
pub const INJECT_MAX: usize = smr_core::layout::INJECT_SIZE as usize;
/// Messages up to this size travel inside the command entry.
pub const INLINE_MAX: usize = smr_core::cmd::INLINE_MAX;

/// How long any wait on the other process may take before the harness gives up.
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// Busy-poll iterations between two checks of the clock and of the child's health.
const CHECK_EVERY: u64 = 1 << 16; // a power of two: checked with a mask

const MODE_IDLE: u64 = 1;
const MODE_ECHO: u64 = 2;
const MODE_LINE: u64 = 3;
const MODE_QUIT: u64 = 4;
const MODE_CMA: u64 = 5;
/// Child state: it failed; details are on its stderr.
const STATE_FAILED: u64 = 99;
/// Written into the line word to make the child leave the line loop (odd, never a ping).
const LINE_STOP: u64 = u64::MAX;

/// Whether the child in `mode` takes turns on the line word (`child_turns`), which it leaves
/// only at `LINE_STOP`.
fn takes_turns(mode: u64) -> bool {
    matches!(mode, MODE_LINE | MODE_CMA)
}

/// The control file's contents. Every field sits on its own 128-byte block.
#[repr(C)]
struct Control {
    /// Parent -> child: which mode to be in.
    mode: CachePadded<AtomicU64>,
    /// Child -> parent: the mode it is in now (0 until its endpoint exists).
    state: CachePadded<AtomicU64>,
    /// The bare cache-line ping-pong word (also the turn of the bare CMA ping-pong).
    line: CachePadded<AtomicU64>,
    /// The bare CMA ping-pong: how many bytes each side reads, and where each side's send
    /// buffer lies in its own address space.
    cma_len: CachePadded<AtomicU64>,
    parent_buf: CachePadded<AtomicU64>,
    child_buf: CachePadded<AtomicU64>,
}

// SAFETY: `Control` consists only of atomics (padded), so every bit pattern is valid and all
// mutation goes through the atomics.
unsafe impl SharedSafe for Control {}

const CONTROL_LEN: usize = 4096;

fn control(map: &Mapping) -> &Control {
    map.at(0).expect("the control file is one page and page-aligned")
}

// ---------------------------------------------------------------------------------------------
// CPU affinity

/// The CPUs this process could run on when it first asked (before any pinning of ours).
pub fn allowed_cpus() -> &'static [usize] {
    static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
    CPUS.get_or_init(|| {
        // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, writable cpu_set_t of the size we pass.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below CPU_SETSIZE, so the bit test stays inside `set`.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect()
    })
}

/// Pin the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("cpu {cpu} out of range"));
    }
    // SAFETY: `cpu` is below CPU_SETSIZE (checked), so the bit is inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size we pass; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(format!("sched_setaffinity(cpu {cpu}): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Let the calling thread run on every CPU in `cpus` again.
fn unpin(cpus: &[usize]) {
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: `cpu` is below CPU_SETSIZE (filtered), so the bit is inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size we pass; pid 0 is the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// The CPU model, from /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string())
}

// ---------------------------------------------------------------------------------------------
// Buffers

/// A page-aligned, pre-faulted heap buffer whose memory is lent to the engine by raw pointer.
pub struct Buf {
    ptr: NonNull<u8>,
    len: usize,
}

impl Buf {
    /// `len` bytes (at least one), filled with a pattern derived from `seed`.
    pub fn new(len: usize, seed: u8) -> Buf {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("buffer layout");
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(ptr) else { std::alloc::handle_alloc_error(layout) };
        let buf = Buf { ptr, len: len.max(1) };
        for i in 0..buf.len {
            // SAFETY: `i < len`: inside our own allocation; writing also faults every page in.
            unsafe { ptr.as_ptr().add(i).write(pattern_byte(i, seed)) };
        }
        buf
    }

    /// The first `len` bytes, lent to the engine.
    ///
    /// # Safety
    /// The range must not be read or written through any other path while the engine may use
    /// it (until the send or receive that takes it has completed).
    pub unsafe fn lend(&self, len: usize) -> LocalIov {
        assert!(len <= self.len, "lending more than the buffer holds");
        // SAFETY: `ptr..ptr+len` is inside our live allocation; the caller keeps it untouched
        // for as long as the engine holds it, and `self` outlives every operation (the session
        // drains its endpoint before the buffers are freed).
        unsafe { LocalIov::from_raw(&[(self.ptr.as_ptr(), len)]) }
    }

    /// The buffer's bytes (only while the engine holds no lent part of it).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is our initialised allocation; the caller guarantees that the
        // engine is not writing to it meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, 4096).expect("buffer layout");
        // SAFETY: allocated in `new` with this very layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

fn pattern_byte(i: usize, seed: u8) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 8) as u8)
}

/// Seed of the bytes the echo child sends (the parent checks them once per size).
const CHILD_SEED: u8 = 0x5c;
const PARENT_SEED: u8 = 0xa3;

// ---------------------------------------------------------------------------------------------
// The handler both sides use: deliver into one preallocated buffer, count what arrives.

struct Pong {
    recv: Buf,
    received: u64,
    last_len: usize,
    sends_done: u64,
    error: Option<String>,
    /// Child only: lengths of messages still to answer.
    to_echo: Option<usize>,
}

impl Pong {
    fn new(max: usize, seed: u8) -> Pong {
        Pong { recv: Buf::new(max, seed), received: 0, last_len: 0, sends_done: 0, error: None, to_echo: None }
    }

    /// Copy a payload that is here in full into the receive buffer.
    fn take(&mut self, msg: &Incoming, payload: &[u8]) -> Disposition {
        let len = payload.len();
        if len as u64 != msg.hdr.len || len > self.recv.len {
            self.error = Some(format!("a {len}-byte payload for a {}-byte message", msg.hdr.len));
            return Disposition::Discard;
        }
        // SAFETY: `len` fits the receive buffer, which the engine holds only between
        // `on_message` and `on_recv_done`, and ping-pong has one message in flight at a time,
        // so nothing else is writing it now.
        unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), self.recv.ptr.as_ptr(), len) };
        self.arrived(len);
        Disposition::Taken { answer_later: false }
    }

    fn arrived(&mut self, len: usize) {
        self.received += 1;
        self.last_len = len;
        if self.to_echo.replace(len).is_some() {
            self.error.get_or_insert_with(|| "two messages arrived before one was answered".to_string());
        }
    }
}

impl Handler for Pong {
    fn on_message(&mut self, msg: &Incoming, _src_name: &str) -> Disposition {
        let len = msg.hdr.len as usize;
        if len > self.recv.len {
            self.error = Some(format!("{len}-byte message exceeds the {}-byte receive buffer", self.recv.len));
            return Disposition::Discard;
        }
        // SAFETY: the buffer is only touched by the engine until `on_recv_done` hands it back;
        // ping-pong keeps at most one receive outstanding.
        let dest = unsafe { self.recv.lend(len) };
        Disposition::Deliver { dest, ctx: len as u64 }
    }

    /// A message whose payload is here in full is copied into the receive buffer at once, as
    /// the provider does for a matched receive: the engine's express arrival.
    fn on_inline(&mut self, msg: &Incoming, payload: &[u8]) -> Option<Disposition> {
        Some(self.take(msg, payload))
    }

    fn on_payload(&mut self, msg: &Incoming, _src_name: &str, payload: &[u8]) -> Disposition {
        self.take(msg, payload)
    }

    fn on_recv_done(&mut self, ctx: u64, result: smr_core::Result<usize>, _dest: LocalIov) {
        match result {
            Ok(n) if n as u64 == ctx => {}
            other => self.error = Some(format!("receive of {ctx} bytes ended with {other:?}")),
        }
        self.arrived(ctx as usize);
    }

    fn on_send_done(&mut self, _cookie: u64, result: smr_core::Result<()>) {
        self.sends_done += 1;
        if let Err(e) = result {
            self.error = Some(format!("send failed: {e}"));
        }
    }
}

fn header(len: usize, tag: u64) -> MsgHeader {
    MsgHeader { app: 0, tag, data: 0, aux: 0, len: len as u64 }
}

/// Send `len` bytes of `buf` once, as the provider does: up to the inject size from a buffer
/// that is copied before this returns (`send_bytes`, whose express path a plain send takes),
/// larger ones lent to the engine.
fn send_once(ep: &mut Endpoint, peer: PeerId, buf: &Buf, len: usize, tag: u64) -> smr_core::Result<SendStatus> {
    if len <= INJECT_MAX {
        return ep.send_bytes(peer, header(len, tag), &buf.bytes()[..len], SendOpts::default());
    }
    // SAFETY: send buffers are never written after creation, so lending them read-only to any
    // number of outstanding sends is fine; they outlive the endpoint's operations.
    let iov = unsafe { buf.lend(len) };
    ep.send(peer, header(len, tag), iov, SendOpts::default())
}

/// Send `len` bytes of `buf`, running progress while the peer's queues are full.
/// The clock is read from the first refusal on, not per send: a clock read (a vDSO call, 28 ns
/// here) on every send was about 15% of the 8 B one-way the ping-pong reports.
fn send_retrying(ep: &mut Endpoint, h: &mut Pong, peer: PeerId, buf: &Buf, len: usize, tag: u64) -> Result<()> {
    let mut started: Option<Instant> = None;
    let mut spins = 0u64;
    loop {
        match send_once(ep, peer, buf, len, tag) {
            Ok(_) => return Ok(()),
            Err(EngineError::Again) => {
                let started = *started.get_or_insert_with(Instant::now);
                ep.progress(h);
                spins += 1;
                if spins & (CHECK_EVERY - 1) == 0 && started.elapsed() > WAIT_LIMIT {
                    return Err(format!("send of {len} bytes still refused after {WAIT_LIMIT:?}"));
                }
            }
            Err(e) => return Err(format!("send of {len} bytes: {e}")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The echo child

/// If this process was started as the echo child of a [`Session`], run it and exit; otherwise
/// return at once. Call it first thing in `main` of every binary that starts sessions.
pub fn run_child_if_requested() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(CHILD_ARG) {
        return;
    }
    let code = match child_main(&args[2..]) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rshm bench echo child: {e}");
            1
        }
    };
    std::process::exit(code);
}

struct ChildArgs {
    control: String,
    parent_ep: String,
    child_ep: String,
    sar: bool,
    max_size: usize,
    cpu: Option<usize>,
    parent_pid: u32,
}

fn parse_child_args(a: &[String]) -> Result<ChildArgs> {
    let [control, parent_ep, child_ep, sar, max_size, cpu, parent_pid] = a else {
        return Err(format!("expected 7 arguments after {CHILD_ARG}, got {}", a.len()));
    };
    let num = |s: &String| s.parse::<i64>().map_err(|e| format!("bad number {s:?}: {e}"));
    Ok(ChildArgs {
        control: control.clone(),
        parent_ep: parent_ep.clone(),
        child_ep: child_ep.clone(),
        sar: sar == "sar",
        max_size: num(max_size)? as usize,
        cpu: usize::try_from(num(cpu)?).ok(),
        parent_pid: num(parent_pid)? as u32,
    })
}

fn child_main(args: &[String]) -> Result<()> {
    let a = parse_child_args(args)?;
    // Die with the parent, even if it is killed: the child busy-polls and would spin forever.
    // SAFETY: plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    // SAFETY: getppid cannot fail.
    if unsafe { libc::getppid() } as u32 != a.parent_pid {
        return Err("the parent exited before the child started".to_string());
    }
    if let Some(cpu) = a.cpu {
        pin_to_cpu(cpu)?;
    }
    let map = Mapping::open(&a.control).map_err(|e| format!("open control file {}: {e}", a.control))?;
    let ctl = control(&map);
    let result = child_serve(&a, ctl);
    if result.is_err() {
        ctl.state.store(STATE_FAILED, Ordering::Release);
    }
    result
}

fn child_serve(a: &ChildArgs, ctl: &Control) -> Result<()> {
    let params = engine_params(!a.sar);
    let mut ep = Endpoint::create(&a.child_ep, params).map_err(|e| format!("create endpoint {}: {e}", a.child_ep))?;
    let parent = ep.add_peer(&a.parent_ep).map_err(|e| format!("add peer {}: {e}", a.parent_ep))?;
    let send = Buf::new(a.max_size, CHILD_SEED);
    ctl.child_buf.store(send.ptr.as_ptr() as u64, Ordering::Release);
    let mut h = Pong::new(a.max_size, 0);
    let mut state = 0;
    let mut tag = 0u64;
    loop {
        let mode = ctl.mode.load(Ordering::Acquire);
        if mode != state {
            state = mode;
            ctl.state.store(mode, Ordering::Release);
        }
        match mode {
            MODE_QUIT => break,
            MODE_LINE => child_turns(ctl, MODE_LINE, || Ok(()))?,
            MODE_CMA => {
                // Each turn reads `cma_len` bytes of the parent's send buffer.
                let (from, len) = (ctl.parent_buf.load(Ordering::Acquire), ctl.cma_len.load(Ordering::Acquire));
                child_turns(ctl, MODE_CMA, || bare_cma_read(a.parent_pid, from, len as usize, &h.recv))?
            }
            MODE_ECHO => {
                while ctl.mode.load(Ordering::Relaxed) == MODE_ECHO {
                    ep.progress(&mut h);
                    if let Some(len) = h.to_echo.take() {
                        tag += 1;
                        send_retrying(&mut ep, &mut h, parent, &send, len, tag)?;
                    }
                    if let Some(e) = h.error.take() {
                        return Err(e);
                    }
                }
            }
            _ => {
                ep.progress(&mut h);
                std::hint::spin_loop();
            }
        }
    }
    // Let our last sends complete before the endpoint goes away.
    let deadline = Instant::now() + Duration::from_secs(2);
    while ep.outstanding() > 0 && Instant::now() < deadline {
        ep.progress(&mut h);
    }
    Ok(())
}

/// Answer every odd value `i` in the line word with `i + 1`, after `on_turn`, until the mode
/// is no longer `mode` (the parent then stores `LINE_STOP`).
fn child_turns(ctl: &Control, mode: u64, mut on_turn: impl FnMut() -> Result<()>) -> Result<()> {
    loop {
        let v = ctl.line.load(Ordering::Acquire);
        if v == LINE_STOP {
            if ctl.mode.load(Ordering::Acquire) != mode {
                return Ok(());
            }
        } else if v & 1 == 1 {
            on_turn()?;
            ctl.line.store(v + 1, Ordering::Release);
        }
        std::hint::spin_loop();
    }
}

/// Read `len` bytes at `addr` in process `pid` into the start of `into` with one
/// `process_vm_readv`, as a CMA message's receiver does, with nothing of the engine around it.
fn bare_cma_read(pid: u32, addr: u64, len: usize, into: &Buf) -> Result<()> {
    let remote = [smr_core::cmd::RemoteIov { addr, len: len as u64 }];
    // SAFETY: `into` is a receive buffer of the parent's or the child's, which the engine writes
    // only while it delivers a message in a progress call, and neither makes one in this mode.
    let mut local = unsafe { into.lend(len) };
    match smr_core::cma::read_from(pid, &remote, &mut local, 0) {
        Ok(n) if n == len => Ok(()),
        other => Err(format!("bare process_vm_readv of {len} bytes from pid {pid}: {other:?}")),
    }
}

// ---------------------------------------------------------------------------------------------
// The parent side

/// How a session's endpoints move messages larger than an inject buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// CMA (process_vm_readv) when the kernel allows it.
    Cma,
    /// Segmentation and reassembly through the receiver's bounce buffers (`Params::cma = false`).
    Sar,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Cma => "cma",
            Transport::Sar => "sar",
        }
    }
}

/// The engine's defaults, with or without CMA, and `RSHM_SAR_HOLD` and
/// `RSHM_PINGPONG_INLINE_MAX` (the provider's FI_RSHM_SAR_HOLD and FI_RSHM_PINGPONG_INLINE_MAX)
/// if set, inherited by the echo child: A/Bs of cold SAR reuse (smr-core `endpoint/cold.rs`) and
/// of inline against inject for a message sent alone (`endpoint/send.rs`) without a rebuild.
fn engine_params(cma: bool) -> Params {
    let mut params = Params { cma, ..Params::default() };
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    if let Some(n) = number("RSHM_SAR_HOLD") {
        params.sar_hold = n;
    }
    if let Some(n) = number("RSHM_PINGPONG_INLINE_MAX") {
        params.pingpong_inline_max = n;
    }
    params
}

/// Options of a session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub transport: Transport,
    /// Largest message size the session will be asked to exchange.
    pub max_size: usize,
    /// Pin parent and child to two different CPUs (when two are allowed).
    pub pin: bool,
}

/// A parent process, its echo child, and a connected endpoint pair.
pub struct Session {
    child: Child,
    map: Mapping,
    ep: Endpoint,
    peer: PeerId,
    h: Pong,
    send: Buf,
    cfg: SessionConfig,
    mode: u64,
    line_next: u64,
    tag: u64,
    cpus: Option<(usize, usize)>,
    checked: Vec<usize>,
}

fn check_child(child: &mut Child, ctl: &Control) -> Result<()> {
    if ctl.state.load(Ordering::Acquire) == STATE_FAILED {
        return Err("the echo child failed (see its message above)".to_string());
    }
    match child.try_wait() {
        Ok(Some(status)) => Err(format!("the echo child exited ({status})")),
        _ => Ok(()),
    }
}

static SESSIONS: AtomicUsize = AtomicUsize::new(0);
/// Live sessions that pinned this thread; the last one to end unpins it.
static PINNED_SESSIONS: AtomicUsize = AtomicUsize::new(0);

fn wait_until(what: &str, child: &mut Child, ctl: &Control, mut done: impl FnMut() -> bool) -> Result<()> {
    let started = Instant::now();
    let mut spins = 0u64;
    while !done() {
        std::hint::spin_loop();
        spins += 1;
        if spins & 1023 == 0 {
            if ctl.state.load(Ordering::Acquire) == STATE_FAILED {
                return Err(format!("{what}: the echo child failed (see its message above)"));
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("{what}: the echo child exited ({status})"));
            }
            if started.elapsed() > WAIT_LIMIT {
                return Err(format!("{what}: no answer from the echo child within {WAIT_LIMIT:?}"));
            }
        }
    }
    Ok(())
}

impl Session {
    /// Start the echo child and connect the two endpoints.
    pub fn start(cfg: SessionConfig) -> Result<Session> {
        let pid = std::process::id();
        let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
        let t = cfg.transport.name();
        let ctl_name = format!("rshm_bench_ctl_{pid}_{n}");
        let parent_ep = format!("rshm_bench_{t}_p_{pid}_{n}");
        let child_ep = format!("rshm_bench_{t}_c_{pid}_{n}");
        let map =
            Mapping::create(&ctl_name, CONTROL_LEN).map_err(|e| format!("create control file {ctl_name}: {e}"))?;
        let ctl = control(&map);
        ctl.mode.store(MODE_IDLE, Ordering::Relaxed);
        ctl.state.store(0, Ordering::Relaxed);
        ctl.line.store(0, Ordering::Relaxed);
        let params = engine_params(cfg.transport == Transport::Cma);
        let ep = Endpoint::create(&parent_ep, params);
        let ep = ep.map_err(|e| {
            let _ = smr_core::shm::unlink(&ctl_name);
            format!("create endpoint {parent_ep}: {e}")
        })?;

        let cpus = allowed_cpus();
        let cpus = (cfg.pin && cpus.len() >= 2).then(|| (cpus[0], cpus[1]));
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let child = Command::new(exe)
            .arg(CHILD_ARG)
            .args([&ctl_name, &parent_ep, &child_ep, t])
            .arg(cfg.max_size.to_string())
            .arg(cpus.map_or(-1, |c| c.1 as i64).to_string())
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn();
        let mut child = child.map_err(|e| {
            let _ = smr_core::shm::unlink(&ctl_name);
            format!("spawn the echo child: {e}")
        })?;
        let ready = wait_until("start", &mut child, ctl, || ctl.state.load(Ordering::Acquire) == MODE_IDLE);
        // The child has mapped the control file (or failed): its name is no longer needed.
        let _ = smr_core::shm::unlink(&ctl_name);
        if let Err(e) = ready {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        if let Some((cpu, _)) = cpus {
            pin_to_cpu(cpu)?;
            PINNED_SESSIONS.fetch_add(1, Ordering::Relaxed);
        }
        let mut ep = ep;
        let peer = ep.add_peer(&child_ep).map_err(|e| format!("add peer {child_ep}: {e}"))?;
        let mut s = Session {
            child,
            map,
            ep,
            peer,
            h: Pong::new(cfg.max_size, 0),
            send: Buf::new(cfg.max_size, PARENT_SEED),
            cfg,
            mode: MODE_IDLE,
            line_next: 1,
            tag: 0,
            cpus,
            checked: Vec::new(),
        };
        control(&s.map).parent_buf.store(s.send.ptr.as_ptr() as u64, Ordering::Release);
        // Connect both ways and fault in the rings, then check the data path once.
        s.round_trips(8, 1000)?;
        s.line_round_trips(1000)?;
        Ok(s)
    }

    /// The CPUs parent and child are pinned to, if pinned.
    pub fn cpus(&self) -> Option<(usize, usize)> {
        self.cpus
    }

    /// The child's pid.
    pub fn child_pid(&self) -> u32 {
        self.child.id()
    }

    pub fn transport(&self) -> Transport {
        self.cfg.transport
    }

    /// Whether CMA is actually on (the parameter and the kernel's permission).
    pub fn cma_enabled(&self) -> bool {
        self.ep.cma_enabled()
    }

    /// The protocol the engine picks for a message of `size` bytes in this session.
    pub fn protocol(&self, size: usize) -> &'static str {
        if size <= self.ep.params().inline_max {
            "inline"
        } else if size <= self.ep.params().inject_max {
            "inject"
        } else if self.ep.cma_enabled() && self.ep.stats().cma_fallbacks == 0 {
            "cma"
        } else {
            "sar"
        }
    }

    fn set_mode(&mut self, mode: u64) -> Result<()> {
        if self.mode == mode {
            return Ok(());
        }
        let ctl = control(&self.map);
        ctl.mode.store(mode, Ordering::Release);
        if takes_turns(self.mode) {
            ctl.line.store(LINE_STOP, Ordering::Release);
        }
        self.mode = mode;
        let what = format!("switch the echo child to mode {mode}");
        wait_until(&what, &mut self.child, ctl, || ctl.state.load(Ordering::Acquire) == mode)
    }

    /// `iters` bare cache-line round trips. Returns the total time.
    pub fn line_round_trips(&mut self, iters: u64) -> Result<Duration> {
        self.set_mode(MODE_LINE)?;
        self.turns(iters, |_, _| Ok(()))
    }

    /// `iters` round trips of the line word with the child (in a mode that `takes_turns`), each
    /// turn of ours starting with `before_turn`, given the child's pid and our receive buffer.
    /// Returns the total time.
    fn turns(&mut self, iters: u64, mut before_turn: impl FnMut(u32, &Buf) -> Result<()>) -> Result<Duration> {
        let ctl = control(&self.map);
        let child = self.child.id();
        let recv = &self.h.recv;
        let line = &ctl.line;
        let mut v = self.line_next;
        let mut spins = 0u64;
        let start = Instant::now();
        for _ in 0..iters {
            before_turn(child, recv)?;
            line.store(v, Ordering::Release);
            while line.load(Ordering::Acquire) != v + 1 {
                std::hint::spin_loop();
                spins += 1;
                if spins & (CHECK_EVERY - 1) == 0 {
                    check_child(&mut self.child, ctl)?;
                }
            }
            v += 2;
        }
        let elapsed = start.elapsed();
        self.line_next = v;
        Ok(elapsed)
    }

    /// `iters` bare CMA round trips of `size` bytes: each side in turn reads `size` bytes of the
    /// other's send buffer with one `process_vm_readv` and hands the turn over through one cache
    /// line, the floor under a CMA message (its command, read and completion). Returns the total
    /// time.
    pub fn cma_round_trips(&mut self, size: usize, iters: u64) -> Result<Duration> {
        if size > self.cfg.max_size {
            return Err(format!("{size} bytes exceeds the session's max_size {}", self.cfg.max_size));
        }
        control(&self.map).cma_len.store(size as u64, Ordering::Relaxed);
        self.set_mode(MODE_CMA)?;
        let child_buf = control(&self.map).child_buf.load(Ordering::Acquire);
        // Into the buffer the engine's messages are delivered into, as the child does.
        self.turns(iters, |child, recv| bare_cma_read(child, child_buf, size, recv))
    }

    fn check_child(&mut self) -> Result<()> {
        check_child(&mut self.child, control(&self.map))
    }

    /// `iters` round trips of `size`-byte messages through the engine. Returns the total time.
    pub fn round_trips(&mut self, size: usize, iters: u64) -> Result<Duration> {
        if size > self.cfg.max_size {
            return Err(format!("{size} bytes exceeds the session's max_size {}", self.cfg.max_size));
        }
        self.set_mode(MODE_ECHO)?;
        if !self.checked.contains(&size) {
            self.one_round_trip(size)?;
            let got = &self.h.recv.bytes()[..size];
            if got.iter().enumerate().any(|(i, &b)| b != pattern_byte(i, CHILD_SEED)) {
                return Err(format!("the {size}-byte echo arrived with the wrong bytes"));
            }
            self.checked.push(size);
        }
        let start = Instant::now();
        for _ in 0..iters {
            self.one_round_trip(size)?;
        }
        let elapsed = start.elapsed();
        // Collect the completions of CMA/SAR sends so nothing is outstanding between runs.
        let mut spins = 0u64;
        while self.ep.outstanding() > 0 {
            self.ep.progress(&mut self.h);
            spins += 1;
            if spins & (CHECK_EVERY - 1) == 0 {
                self.check_child()?;
            }
        }
        Ok(elapsed)
    }

    fn one_round_trip(&mut self, size: usize) -> Result<()> {
        let target = self.h.received + 1;
        self.tag += 1;
        send_retrying(&mut self.ep, &mut self.h, self.peer, &self.send, size, self.tag)?;
        let mut spins = 0u64;
        while self.h.received < target {
            self.ep.progress(&mut self.h);
            spins += 1;
            if spins & (CHECK_EVERY - 1) == 0 {
                self.check_child()?;
            }
        }
        self.h.to_echo = None;
        if let Some(e) = self.h.error.take() {
            return Err(e);
        }
        if self.h.last_len != size {
            return Err(format!("sent {size} bytes, the echo had {}", self.h.last_len));
        }
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let ctl = control(&self.map);
        ctl.mode.store(MODE_QUIT, Ordering::Release);
        if takes_turns(self.mode) {
            ctl.line.store(LINE_STOP, Ordering::Release);
        }
        // Keep answering the child's last completions while it winds down.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.ep.progress(&mut self.h);
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if self.cpus.is_some() && PINNED_SESSIONS.fetch_sub(1, Ordering::Relaxed) == 1 {
            unpin(allowed_cpus());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The engine's software cost alone: both endpoints in this process, one thread

/// Two endpoints in this process driven by one thread: what the engine costs in instructions,
/// without any cache line crossing cores.
pub struct LocalPair {
    a: Endpoint,
    b: Endpoint,
    to_b: PeerId,
    ha: Pong,
    hb: Pong,
    send: Buf,
    tag: u64,
}

impl LocalPair {
    pub fn new(transport: Transport, max_size: usize) -> Result<LocalPair> {
        let (pid, n) = (std::process::id(), SESSIONS.fetch_add(1, Ordering::Relaxed));
        let params = engine_params(transport == Transport::Cma);
        let create = |side: &str| {
            let name = format!("rshm_bench_local_{side}_{pid}_{n}");
            Endpoint::create(&name, params.clone()).map_err(|e| format!("create endpoint {name}: {e}"))
        };
        let (mut a, b) = (create("a")?, create("b")?);
        let to_b = a.add_peer(b.name()).map_err(|e| format!("add peer: {e}"))?;
        let mut p = LocalPair {
            a,
            b,
            to_b,
            ha: Pong::new(max_size, 0),
            hb: Pong::new(max_size, 0),
            send: Buf::new(max_size, PARENT_SEED),
            tag: 0,
        };
        // Connect, and let the sender see the receiver's CONN_ACK (its own progress drains it):
        // until then every send would also re-check the connection timer.
        for _ in 0..1000 {
            p.send_and_receive(8)?;
            p.a.progress(&mut p.ha);
        }
        Ok(p)
    }

    /// Send `size` bytes from one endpoint and progress until the other has delivered them
    /// (and, for CMA and SAR, until the sender has its completion).
    pub fn send_and_receive(&mut self, size: usize) -> Result<()> {
        let target = self.hb.received + 1;
        self.tag += 1;
        let mut spins = 0u64;
        loop {
            match send_once(&mut self.a, self.to_b, &self.send, size, self.tag) {
                Ok(_) => break,
                Err(EngineError::Again) => {
                    self.a.progress(&mut self.ha);
                    self.b.progress(&mut self.hb);
                    spins += 1;
                    if spins > CHECK_EVERY {
                        return Err(format!("send of {size} bytes to a local endpoint keeps failing"));
                    }
                }
                Err(e) => return Err(format!("send: {e}")),
            }
        }
        let mut spins = 0u64;
        while self.hb.received < target || self.a.outstanding() > 0 {
            self.b.progress(&mut self.hb);
            if self.a.outstanding() > 0 {
                self.a.progress(&mut self.ha);
            }
            spins += 1;
            if spins > CHECK_EVERY * 64 {
                return Err(format!("a local {size}-byte message never arrived"));
            }
        }
        self.hb.to_echo = None;
        match self.hb.error.take().or_else(|| self.ha.error.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One `progress` call on an endpoint with nothing to do. Returns its event count.
    pub fn progress_idle(&mut self) -> usize {
        self.b.progress(&mut self.hb)
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers for reports

/// Scheduler accounting of the main thread of a process, from /proc/<pid>/schedstat.
#[derive(Debug, Clone, Copy)]
pub struct SchedTimes {
    /// Time spent running on a CPU.
    pub on_cpu: Duration,
    /// Time spent runnable but waiting for a CPU (another task had it).
    pub waiting: Duration,
}

/// The scheduler's accounting of `pid` (nanosecond resolution, unlike /proc/<pid>/stat).
pub fn sched_times(pid: u32) -> Option<SchedTimes> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let mut f = text.split_ascii_whitespace().map(|v| v.parse::<u64>().ok());
    let on_cpu = f.next()??;
    let waiting = f.next()??;
    Some(SchedTimes { on_cpu: Duration::from_nanos(on_cpu), waiting: Duration::from_nanos(waiting) })
}

/// Machine-wide (steal, total) jiffies from /proc/stat.
fn steal_and_total() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line.split_ascii_whitespace().filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total = v.iter().take(8).sum();
    Some((*v.get(7)?, total))
}

/// Where the time went while a measurement ran: did parent and child really have a CPU each?
#[derive(Debug, Clone, Copy)]
pub struct CpuSnapshot {
    wall: Instant,
    parent: Option<SchedTimes>,
    child: Option<SchedTimes>,
    stat: Option<(u64, u64)>,
}

/// Fractions of the wall time between two snapshots.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuShare {
    /// Share of the time the parent (the child) ran on a CPU; 0 for a child not measured.
    pub parent: f64,
    pub child: f64,
    /// Share of the time the parent (the child) was ready to run but another task had its CPU.
    pub parent_waiting: f64,
    pub child_waiting: f64,
    /// Share of all CPU time the hypervisor gave to other guests.
    pub steal: f64,
}

impl CpuShare {
    /// Whether other load took the CPUs away often enough to inflate busy-polling figures.
    pub fn contended(&self) -> bool {
        self.parent_waiting.max(self.child_waiting) > 0.02 || self.steal > 0.02
    }
}

impl CpuSnapshot {
    /// Scheduler accounting now, of this process and, if given, of `child`.
    pub fn take(child: Option<u32>) -> CpuSnapshot {
        CpuSnapshot {
            wall: Instant::now(),
            parent: sched_times(std::process::id()),
            child: child.and_then(sched_times),
            stat: steal_and_total(),
        }
    }

    /// The shares between this snapshot and `later` (`None` if too short to tell).
    pub fn share_until(&self, later: &CpuSnapshot) -> Option<CpuShare> {
        let wall = later.wall.duration_since(self.wall).as_secs_f64();
        // Run-queue waits are counted in nanoseconds: short windows are meaningful.
        if wall < 0.01 {
            return None;
        }
        let frac = |a: Duration, b: Duration| (b.saturating_sub(a).as_secs_f64() / wall).min(1.0);
        let (p0, p1) = (self.parent?, later.parent?);
        let mut share = CpuShare {
            parent: frac(p0.on_cpu, p1.on_cpu),
            parent_waiting: frac(p0.waiting, p1.waiting),
            ..CpuShare::default()
        };
        if let (Some(c0), Some(c1)) = (self.child, later.child) {
            share.child = frac(c0.on_cpu, c1.on_cpu);
            share.child_waiting = frac(c0.waiting, c1.waiting);
        }
        if let (Some((s0, t0)), Some((s1, t1))) = (self.stat, later.stat) {
            // Steal is counted in jiffies: judge it only over enough of them.
            if t1 >= t0 + 20 {
                share.steal = (s1 - s0) as f64 / (t1 - t0) as f64;
            }
        }
        Some(share)
    }
}

impl Session {
    /// CPU accounting now, to compare with a later snapshot.
    pub fn cpu_snapshot(&self) -> CpuSnapshot {
        CpuSnapshot::take(Some(self.child.id()))
    }
}

/// Median of a non-empty sample.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// "8", "1K", "64K", "1M" -> bytes.
pub fn parse_size(s: &str) -> Result<usize> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        _ => (s.trim_end_matches(['b', 'B']), 1),
    };
    let n: usize = num.parse().map_err(|e| format!("bad size {s:?}: {e}"))?;
    n.checked_mul(mult).ok_or_else(|| format!("size {s:?} overflows"))
}

/// Bytes in the shortest exact unit: 8 B, 1 KiB, 64 KiB, 1 MiB.
pub fn size_label(n: usize) -> String {
    if n >= 1 << 20 && n & ((1 << 20) - 1) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n & ((1 << 10) - 1) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert!(parse_size("x").is_err());
        assert_eq!(size_label(8), "8 B");
        assert_eq!(size_label(4096), "4 KiB");
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
    }
}
