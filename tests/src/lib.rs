//! Shared helpers for the multi-process tests.
//!
//! * payloads: a pattern derived from (sender id, sequence number, size), a checksum, and a
//!   verifier that names the first differing byte;
//! * `Collector`: a `Handler` that delivers into owned `Vec`s (or holds) and records everything;
//! * `Node`: an endpoint plus its handler and the send buffers it lends the engine, with a
//!   "send, retrying on `Again` while progressing" loop;
//! * `Scenario` and `Child`: spawning `rshm-peer` processes, reading their stdout line by line,
//!   killing them with SIGKILL, and cleaning up after them (a Drop guard).

use smr_core::cmd::MsgHeader;
use smr_core::endpoint::{
    Delivered, Disposition, Endpoint, Handler, Incoming, MsgKey, Params, PeerId, SendOpts, SendStatus, SrcId,
};
use smr_core::iov::LocalIov;
use smr_core::{Error, Result};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest inline message (the inline/inject boundary).
pub const INLINE: usize = smr_core::cmd::INLINE_MAX;
/// Every size class: empty, inline edge, inject edges, CMA/SAR, and a large one.
pub const SIZES_ALL: &[usize] = &[0, 1, INLINE, INLINE + 1, 4096, 4097, 65536, 1 << 20, 16 << 20];
/// Every size class up to 1 MiB.
pub const SIZES_UP_TO_1M: &[usize] = &[0, 1, INLINE, INLINE + 1, 4096, 4097, 65536, 1 << 20];
/// The bound of every wait loop in the tests.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A deadline `DEADLINE` from now.
pub fn deadline() -> Instant {
    Instant::now() + DEADLINE
}

/// Params in CMA mode (`sar == false`) or SAR-only mode.
pub fn params(sar: bool) -> Params {
    Params { cma: !sar, ..Default::default() }
}

// ---------------------------------------------------------------------------------------------
// Pid namespaces

/// Whether a helper can run in a pid namespace of its own (`unshare --pid`, root only). Where it
/// cannot, this prints `SKIPPED: ...` and the caller returns, passing without having tested
/// anything; under CI=true (which runs as root) it fails instead.
pub fn namespaces_or_skip(test: &str) -> bool {
    let ok =
        Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).status().is_ok_and(|s| s.success());
    if !ok {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{test}: unshare --pid failed under CI=true");
        let _ = writeln!(std::io::stderr(), "SKIPPED: needs root for unshare --pid ({test})");
    }
    ok
}

// ---------------------------------------------------------------------------------------------
// CMA

/// The environment variable that makes the tests named for CMA fail where CMA is not
/// permitted (`1`), instead of skipping (unset or `0`).
pub const REQUIRE_CMA_ENV: &str = "RSHM_TEST_REQUIRE_CMA";

/// Whether `RSHM_TEST_REQUIRE_CMA=1`. Any value other than unset, empty, `0` or `1` panics, so
/// that a typo in CI does not quietly turn the requirement off.
pub fn cma_required() -> bool {
    match std::env::var(REQUIRE_CMA_ENV).as_deref() {
        Ok("1") => true,
        Ok("0") | Ok("") | Err(_) => false,
        Ok(other) => panic!("{REQUIRE_CMA_ENV}={other}: expected 0 or 1"),
    }
}

/// Whether a test of CMA can run: this process may use CMA (`smr_core::cma::probe`, which
/// the helper processes share, as they inherit our environment). Where it may not (Yama
/// ptrace_scope, seccomp, or `RSHM_TEST_DENY_CMA=1`), the test fails under
/// `RSHM_TEST_REQUIRE_CMA=1`; otherwise this prints `SKIPPED: CMA not permitted here` and the
/// caller returns, passing without having tested anything. The line goes straight to stderr,
/// which the test harness does not capture, so it shows in every log.
pub fn cma_or_skip(test: &str) -> bool {
    let required = cma_required();
    if smr_core::cma::probe() {
        return true;
    }
    assert!(
        !required,
        "{test}: {REQUIRE_CMA_ENV}=1 but CMA is not permitted here (Yama ptrace_scope, seccomp, or {}=1)",
        smr_core::cma::DENY_ENV
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: CMA not permitted here ({test})");
    false
}

/// Messages longer than this travel by CMA (or SAR), not inline or inject.
pub const INJECT_MAX: usize = smr_core::layout::INJECT_SIZE as usize;

/// How many of endpoint `name`'s SAR buffers are free, and how many it has. Counts by popping
/// every free buffer and pushing them all back: call it only while nothing else takes or
/// returns that endpoint's buffers (its owner stalled or never progressing, and senders that
/// use CMA), or where a miscount can only fail the check. A message that went by CMA leaves
/// the receiver's SAR pool untouched. Buffers the owner holds back on their way to the pool
/// (`Endpoint::sar_held_back`, `inject_held_back`) are not free here: add them where the owner
/// is at hand.
pub fn sar_buffers(name: &str) -> (usize, usize) {
    free_buffers(name, "SAR", |r| (r.sar_stack(), r.geometry().counts.sar_count))
}

/// `sar_buffers` for the inject pool (the same caveats).
pub fn inject_buffers(name: &str) -> (usize, usize) {
    free_buffers(name, "inject", |r| (r.inject_stack(), r.geometry().counts.inject_count))
}

/// How many of endpoint `name`'s senders hold one of its inject buffers for their next
/// message (`smr_core::endpoint` keeps such a spare per receiver).
pub fn spares_held(name: &str) -> usize {
    entries_recording(name, |e| &e.held)
}

/// How many of endpoint `name`'s senders have one of its SAR buffers recorded as theirs (the one
/// a segment is being copied into: `smr_core::held`).
pub fn sar_buffers_held(name: &str) -> usize {
    entries_recording(name, |e| &e.sar_held)
}

/// Entries of endpoint `name`'s peer table whose record `word` is set.
fn entries_recording(name: &str, word: fn(&smr_core::layout::PeerSlot) -> &std::sync::atomic::AtomicU64) -> usize {
    let region = smr_core::region::Region::open(name).unwrap_or_else(|e| panic!("open {name}: {e}"));
    region.peer_slots().iter().filter(|e| word(e).load(std::sync::atomic::Ordering::Relaxed) != 0).count()
}

fn free_buffers(
    name: &str,
    pool: &str,
    stack: for<'a> fn(&'a smr_core::region::Region) -> (smr_core::free_stack::FreeStack<'a>, u64),
) -> (usize, usize) {
    let region = smr_core::region::Region::open(name).unwrap_or_else(|e| panic!("open {name}: {e}"));
    let (stack, total) = stack(&region);
    let mut taken = Vec::new();
    while let Ok(i) = stack.pop() {
        taken.push(i);
    }
    for &i in &taken {
        stack.push(i).unwrap_or_else(|e| panic!("give back {pool} buffer {i} of {name}: {e:?}"));
    }
    (taken.len(), total as usize)
}

// ---------------------------------------------------------------------------------------------
// Payloads

pub use smr_core::testing::Rng;

/// Tag layout: sender id in the high 32 bits, sequence number in the low 32.
pub fn make_tag(sender: u32, seq: u32) -> u64 {
    (u64::from(sender) << 32) | u64::from(seq)
}

pub fn split_tag(tag: u64) -> (u32, u32) {
    ((tag >> 32) as u32, tag as u32)
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn seed(sender: u32, seq: u32, len: usize) -> u64 {
    let mut s = make_tag(sender, seq) ^ (len as u64).rotate_left(17);
    splitmix(&mut s)
}

/// The pattern word at each 8-byte position of a message, in order.
fn pattern_words(sender: u32, seq: u32, len: usize) -> impl Iterator<Item = [u8; 8]> {
    let mut s = seed(sender, seq, len);
    std::iter::repeat_with(move || splitmix(&mut s).to_le_bytes())
}

/// The payload of message `seq` from `sender` of `len` bytes.
pub fn pattern(sender: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut words = pattern_words(sender, seq, len);
    let mut chunks = v.chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&words.next().expect("endless"));
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&words.next().expect("endless")[..n]);
    v
}

/// What `rshm-peer rma` writes into a registration in round `round`.
pub fn rma_pattern(round: u32, len: usize) -> Vec<u8> {
    pattern(0x0AA, round, len)
}

/// FNV-style checksum over 8-byte words (fast enough for 16 MiB in a debug build).
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The header of message `seq` from `sender` carrying `data`: the checksum rides in `data`.
pub fn header(sender: u32, seq: u32, data: &[u8]) -> MsgHeader {
    MsgHeader { app: 0, tag: make_tag(sender, seq), data: checksum(data), aux: 0, len: data.len() as u64 }
}

/// Check a received message against the pattern its tag and length name, and its checksum.
pub fn verify(hdr: &MsgHeader, bytes: &[u8]) -> std::result::Result<(), String> {
    let (sender, seq) = split_tag(hdr.tag);
    if bytes.len() as u64 != hdr.len {
        return Err(format!("sender {sender} seq {seq}: {} bytes received, header says {}", bytes.len(), hdr.len));
    }
    let mut words = pattern_words(sender, seq, bytes.len());
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let want = words.next().expect("endless");
        if chunk != &want[..chunk.len()] {
            let at = chunk.iter().zip(want).position(|(a, b)| *a != b).unwrap_or(0);
            return Err(format!(
                "sender {sender} seq {seq} len {}: first wrong byte at offset {}",
                bytes.len(),
                i * 8 + at
            ));
        }
    }
    let sum = checksum(bytes);
    if sum != hdr.data {
        return Err(format!(
            "sender {sender} seq {seq} len {}: checksum {sum:#x}, header carries {:#x}",
            bytes.len(),
            hdr.data
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Handler

/// A finished receive.
#[derive(Debug)]
pub struct Received {
    pub src: SrcId,
    pub hdr: MsgHeader,
    pub result: Result<usize>,
    pub bytes: Vec<u8>,
}

/// A hook `Collector` calls for every offered message.
pub type OfferHook = Box<dyn FnMut(&Incoming)>;

/// A handler that delivers every message into an owned buffer of its size, or holds it.
#[derive(Default)]
pub struct Collector {
    /// Answer `Disposition::Hold` instead of delivering.
    pub hold: bool,
    /// Every message offered, in order.
    pub offered: Vec<Incoming>,
    /// Held messages not yet delivered or discarded (when `hold`).
    pub held: Vec<Incoming>,
    /// Finished receives, in completion order.
    pub received: Vec<Received>,
    /// `on_send_done` calls, in order.
    pub sends_done: Vec<(u64, Result<()>)>,
    /// Called first for every offered message (a test hook: print, stall, ...).
    pub on_offer: Option<OfferHook>,
    /// Deliveries under way, by context (the message key).
    in_progress: HashMap<u64, Incoming>,
}

impl Handler for Collector {
    fn on_message(&mut self, msg: &Incoming, _src_name: &str) -> Disposition {
        if let Some(hook) = &mut self.on_offer {
            hook(msg);
        }
        self.offered.push(*msg);
        if self.hold {
            self.held.push(*msg);
            return Disposition::Hold;
        }
        self.in_progress.insert(msg.key, *msg);
        Disposition::Deliver { dest: LocalIov::owned(vec![0; msg.hdr.len as usize]), ctx: msg.key }
    }

    fn on_recv_done(&mut self, ctx: u64, result: Result<usize>, dest: LocalIov) {
        let msg = self.in_progress.remove(&ctx).expect("on_recv_done for an unknown context");
        self.received.push(Received {
            src: msg.src,
            hdr: msg.hdr,
            result,
            bytes: dest.into_owned().expect("owned destination"),
        });
    }

    fn on_send_done(&mut self, cookie: u64, result: Result<()>) {
        self.sends_done.push((cookie, result));
    }
}

impl Collector {
    /// Note a delivery of held message `msg` that the engine finishes later.
    fn delivering(&mut self, msg: Incoming) {
        self.in_progress.insert(msg.key, msg);
    }
}

// ---------------------------------------------------------------------------------------------
// Node

/// An endpoint, its handler, and the send buffers it lends the engine until completion.
pub struct Node {
    /// Declared first, so it is dropped before the buffers it may still refer to.
    pub ep: Endpoint,
    pub h: Collector,
    inflight: HashMap<u64, Vec<u8>>,
    done_seen: usize,
    next_cookie: u64,
    /// How many times `send` answered `Again`.
    pub again: u64,
}

impl Node {
    pub fn create(name: &str, params: Params) -> Result<Node> {
        Ok(Node {
            ep: Endpoint::create(name, params)?,
            h: Collector::default(),
            inflight: HashMap::new(),
            done_seen: 0,
            next_cookie: 1,
            again: 0,
        })
    }

    /// One round of progress; buffers of finished sends are released. Returns the event count.
    pub fn pump(&mut self) -> usize {
        let n = self.ep.progress(&mut self.h);
        for (cookie, _) in &self.h.sends_done[self.done_seen..] {
            self.inflight.remove(cookie);
        }
        self.done_seen = self.h.sends_done.len();
        n
    }

    /// Progress; if nothing happened, sleep until woken or `idle` passes.
    pub fn pump_or_wait(&mut self, idle: Duration) -> usize {
        let n = self.pump();
        if n == 0 {
            self.ep.wait(Some(idle));
        }
        n
    }

    /// Drop the record of finished sends and offered messages (long runs: the handler keeps
    /// every one otherwise). Call after reading what is needed from `h.sends_done`.
    pub fn forget_done(&mut self) {
        self.pump_done();
        self.h.sends_done.clear();
        self.h.offered.clear();
        self.done_seen = 0;
    }

    fn pump_done(&mut self) {
        for (cookie, _) in &self.h.sends_done[self.done_seen..] {
            self.inflight.remove(cookie);
        }
        self.done_seen = self.h.sends_done.len();
    }

    /// Sends that returned `Pending` and have not completed yet.
    pub fn sends_in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// One send attempt. On success returns the status and the send's cookie; on failure the
    /// error and the buffer back (to retry after `Again`).
    pub fn try_send(
        &mut self,
        peer: PeerId,
        hdr: MsgHeader,
        mut data: Vec<u8>,
        delivery_complete: bool,
    ) -> std::result::Result<(SendStatus, u64), (Error, Vec<u8>)> {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        // SAFETY: the range is `data`'s heap buffer, valid for reads and writes. The engine only
        // reads it. If the send is pending, `data` moves into `self.inflight` (the heap buffer
        // does not move) and stays there, untouched, until `on_send_done(cookie)` arrives through
        // `pump`. If the send is done or failed, the engine is finished with the range when
        // `send` returns, before `data` is given back or dropped.
        let iov = unsafe { LocalIov::from_raw(&[(data.as_mut_ptr(), data.len())]) };
        let opts = SendOpts { cookie, delivery_complete, more: false, pull: false, split_early: false };
        match self.ep.send(peer, hdr, iov, opts) {
            Ok(SendStatus::Pending) => {
                self.inflight.insert(cookie, data);
                Ok((SendStatus::Pending, cookie))
            }
            Ok(SendStatus::Done) => Ok((SendStatus::Done, cookie)),
            Err(e) => {
                if e == Error::Again {
                    self.again += 1;
                }
                Err((e, data))
            }
        }
    }

    /// Send, retrying on `Again` while progressing, until `deadline` (then panic).
    pub fn send_retry(
        &mut self,
        peer: PeerId,
        hdr: MsgHeader,
        mut data: Vec<u8>,
        delivery_complete: bool,
        deadline: Instant,
    ) -> Result<(SendStatus, u64)> {
        loop {
            match self.try_send(peer, hdr, data, delivery_complete) {
                Ok(done) => return Ok(done),
                Err((Error::Again, back)) => {
                    data = back;
                    if self.pump() == 0 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                    assert!(
                        Instant::now() < deadline,
                        "{}: send to peer {peer} still answers Again at the deadline",
                        self.ep.name()
                    );
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Progress until `cond` holds; panic with `what` at the deadline.
    pub fn wait_until(&mut self, deadline: Instant, what: &str, mut cond: impl FnMut(&Node) -> bool) {
        while !cond(self) {
            assert!(Instant::now() < deadline, "{}: timed out waiting for {what}", self.ep.name());
            self.pump_or_wait(Duration::from_millis(1));
        }
    }

    /// Deliver every held message into an owned buffer of its size. Messages still arriving
    /// complete later through `on_recv_done`.
    pub fn deliver_held(&mut self) {
        for msg in std::mem::take(&mut self.h.held) {
            let dest = LocalIov::owned(vec![0; msg.hdr.len as usize]);
            match self.ep.deliver(msg.key, dest, msg.key) {
                Ok(Delivered::Now(result, dest)) => self.h.received.push(Received {
                    src: msg.src,
                    hdr: msg.hdr,
                    result,
                    bytes: dest.into_owned().expect("owned destination"),
                }),
                Ok(Delivered::Later) => self.h.delivering(msg),
                Err(e) => panic!("deliver of held message {} failed: {e}", msg.key),
            }
        }
    }

    /// Deliver one held message by key.
    pub fn deliver(&mut self, key: MsgKey, len: usize) -> Result<Delivered> {
        self.ep.deliver(key, LocalIov::owned(vec![0; len]), key)
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// A unique endpoint name: `rshm_it_<tag>_<pid>_<counter>`.
/// Progress `a` and `b` in turn until `done(a, b)` holds; at `deadline`, panic with `what(a, b)`.
pub fn pump_pair_until(
    a: &mut Node,
    b: &mut Node,
    deadline: Instant,
    what: impl Fn(&Node, &Node) -> String,
    mut done: impl FnMut(&Node, &Node) -> bool,
) {
    while !done(a, b) {
        assert!(Instant::now() < deadline, "{}", what(a, b));
        a.pump();
        b.pump();
    }
}

pub fn unique_name(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("rshm_it_{tag}_{}_{n}", std::process::id());
    assert!(name.len() <= 63, "endpoint name too long: {name}");
    name
}

/// `key=value` pairs of a result line.
pub fn parse_kv(line: &str) -> HashMap<String, String> {
    line.split_whitespace().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A numeric field of a result line; panics with the line if missing.
pub fn kv_u64(kv: &HashMap<String, String>, key: &str) -> u64 {
    kv.get(key).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no numeric {key}= in {kv:?}"))
}

/// A spawned `rshm-peer`.
pub struct Child {
    pub label: String,
    proc: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stdout_log: Arc<Mutex<Vec<String>>>,
    stderr_log: Arc<Mutex<String>>,
    reaped: Option<ExitStatus>,
}

impl Child {
    pub fn spawn(exe: &str, label: &str, args: &[String]) -> Child {
        let mut proc = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {exe} for {label}: {e}"));
        let stdout = proc.stdout.take().expect("piped");
        let mut stderr = proc.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        let stdout_log = Arc::new(Mutex::new(Vec::new()));
        let log = stdout_log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                log.lock().unwrap_or_else(|p| p.into_inner()).push(line.clone());
                if tx.send(line).is_err() {
                    // Nobody reads lines any more; keep logging.
                }
            }
        });
        let stderr_log = Arc::new(Mutex::new(String::new()));
        let log = stderr_log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock().unwrap_or_else(|p| p.into_inner()).push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Child { label: label.to_string(), stdin: proc.stdin.take(), proc, lines, stdout_log, stderr_log, reaped: None }
    }

    pub fn pid(&self) -> i32 {
        self.proc.id() as i32
    }

    /// Everything the child printed so far, for failure messages.
    pub fn transcript(&self) -> String {
        let out = self.stdout_log.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
        let err = self.stderr_log.lock().unwrap_or_else(|p| p.into_inner()).clone();
        format!("--- {} (pid {}) stdout:\n{out}\n--- stderr:\n{err}", self.label, self.pid())
    }

    /// The next stdout line starting with `prefix` (other lines are skipped), calling `pump`
    /// while waiting. Panics at `deadline` or if the child's stdout closes first.
    pub fn expect_line_while(&mut self, prefix: &str, deadline: Instant, mut pump: impl FnMut()) -> String {
        loop {
            match self.lines.try_recv() {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => continue,
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(50));
                    panic!("{} ended before printing {prefix}\n{}", self.label, self.transcript())
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {} to print {prefix}\n{}",
                self.label,
                self.transcript()
            );
            pump();
        }
    }

    /// The next stdout line starting with `prefix`, blocking. Panics at `deadline`.
    pub fn expect_line(&mut self, prefix: &str, deadline: Instant) -> String {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("timed out waiting for {} to print {prefix}\n{}", self.label, self.transcript())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(50));
                    panic!("{} ended before printing {prefix}\n{}", self.label, self.transcript())
                }
            }
        }
    }

    /// Write a line to the child's stdin.
    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}").expect("child stdin");
        stdin.flush().expect("child stdin");
    }

    /// Close the child's stdin: a lingering child then exits.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Wait for the child to exit by itself (after `close_stdin`).
    pub fn wait_exit(&mut self, deadline: Instant) -> ExitStatus {
        if let Some(status) = self.reaped {
            return status;
        }
        loop {
            if let Some(status) = self.proc.try_wait().expect("waitpid") {
                self.reaped = Some(status);
                return status;
            }
            assert!(Instant::now() < deadline, "{} did not exit\n{}", self.label, self.transcript());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Close stdin, wait for a clean exit and panic (with the transcript) on a failure status.
    pub fn finish(&mut self, deadline: Instant) {
        self.close_stdin();
        let status = self.wait_exit(deadline);
        assert!(status.success(), "{} exited with {status}\n{}", self.label, self.transcript());
    }

    /// SIGKILL the child and reap it. Returns the instant just before the signal was sent.
    pub fn kill(&mut self) -> Instant {
        let at = Instant::now();
        assert!(self.reaped.is_none(), "{} already exited", self.label);
        self.kill_and_reap();
        assert!(self.reaped.is_some(), "{} survived SIGKILL", self.label);
        at
    }

    /// SIGKILL (if still unreaped) and reap, giving up after 10 s. Never panics.
    fn kill_and_reap(&mut self) {
        if self.reaped.is_some() {
            return;
        }
        // SAFETY: kill(2) with the pid of our own child, which has not been reaped yet (so the pid
        // cannot have been reused by another process); no memory is involved.
        unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.proc.try_wait() {
                Ok(Some(status)) => {
                    self.reaped = Some(status);
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                Err(_) => return,
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

/// The processes and endpoint names of one test. Dropping it (also on a panic) kills every
/// child still running and removes region files that dead owners left in /dev/shm.
pub struct Scenario {
    exe: &'static str,
    tag: String,
    names: Vec<String>,
    children: Vec<Child>,
}

impl Scenario {
    pub fn new(exe: &'static str, tag: &str) -> Scenario {
        Scenario { exe, tag: tag.to_string(), names: Vec::new(), children: Vec::new() }
    }

    /// A fresh endpoint name, cleaned up with the scenario.
    pub fn name(&mut self, role: &str) -> String {
        let name = unique_name(&format!("{}{role}", self.tag));
        self.names.push(name.clone());
        name
    }

    /// Spawn `rshm-peer` with `args`; returns the child's index.
    pub fn spawn(&mut self, label: &str, args: &[&str]) -> usize {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.children.push(Child::spawn(self.exe, label, &args));
        self.children.len() - 1
    }

    /// `spawn`, with `own_pid_namespace` in a pid namespace of its own (with its own /proc;
    /// `namespaces_or_skip` says whether that works here): under `unshare`, which takes the
    /// child with it when killed.
    pub fn spawn_placed(&mut self, label: &str, own_pid_namespace: bool, args: &[&str]) -> usize {
        if !own_pid_namespace {
            return self.spawn(label, args);
        }
        let unshare = ["--pid", "--fork", "--mount-proc", "--kill-child", self.exe];
        let args: Vec<String> = unshare.iter().chain(args).map(|s| s.to_string()).collect();
        self.children.push(Child::spawn("unshare", label, &args));
        self.children.len() - 1
    }

    pub fn child(&mut self, i: usize) -> &mut Child {
        &mut self.children[i]
    }

    /// Transcripts of every child, for failure messages.
    pub fn transcripts(&self) -> String {
        self.children.iter().map(Child::transcript).collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        for child in &mut self.children {
            child.kill_and_reap();
        }
        for name in &self.names {
            if let Ok(smr_core::region::Occupant::Dead(_)) = smr_core::region::inspect(name) {
                let _ = smr_core::shm::unlink(name);
            }
        }
    }
}
