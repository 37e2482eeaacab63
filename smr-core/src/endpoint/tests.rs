//! In-process tests of two endpoints: every protocol, held and direct delivery, truncation.

use super::measured::{Choice, Overlap, Via};
use super::split::{state_word, OFFERED, TAKEN};
use super::*;
use crate::cmd::SAR_FIRST_SEGMENT;
use crate::cmd::{resp, CmdEntry, RemoteIov, RespEntry, Status, COMPACT_MAX};
use crate::layout::INJECT_SIZE;

mod claimed_heads;
mod cma_refused;
mod dead_sender;
mod direct;
mod linking;
mod parked;
mod receiver_gone;
mod reply_peer;
mod send_gates;

/// A handler that delivers straight into owned buffers of the message's size (or holds).
#[derive(Default)]
struct Collect {
    hold: bool,
    /// Refuse every message with this errno.
    refuse: Option<u32>,
    /// Refuse the messages with these tags (EINVAL).
    refuse_tags: Vec<u64>,
    /// Take messages with `Disposition::Later`; answered by the test.
    later: bool,
    /// Take the payloads offered in `on_payload` (recorded in `taken`).
    take_payload: bool,
    /// Answer inline requests at once in the answer buffer they name (`answer_request`).
    answer_into: bool,
    /// Answer every message at once with its payload's first bytes (`Disposition::AnswerWith`),
    /// even one offered without its payload (which the engine must refuse).
    answer_with: bool,
    taken: Vec<(MsgHeader, Vec<u8>)>,
    /// The sender (id, incarnation) of each message in `taken`.
    taken_from: Vec<(SrcId, u64)>,
    /// Take the messages offered in `on_inline` (all are recorded in `inline_offered`, those
    /// taken counted in `inline_taken`).
    take_inline: bool,
    inline_offered: Vec<(SrcId, u64, MsgHeader, Vec<u8>)>,
    inline_taken: usize,
    dest_len: Option<usize>,
    /// Deliver into this buffer of the test's (address, length) instead of one of our own.
    dest_raw: Option<(usize, usize)>,
    received: Vec<(MsgHeader, Result<usize>, Vec<u8>)>,
    offered: Vec<Incoming>,
    sends_done: Vec<(u64, Result<()>)>,
    answers: Vec<(u64, Vec<u8>)>,
    /// How many parts each of `answers` came in.
    answer_parts: Vec<usize>,
    /// The answers' first bytes as announced before the answers (`on_send_answer_part`).
    answer_pieces: Vec<(u64, Vec<u8>)>,
    /// Take CMA and one-segment SAR messages on the express path (`on_fill_express`) into a
    /// buffer of `dest_len` (or the message's length), recorded in `received` as a delivery
    /// is; counted here.
    take_fill: bool,
    fill_taken: usize,
}

impl Handler for Collect {
    fn on_message(&mut self, msg: &Incoming, _src_name: &str) -> Disposition {
        self.offered.push(*msg);
        if self.answer_with {
            return Disposition::AnswerWith(AnswerData::new(3, |b| b.fill(0xAB)).unwrap());
        }
        if self.hold {
            return Disposition::Hold;
        }
        if let Some(errno) = self.refuse {
            return Disposition::Refuse(errno);
        }
        if self.refuse_tags.contains(&msg.hdr.tag) {
            return Disposition::Refuse(libc::EINVAL as u32);
        }
        let len = self.dest_len.unwrap_or(msg.hdr.len as usize);
        let dest = match self.dest_raw {
            // SAFETY: the test that set `dest_raw` keeps that buffer alive, and does not touch it,
            // until the endpoint that delivers into it is dropped.
            Some((at, len)) => unsafe { LocalIov::from_raw(&[(at as *mut u8, len)]) },
            None => LocalIov::owned(vec![0; len]),
        };
        if self.later {
            return Disposition::Later { dest, ctx: msg.hdr.tag };
        }
        Disposition::Deliver { dest, ctx: msg.hdr.tag }
    }
    fn on_payload(&mut self, msg: &Incoming, src_name: &str, payload: &[u8]) -> Disposition {
        if self.answer_into && self.refuse.is_none() {
            let (buf, len) = parse_request(payload);
            return Disposition::AnswerInto { buf, data: LocalIov::owned(pattern(len, buf.wire() as u8)) };
        }
        if self.answer_with {
            let n = payload.len().min(crate::cmd::ANSWER_DATA_MAX);
            return Disposition::AnswerWith(AnswerData::new(n, |b| b.copy_from_slice(&payload[..n])).unwrap());
        }
        if !self.take_payload {
            return self.on_message(msg, src_name);
        }
        assert_eq!(payload.len() as u64, msg.hdr.len, "inline payload of the wrong length");
        self.taken.push((msg.hdr, payload.to_vec()));
        self.taken_from.push((msg.src, msg.src_gen));
        Disposition::Taken { answer_later: false }
    }
    /// With `take_inline`, the same decision as `on_payload` (so every test that answers or
    /// refuses can be run through the express path too).
    fn on_inline(&mut self, msg: &Incoming, payload: &[u8]) -> Option<Disposition> {
        assert_eq!(payload.len() as u64, msg.hdr.len, "inline payload of the wrong length");
        self.inline_offered.push((msg.src, msg.src_gen, msg.hdr, payload.to_vec()));
        if !self.take_inline {
            return None;
        }
        self.inline_taken += 1;
        Some(self.on_payload(msg, "", payload))
    }
    fn on_fill_express(&mut self, msg: &Incoming, fill: impl FnOnce(LentRange) -> Option<usize>) -> bool {
        if !self.take_fill {
            return false;
        }
        let mut buf = vec![0u8; self.dest_len.unwrap_or(msg.hdr.len as usize)];
        // SAFETY: `buf` is ours, writable, and untouched until `fill` returns.
        let Some(n) = fill(unsafe { LentRange::new(buf.as_mut_ptr() as usize, buf.len()) }) else { return false };
        self.fill_taken += 1;
        self.received.push((msg.hdr, outcome(msg.hdr.len, n), buf));
        true
    }
    fn on_recv_done(&mut self, ctx: u64, result: Result<usize>, dest: LocalIov) {
        let hdr = self.offered.iter().find(|m| m.hdr.tag == ctx).map(|m| m.hdr).unwrap_or_default();
        self.received.push((hdr, result, dest.into_owned().unwrap_or_default()));
    }
    fn on_send_done(&mut self, cookie: u64, result: Result<()>) {
        self.sends_done.push((cookie, result));
    }
    fn on_send_answer(&mut self, cookie: u64, parts: &[&[u8]]) {
        assert!(!self.sends_done.iter().any(|d| d.0 == cookie), "answer data after the send's completion");
        self.answers.push((cookie, parts.concat()));
        self.answer_parts.push(parts.len());
    }
    fn on_send_answer_part(&mut self, cookie: u64, parts: &[&[u8]]) {
        assert!(!self.answers.iter().any(|a| a.0 == cookie), "a piece after the whole answer");
        self.answer_pieces.push((cookie, parts.concat()));
    }
}

/// A test request for an answer placed in the sender's buffers: the first buffer's name, the
/// answer's length, the further buffers' names.
fn request(buf: AnswerBuf, len: usize) -> Vec<u8> {
    let mut req = [buf.wire().to_le_bytes(), (len as u32).to_le_bytes()].concat();
    buf.more().iter().for_each(|m| req.extend_from_slice(&m.to_le_bytes()));
    req
}

fn parse_request(p: &[u8]) -> (AnswerBuf, usize) {
    let more: Vec<u16> = p[8..].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    let name = u32::from_le_bytes(p[0..4].try_into().unwrap());
    let len = u32::from_le_bytes(p[4..8].try_into().unwrap()) as usize;
    (AnswerBuf::from_wire(name, &more).expect("a well-formed test request"), len)
}

/// A request's header: `tag`, and its payload's length.
fn request_hdr(tag: u64, req: &[u8]) -> MsgHeader {
    MsgHeader { app: 0, tag, data: 0, aux: 0, len: req.len() as u64 }
}

/// Free buffers in an endpoint's inject and SAR pools (popped and pushed back), buffers it
/// holds back on their way to the pool (`cold.rs`) counted as free.
fn free_buffers(ep: &Endpoint) -> (usize, usize) {
    let count = |stack: crate::free_stack::FreeStack<'_>| {
        let taken: Vec<u32> = std::iter::from_fn(|| stack.pop().ok()).collect();
        taken.iter().for_each(|&i| stack.push(i).unwrap());
        taken.len()
    };
    (count(ep.region.inject_stack()) + ep.inject_held_back(), count(ep.region.sar_stack()) + ep.sar_held_back())
}

/// Inject buffers of `ep`'s pool that its senders hold for their next message (`spare`).
fn spares_held(ep: &Endpoint) -> usize {
    ep.region.peer_slots().iter().filter(|s| s.held.load(crate::sync::Ordering::Relaxed) != 0).count()
}

/// An 8-byte message's header with tag `tag`.
fn hdr(tag: u64) -> MsgHeader {
    MsgHeader { app: 0, tag, data: 0, aux: 0, len: 8 }
}

/// Options of an acknowledged send (delivery complete) with cookie `cookie`.
fn acked(cookie: u64) -> SendOpts {
    SendOpts { cookie, delivery_complete: true, ..SendOpts::default() }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn name(tag: &str) -> String {
    format!("rshm_ut_{tag}_{}", std::process::id())
}

fn pair(tag: &str, params: Params) -> (Endpoint, Endpoint, PeerId) {
    let a = Endpoint::create(&name(&format!("{tag}a")), params.clone()).unwrap();
    let b = Endpoint::create(&name(&format!("{tag}b")), params).unwrap();
    let mut a = a;
    let to_b = a.add_peer(b.name()).unwrap();
    (a, b, to_b)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Whole pages of our own mapping, zeroed, for tests that make part of a range unreadable: with
/// mprotect, not munmap, since another test thread's mapping could land in a hole.
struct OwnPages {
    at: *mut u8,
    len: usize,
}

impl OwnPages {
    /// At least `len` bytes.
    fn new(len: usize) -> Self {
        let len = len.div_ceil(page_size()) * page_size();
        let (rw, anon) = (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS);
        // SAFETY: a new anonymous mapping, at an address the kernel chooses.
        let at = unsafe { libc::mmap(std::ptr::null_mut(), len, rw, anon, -1, 0) };
        assert_ne!(at, libc::MAP_FAILED);
        OwnPages { at: at.cast(), len }
    }

    fn base(&self) -> u64 {
        self.at as u64
    }

    /// The bytes, while all are readable and writable (before `forbid`).
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping made in `new`, ours alone.
        unsafe { std::slice::from_raw_parts_mut(self.at, self.len) }
    }

    /// Make the pages from byte `from` (a page boundary) on unreadable.
    fn forbid(&self, from: usize) {
        // SAFETY: pages of our mapping; no reference to them is used after this.
        assert_eq!(unsafe { libc::mprotect(self.at.add(from).cast(), self.len - from, libc::PROT_NONE) }, 0);
    }
}

impl Drop for OwnPages {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, which nothing uses once the test drops this.
        unsafe { libc::munmap(self.at.cast(), self.len) };
    }
}

/// Makes the tests named for CMA fail where CMA is not permitted, instead of skipping.
const REQUIRE_CMA_ENV: &str = "RSHM_TEST_REQUIRE_CMA";

/// Sets the bound of every wait loop here in seconds (20 by default). A mutation run sets it
/// below its per-mutant timeout, so that a mutant that loses a message fails a test in seconds
/// instead of holding the run to its timeout (docs/reliability.md).
const DEADLINE_ENV: &str = "RSHM_TEST_DEADLINE_SECS";

/// The bound of every wait loop here.
fn deadline_span() -> std::time::Duration {
    static SPAN: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *SPAN.get_or_init(|| {
        let secs = std::env::var(DEADLINE_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(20);
        std::time::Duration::from_secs(secs)
    })
}

fn deadline() -> std::time::Instant {
    std::time::Instant::now() + deadline_span()
}

/// Whether a test of CMA can run. Where CMA is not permitted (Yama, seccomp, or
/// `cma::DENY_ENV`), it fails under `RSHM_TEST_REQUIRE_CMA=1`; otherwise it says so on stderr
/// (written directly, so that the test harness shows it even for a passing test) and the
/// caller returns without testing anything.
fn cma_or_skip(test: &str) -> bool {
    let required = match std::env::var(REQUIRE_CMA_ENV).as_deref() {
        Ok("1") => true,
        Ok("0") | Ok("") | Err(_) => false,
        Ok(other) => panic!("{REQUIRE_CMA_ENV}={other}: expected 0 or 1"),
    };
    if crate::cma::probe() {
        return true;
    }
    assert!(
        !required,
        "{test}: {REQUIRE_CMA_ENV}=1 but CMA is not permitted here (Yama ptrace_scope, seccomp, or {}=1)",
        crate::cma::DENY_ENV
    );
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: CMA not permitted here ({test})");
    false
}

/// Sizes `exchange_all_sizes` sends; those above `INJECT_SIZE` go through CMA or SAR.
const SIZES: [usize; 9] = [0, 1, INLINE_MAX, INLINE_MAX + 1, 4096, 4097, 65536, 1 << 20, 3 * (1 << 20) + 7];

fn large_sizes() -> usize {
    SIZES.iter().filter(|&&len| len as u64 > INJECT_SIZE).count()
}

/// Send every size class from a to b and check the bytes that arrive. Returns the sender's
/// and the receiver's endpoint, for their stats.
fn exchange_all_sizes(tag: &str, params: Params) -> (Endpoint, Endpoint) {
    let (mut a, mut b, to_b) = pair(tag, params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    for (i, &len) in SIZES.iter().enumerate() {
        exchange_one((&mut a, &mut ha), (&mut b, &mut hb), to_b, i, len);
    }
    let pending: Vec<(u64, Result<()>)> = SIZES
        .iter()
        .enumerate()
        .filter(|(_, &len)| len as u64 > INJECT_SIZE)
        .map(|(i, _)| (i as u64, Ok(())))
        .collect();
    assert_eq!(ha.sends_done, pending, "every large send completes once, successfully");
    assert_eq!((a.outstanding(), b.outstanding()), (0, 0));
    for ep in [&a, &b] {
        assert_eq!(ep.stats().corrupt_commands, 0, "{:?}", ep.stats());
        assert_eq!(ep.stats().cma_fallbacks, 0, "{:?}", ep.stats());
    }
    (a, b)
}

/// `a` sends its `i`th message (`len` bytes, tag `i`) to `b`, and `b` receives it, every byte
/// checked; a send that waits for the receiver completes.
fn exchange_one(
    a: (&mut Endpoint, &mut Collect),
    b: (&mut Endpoint, &mut Collect),
    to_b: PeerId,
    i: usize,
    len: usize,
) {
    let ((a, ha), (b, hb)) = (a, b);
    let data = pattern(len, i as u8);
    let hdr = MsgHeader { app: 1, tag: i as u64, data: 7, aux: 0, len: len as u64 };
    let dl = deadline();
    let status = loop {
        match a.send(
            to_b,
            hdr,
            LocalIov::owned(data.clone()),
            SendOpts { cookie: i as u64, delivery_complete: false, more: false, pull: false, split_early: false },
        ) {
            Err(Error::Again) => {
                assert!(std::time::Instant::now() < dl, "send of size {len} still answers Again");
                a.progress(ha);
                b.progress(hb);
            }
            other => break other.unwrap(),
        }
    };
    // Inline and inject sends are done at once; the others wait for the receiver.
    let want = if len as u64 > INJECT_SIZE { SendStatus::Pending } else { SendStatus::Done };
    assert_eq!(status, want, "size {len}");
    while hb.received.len() <= i || (status == SendStatus::Pending && !ha.sends_done.iter().any(|d| d.0 == i as u64)) {
        assert!(std::time::Instant::now() < dl, "size {len}: not received, or the send not completed");
        a.progress(ha);
        b.progress(hb);
    }
    assert_eq!(hb.received.len(), i + 1, "one receive per message");
    let (h, result, bytes) = &hb.received[i];
    assert_eq!((h.tag, h.len, h.data), (i as u64, len as u64, 7));
    assert_eq!(*result, Ok(len), "size {len}");
    assert!(*bytes == data, "payload of size {len} differs");
}

#[test]
fn every_size_through_cma() {
    if !cma_or_skip("every_size_through_cma") {
        return;
    }
    let (a, b) = exchange_all_sizes("cma", Params::default());
    assert!(a.cma_enabled() && b.cma_enabled());
    // Every large message was copied with CMA, none went through SAR.
    assert_eq!(b.stats().cma_reads, large_sizes() as u64, "{:?}", b.stats());
    assert_eq!(a.stats().cma_reads, 0, "{:?}", a.stats());
}

#[test]
fn every_size_through_sar() {
    let (a, b) = exchange_all_sizes("sar", Params { cma: false, ..Params::default() });
    assert!(!a.cma_enabled() && !b.cma_enabled());
    assert_eq!((a.stats().cma_reads, b.stats().cma_reads), (0, 0));
}

/// Bytes of /dev/shm that region `name` holds (its allocated pages).
fn region_bytes(name: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(crate::shm::file_of(name)).expect("region file").blocks() * 512
}

/// The pools' pages (inject and SAR buffers) are reserved by the first process that copies into
/// or out of them, not at creation: an endpoint that only sends, or only gets messages that
/// travel inline, holds 2.5 MiB less.
#[test]
fn the_pools_are_reserved_on_first_use() {
    let fresh = Endpoint::create(&name("lazypools"), Params::default()).unwrap();
    let geo = *fresh.region.geometry();
    let size = geo.size;
    let pools = size - geo.reserved_at_creation();
    assert!(pools >= 2 << 20, "pools of {pools} bytes are too small to tell apart");
    let held = region_bytes(fresh.name());
    assert!(held <= size - pools, "a fresh region holds {held} of {size} bytes, its {pools} bytes of pools included");
    assert!(
        held + 8192 >= size - pools,
        "a fresh region holds only {held} of the {} bytes outside its pools",
        size - pools
    );
    // Messages of every size, through the inject pool and by SAR: the receiver's pools are
    // used, the sender's are not.
    let (a, b) = exchange_all_sizes("lazypools", Params { cma: false, ..Params::default() });
    assert_eq!(region_bytes(b.name()), size, "the receiver's region after inject and SAR messages");
    assert_eq!(region_bytes(a.name()), held, "the sender's region, whose pools nobody used");
}

/// Progress both endpoints until `done` holds; panic with `what` at the deadline.
fn pump_until(
    (a, ha): (&mut Endpoint, &mut Collect),
    (b, hb): (&mut Endpoint, &mut Collect),
    what: &str,
    mut done: impl FnMut(&Collect, &Collect) -> bool,
) {
    let dl = deadline();
    while !done(ha, hb) {
        assert!(std::time::Instant::now() < dl, "timed out waiting for {what}");
        a.progress(ha);
        b.progress(hb);
    }
}

/// Send message `i` of `len` bytes to `to_b`: tag and cookie `i`, bytes `pattern(len, i)`, not
/// acknowledged and not pulled, as the tests of the protocol chooser send theirs (`measured.rs`).
fn send_numbered(a: &mut Endpoint, to_b: PeerId, i: u64, len: usize) {
    let hdr = MsgHeader { app: 0, tag: i, data: 0, aux: 0, len: len as u64 };
    let opts = SendOpts { cookie: i, delivery_complete: false, more: false, pull: false, split_early: false };
    a.send(to_b, hdr, LocalIov::owned(pattern(len, i as u8)), opts).unwrap();
}

/// Progress `b` alone until it has received `n` messages; `what` is the failure's message.
fn receive_until(b: &mut Endpoint, hb: &mut Collect, n: usize, what: &str) {
    let dl = deadline();
    while hb.received.len() < n {
        assert!(std::time::Instant::now() < dl, "{what}");
        b.progress(hb);
    }
}

/// Held CMA messages: the sender's data stays in its memory until each is delivered, so their
/// delivery-complete sends finish only then; inline and inject ones are copied into the
/// receiver's region on arrival and complete at once.
#[test]
fn held_messages_are_delivered_later_and_truncated_on_request() {
    if !cma_or_skip("held_messages_are_delivered_later_and_truncated_on_request") {
        return;
    }
    held_messages_complete_their_senders_on_delivery("held", Params::default(), 2);
}

/// Held SAR messages: the segments are copied out of the SAR buffers as they arrive (so other
/// senders' messages are not blocked behind them), but the sender is answered only when its
/// message is delivered, as for CMA: a receiver that dies before that fails the send.
#[test]
fn held_sar_messages_complete_their_senders_on_delivery() {
    held_messages_complete_their_senders_on_delivery("heldsar", Params { cma: false, ..Params::default() }, 0);
}

fn held_messages_complete_their_senders_on_delivery(tag: &str, params: Params, cma_reads: u64) {
    let (mut a, mut b, to_b) = pair(tag, params);
    let (mut ha, mut hb) = (Collect::default(), Collect { hold: true, ..Default::default() });
    let sizes = [5usize, 3000, 100_000, 300_000];
    for (i, &len) in sizes.iter().enumerate() {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let status = a
            .send(
                to_b,
                hdr,
                LocalIov::owned(pattern(len, 9)),
                SendOpts { cookie: i as u64, delivery_complete: true, more: false, pull: false, split_early: false },
            )
            .unwrap();
        assert_eq!(status, SendStatus::Pending, "size {len} with delivery-complete");
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "four offered messages", |_, hb| hb.offered.len() == 4);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the inline and inject acks", |ha, _| ha.sends_done.len() >= 2);
    for _ in 0..100 {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    // Inline and inject: acknowledged when held. CMA and SAR: still pending, nothing read yet
    // (CMA) or every segment in (SAR).
    assert_eq!(ha.sends_done, vec![(0, Ok(())), (1, Ok(()))]);
    assert_eq!(a.outstanding(), 2);
    assert_eq!((b.held_count(), b.stats().cma_reads), (4, 0));
    let offered: Vec<(u64, u64)> = hb.offered.iter().map(|m| (m.hdr.tag, m.hdr.len)).collect();
    assert_eq!(offered, sizes.iter().enumerate().map(|(i, &l)| (i as u64, l as u64)).collect::<Vec<_>>());
    for (i, m) in hb.offered.clone().iter().enumerate() {
        let want = if i == 3 { 1000 } else { sizes[i] };
        // Every held message is in our memory or readable with CMA: delivered at once.
        let (result, bytes) = match b.deliver(m.key, LocalIov::owned(vec![0; want]), i as u64).unwrap() {
            Delivered::Now(r, dest) => (r, dest.into_owned().unwrap()),
            Delivered::Later => panic!("held message {i} of {} bytes not delivered at once", sizes[i]),
        };
        if i == 3 {
            assert_eq!(result, Err(Error::Truncated { delivered: 1000, sent: 300_000 }));
        } else {
            assert_eq!(result, Ok(sizes[i]));
        }
        assert_eq!(bytes.len(), want);
        assert!(bytes[..] == pattern(sizes[i], 9)[..want], "held message {i} differs");
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the large messages' acks", |ha, _| ha.sends_done.len() >= 4);
    for _ in 0..100 {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    // The truncated message completes its sender normally: the receiver chose to take less.
    assert_eq!(ha.sends_done, vec![(0, Ok(())), (1, Ok(())), (2, Ok(())), (3, Ok(()))]);
    assert!(hb.received.is_empty(), "deliveries finished through on_recv_done: {:?}", hb.received.len());
    assert_eq!((b.held_count(), a.outstanding(), b.outstanding()), (0, 0, 0));
    assert_eq!((b.stats().cma_reads, b.stats().cma_fallbacks, b.stats().corrupt_commands), (cma_reads, 0, 0));
}

#[test]
fn garbage_commands_are_counted_and_survived() {
    let (mut a, mut b, _to_b) = pair("junk", Params::default());
    let peer_view = crate::region::Region::open(b.name()).unwrap();
    let mut rng = 0x1234_5678_9abc_def0u64;
    for _ in 0..2000 {
        let mut e = CmdEntry::default();
        let bytes: &mut [u8] = &mut e.payload;
        for chunk in bytes.chunks_mut(8) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let n = chunk.len();
            chunk.copy_from_slice(&rng.to_le_bytes()[..n]);
        }
        e.op = (rng % 6) as u8;
        e.proto = (rng >> 8) as u8 % 6;
        e.src = (rng >> 16) as u32 % 2048;
        e.len = rng >> (rng % 64);
        while peer_view.cmd_ring().push(&e).is_err() {
            b.progress(&mut Collect::default());
        }
    }
    // Every piece of garbage handled before `a` claims its entry in b's peer table: one left in
    // the ring that names that entry would be taken for a's (b accepts a sender at its first
    // message, the connection request may come later), and arrive before "live".
    let mut hb = Collect::default();
    while !b.cmd_rx.is_empty(&b.region.cmd_ring()) {
        b.progress(&mut hb);
    }
    assert!(b.stats().corrupt_commands > 1200, "{:?}", b.stats());
    // Still works afterwards.
    let to_b = a.add_peer(b.name()).unwrap();
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: 4 };
    a.send(to_b, hdr, LocalIov::owned(b"live".to_vec()), SendOpts::default()).unwrap();
    receive_until(&mut b, &mut hb, 1, "the message after the garbage never arrived");
    assert_eq!(hb.received.len(), 1);
    assert_eq!((&hb.received[0].1, &hb.received[0].2[..]), (&Ok(4), &b"live"[..]));
}

#[test]
fn closing_a_receiver_fails_pending_and_later_sends() {
    let (mut a, b, to_b) = pair("closed", Params::default());
    let mut ha = Collect::default();
    let big = pattern(100_000, 1);
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: big.len() as u64 };
    // Pending until b reads it with CMA, which it never will.
    assert_eq!(
        a.send(to_b, hdr, LocalIov::owned(big), SendOpts { cookie: 9, ..SendOpts::default() }),
        Ok(SendStatus::Pending)
    );
    drop(b);
    let start = std::time::Instant::now();
    while ha.sends_done.is_empty() {
        a.progress(&mut ha);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "pending send not failed after the receiver closed"
        );
    }
    assert_eq!(ha.sends_done, vec![(9, Err(Error::PeerDead))]);
    let small = MsgHeader { app: 0, tag: 2, data: 0, aux: 0, len: 4 };
    assert_eq!(a.send(to_b, small, LocalIov::owned(b"lost".to_vec()), SendOpts::default()), Err(Error::PeerDead));
}

/// A name with no region: a peer still starting (sends answer "again" until
/// `absent_peer_timeout`), unless `name_owner_gone` says the name's owner is gone (its region was
/// reaped after it died): then sends fail with `PeerDead` after `dead_owner_timeout`.
#[test]
fn a_name_whose_owner_is_gone_fails_sends_after_the_dead_owner_timeout() {
    let params = Params {
        absent_peer_timeout: std::time::Duration::from_secs(60),
        dead_owner_timeout: std::time::Duration::from_millis(100),
        name_owner_gone: Some(|name| name.ends_with("_gone")),
        ..Params::default()
    };
    let mut a = Endpoint::create(&name("ownergone_a"), params).unwrap();
    let starting = a.add_peer(&name("ownergone_starting")).unwrap();
    let gone = a.add_peer(&format!("{}_gone", name("ownergone"))).unwrap();
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: 4 };
    let mut send = |to| a.send(to, hdr, LocalIov::owned(b"ping".to_vec()), SendOpts::default());
    let start = std::time::Instant::now();
    let failed = loop {
        match send(gone) {
            Err(Error::Again) => {
                assert!(start.elapsed() < deadline_span(), "a send to a gone owner's name never failed")
            }
            other => break other,
        }
    };
    assert_eq!(failed, Err(Error::PeerDead));
    // The engine times it with the coarse clock (`crate::clock`), a scheduler tick (up to 10 ms)
    // behind this one.
    let waited = start.elapsed();
    assert!(waited >= std::time::Duration::from_millis(85), "failed after {waited:?}, before dead_owner_timeout");
    // The same wait on a name whose owner may still be starting has not failed it.
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(300) {
        assert_eq!(send(starting), Err(Error::Again));
    }
}

/// A receiver that answered a send and then closed, before its sender looked at the answer: the
/// sender's liveness check finds the receiver's region closed, but the answer it left in our
/// response ring completes the send (SOS's barrier release put, answered by a PE that went on
/// to finalize, used to fail with `PeerDead`). A send it never answered still fails.
#[test]
fn an_answer_left_by_a_receiver_that_closed_completes_its_send() {
    let (mut a, mut b, to_b, mut ha, mut hb) = answered_once("answeredclosed", Params::default());
    assert_eq!(a.send_bytes(to_b, hdr(2), &pattern(8, 2), acked(2)), Ok(SendStatus::Pending));
    receive_until(&mut b, &mut hb, 2, "the second message not received");
    // Never answered: the receiver takes it to answer later (`later`), and closes first.
    hb.later = true;
    assert_eq!(a.send_bytes(to_b, hdr(3), &pattern(8, 3), acked(3)), Ok(SendStatus::Pending));
    receive_until(&mut b, &mut hb, 3, "the third message not received");
    drop(b);
    // The liveness check, before any drain of the response ring.
    a.check_peers(&mut ha);
    assert_eq!(ha.sends_done, vec![(1, Ok(())), (2, Ok(())), (3, Err(Error::PeerDead))]);
}

/// A pair whose receiver `b` took message 2 and answered it behind an entry another peer has
/// claimed in `a`'s response ring and not yet published, then closed; `a`'s liveness tick has
/// run once. The tick's drain stopped at the claimed entry, so the answer is unread.
fn answered_behind_a_stalled_entry(name: &str) -> (Endpoint, Collect) {
    let (mut a, mut b, to_b, mut ha, mut hb) = answered_once(name, stalls());
    assert_eq!(a.send_bytes(to_b, hdr(2), &pattern(8, 2), acked(2)), Ok(SendStatus::Pending));
    a.region.resp_ring().claim_unpublished();
    receive_until(&mut b, &mut hb, 2, "the second message not received");
    drop(b);
    a.check_peers(&mut ha);
    (a, ha)
}

/// Skip `a`'s stalled response entry (its producer is nobody we know) once the engine's coarse
/// clock has seen `stall_timeout` pass.
fn skip_the_stalled_entry(a: &mut Endpoint) {
    let dl = deadline();
    while a.stats().skipped_slots == 0 {
        assert!(std::time::Instant::now() < dl, "the claimed entry was never skipped");
        a.check_stalls();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(a.stats().skipped_slots, 1);
}

/// An answer a receiver published just before it died, behind an entry another peer has
/// claimed in our response ring and not yet published: the send waits for it rather than fail
/// (`dead_receivers.rs`: failing it at once gave an error for a message the receiver had taken), and
/// completes once the stalled entry is skipped.
#[test]
fn an_answer_behind_a_stalled_entry_completes_its_send_though_the_receiver_died() {
    let (mut a, mut ha) = answered_behind_a_stalled_entry("answerstalled");
    assert_eq!(ha.sends_done, vec![(1, Ok(()))], "the send failed while its answer could still come");
    skip_the_stalled_entry(&mut a);
    a.progress(&mut ha);
    assert_eq!(ha.sends_done, vec![(1, Ok(())), (2, Ok(()))]);
    a.check_peers(&mut ha);
    assert_eq!(ha.sends_done.len(), 2, "a completed send failed again");
    assert_eq!((a.stats().late_answers, a.stats().corrupt_commands), (0, 0));
    assert!(!a.expects_late_answers());
}

/// The same answer when the stalled entry outlasts `stall_timeout` (its producer alive but
/// stopped): the send fails then, within a bound, and the answer read later is a late one, not
/// a peer's error (counted as corrupt, it failed the kill storm now and then).
#[test]
fn an_answer_read_after_its_send_failed_at_the_stall_timeout_is_late_not_corrupt() {
    let (mut a, mut ha) = answered_behind_a_stalled_entry("answerlate");
    assert_eq!(ha.sends_done, vec![(1, Ok(()))]);
    let dl = deadline();
    while ha.sends_done.len() < 2 {
        assert!(std::time::Instant::now() < dl, "the send to the dead receiver never failed");
        std::thread::sleep(std::time::Duration::from_millis(5));
        a.check_peers(&mut ha);
    }
    assert_eq!(ha.sends_done, vec![(1, Ok(())), (2, Err(Error::PeerDead))]);
    assert!(a.expects_late_answers());
    skip_the_stalled_entry(&mut a);
    a.progress(&mut ha);
    assert_eq!(ha.sends_done.len(), 2, "the late answer finished nothing");
    assert_eq!((a.stats().late_answers, a.stats().corrupt_commands), (1, 0));
    // Once the head passed every position the dead receiver could have claimed, its failed
    // sends are forgotten.
    a.check_peers(&mut ha);
    assert!(!a.expects_late_answers());
}

/// A receiver that closed with a send of ours unanswered, and a successor under its name before
/// our next liveness tick: the send still fails with `PeerDead` (it waited on the successor
/// forever when a send to the successor linked it first and cleared the peer's death), and only
/// then does the successor get messages.
#[test]
fn a_send_left_unanswered_by_a_predecessor_fails_before_its_successor_is_linked() {
    let (mut a, b, to_b, mut ha, _) = one_answered_one_not("succlinked");
    let name = b.name().to_string();
    drop(b);
    let mut successor = Endpoint::create(&name, Params::default()).unwrap();
    let mut hs = Collect::default();
    let dl = deadline();
    // The first send to the successor is retried (with our progress, as an application must
    // on -FI_EAGAIN) until it goes out.
    let sent = loop {
        assert!(std::time::Instant::now() < dl, "the send to the successor never went out: {:?}", ha.sends_done);
        match a.send_bytes(to_b, hdr(3), &pattern(8, 3), acked(3)) {
            Err(Error::Again) => {}
            other => break other,
        }
        a.progress(&mut ha);
        successor.progress(&mut hs);
    };
    assert_eq!(sent, Ok(SendStatus::Pending));
    assert_eq!(ha.sends_done, vec![(1, Ok(())), (2, Err(Error::PeerDead))], "before the successor was linked");
    pump_until((&mut a, &mut ha), (&mut successor, &mut hs), "the successor's answer", |ha, _| {
        ha.sends_done.len() == 3
    });
    assert_eq!(ha.sends_done[2], (3, Ok(())));
    assert_eq!(hs.received.len(), 1);
}

/// Acknowledged messages that one pass of the receiver's handles are answered in runs, one
/// response for up to `DONE_MANY_MAX` of them (`ok_run.rs`), and the answers keep the order of
/// the sends around a refusal among them.
#[test]
fn answers_of_one_pass_go_out_in_runs_in_send_order() {
    let (mut a, mut b, to_b) = pair("okrun", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    // Connected first, so that the pass below handles the messages alone.
    assert_eq!(a.send_bytes(to_b, hdr(100), &pattern(8, 0), acked(100)), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first answer", |ha, _| ha.sends_done.len() == 1);
    assert_eq!(b.stats().ok_runs, 0, "an answer with nothing behind it goes out alone");
    hb.refuse_tags = vec![9];
    for tag in 1..=16u64 {
        assert_eq!(a.send_bytes(to_b, hdr(tag), &pattern(8, tag as u8), acked(tag)), Ok(SendStatus::Pending));
    }
    let runs = b.stats().ok_runs;
    b.progress(&mut hb);
    assert_eq!(hb.received.len(), 1 + 15, "one pass took every message but the refused one");
    // 1..=6 full, 7 and 8 before the refusal of 9, 10..=15 full; 16 alone goes as a plain answer.
    assert_eq!(b.stats().ok_runs - runs, 3);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "every answer", |ha, _| ha.sends_done.len() == 17);
    let expected: Vec<(u64, Result<()>)> = std::iter::once((100, Ok(())))
        .chain((1..=16).map(|t| (t, if t == 9 { Err(Error::Refused(libc::EINVAL as u32)) } else { Ok(()) })))
        .collect();
    assert_eq!(ha.sends_done, expected);
    assert_eq!(a.stats().corrupt_commands, 0);
    for (i, (h, r, bytes)) in hb.received.iter().skip(1).enumerate() {
        let tag = if i < 8 { i as u64 + 1 } else { i as u64 + 2 };
        assert_eq!((h.tag, r, bytes), (tag, &Ok(8), &pattern(8, tag as u8)));
    }
}

/// A refused message fails its sender with the errno the receiver gave, for every protocol
/// (inline, inject, CMA or SAR); nothing is delivered.
#[test]
fn refused_messages_fail_their_senders_with_the_receivers_errno() {
    for (tag, cma, take_inline) in [("refc", true, false), ("refs", false, false), ("refx", false, true)] {
        let (mut a, mut b, to_b) = pair(tag, Params { cma, ..Params::default() });
        let (mut ha, mut hb) = (Collect::default(), Collect { refuse: Some(13), take_inline, ..Default::default() });
        let sizes = [1usize, 4096, 100_000];
        for (i, &len) in sizes.iter().enumerate() {
            let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 7, len: len as u64 };
            let opts =
                SendOpts { cookie: i as u64, delivery_complete: true, more: false, pull: false, split_early: false };
            let buf = LocalIov::owned(pattern(len, i as u8));
            assert_eq!(a.send(to_b, hdr, buf, opts), Ok(SendStatus::Pending));
        }
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "refusals", |ha, _| ha.sends_done.len() == sizes.len());
        for (i, (cookie, result)) in ha.sends_done.iter().enumerate() {
            assert_eq!((*cookie, result.clone()), (i as u64, Err(Error::Refused(13))), "size {}", sizes[i]);
        }
        assert!(hb.received.is_empty());
        assert_eq!(hb.offered.iter().map(|m| m.hdr.aux).collect::<Vec<_>>(), vec![7; 3]);
        assert_eq!((a.stats().corrupt_commands, b.stats().corrupt_commands), (0, 0));
        assert_eq!(hb.inline_taken, 2 * usize::from(take_inline), "the inline and inject ones on the express path");
    }
}

/// `Later`: the message is delivered, but its sender completes only when the receiver answers
/// (with success or an errno).
#[test]
fn later_messages_complete_their_senders_on_answer() {
    let (mut a, mut b, to_b) = pair("later", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { later: true, ..Default::default() });
    for (i, len) in [16usize, 3000].into_iter().enumerate() {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts = SendOpts { cookie: i as u64, delivery_complete: true, more: false, pull: false, split_early: false };
        assert_eq!(a.send(to_b, hdr, LocalIov::owned(pattern(len, 3)), opts), Ok(SendStatus::Pending));
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "deliveries", |_, hb| hb.received.len() == 2);
    for _ in 0..100 {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    assert!(ha.sends_done.is_empty(), "answered before the receiver said so: {:?}", ha.sends_done);
    assert_eq!(hb.received[1].2, pattern(3000, 3));
    let (first, second) = (hb.offered[0], hb.offered[1]);
    b.answer(first.answer_to(), Ok(()));
    b.answer(second.answer_to(), Err(22));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "answers", |ha, _| ha.sends_done.len() == 2);
    assert_eq!(ha.sends_done, vec![(0, Ok(())), (1, Err(Error::Refused(22)))]);
}

/// `answer_with`: the sender's handler gets the bytes, then the send completes; data longer
/// than a response entry holds is refused and nothing is sent.
#[test]
fn answers_carry_data_to_the_sender() {
    let (mut a, mut b, to_b) = pair("answerdata", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { later: true, ..Default::default() });
    for i in 0..3u64 {
        let hdr = MsgHeader { app: 0, tag: i, data: 0, aux: 0, len: 16 };
        let opts = SendOpts { cookie: 10 + i, delivery_complete: true, more: false, pull: false, split_early: false };
        assert_eq!(a.send(to_b, hdr, LocalIov::owned(pattern(16, 1)), opts), Ok(SendStatus::Pending));
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "deliveries", |_, hb| hb.received.len() == 3);
    let long = [7u8; crate::cmd::ANSWER_DATA_MAX + 1];
    let m = hb.offered.clone();
    assert_eq!(b.answer_with(m[0].answer_to(), &long), Err(Error::Invalid("answer data too long")));
    b.answer_with(m[0].answer_to(), &long[..crate::cmd::ANSWER_DATA_MAX]).unwrap();
    b.answer_with(m[1].answer_to(), &[]).unwrap();
    b.answer_with(m[2].answer_to(), &pattern(5, 9)).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "answers", |ha, _| ha.sends_done.len() == 3);
    assert_eq!(ha.sends_done, vec![(10, Ok(())), (11, Ok(())), (12, Ok(()))]);
    assert_eq!(ha.answers, vec![(10, vec![7u8; crate::cmd::ANSWER_DATA_MAX]), (11, vec![]), (12, pattern(5, 9))]);
}

/// `Disposition::AnswerWith`: a message offered with its payload (inline, or in an inject
/// buffer, which comes back) is answered in the same step with the handler's bytes; one offered
/// without (CMA) is refused, as the disposition promises.
#[test]
fn answers_with_data_go_out_in_the_step_that_takes_the_request() {
    for take_inline in [false, true] {
        answers_with_data_in_one_step(take_inline);
    }
}

fn answers_with_data_in_one_step(take_inline: bool) {
    let (mut a, mut b, to_b) = pair(if take_inline { "answerwithx" } else { "answerwith" }, Params::default());
    let free_before = free_buffers(&a);
    let (mut ha, mut hb) = (Collect::default(), Collect { answer_with: true, take_inline, ..Default::default() });
    let sizes = [0usize, 8, INLINE_MAX, INLINE_MAX + 1, INJECT_SIZE as usize];
    for (i, &len) in sizes.iter().enumerate() {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts = SendOpts { cookie: i as u64, delivery_complete: true, more: false, pull: false, split_early: false };
        assert_eq!(a.send_bytes(to_b, hdr, &pattern(len, i as u8), opts), Ok(SendStatus::Pending));
    }
    // One progress step of the receiver answers them all: nothing waits for a later step.
    b.progress(&mut hb);
    a.progress(&mut ha);
    assert_eq!(ha.sends_done.len(), sizes.len(), "answered in one step of the receiver");
    for (i, &len) in sizes.iter().enumerate() {
        assert_eq!(ha.sends_done[i], (i as u64, Ok(())));
        let n = len.min(crate::cmd::ANSWER_DATA_MAX);
        assert_eq!(ha.answers[i], (i as u64, pattern(len, i as u8)[..n].to_vec()), "size {len}");
    }
    assert!(hb.received.is_empty() && hb.taken.is_empty());
    let big = INJECT_SIZE as usize + 1;
    let hdr = MsgHeader { app: 0, tag: 99, data: 0, aux: 0, len: big as u64 };
    let opts = SendOpts { cookie: 99, delivery_complete: true, more: false, pull: true, split_early: false };
    assert_eq!(a.send(to_b, hdr, LocalIov::owned(pattern(big, 1)), opts), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "refusal", |ha, _| ha.sends_done.len() == sizes.len() + 1);
    assert_eq!(ha.sends_done.last(), Some(&(99, Err(Error::Refused(libc::EINVAL as u32)))));
    assert_eq!(ha.answers.len(), sizes.len(), "the refused message was answered with data");
    assert_eq!(free_buffers(&a), free_before, "inject buffers not returned");
    assert_eq!(hb.inline_taken, if take_inline { 5 } else { 0 }, "inline and inject requests on the express path");
}

/// `send_bytes`: every size up to inject_max arrives intact, offered with its payload
/// (`on_payload`, inline or from an inject buffer) for the handler to take, acknowledged sends
/// complete, and longer buffers are refused without sending anything.
#[test]
fn send_bytes_moves_small_messages_and_refuses_longer_ones() {
    let (mut a, mut b, to_b) = pair("sendbytes", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { take_payload: true, ..Default::default() });
    let sizes = [0usize, 8, INLINE_MAX, INLINE_MAX + 1, INJECT_SIZE as usize];
    for (i, &len) in sizes.iter().enumerate() {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts =
            SendOpts { cookie: i as u64, delivery_complete: i % 2 == 1, more: false, pull: false, split_early: false };
        let want = if opts.delivery_complete { SendStatus::Pending } else { SendStatus::Done };
        assert_eq!(a.send_bytes(to_b, hdr, &pattern(len, i as u8), opts), Ok(want));
    }
    let long = INJECT_SIZE as usize + 1;
    let hdr = MsgHeader { app: 0, tag: 99, data: 0, aux: 0, len: long as u64 };
    assert!(matches!(a.send_bytes(to_b, hdr, &pattern(long, 0), SendOpts::default()), Err(Error::Invalid(_))));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "deliveries", |ha, hb| {
        hb.taken.len() + hb.received.len() == sizes.len() && ha.sends_done.len() == 2
    });
    assert_eq!(hb.taken.len(), sizes.len(), "messages up to the inject size not offered through on_payload");
    assert!(hb.received.is_empty(), "a message was delivered instead of taken");
    for ((i, &len), (hdr, bytes)) in sizes.iter().enumerate().zip(&hb.taken) {
        assert_eq!((hdr.tag, bytes), (i as u64, &pattern(len, i as u8)));
    }
    assert_eq!(ha.sends_done, vec![(1, Ok(())), (3, Ok(()))]);
    assert!(hb.offered.iter().all(|m| m.hdr.tag != 99), "the refused message was sent");
}

/// A connected pair whose receiver takes what the express path offers (`take`) or declines it,
/// with the sender's and the receiver's handlers.
fn express_pair(take: bool, name: &str) -> (Endpoint, Endpoint, PeerId, Collect, Collect) {
    let (a, b, to_b) = pair(&format!("{name}{}", if take { "take" } else { "decline" }), Params::default());
    (a, b, to_b, Collect::default(), Collect { take_payload: true, take_inline: take, ..Default::default() })
}

/// The express path (`Handler::on_inline`): inline messages and messages in inject buffers are
/// offered there, with their bytes and their sender's id and incarnation (the same as
/// `on_payload` gives), and one whose sender asked for an answer is answered once taken. A
/// message taken there is seen nowhere else; one declined goes through `on_payload`, once, in
/// order. Either way the inject buffers come back.
#[test]
fn inline_messages_take_the_express_path() {
    for take in [true, false] {
        let (mut a, mut b, to_b, mut ha, mut hb) = express_pair(take, "express");
        let (pool, _) = free_buffers(&b);
        // Inline without an answer, inline acknowledged, inline without, inject without.
        let sends = [(0usize, false), (8, true), (INLINE_MAX, false), (INLINE_MAX + 1, false)];
        for (i, &(len, ack)) in sends.iter().enumerate() {
            let hdr = MsgHeader { app: 0, tag: i as u64, data: 7, aux: 0, len: len as u64 };
            let opts =
                SendOpts { cookie: i as u64, delivery_complete: ack, more: false, pull: false, split_early: false };
            a.send_bytes(to_b, hdr, &pattern(len, i as u8), opts).unwrap();
        }
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "deliveries", |ha, hb| {
            hb.taken.len() == sends.len() && ha.sends_done.len() == 1
        });
        let offered: Vec<u64> = hb.inline_offered.iter().map(|m| m.2.tag).collect();
        assert_eq!(offered, [0, 1, 2, 3], "offered on the express path (take {take})");
        for (_, _, hdr, bytes) in &hb.inline_offered {
            assert_eq!((hdr.data, bytes), (7, &pattern(hdr.len as usize, hdr.tag as u8)));
        }
        assert_eq!(hb.inline_taken, if take { 4 } else { 0 });
        // The taken message's buffer comes back at b's next pass; a keeps one for its next.
        b.progress(&mut hb);
        assert_eq!(free_buffers(&b).0 + spares_held(&b), pool, "inject buffers back but a's spare (take {take})");
        // Each once, in order: taken on the express path (through `Collect::on_inline`) or not.
        let tags: Vec<u64> = hb.taken.iter().map(|m| m.0.tag).collect();
        assert_eq!(tags, [0, 1, 2, 3], "taken (take {take})");
        for (hdr, bytes) in &hb.taken {
            assert_eq!(bytes, &pattern(hdr.len as usize, hdr.tag as u8));
        }
        let sender = hb.taken_from[0];
        assert!(hb.taken_from.iter().all(|&s| s == sender));
        assert!(hb.inline_offered.iter().all(|m| (m.0, m.1) == sender), "express offers name another sender");
        assert_ne!(sender.1, 0, "a connected sender's incarnation");
        assert_eq!(ha.sends_done, vec![(1, Ok(()))], "the acknowledged message answered once");
        for _ in 0..10 {
            a.progress(&mut ha);
            b.progress(&mut hb);
        }
        assert_eq!(ha.sends_done.len(), 1, "answered twice");
        // Nor was a message answered whose sender asked for no answer (a answers no peer).
        assert_eq!(a.stats().corrupt_commands, 0, "answers no send waited for (take {take})");
    }
}

/// Short messages arrive whole with their header's every field, on the express path or off it,
/// one by one or in a FI_MORE batch, and each answer wanted comes back for its own message:
/// those that go compact (no `aux`, no answer wanted, up to 32 bytes without CQ data,
/// `proto::COMPACT`, or 24 with it, `proto::COMPACT_DATA`; 9 to 16 bytes with `aux` or an answer
/// wanted and no CQ data, `proto::COMPACT_AUX`, an RMA write's) and those next to them that do
/// not.
#[test]
fn short_messages_arrive_whole_compact_or_not() {
    for take in [true, false] {
        let (mut a, mut b, to_b, mut ha, mut hb) = express_pair(take, "compact");
        let mut sent = Vec::new();
        // Completions reported to the sender: acknowledged messages', and batched ones'.
        let mut reported = Vec::new();
        for len in 0..=COMPACT_MAX + 8 {
            // Batched (pushed with the next), plain (compact up to 32 B), with CQ data, with
            // `aux`, acknowledged, with `aux` and acknowledged (one by one and batched), with all
            // three.
            let kinds = [
                (0, 0, false, true),
                (0, 0, false, false),
                (7, 0, false, false),
                (0, 9, false, false),
                (0, 0, true, false),
                (0, 9, true, false),
                (0, 9, true, true),
                (7, 9, true, false),
            ];
            for (data, aux, ack, more) in kinds {
                let tag = sent.len() as u64;
                let hdr = MsgHeader { app: 2, tag, data, aux, len: len as u64 };
                let opts = SendOpts { cookie: tag, delivery_complete: ack, more, pull: false, split_early: false };
                a.send_bytes(to_b, hdr, &pattern(len, tag as u8), opts).unwrap();
                sent.push(hdr);
                if ack || more {
                    reported.push(tag);
                }
            }
            pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the messages", |_, hb| hb.taken.len() == sent.len());
        }
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the answers", |ha, _| ha.sends_done.len() >= reported.len());
        let got: Vec<MsgHeader> = hb.taken.iter().map(|m| m.0).collect();
        assert_eq!(got, sent, "headers, in order (take {take})");
        for (h, bytes) in &hb.taken {
            assert_eq!(bytes, &pattern(h.len as usize, h.tag as u8), "message {} of {} B", h.tag, h.len);
        }
        let mut done: Vec<u64> = ha.sends_done.iter().map(|d| d.0).collect();
        done.sort_unstable();
        assert_eq!(done, reported, "each acknowledged or batched message reported once, by its own cookie");
        assert!(ha.sends_done.iter().all(|d| d.1.is_ok()));
        assert_eq!(hb.inline_taken, if take { sent.len() } else { 0 }, "taken on the express path (take {take})");
    }
}

/// The express send (`send_express`) sends only what the general path would push at once, and
/// declines, sending nothing, otherwise: before the peer acknowledged the connection, for more
/// than an inject buffer holds or a header of another length, and behind a staged FI_MORE
/// batch (which `send_bytes` then pushes first: order is kept). What it sends arrives intact,
/// inline or in an inject buffer.
#[test]
fn send_express_sends_what_the_general_path_would_and_declines_the_rest() {
    let (mut a, mut b, to_b) = pair("sendinline", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { take_payload: true, ..Default::default() });
    let hdr = |tag: u64, len: usize| MsgHeader { app: 0, tag, data: 0, aux: 0, len: len as u64 };
    let now = SendOpts::default();
    assert!(!a.send_express(to_b, &hdr(0, 8), &pattern(8, 0)), "sent before the connection was acknowledged");
    assert_eq!(a.send_bytes(to_b, hdr(0, 8), &pattern(8, 0), now), Ok(SendStatus::Done));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first message", |_, hb| hb.taken.len() == 1);
    a.progress(&mut ha); // the connection's acknowledgement
    let sent_before = (a.stats().sent_inline, a.stats().sent_inject);
    let too_long = INJECT_SIZE as usize + 1;
    assert!(!a.send_express(to_b, &hdr(1, too_long), &pattern(too_long, 1)), "longer than an inject buffer");
    assert!(!a.send_express(to_b, &hdr(1, 9), &pattern(8, 1)), "header of another length");
    let more = SendOpts { cookie: 1, more: true, ..SendOpts::default() };
    assert_eq!(a.send_bytes(to_b, hdr(1, 8), &pattern(8, 1), more), Ok(SendStatus::Pending));
    assert!(!a.send_express(to_b, &hdr(2, 8), &pattern(8, 2)), "sent ahead of a staged message");
    assert_eq!(a.send_bytes(to_b, hdr(2, 8), &pattern(8, 2), now), Ok(SendStatus::Done));
    for (tag, len) in [(3, 0), (4, 8), (5, INLINE_MAX), (6, INLINE_MAX + 1), (7, INJECT_SIZE as usize)] {
        assert!(a.send_express(to_b, &hdr(tag, len), &pattern(len, tag as u8)), "{len} B to a ready peer");
    }
    let sent = (a.stats().sent_inline - sent_before.0, a.stats().sent_inject - sent_before.1);
    assert_eq!(sent, (5, 2), "inline and inject sends");
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "every message", |_, hb| hb.taken.len() == 8);
    let tags: Vec<u64> = hb.taken.iter().map(|m| m.0.tag).collect();
    assert_eq!(tags, [0, 1, 2, 3, 4, 5, 6, 7], "arrival order");
    for (h, bytes) in &hb.taken {
        assert_eq!(bytes, &pattern(h.len as usize, h.tag as u8), "message {}", h.tag);
    }
}

/// An acknowledged small send to a ready peer takes the express path as a plain one does, and
/// still waits for its answer: pending until the receiver took it, answered once, with the
/// cookie it was sent with, inline and in an inject buffer alike.
#[test]
fn acknowledged_sends_take_the_express_path_and_complete_on_their_answer() {
    let (mut a, mut b, to_b) = pair("ackexpress", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { take_payload: true, ..Default::default() });
    let hdr = |tag: u64, len: usize| MsgHeader { app: 0, tag, data: 0, aux: 0, len: len as u64 };
    assert_eq!(a.send_bytes(to_b, hdr(0, 8), &pattern(8, 0), SendOpts::default()), Ok(SendStatus::Done));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first message", |_, hb| hb.taken.len() == 1);
    a.progress(&mut ha); // the connection's acknowledgement
    let sent_before = a.stats().sent_inline + a.stats().sent_inject;
    for (i, len) in [8, INLINE_MAX, INLINE_MAX + 1, INJECT_SIZE as usize].into_iter().enumerate() {
        let cookie = 100 + i as u64;
        let acked = SendOpts { cookie, delivery_complete: true, ..SendOpts::default() };
        let tag = 1 + i as u64;
        assert_eq!(a.send_bytes(to_b, hdr(tag, len), &pattern(len, tag as u8), acked), Ok(SendStatus::Pending));
        assert_eq!(a.stats().sent_inline + a.stats().sent_inject, sent_before + 1 + i as u64, "{len} B not pushed");
        a.progress(&mut ha);
        assert!(ha.sends_done.iter().all(|d| d.0 != cookie), "{len} B complete before the receiver took it");
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the answer", |ha, _| ha.sends_done.len() == 1 + i);
        assert_eq!(ha.sends_done[i], (cookie, Ok(())), "{len} B");
        assert_eq!(hb.taken[1 + i].1, pattern(len, tag as u8), "{len} B arrived intact");
    }
    for _ in 0..10 {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    assert_eq!(ha.sends_done.len(), 4, "answered twice");
}

/// Messages in inject buffers that the handler takes (from `on_payload`, or from `on_inline` on
/// the express path) give their buffers back: three times as many as the pool holds all arrive
/// intact, and the pool is whole afterwards. A command naming an inject buffer outside the pool
/// is counted as corrupt (`decode` rejects it), with nothing offered to the handler.
#[test]
fn taken_inject_messages_return_their_buffers_and_bad_ones_are_refused() {
    for take_inline in [false, true] {
        let name = if take_inline { "takeninjectexpress" } else { "takeninject" };
        let (mut a, mut b, to_b) = pair(name, Params::default());
        let (mut ha, mut hb) = (Collect::default(), Collect { take_payload: true, take_inline, ..Default::default() });
        let (pool, _) = free_buffers(&b);
        let count = 3 * pool;
        let len = INLINE_MAX + 100;
        for i in 0..count {
            let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
            let dl = deadline();
            while a.send_bytes(to_b, hdr, &pattern(len, i as u8), SendOpts::default()) == Err(Error::Again) {
                assert!(std::time::Instant::now() < dl, "inject buffers not coming back");
                b.progress(&mut hb);
            }
        }
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "deliveries", |_, hb| hb.taken.len() == count);
        for (i, (hdr, bytes)) in hb.taken.iter().enumerate() {
            assert_eq!((hdr.tag, bytes), (i as u64, &pattern(len, i as u8)));
        }
        assert_eq!(hb.inline_taken, if take_inline { count } else { 0 }, "taken on the express path");
        b.progress(&mut hb);
        assert_eq!(free_buffers(&b).0 + spares_held(&b), pool, "every buffer back but a's spare");
        assert_eq!(b.stats().corrupt_commands, 0);

        // A forged command: an inject message naming buffer `pool` (one past the last).
        let src = a.link(to_b).unwrap().slot;
        let mut e = CmdEntry::message(src, 1, &MsgHeader { app: 0, tag: 500, data: 0, aux: 0, len: 64 }, true);
        e.set_inject(pool as u32);
        crate::region::Region::open(b.name()).unwrap().cmd_ring().push(&e).unwrap();
        b.progress(&mut hb);
        assert_eq!(b.stats().corrupt_commands, 1);
        let offered = (hb.taken.len(), hb.offered.len(), hb.inline_offered.len());
        assert_eq!(offered, (count, 0, count), "the forged message was offered");
    }
}

/// With `inject_hold`, the inject buffers of the messages we took go back to our pool only after
/// `hold` others (`cold.rs`): a sender streaming to us fills buffers in turn, not the same two,
/// and none is lost (held ones are ours, counted free). Without it, the same two serve.
#[test]
fn inject_buffers_go_back_cold_when_asked() {
    use crate::sync::Ordering::Relaxed;
    for hold in [0usize, 8] {
        let params = Params { inject_hold: hold, ..Params::default() };
        let (mut a, mut b, to_b) = pair(&format!("injhold{hold}"), params);
        let (mut ha, mut hb) =
            (Collect::default(), Collect { take_payload: true, take_inline: true, ..Default::default() });
        let (pool, _) = free_buffers(&b);
        let len = INLINE_MAX + 1;
        let mut spares = std::collections::HashSet::new();
        for tag in 0..20u64 {
            let hdr = MsgHeader { app: 0, tag, data: 0, aux: 0, len: len as u64 };
            assert_eq!(a.send_bytes(to_b, hdr, &pattern(len, tag as u8), SendOpts::default()), Ok(SendStatus::Done));
            let want = tag as usize + 1;
            pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a message", |_, hb| hb.taken.len() == want);
            b.progress(&mut hb);
            let src = a.link(to_b).unwrap().slot as usize;
            spares.insert(b.region.peer_slots()[src].held.load(Relaxed));
        }
        assert!(hb.taken.iter().enumerate().all(|(i, t)| t.1 == pattern(len, i as u8)), "hold {hold}");
        assert_eq!(b.inject_held_back(), hold, "buffers held back");
        assert_eq!(free_buffers(&b).0, pool - 1, "hold {hold}: all back but the sender's spare");
        if hold == 0 {
            assert!(spares.len() <= 2, "without a hold the same buffers serve: {}", spares.len());
        } else {
            assert!(spares.len() > hold, "with a hold of {hold}, only {} buffers served", spares.len());
        }
    }
}

/// The spare inject buffer a sender keeps in its receiver's pool (`spare`): taken after each
/// inject message, filled by the next, and never lost. It goes back when the sender stops
/// sending (its second liveness tick without a send), when it closes, and, when it dies, by the
/// receiver that forgets it, as does a buffer the sender died copying a message into; a buffer
/// whose message the receiver handled does not go back twice, and a record of another
/// incarnation stays as it is.
#[test]
fn a_senders_spare_inject_buffer_always_comes_back() {
    use crate::sync::Ordering::Relaxed;
    let (mut a, mut b, to_b) = pair("spare", Params::default());
    let (mut ha, mut hb) =
        (Collect::default(), Collect { take_payload: true, take_inline: true, ..Default::default() });
    let (pool, _) = free_buffers(&b);
    let len = INLINE_MAX + 1;
    let send = |a: &mut Endpoint, b: &mut Endpoint, hb: &mut Collect, tag: u64| {
        let hdr = MsgHeader { app: 0, tag, data: 0, aux: 0, len: len as u64 };
        let dl = deadline();
        while a.send_bytes(to_b, hdr, &pattern(len, tag as u8), SendOpts::default()) == Err(Error::Again) {
            assert!(std::time::Instant::now() < dl, "no inject buffer");
            b.progress(hb);
        }
    };
    send(&mut a, &mut b, &mut hb, 0);
    let src = a.link(to_b).unwrap().slot as usize;
    let entry = |b: &Endpoint| b.region.peer_slots()[src].held.load(Relaxed);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first message", |_, hb| hb.taken.len() == 1);
    b.progress(&mut hb);
    assert_ne!(entry(&b), 0, "a keeps a spare after an inject message");
    assert_eq!(free_buffers(&b).0, pool - 1, "the message's buffer is back, the spare is not");

    // The next message fills the spare: b's pool is not touched for it, and a takes another.
    let spare = entry(&b);
    send(&mut a, &mut b, &mut hb, 1);
    assert_eq!(free_buffers(&b).0, pool - 2, "one buffer for the message, one spare");
    assert_ne!(entry(&b), spare, "a new spare");
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the second message", |_, hb| hb.taken.len() == 2);
    b.progress(&mut hb);
    assert_eq!(hb.taken[1].1, pattern(len, 1), "the spare carried the message");

    // A tick with a send since the last keeps the spare; the next one gives it back.
    a.tick_due = true;
    a.progress(&mut ha);
    assert_ne!(entry(&b), 0, "kept while a still sends");
    a.tick_due = true;
    a.progress(&mut ha);
    assert_eq!(entry(&b), 0, "given back once a stopped sending");
    assert_eq!(free_buffers(&b).0, pool);

    // a dies holding a spare: b, forgetting it, decides about its record once every command
    // a pushed is handled (at once here: none is left), and takes the spare back.
    send(&mut a, &mut b, &mut hb, 2);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the third message", |_, hb| hb.taken.len() == 3);
    b.progress(&mut hb);
    assert_ne!(entry(&b), 0, "a holds a spare");
    let inc = b.inp.get(&(src as SrcId)).unwrap().incarnation;
    let last = b.handled(src as SrcId, super::spare::Pool::Inject).expect("three inject messages handled");
    b.forget_in_peer(src as SrcId, &mut hb);
    b.tick_due = true;
    b.progress(&mut hb);
    assert_eq!((entry(&b), free_buffers(&b).0), (0, pool), "the dead sender's spare is back");
    // The entry is free, and what was handled from it counts from nothing again: for what
    // follows, as if its sender's messages were handled.
    assert_eq!(b.handled(src as SrcId, super::spare::Pool::Inject), None);
    b.note_handled(src as SrcId, super::spare::Pool::Inject, last);
    // What forgetting a sender of incarnation `inc` does about its record, without a sender.
    let forget_and_decide = |b: &mut Endpoint, hb: &mut Collect, inc: u64| {
        b.decide_later(src as SrcId, inc);
        b.tick_due = true;
        b.progress(hb);
    };

    // A buffer a dead sender was copying a message into (recorded in flight, the message never
    // handled) goes back; one whose message b handled (the last inject message's id) does not:
    // it went back when b took the message, and may be another sender's by now.
    let region = Arc::clone(&b.region);
    let rec = crate::held::Record { word: &region.peer_slots()[src].held, msg: &region.peer_slots()[src].held_msg };
    for (msg_id, back) in [(last + 1, true), (last, false)] {
        let index = region.inject_stack().pop().unwrap();
        rec.hold_in_flight(inc, Some(index), msg_id);
        forget_and_decide(&mut b, &mut hb, inc);
        assert_eq!(entry(&b), 0, "the record of message {msg_id} is decided");
        assert_eq!(free_buffers(&b).0, if back { pool } else { pool - 1 }, "message {msg_id}'s buffer");
        if !back {
            region.inject_stack().push(index).unwrap();
        }
    }

    // A sender killed inside its pop (`spare::take` and `spare::done` announce the buffer before
    // each attempt, `held`): after the pop took the buffer, for a message or as its spare, the
    // buffer comes back; before it did, what the record names stays where it is, free or taken
    // by another.
    let stack = region.inject_stack();
    for msg_id in [Some(last + 1), None] {
        let index = stack.pop_as(src as u32, |i| rec.announce(inc, i, msg_id)).unwrap();
        assert_ne!(entry(&b), 0, "the pop announced buffer {index}");
        forget_and_decide(&mut b, &mut hb, inc);
        assert_eq!((entry(&b), free_buffers(&b).0), (0, pool), "the buffer taken in the pop ({msg_id:?}) is back");
    }
    let named = stack.pop().unwrap();
    stack.push(named).unwrap();
    rec.announce(inc, named, Some(last + 1));
    forget_and_decide(&mut b, &mut hb, inc);
    assert_eq!((entry(&b), free_buffers(&b).0), (0, pool), "a buffer named but never taken");
    // The same again, with the named buffer on top for another process to take.
    let named = stack.pop().unwrap();
    stack.push(named).unwrap();
    rec.announce(inc, named, Some(last + 1));
    assert_eq!(stack.pop(), Ok(named), "another process takes the named buffer");
    forget_and_decide(&mut b, &mut hb, inc);
    assert_eq!(entry(&b), 0, "the record is decided");
    assert!(stack.in_use(named) && free_buffers(&b).0 == pool - 1, "another's buffer given back");
    stack.push(named).unwrap();

    // A record another incarnation left: a new holder of the entry does not touch it, and b's
    // decision about a third incarnation leaves it too.
    let index = region.inject_stack().pop().unwrap();
    rec.hold_in_flight(inc, Some(index), 9);
    let left = entry(&b);
    assert!(!rec.wants_spare(inc + 1) && rec.take_spare(inc + 1, 10).is_none());
    rec.hold_in_flight(inc + 1, Some(index ^ 1), 10);
    forget_and_decide(&mut b, &mut hb, inc + 2);
    assert_eq!(entry(&b), left, "another incarnation's record changed");
    forget_and_decide(&mut b, &mut hb, inc);
    assert_eq!((entry(&b), free_buffers(&b).0), (0, pool), "the left buffer is back");

    // Closing gives the spare back.
    let (mut c, mut hc) = (Endpoint::create(&name("sparec"), Params::default()).unwrap(), Collect::default());
    let c_to_b = c.add_peer(b.name()).unwrap();
    let hdr = MsgHeader { app: 0, tag: 9, data: 0, aux: 0, len: len as u64 };
    let dl = deadline();
    while c.send_bytes(c_to_b, hdr, &pattern(len, 9), SendOpts::default()) == Err(Error::Again) {
        assert!(std::time::Instant::now() < dl, "c never connected");
        b.progress(&mut hb);
        c.progress(&mut hc);
    }
    assert_eq!(spares_held(&b), 1, "c keeps a spare");
    drop(c);
    assert_eq!(spares_held(&b), 0, "c gave its spare back when it closed");
}

/// A sender stopped inside its pop of an inject buffer, between the head CAS and the mark (a
/// SIGSTOP, a debugger, a host that did not run it), for longer than `stall_timeout`: the
/// receiver's repair of its pool leaves the buffer alone, so no other process takes it before the
/// stopped one goes on. Stopped there and then gone, once the receiver has decided about it,
/// its buffer comes back.
#[test]
fn a_sender_stopped_mid_pop_keeps_its_buffer_through_the_receivers_repairs() {
    let (mut a, mut b, to_b) = pair("midpop", Params::default());
    let (mut ha, mut hb) =
        (Collect::default(), Collect { take_payload: true, take_inline: true, ..Default::default() });
    assert_eq!(a.send_bytes(to_b, hdr(1), &pattern(8, 1), SendOpts::default()), Ok(SendStatus::Done));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first message", |_, hb| hb.taken.len() == 1);
    let src = a.link(to_b).unwrap().slot as usize;
    let inc = b.inp.get(&(src as SrcId)).unwrap().incarnation;
    let region = Arc::clone(&b.region);
    let rec = crate::held::Record { word: &region.peer_slots()[src].held, msg: &region.peer_slots()[src].held_msg };
    let stack = region.inject_stack();
    let (pool, _) = free_buffers(&b);
    // More ticks than `stall_timeout` holds liveness intervals: an orphan left alone by the
    // repair so far is left alone for good.
    let ticks = 3 * (b.params.stall_timeout.as_nanos() / b.params.liveness_interval.as_nanos()).max(2);
    let tick = |b: &mut Endpoint, hb: &mut Collect| {
        for _ in 0..ticks {
            b.tick_due = true;
            b.progress(hb);
        }
    };

    let index = stack.pop_stopped_before_mark(src as u32, |i| rec.announce(inc, i, Some(7)));
    tick(&mut b, &mut hb);
    let free: Vec<u32> = std::iter::from_fn(|| stack.pop().ok()).collect();
    free.iter().for_each(|&i| stack.push(i).unwrap());
    assert!(!free.contains(&index), "the stopped sender's buffer {index} was handed out again");
    assert_eq!(free.len(), pool - 1);
    // It goes on: marks the buffer, records it in flight, then gives it back unsent.
    stack.finish_stopped_pop(index, src as u32);
    rec.hold_in_flight(inc, Some(index), 7);
    rec.give_back_in_flight(inc, index, &stack);
    assert_eq!((rec.pending(), free_buffers(&b).0), (None, pool));

    // Stopped there again, and gone: the decision leaves the buffer (the pop had not marked it)
    // and the record to the repair, which gives the buffer back.
    let index = stack.pop_stopped_before_mark(src as u32, |i| rec.announce(inc, i, Some(8)));
    b.forget_in_peer(src as SrcId, &mut hb);
    tick(&mut b, &mut hb);
    assert_eq!(rec.pending(), None, "the gone sender's record is decided");
    assert!(!stack.in_use(index));
    assert_eq!(free_buffers(&b).0, pool, "the gone sender's orphan {index} is back");
}

/// A sender whose entry in the receiver's peer table another holds when the receiver forgets it
/// (`claim_slot` took the entry of a dead sender until layout version 22; now only a scribble
/// gets there): forgetting it leaves the holder's claim, so that no third sender takes the entry
/// from under it. A connection request in the entry of a sender the receiver knows and that
/// lives is refused: the live sender keeps the entry. An entry that still holds the sender
/// forgotten is freed, once the receiver has passed its commands.
#[test]
fn forgetting_a_dead_sender_leaves_its_successors_entry() {
    use crate::layout::{SLOT_FREE, SLOT_READY};
    use crate::sync::Ordering::Relaxed;
    let (mut a, mut b, to_b) = pair("successor", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { take_inline: true, ..Default::default() });
    let hdr = MsgHeader { app: 0, tag: 7, data: 0, aux: 0, len: 8 };
    a.send_bytes(to_b, hdr, &pattern(8, 1), SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a's message", |_, hb| hb.inline_taken == 1);
    let src = a.link(to_b).unwrap().slot as SrcId;
    let region = Arc::clone(&b.region);
    let entry = &region.peer_slots()[src as usize];
    let successor = Endpoint::create(&name("successorc"), Params::default()).unwrap();
    let me = crate::liveness::ProcessIdentity::current().unwrap();
    super::entry::fill_slot(entry, successor.name(), me, successor.region.incarnation());

    b.forget_in_peer(src, &mut hb);
    b.decide_due();
    assert_eq!(entry.state.load(Relaxed) & 3, SLOT_READY, "the successor keeps the entry a's death freed");
    b.accept(src, &mut hb).unwrap();
    assert_eq!(entry.state.load(Relaxed) & 3, SLOT_READY, "and keeps it once b learns of it");
    assert_eq!(b.inp.get(&src).map(|p| p.name.as_str()), Some(successor.name()));

    // A connection request in the entry of a sender b knows and that lives is a scribble (no
    // sender takes an entry b has not freed): b keeps the sender it knows, and the entry.
    super::entry::fill_slot(entry, a.name(), me, a.region.incarnation());
    assert!(matches!(b.accept(src, &mut hb), Err(Error::Corrupt(_))), "a forged CONNECT accepted");
    assert_eq!(b.inp.get(&src).map(|p| p.name.as_str()), Some(successor.name()), "the live sender forgotten");
    assert_eq!(entry.state.load(Relaxed) & 3, SLOT_READY, "the live sender's entry freed");
    super::entry::fill_slot(entry, successor.name(), me, successor.region.incarnation());

    b.forget_in_peer(src, &mut hb);
    assert_eq!(entry.state.load(Relaxed) & 3, SLOT_READY, "kept until b has passed the sender's commands");
    b.decide_due();
    assert_eq!(entry.state.load(Relaxed), SLOT_FREE, "an entry still holding the sender forgotten is free");
}

/// Responses waiting in the receiver's backlog for room in a sender's response ring are for that
/// sender alone: once another sender holds its entry of the receiver's peer table (the first
/// died with its answers unread), they are dropped, not pushed into the successor's ring, where
/// they carry message ids that are the successor's too (a kill storm saw one complete a
/// survivor's send with an answer that did not fit it).
#[test]
fn responses_queued_for_a_sender_never_reach_its_successor_in_its_entry() {
    let mut params = Params::default();
    params.counts.resp_len = 8;
    let (mut a, mut b, to_b) = pair("queuedresp", params.clone());
    let mut hb = Collect { refuse: Some(13), ..Default::default() };
    // a reads none of its responses: b's refusals fill a's ring, and the rest wait.
    for i in 0..12 {
        assert_eq!(a.send_bytes(to_b, hdr(i), &pattern(8, 1), acked(i)), Ok(SendStatus::Pending));
    }
    let dl = deadline();
    while hb.offered.len() < 12 {
        assert!(std::time::Instant::now() < dl, "b took {} of the 12 messages", hb.offered.len());
        b.progress(&mut hb);
    }
    assert!(b.resp_backlog.len() >= 4, "{} responses wait for room in a's ring", b.resp_backlog.len());

    let mut successor = successor_in_entry(&mut a, &mut b, to_b, &mut hb, "queuedresps", params);
    b.progress(&mut hb);
    assert!(b.resp_backlog.is_empty(), "{} responses still wait", b.resp_backlog.len());
    successor.progress(&mut Collect::default());
    assert_eq!(successor.stats().corrupt_commands, 0, "the successor read a's answers");
}

/// The same for an answer the handler gives later (`Disposition::Later`): it goes to the sender
/// of the message, or to nobody.
#[test]
fn a_later_answer_reaches_its_sender_or_nobody() {
    let (mut a, mut b, to_b) = pair("laterto", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { later: true, ..Default::default() });
    for i in 0..2 {
        assert_eq!(a.send_bytes(to_b, hdr(i), &pattern(8, 1), acked(i)), Ok(SendStatus::Pending));
    }
    receive_until(&mut b, &mut hb, 2, "the messages were not received");
    b.answer(hb.offered[0].answer_to(), Ok(()));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first answer", |ha, _| !ha.sends_done.is_empty());
    assert_eq!(ha.sends_done, vec![(0, Ok(()))]);

    let mut successor = successor_in_entry(&mut a, &mut b, to_b, &mut hb, "latertos", Params::default());
    b.answer(hb.offered[1].answer_to(), Err(22));
    b.answer_with(hb.offered[1].answer_to(), &[1, 2]).unwrap();
    b.progress(&mut hb);
    successor.progress(&mut Collect::default());
    assert_eq!(successor.stats().corrupt_commands, 0, "the successor read a's answer");
}

/// And for a SAR message held whole, whose answer waits for its delivery: delivered after its
/// sender's entry passed to a successor, it answers nobody.
#[test]
fn a_held_sar_message_delivered_after_a_successor_took_the_entry_answers_nobody() {
    let params = Params { cma: false, ..Params::default() };
    let (mut a, mut b, to_b) = pair("heldto", params.clone());
    let (mut ha, mut hb) = (Collect::default(), Collect { hold: true, ..Default::default() });
    let len = 100_000;
    let opts = SendOpts { cookie: 1, delivery_complete: true, more: false, pull: false, split_early: false };
    let hdr = MsgHeader { len: len as u64, ..hdr(1) };
    assert_eq!(a.send(to_b, hdr, LocalIov::owned(pattern(len, 4)), opts), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the message offered", |_, hb| hb.offered.len() == 1);
    for _ in 0..100 {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    assert_eq!((b.held_count(), a.outstanding()), (1, 1), "held whole, its sender waiting");

    let mut successor = successor_in_entry(&mut a, &mut b, to_b, &mut hb, "heldtos", params);
    let delivered = b.deliver(hb.offered[0].key, LocalIov::owned(vec![0; len]), 1).unwrap();
    let Delivered::Now(Ok(n), dest) = delivered else { panic!("not delivered at once") };
    assert_eq!((n, dest.into_owned().unwrap()), (len, pattern(len, 4)));
    b.progress(&mut hb);
    successor.progress(&mut Collect::default());
    assert_eq!(successor.stats().corrupt_commands, 0, "the successor read a's answer");
}

/// Commands a sender left in the receiver's ring, a re-sent CONNECT among them, read after the
/// receiver forgot it and another sender took its entry: they are the first sender's (its
/// inline messages delivered, nothing answered), and the entry's new sender is learnt from its
/// own CONNECT only. Before CONNECT named its sender, the stale one made the receiver learn the
/// successor early and answer the first sender's messages into the successor's ring (a kill
/// storm's survivor counted them corrupt, and one completed a send of its own with an answer
/// that did not fit it).
#[test]
fn a_forgotten_senders_commands_are_not_its_successors() {
    use crate::layout::SLOT_READY;
    use crate::sync::Ordering::Relaxed;
    let (mut a, mut b, to_b) = pair("leftover", Params::default());
    let (mut ha, mut hb) =
        (Collect::default(), Collect { take_inline: true, take_payload: true, ..Default::default() });
    assert_eq!(a.send_bytes(to_b, hdr(1), &pattern(8, 1), acked(1)), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first answer", |ha, _| ha.sends_done.len() == 1);
    let (src, ring) = {
        let link = a.link(to_b).unwrap();
        (link.slot, Region::open(b.name()).unwrap())
    };
    // a's leftovers: a re-sent CONNECT, then two acknowledged messages; then a is forgotten.
    super::peers::push_cmd(&ring, src, &CmdEntry::connect(src, a.region.incarnation())).unwrap();
    for i in 2..4 {
        assert_eq!(a.send_bytes(to_b, hdr(i), &pattern(8, i as u8), acked(i)), Ok(SendStatus::Pending));
    }
    b.forget_in_peer(src as SrcId, &mut hb);
    let successor = take_entry(&mut b, src, "leftovers", Params::default());
    assert_eq!(b.region.peer_slots()[src as usize].state.load(Relaxed) & 3, SLOT_READY);

    for _ in 0..10 {
        b.progress(&mut hb);
    }
    let taken: Vec<u64> = hb.taken.iter().map(|(h, _)| h.tag).collect();
    assert_eq!(taken, vec![1, 2, 3], "a's inline messages are delivered");
    assert!(b.inp.get(&(src as SrcId)).is_none(), "b learnt the successor from a's commands");
    let mut successor = successor;
    successor.progress(&mut Collect::default());
    assert_eq!(successor.stats().corrupt_commands, 0, "the successor read answers to a's messages");
    assert_eq!(b.stats().corrupt_commands, 0);

    // The successor's own request: b learns it.
    super::peers::push_cmd(&ring, src, &CmdEntry::connect(src, successor.region.incarnation())).unwrap();
    b.progress(&mut hb);
    assert_eq!(b.inp.get(&(src as SrcId)).map(|p| p.name.as_str()), Some(successor.name()));
}

/// The same for a sender the receiver never met: it connected, sent and went, and another took
/// its entry, before the receiver read any of it. Nothing vouches for such commands (they may
/// be garbage): none is delivered, none answered.
#[test]
fn a_gone_senders_commands_read_after_its_entry_changed_hands_are_its_own() {
    let (mut a, mut b, to_b) = pair("nevermet", Params::default());
    let mut hb = Collect { take_inline: true, take_payload: true, ..Default::default() };
    for i in 1..3 {
        assert_eq!(a.send_bytes(to_b, hdr(i), &pattern(8, i as u8), acked(i)), Ok(SendStatus::Pending));
    }
    let src = a.link(to_b).unwrap().slot;
    let ring = Region::open(b.name()).unwrap();
    let mut successor = take_entry(&mut b, src, "nevermets", Params::default());
    super::peers::push_cmd(&ring, src, &CmdEntry::connect(src, successor.region.incarnation())).unwrap();

    for _ in 0..10 {
        b.progress(&mut hb);
    }
    assert!(hb.taken.is_empty() && hb.offered.is_empty(), "a's messages were offered");
    assert_eq!(b.inp.get(&(src as SrcId)).map(|p| p.name.as_str()), Some(successor.name()));
    successor.progress(&mut Collect::default());
    assert_eq!(successor.stats().corrupt_commands, 0, "the successor read answers to a's messages");
    assert_eq!(b.stats().corrupt_commands, 0);
}

/// A scribbler rewrites the peer-table entry of a live sender to name another endpoint and
/// pushes that endpoint's CONNECT. No sender takes an entry the receiver has not freed (layout
/// version 22), so the receiver refuses it: it keeps the sender it knows, counts the command as
/// corrupt, and the sender's next message arrives as its own. (Before, the receiver forgot the
/// live sender and took its messages for the named endpoint's.)
#[test]
fn a_forged_connect_in_a_live_senders_entry_leaves_it_known() {
    let (mut a, mut b, to_b) = pair("forgedconn", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { take_inline: true, ..Default::default() });
    let plain = SendOpts::default();
    a.send_bytes(to_b, hdr(1), &pattern(8, 1), plain).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a's first message", |_, hb| hb.inline_taken == 1);
    let src = a.link(to_b).unwrap().slot;
    let known = b.inp.get(&(src as SrcId)).map(|p| p.incarnation).unwrap();
    let forged = Endpoint::create(&name("forgedconnf"), Params::default()).unwrap();
    let me = crate::liveness::ProcessIdentity::current().unwrap();
    super::entry::fill_slot(&b.region.peer_slots()[src as usize], forged.name(), me, forged.region.incarnation());
    let ring = Region::open(b.name()).unwrap();
    super::peers::push_cmd(&ring, src, &CmdEntry::connect(src, forged.region.incarnation())).unwrap();
    for _ in 0..10 {
        b.progress(&mut hb);
    }
    assert_eq!(b.inp.get(&(src as SrcId)).map(|p| p.incarnation), Some(known), "b forgot the live sender");
    assert_eq!(b.stats().corrupt_commands, 1, "the forged CONNECT");

    a.send_bytes(to_b, hdr(2), &pattern(8, 2), plain).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a's second message", |_, hb| hb.inline_taken == 2);
    let (from, gen, header, payload) = hb.inline_offered.last().cloned().unwrap();
    assert_eq!((from, gen, header.tag, payload), (src as SrcId, known, 2, pattern(8, 2)), "a's message, as a's");
}

/// A new endpoint (`tag`) takes the entry of b's peer table that a sends through, as a sender
/// does once a is dead, and b learns of it.
fn successor_in_entry(
    a: &mut Endpoint,
    b: &mut Endpoint,
    to_b: PeerId,
    hb: &mut Collect,
    tag: &str,
    params: Params,
) -> Endpoint {
    let src = a.link(to_b).unwrap().slot;
    let successor = take_entry(&mut *b, src, tag, params);
    b.accept(src as SrcId, hb).unwrap();
    successor
}

/// A watch of `watch`'s process as if it had died: the same identity under a pid that has
/// exited (a test cannot kill an endpoint of its own process).
fn dead_watch(watch: &crate::liveness::Watch) -> crate::liveness::Watch {
    let pid = crate::liveness::dead_pid();
    crate::liveness::Watch::new(crate::liveness::ProcessIdentity { pid, ..watch.ident() })
}

/// A pair (`a` sends to `b`) whose first message, acknowledged, has been answered: `a` linked,
/// acknowledged and known to `b`. With both handlers.
fn answered_once(tag: &str, params: Params) -> (Endpoint, Endpoint, PeerId, Collect, Collect) {
    let (mut a, mut b, to_b) = pair(tag, params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    assert_eq!(a.send_bytes(to_b, hdr(1), &pattern(8, 1), acked(1)), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first answer", |ha, _| ha.sends_done.len() == 1);
    (a, b, to_b, ha, hb)
}

/// A short `stall_timeout`, and no liveness tick but the test's own.
fn stalls() -> Params {
    Params {
        stall_timeout: std::time::Duration::from_millis(20),
        liveness_interval: std::time::Duration::from_secs(3600),
        ..Params::default()
    }
}

/// A pair whose receiver `b` answered message 1 and took message 2 to answer later (it never
/// does).
fn one_answered_one_not(tag: &str) -> (Endpoint, Endpoint, PeerId, Collect, Collect) {
    let (mut a, mut b, to_b, ha, mut hb) = answered_once(tag, Params::default());
    hb.later = true;
    assert_eq!(a.send_bytes(to_b, hdr(2), &pattern(8, 2), acked(2)), Ok(SendStatus::Pending));
    receive_until(&mut b, &mut hb, 2, "the second message not received");
    (a, b, to_b, ha, hb)
}

/// A new endpoint (`tag`) fills entry `src` of b's peer table, as a sender claiming it does
/// once the sender b knows there died (b's watch of that sender says so from here on: a test
/// cannot kill an endpoint of its own process).
fn take_entry(b: &mut Endpoint, src: u32, tag: &str, params: Params) -> Endpoint {
    if let Some(known) = b.inp.get_mut(&(src as SrcId)) {
        known.watch = dead_watch(&known.watch);
        assert!(!known.watch.alive(), "a watch of a dead process");
    }
    let successor = Endpoint::create(&name(tag), params).unwrap();
    let me = crate::liveness::ProcessIdentity::current().unwrap();
    super::entry::fill_slot(&b.region.peer_slots()[src as usize], successor.name(), me, successor.region.incarnation());
    successor
}

/// Peer-table entries whose claimants were killed after claiming them and before filling them
/// in are claimed again; those of a live claimant are not.
#[test]
fn entries_left_half_claimed_by_the_dead_are_claimed_again() {
    use crate::layout::{SLOT_CLAIMED, SLOT_READY};
    use crate::liveness::ProcessIdentity;
    use crate::sync::Ordering::Relaxed;
    let mut b = Endpoint::create(&name("halfb"), Params::default()).unwrap();
    let dead = crate::liveness::dead_pid();
    let region = Arc::clone(&b.region);
    let entries = region.peer_slots();
    let me = crate::liveness::ProcessIdentity::current().unwrap();
    let claimed_by = |pid| super::entry::slot_word(SLOT_CLAIMED, ProcessIdentity { pid, ..me });
    for e in entries {
        e.state.store(claimed_by(dead), Relaxed);
    }
    // One entry a live process is claiming (this one): nobody takes it. Nor one that a process
    // of another pid namespace is claiming, whose pid (dead here) means nothing here.
    let live = (std::process::id() as usize) % entries.len();
    entries[live].state.store(claimed_by(std::process::id()), Relaxed);
    let foreign = (live + 1) % entries.len();
    let stranger = ProcessIdentity { pid: dead, ns: me.ns.wrapping_add(1), ..me };
    entries[foreign].state.store(super::entry::slot_word(SLOT_CLAIMED, stranger), Relaxed);

    let mut a = Endpoint::create(&name("halfa"), Params::default()).unwrap();
    let to_b = a.add_peer(b.name()).unwrap();
    let (mut ha, mut hb) = (Collect::default(), Collect { take_inline: true, ..Default::default() });
    let hdr = MsgHeader { app: 0, tag: 3, data: 0, aux: 0, len: 8 };
    let dl = deadline();
    while a.send_bytes(to_b, hdr, &pattern(8, 3), SendOpts::default()) == Err(Error::Again) {
        assert!(std::time::Instant::now() < dl, "no entry of b's peer table could be claimed");
        a.progress(&mut ha);
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the message", |_, hb| hb.inline_taken == 1);
    let src = a.link(to_b).unwrap().slot as usize;
    assert_ne!(src, live, "a live claimant's entry was taken");
    assert_ne!(src, foreign, "an entry of another pid namespace's claimant was judged by its pid");
    assert_eq!(entries[src].state.load(Relaxed) & 3, SLOT_READY);
    assert_eq!(hb.inline_offered[0].3, pattern(8, 3));
}

/// An entry of the peer table whose sender died, or left, passes to a new sender only once the
/// receiver freed it, past every command that sender pushed (`claim_slot`): until then a new
/// sender gets `Again` (here, with a one-entry table). An entry filled by a sender that died
/// before it pushed anything is found on the receiver's ticks (`unmet`), also on ticks after the
/// first; one of a sender it knew
/// is freed once it forgot it and its ring passed the sender's commands, and the count of what
/// was handled from the entry starts again.
#[test]
fn a_gone_senders_entry_passes_on_only_once_its_receiver_freed_it() {
    use super::spare::Pool;
    use crate::layout::Counts;
    use crate::liveness::ProcessIdentity;
    use crate::sync::Ordering::Relaxed;
    let d = Params::default();
    let params = Params {
        counts: Counts { max_peers: 1, ..d.counts },
        liveness_interval: std::time::Duration::from_millis(1),
        ..d
    };
    let mut b = Endpoint::create(&name("unmetb"), params).unwrap();
    let (mut ha, mut hb) = (Collect::default(), Collect { take_payload: true, ..Default::default() });
    // Ticks over the empty table first (a tick is due every 8th poll once the interval passed):
    // the dead sender's entry is found on a later one.
    for _ in 0..24 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        b.progress(&mut hb);
    }
    let dead = crate::liveness::dead_pid();
    let me = ProcessIdentity::current().unwrap();
    let region = Arc::clone(&b.region);
    let entry = &region.peer_slots()[0];
    super::entry::fill_slot(entry, &name("unmetghost"), ProcessIdentity { pid: dead, ..me }, 0x5eed);

    let mut a = Endpoint::create(&name("unmeta"), Params::default()).unwrap();
    let to_b = a.add_peer(b.name()).unwrap();
    let hdr = MsgHeader { app: 0, tag: 5, data: 0, aux: 0, len: 2000 };
    for _ in 0..3 {
        assert_eq!(a.send_bytes(to_b, hdr, &pattern(2000, 5), SendOpts::default()), Err(Error::Again));
    }
    assert_eq!(entry.incarnation.load(Relaxed), 0x5eed, "a took the entry of a sender b never met");
    let keep_trying = |a: &mut Endpoint, to_b: PeerId, b: &mut Endpoint, hb: &mut Collect, what: &str| {
        let dl = deadline();
        while a.send_bytes(to_b, hdr, &pattern(2000, 5), SendOpts::default()) == Err(Error::Again) {
            assert!(std::time::Instant::now() < dl, "{what}: {:?}", b.stats());
            std::thread::sleep(std::time::Duration::from_millis(1));
            b.progress(hb);
        }
    };
    keep_trying(&mut a, to_b, &mut b, &mut hb, "b never freed the dead sender's entry");
    assert_eq!(b.stats().unmet_dead_senders, 1);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a's message", |_, hb| hb.taken.len() == 1);
    assert!(b.handled(0, Pool::Inject).is_some(), "a's message came through the inject pool");

    // b forgets a (as when it dies): c waits until b's tick has passed a's commands.
    b.forget_in_peer(0, &mut hb);
    let mut c = Endpoint::create(&name("unmetc"), Params::default()).unwrap();
    let c_to_b = c.add_peer(b.name()).unwrap();
    assert_eq!(c.send_bytes(c_to_b, hdr, &pattern(2000, 6), SendOpts::default()), Err(Error::Again));
    assert_eq!(entry.incarnation.load(Relaxed), a.region.incarnation(), "c took the entry before b freed it");
    keep_trying(&mut c, c_to_b, &mut b, &mut hb, "b never freed the forgotten sender's entry");
    assert_eq!(entry.incarnation.load(Relaxed), c.region.incarnation());
    assert_eq!(b.handled(0, Pool::Inject), None, "the count of what was handled from the entry starts again");
}

/// The SAR buffer a sender copies a segment into is recorded until the segment is pushed
/// (`spare`): none stays recorded once SAR messages of every size went through. A receiver
/// forgetting the sender gives back one recorded for a segment it never handled (the sender died
/// copying it), and not one whose segment it handled (that buffer came back with the segment).
#[test]
fn a_dead_senders_sar_buffer_comes_back_unless_its_segment_arrived() {
    let (_a, mut b) = exchange_all_sizes("sarheld", Params { cma: false, ..Params::default() });
    assert_sar_records_decided(&mut b);
}

/// A SAR message of a sender we forgot (it died), still in our ring when we come to it, names a
/// buffer of our pool: the buffer comes back, once, though the message goes nowhere.
#[test]
fn a_forgotten_senders_sar_message_gives_its_buffer_back() {
    let params = Params { cma: false, ..Params::default() };
    let sar_count = params.counts.sar_count as usize;
    let (mut a, mut b, to_b) = pair("sarforgot", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    a.send_bytes(to_b, hdr(1), &pattern(8, 1), SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "hello", |_, hb| hb.received.len() == 1);
    let free_before = free_buffers(&b);
    assert_eq!(free_before.1, sar_count);
    // A SAR message pushed into b's ring, which b has not looked at yet.
    send_numbered(&mut a, to_b, 2, 10_000);
    assert!(free_buffers(&b).1 < sar_count, "the message took none of b's SAR buffers");
    let src = b.inp.iter().map(|(src, _)| src).next().expect("b knows a");
    b.forget_in_peer(src, &mut hb);
    drop(a);
    for _ in 0..64 {
        b.progress(&mut hb);
    }
    assert_eq!(hb.received.len(), 1, "the forgotten sender's SAR message went somewhere");
    assert_eq!(free_buffers(&b), free_before, "b's buffers, every one back once");
}

/// A SAR segment is named by its sender's count of the segments it pushed, not by its message's
/// id and offset. That key kept 30 bits for the offset (messages up to 1 GiB), and message ids
/// shifted past them wrapped after 2^34 messages: from there on every segment named a key below
/// the highest one handled, so a receiver took a dead sender's buffer for handled and kept it out
/// of the pool for good.
#[test]
fn sar_segments_are_named_in_order_past_every_message_id() {
    let (mut a, mut b, to_b) = pair("sarseq", Params { cma: false, ..Params::default() });
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    a.next_msg_id = (1 << 34) - 2;
    let len = 3 * SAR_FIRST_SEGMENT as usize;
    let mut handled = Vec::new();
    for i in 0..4 {
        exchange_one((&mut a, &mut ha), (&mut b, &mut hb), to_b, i, len);
        let src = a.link(to_b).unwrap().slot as SrcId;
        handled.push(b.handled(src, super::spare::Pool::Sar).expect("segments handled"));
    }
    assert!(a.next_msg_id > 1 << 34, "the message ids did not pass 2^34");
    assert!(handled.windows(2).all(|w| w[1] > w[0]), "the last segment handled, message by message: {handled:?}");
    assert_sar_records_decided(&mut b);
}

/// A message of one SAR segment leaves the sender a spare of the receiver's SAR pool (`spare`),
/// which carries its next such message; a message of several segments takes none; the spare
/// goes back once the sender stops sending.
#[test]
fn a_one_segment_sar_message_leaves_a_spare_that_carries_the_next() {
    use crate::sync::Ordering::Relaxed;
    let (mut a, mut b, to_b) = pair("sarspare", Params { cma: false, ..Params::default() });
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let (_, pool) = free_buffers(&b);
    let src = |a: &mut Endpoint| a.link(to_b).unwrap().slot as usize;
    let record = |b: &Endpoint, src: usize| b.region.peer_slots()[src].sar_held.load(Relaxed);
    let one_segment = INJECT_SIZE as usize + 1024;

    exchange_one((&mut a, &mut ha), (&mut b, &mut hb), to_b, 0, one_segment);
    let s = src(&mut a);
    b.progress(&mut hb);
    let spare = record(&b, s);
    assert_ne!(spare, 0, "a keeps a SAR spare after a one-segment message");
    assert_eq!(free_buffers(&b).1, pool - 1, "the message's buffer is back, the spare is not");

    // The next one goes in the spare (b's data arrives intact) and a takes another.
    exchange_one((&mut a, &mut ha), (&mut b, &mut hb), to_b, 1, one_segment);
    b.progress(&mut hb);
    assert_eq!(hb.received[1].2, pattern(one_segment, 1), "the spare carried the message");
    assert_ne!(record(&b, s), 0, "a new spare");
    assert_ne!(record(&b, s), spare, "the spare was used, not kept");
    assert_eq!(free_buffers(&b).1, pool - 1);

    // A message of several segments uses the spare for its first and takes no new one.
    exchange_one((&mut a, &mut ha), (&mut b, &mut hb), to_b, 2, 3 * SAR_FIRST_SEGMENT as usize);
    b.progress(&mut hb);
    assert_eq!(hb.received[2].2, pattern(3 * SAR_FIRST_SEGMENT as usize, 2));
    assert_eq!(record(&b, s), 0, "no spare after a message of several segments");
    assert_eq!(free_buffers(&b).1, pool, "every SAR buffer back");

    // Given back on the second tick without a send.
    exchange_one((&mut a, &mut ha), (&mut b, &mut hb), to_b, 3, one_segment);
    b.progress(&mut hb);
    assert_ne!(record(&b, s), 0);
    for _ in 0..2 {
        a.tick_due = true;
        a.progress(&mut ha);
    }
    assert_eq!((record(&b, s), free_buffers(&b).1), (0, pool), "the spare is back once a stopped sending");
}

/// `b`'s one sender is taken for gone: a SAR buffer recorded for a segment after the last one
/// `b` handled goes back to `b`'s pool, and one for the last it handled does not.
fn assert_sar_records_decided(b: &mut Endpoint) {
    use crate::sync::Ordering::Relaxed;
    let mut hb = Collect::default();
    let (src, inc) = b.inp.iter().map(|(s, p)| (s, p.incarnation)).next().expect("a connected sender");
    let region = Arc::clone(&b.region);
    let entry = &region.peer_slots()[src as usize];
    assert_eq!(entry.sar_held.load(Relaxed), 0, "a SAR buffer still recorded after its segment went out");
    let handled = b.handled(src, super::spare::Pool::Sar).expect("segments handled");
    let rec = crate::held::Record { word: &entry.sar_held, msg: &entry.sar_held_msg };
    let (_, pool) = free_buffers(b);
    for (key, back) in [(handled + 1, true), (handled, false)] {
        let index = region.sar_stack().pop().unwrap();
        rec.hold_in_flight(inc, Some(index), key);
        b.decide_later(src, inc);
        b.tick_due = true;
        b.progress(&mut hb);
        assert_eq!(entry.sar_held.load(Relaxed), 0, "segment {key:#x}: the record is decided");
        assert_eq!(free_buffers(b).1, if back { pool } else { pool - 1 }, "segment {key:#x}'s buffer");
        if !back {
            region.sar_stack().push(index).unwrap();
        }
    }
}

/// `pull` asks for CMA only above the first SAR segment: a one-segment message goes by SAR
/// (no system call, one step of the receiver either way), a longer one by CMA; both arrive.
/// One segment is the receiver's: with smaller SAR buffers, less fits.
#[test]
fn pull_takes_cma_only_for_messages_longer_than_one_segment() {
    if !cma_or_skip("pull_takes_cma_only_for_messages_longer_than_one_segment") {
        return;
    }
    let params = Params { cma_min: usize::MAX, ..Params::default() };
    let (mut a, mut b, to_b) = pair("pull", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let sizes = [SAR_FIRST_SEGMENT as usize, SAR_FIRST_SEGMENT as usize + 1];
    for (i, &len) in sizes.iter().enumerate() {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts = SendOpts { cookie: i as u64, delivery_complete: true, more: false, pull: true, split_early: false };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, i as u8)), opts).unwrap();
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "deliveries", |ha, _| ha.sends_done.len() == sizes.len());
    assert_eq!((a.stats().sent_sar, a.stats().sent_cma), (1, 1));
    for (hdr, result, bytes) in &hb.received {
        let len = sizes[hdr.tag as usize];
        assert_eq!((result, bytes), (&Ok(len), &pattern(len, hdr.tag as u8)));
    }
    assert_eq!(hb.received.len(), sizes.len());

    // A receiver with 8 KiB SAR buffers: 16 KiB is two of its segments, so it is pulled.
    let mut small = Params { cma_min: usize::MAX, ..Params::default() };
    small.counts.sar_size = 8192;
    let (mut a, mut b, to_b) = pair("pullsmall", small);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let len = SAR_FIRST_SEGMENT as usize;
    let hdr = MsgHeader { app: 0, tag: 0, data: 0, aux: 0, len: len as u64 };
    let opts = SendOpts { cookie: 0, delivery_complete: true, more: false, pull: true, split_early: false };
    a.send(to_b, hdr, LocalIov::owned(pattern(len, 5)), opts).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the pulled message", |ha, _| ha.sends_done.len() == 1);
    assert_eq!((a.stats().sent_sar, a.stats().sent_cma), (0, 1));
    assert_eq!(hb.received[0].2, pattern(len, 5));
}

/// `measure_protocol` from just above `measured::MEASURED_ABOVE`, one SAR segment included: the
/// sender tries CMA and SAR in turn while it learns, and every answer carries the receiver's time;
/// at that size (an inject buffer's) nothing is learnt.
#[test]
fn one_segment_messages_are_measured_above_the_smallest_class() {
    if !cma_or_skip("one_segment_messages_are_measured_above_the_smallest_class") {
        return;
    }
    let params = Params { cma_min: usize::MAX, measure_protocol: true, ..Params::default() };
    let (mut a, mut b, to_b) = pair("measured-small", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let smallest = super::measured::MEASURED_ABOVE as usize;
    let lens = [smallest, smallest + 1, smallest, 8 * 1024, 6 * 1024, 7 * 1024, 5 * 1024, 8 * 1024 - 1];
    for (i, &len) in lens.iter().enumerate() {
        send_numbered(&mut a, to_b, i as u64, len);
        // An inject message's send is done once pushed; the others wait for their answers.
        let answered = lens[..=i].iter().filter(|&&l| l > smallest).count();
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a message", |ha, hb| {
            hb.received.len() == i + 1 && ha.sends_done.len() == answered
        });
    }
    // Six of MEASURED_ABOVE + 1 .. 8 KiB, learning: three by CMA, three by SAR, the first of
    // each run not learnt; two in inject buffers. The next class learnt nothing.
    assert_eq!((a.stats().sent_cma, a.stats().sent_sar, a.stats().sent_inject), (3, 3, 2));
    assert_eq!(a.chooser.answers(8 * 1024), (2, 2));
    assert_eq!(a.chooser.answers(16 * 1024), (0, 0));
    for (hdr, result, bytes) in &hb.received {
        let len = lens[hdr.tag as usize];
        assert_eq!(result, &Ok(len));
        assert!(*bytes == pattern(len, hdr.tag as u8), "message {} differs", hdr.tag);
    }
    assert_eq!(hb.received.len(), lens.len());
}

/// A SAR message's time is the copies, not the span from its first segment to its last: here
/// the receiver has two SAR buffers and pauses 20 ms between taking segments, as it did when CMA
/// messages queued between a SAR message's segments (docs/perf/protocols.md), and SAR must still
/// be credited with about what its copies took, not the pauses.
#[test]
fn a_sar_message_is_timed_by_its_copies_not_by_pauses_between_segments() {
    if !cma_or_skip("a_sar_message_is_timed_by_its_copies_not_by_pauses_between_segments") {
        return;
    }
    let mut params = Params { cma_min: usize::MAX, measure_protocol: true, sar_hold: 0, ..Params::default() };
    params.counts.sar_count = 2;
    let (mut a, mut b, to_b) = pair("measured-pauses", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let len = 200_000usize;
    let pause = std::time::Duration::from_millis(20);
    // Learning: a run of three by CMA, then three by SAR (the first of each run not learnt).
    for i in 0..6 {
        send_numbered(&mut a, to_b, i as u64, len);
        let dl = deadline();
        while ha.sends_done.len() < i + 1 {
            assert!(std::time::Instant::now() < dl, "timed out waiting for message {i}");
            a.progress(&mut ha);
            b.progress(&mut hb);
            if !b.sar_rx.is_empty() {
                std::thread::sleep(pause);
            }
        }
    }
    assert_eq!((a.stats().sent_cma, a.stats().sent_sar), (3, 3));
    assert_eq!(a.chooser.answers(len as u64), (2, 2));
    // Seven segments into two buffers: at least three pauses, 60 ms, inside each SAR message.
    let spans_ns_per_kib = 3 * pause.as_nanos() as u64 * 1024 / len as u64;
    // Credited with the pauses, SAR would be at `spans_ns_per_kib` or above. Its copies alone
    // are far below, but this machine's tests run in parallel on two CPUs, and a copy preempted
    // midway once came to 44,000 ns/KiB (a seventh of the pauses): half is the line.
    let (sar, _) = a.chooser.figures(len as u64);
    assert!(sar > 0 && sar < spans_ns_per_kib / 2, "SAR credited {sar} ns/KiB, its pauses alone {spans_ns_per_kib}");
    for (hdr, result, bytes) in &hb.received {
        assert_eq!(result, &Ok(len));
        assert!(*bytes == pattern(len, hdr.tag as u8), "message {} differs", hdr.tag);
    }
    assert_eq!(hb.received.len(), 6);
}

/// A timed SAR message is charged its two sides' copies in sum (`Overlap::None`) only when it
/// went while we had another operation outstanding and its receiver progressed busy with
/// operations of its own (it polls, never free: each side of a two-way stream of large reads);
/// to a receiver that is free it is charged as a pipeline, as before. Every byte arrives.
#[test]
fn sar_copies_are_summed_only_when_both_sides_are_busy() {
    if !cma_or_skip("sar_copies_are_summed_only_when_both_sides_are_busy") {
        return;
    }
    let params = Params { cma_min: usize::MAX, measure_protocol: true, ..Params::default() };
    let (mut a, mut b, to_b) = pair("measured-overlap", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let len = 200_000usize;
    // Learning: a run of three by CMA (sends 0-2), then three by SAR (3-5), the first of each
    // run not timed.
    for i in 0..3 {
        send_numbered(&mut a, to_b, i, len);
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a CMA send", |ha, _| ha.sends_done.len() == i as usize + 1);
    }
    let timed_sar = |a: &Endpoint| -> Vec<(u64, Overlap)> {
        let mut v: Vec<_> = a
            .pending
            .iter()
            .filter(|(_, s)| s.measured.is_some_and(|c| c.via == Via::Sar && c.timed()))
            .map(|(_, s)| (s.cookie, s.overlap))
            .collect();
        v.sort_by_key(|&(cookie, _)| cookie);
        v
    };
    // The receiver progresses with operations of its own outstanding (not free); send 4 goes
    // while send 3 is outstanding.
    b.note_poll(false);
    send_numbered(&mut a, to_b, 3, len);
    send_numbered(&mut a, to_b, 4, len);
    assert_eq!(timed_sar(&a), [(4, Overlap::None)]);
    // Now it progresses free: send 5, with 3 and 4 still outstanding, is a pipeline again.
    b.note_poll(true);
    send_numbered(&mut a, to_b, 5, len);
    assert_eq!(timed_sar(&a), [(4, Overlap::None), (5, Overlap::Pipeline)]);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "six sends", |ha, _| ha.sends_done.len() == 6);
    assert_eq!((a.stats().sent_cma, a.stats().sent_sar), (3, 3));
    assert_eq!(a.chooser.answers(len as u64), (2, 2));
    for (hdr, result, bytes) in &hb.received {
        assert_eq!(result, &Ok(len));
        assert!(*bytes == pattern(len, hdr.tag as u8), "message {} differs", hdr.tag);
    }
    assert_eq!(hb.received.len(), 6);
}

/// `measure_protocol`: above one SAR segment the sender tries both protocols in turn until it has
/// three timed answers of each; its receivers time every transfer, held and delivered later or
/// delivered at once, and report the time in their answers (`measured.rs`); every byte arrives
/// whichever way.
#[test]
fn large_messages_go_both_ways_and_every_answer_is_timed() {
    if !cma_or_skip("large_messages_go_both_ways_and_every_answer_is_timed") {
        return;
    }
    let params = Params { cma_min: usize::MAX, measure_protocol: true, ..Params::default() };
    let (mut a, mut b, to_b) = pair("measured", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let len = 200_000usize;
    // Four held (no receive posted), then delivered: learning sends runs of three, so three by
    // CMA and the first of the SAR run.
    hb.hold = true;
    for i in 0..4 {
        send_numbered(&mut a, to_b, i as u64, len);
    }
    assert_eq!((a.stats().sent_cma, a.stats().sent_sar), (3, 1));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "four held messages", |_, hb| hb.offered.len() == 4);
    let dl = deadline();
    while !b.sar_rx.is_empty() {
        assert!(std::time::Instant::now() < dl, "timed out waiting for the held messages' segments");
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    assert_eq!(b.held_count(), 4);
    for m in hb.offered.clone() {
        match b.deliver(m.key, LocalIov::owned(vec![0; len]), m.hdr.tag).unwrap() {
            Delivered::Now(result, dest) => {
                assert_eq!(result, Ok(len));
                assert!(
                    dest.into_owned().unwrap() == pattern(len, m.hdr.tag as u8),
                    "held message {} differs",
                    m.hdr.tag
                );
            }
            Delivered::Later => panic!("held message {} not delivered at once", m.hdr.tag),
        }
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "their answers", |ha, _| ha.sends_done.len() == 4);
    // Every answer was timed; the first of each run is not learnt.
    assert_eq!(a.chooser.answers(len as u64), (0, 2));
    // Two delivered at once: the rest of the SAR run, both learnt.
    hb.hold = false;
    for i in 4..6 {
        send_numbered(&mut a, to_b, i as u64, len);
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a large message", |ha, _| ha.sends_done.len() == i + 1);
    }
    assert_eq!((a.stats().sent_cma, a.stats().sent_sar), (3, 3));
    assert_eq!(a.chooser.answers(len as u64), (2, 2));
    assert!(ha.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", ha.sends_done);
    for (hdr, result, bytes) in &hb.received {
        assert_eq!(result, &Ok(len));
        assert!(*bytes == pattern(len, hdr.tag as u8), "message {} differs", hdr.tag);
    }
    assert_eq!((hb.received.len(), b.stats().corrupt_commands), (2, 0));
}

/// Messages are matched in the order they were sent when the chooser switches from SAR to CMA
/// while a SAR message still waits for a buffer for its first segment: a later large message
/// waits (Again) until it has started, and then goes the way the chooser says, not by a CMA
/// command the receiver would match first, nor by SAR in its wake.
#[test]
fn a_cma_choice_behind_an_unstarted_sar_message_keeps_send_order() {
    if !cma_or_skip("a_cma_choice_behind_an_unstarted_sar_message_keeps_send_order") {
        return;
    }
    let d = Params::default();
    // Two SAR buffers, given back at once: the second SAR message waits for one.
    let counts = Counts { sar_count: 2, ..d.counts };
    let params = Params { cma_min: usize::MAX, measure_protocol: true, sar_hold: 0, counts, ..d };
    let (mut a, mut b, to_b) = pair("measured-order", params);
    let (mut ha, mut hb) = (Collect::default(), Collect { hold: true, ..Default::default() });
    let len = 200_000usize;
    // Learning sends runs of three: CMA, CMA, CMA, SAR, SAR, SAR, then CMA again.
    let n = 9;
    let mut waited = 0;
    for i in 0..n {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts =
            SendOpts { cookie: i as u64, delivery_complete: false, more: false, pull: false, split_early: false };
        let dl = deadline();
        loop {
            match a.send(to_b, hdr, LocalIov::owned(pattern(len, i as u8)), opts) {
                Ok(_) => break,
                Err(Error::Again) => {
                    assert!(a.sar_unstarted(to_b), "Again only behind an unstarted SAR message");
                    assert!(std::time::Instant::now() < dl, "message {i} waited too long");
                    waited += 1;
                    a.progress(&mut ha);
                    b.progress(&mut hb);
                }
                Err(e) => panic!("message {i}: {e:?}"),
            }
        }
    }
    assert!(waited > 0, "no message waited behind the SAR run");
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "every message offered", |_, hb| hb.offered.len() == n);
    let order: Vec<u64> = hb.offered.iter().map(|m| m.hdr.tag).collect();
    assert_eq!(order, (0..n as u64).collect::<Vec<_>>(), "matched out of send order");
    assert_eq!((a.stats().sent_cma, a.stats().sent_sar), (6, 3), "the CMA choices after the SAR run went by CMA");
    let dl = deadline();
    while !b.sar_rx.is_empty() {
        assert!(std::time::Instant::now() < dl, "timed out waiting for the segments");
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    for m in hb.offered.clone() {
        match b.deliver(m.key, LocalIov::owned(vec![0; len]), m.hdr.tag).unwrap() {
            Delivered::Now(result, dest) => {
                assert_eq!(result, Ok(len));
                assert!(dest.into_owned().unwrap() == pattern(len, m.hdr.tag as u8), "message {} differs", m.hdr.tag);
            }
            Delivered::Later => {}
        }
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "every send done", |ha, _| ha.sends_done.len() == n);
    assert!(ha.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", ha.sends_done);
}

/// FI_MORE: messages sent with `more` wait in the sender (the receiver sees none of them) until a
/// send without it; then they all arrive, in order, with the last one, in one batch per ring
/// claim; unacknowledged ones complete once out. A batch larger than the receiver's ring goes in
/// as far as it fits and the rest follows from progress, still in order, and a send without
/// `more` waits (Again) rather than overtake what is left.
#[test]
fn more_batches_small_messages_in_order() {
    let mut params = Params::default();
    params.counts.cmd_len = 8;
    let (mut a, mut b, to_b) = pair("more", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    // The connection handshake first, so the batch below is all messages.
    let hello = MsgHeader { app: 0, tag: 1000, data: 0, aux: 0, len: 1 };
    a.send_bytes(to_b, hello, &[1], SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "hello", |_, hb| hb.received.len() == 1);
    hb.received.clear();

    let sizes = [8usize, 0, INLINE_MAX, 100, 1, 16, 8, 8, 8, 8, 8, 8];
    for (i, &len) in sizes.iter().enumerate() {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts =
            SendOpts { cookie: i as u64, delivery_complete: i == 3, more: true, pull: false, split_early: false };
        assert_eq!(a.send_bytes(to_b, hdr, &pattern(len, i as u8), opts), Ok(SendStatus::Pending));
    }
    for _ in 0..50 {
        b.progress(&mut hb);
    }
    assert!(hb.received.is_empty(), "a staged message arrived before the batch was flushed");
    // The last one, without `more`, flushes: 8 of 12 fit the ring, the rest wait for room.
    let last = MsgHeader { app: 0, tag: 99, data: 0, aux: 0, len: 3 };
    assert_eq!(a.send_bytes(to_b, last, &[9, 9, 9], SendOpts::default()), Err(Error::Again));
    assert_eq!(a.stats().batches, 1);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the batch", |_, hb| hb.received.len() == sizes.len());
    assert_eq!(a.send_bytes(to_b, last, &[9, 9, 9], SendOpts::default()), Ok(SendStatus::Done));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the last", |ha, hb| {
        hb.received.len() == sizes.len() + 1 && ha.sends_done.len() == sizes.len()
    });
    let tags: Vec<u64> = hb.received.iter().map(|r| r.0.tag).collect();
    let mut want: Vec<u64> = (0..sizes.len() as u64).collect();
    want.push(99);
    assert_eq!(tags, want, "out of order");
    for (hdr, result, bytes) in &hb.received[..sizes.len()] {
        let len = sizes[hdr.tag as usize];
        assert_eq!((result, bytes), (&Ok(len), &pattern(len, hdr.tag as u8)));
    }
    let mut done: Vec<u64> = ha.sends_done.iter().map(|d| d.0).collect();
    done.sort();
    assert_eq!(done, (0..sizes.len() as u64).collect::<Vec<_>>());
    assert!(ha.sends_done.iter().all(|d| d.1.is_ok()));
    assert!(a.stats().batches >= 2, "the rest of the batch did not go out as a batch");
}

/// `more` stages inline messages only: an inject-sized one goes out at once, behind the messages
/// staged before it (in order), with its buffer recorded through the push like any inject
/// message (`spare`), so that it is not lost should the sender die with a batch staged.
#[test]
fn inject_sized_more_sends_go_out_at_once_behind_the_staged_ones() {
    let (mut a, mut b, to_b) = pair("moreinject", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let sizes = [8usize, INLINE_MAX + 1, 100, 4096];
    let more =
        |i: usize| SendOpts { cookie: i as u64, delivery_complete: false, more: true, pull: false, split_early: false };
    let send = |a: &mut Endpoint, i: usize| {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: sizes[i] as u64 };
        a.send_bytes(to_b, hdr, &pattern(sizes[i], i as u8), more(i))
    };
    assert_eq!(send(&mut a, 0), Ok(SendStatus::Pending), "an inline message is staged");
    assert_eq!(send(&mut a, 1), Ok(SendStatus::Done), "an inject-sized one goes out at once");
    assert_eq!(send(&mut a, 2), Ok(SendStatus::Pending));
    assert_eq!(send(&mut a, 3), Ok(SendStatus::Done));
    assert_eq!(a.stats().sent_inject, 2);
    // Both went through the recorded path: the second left a spare behind it in b's pool.
    assert_ne!(spares_held(&b), 0, "no spare: the inject-sized sends were not pushed as recorded");
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the four", |_, hb| hb.received.len() == sizes.len());
    let got: Vec<(u64, Vec<u8>)> = hb.received.iter().map(|r| (r.0.tag, r.2.clone())).collect();
    let want: Vec<(u64, Vec<u8>)> = (0..sizes.len()).map(|i| (i as u64, pattern(sizes[i], i as u8))).collect();
    assert_eq!(got, want, "out of order, or bytes wrong");
}

/// A long run of `more` sends goes out every `BATCH_MAX` messages, so the receiver works on it
/// while the sender builds the rest; what is staged after the last full batch waits, in order.
#[test]
fn long_more_runs_go_out_in_bounded_batches() {
    let (mut a, mut b, to_b) = pair("morelong", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let hello = MsgHeader { app: 0, tag: 1000, data: 0, aux: 0, len: 1 };
    a.send_bytes(to_b, hello, &[1], SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "hello", |_, hb| hb.received.len() == 1);
    hb.received.clear();
    let n = super::batch::BATCH_MAX + 3;
    for i in 0..n {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: 8 };
        let opts = SendOpts { cookie: i as u64, delivery_complete: false, more: true, pull: false, split_early: false };
        assert_eq!(a.send_bytes(to_b, hdr, &pattern(8, i as u8), opts), Ok(SendStatus::Pending));
    }
    for _ in 0..50 {
        b.progress(&mut hb);
    }
    let tags: Vec<u64> = hb.received.iter().map(|r| r.0.tag).collect();
    assert_eq!(tags, (0..super::batch::BATCH_MAX as u64).collect::<Vec<_>>(), "the first full batch");
    assert_eq!(a.stats().batches, 1);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the rest", |ha, hb| {
        hb.received.len() == n && ha.sends_done.len() == n
    });
    let tags: Vec<u64> = hb.received.iter().map(|r| r.0.tag).collect();
    assert_eq!(tags, (0..n as u64).collect::<Vec<_>>(), "out of order");
    for (hdr, result, bytes) in &hb.received {
        assert_eq!((result, bytes), (&Ok(8), &pattern(8, hdr.tag as u8)));
    }
}

/// Messages staged for several peers: a peer whose ring is full keeps the rest of its messages
/// staged, in order, ahead of any later send to it, and holds back no other peer's, which go out
/// with the same flush; every message arrives once, and every staged one is reported once.
#[test]
fn a_full_ring_holds_back_only_its_own_peers_staged_messages() {
    let mut small = Params::default();
    small.counts.cmd_len = 8;
    let (mut a, mut b, to_b) = pair("morepeers", small);
    let mut c = Endpoint::create(&name("morepeersc"), Params::default()).unwrap();
    let to_c = a.add_peer(c.name()).unwrap();
    let (mut ha, mut hb, mut hc) = (Collect::default(), Collect::default(), Collect::default());
    // The connection handshakes first, so that the rings below hold messages only.
    a.send_bytes(to_b, hdr(1000), &pattern(8, 0), SendOpts::default()).unwrap();
    a.send_bytes(to_c, hdr(1001), &pattern(8, 0), SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "hello b", |_, hb| hb.received.len() == 1);
    pump_until((&mut a, &mut ha), (&mut c, &mut hc), "hello c", |_, hc| hc.received.len() == 1);
    hb.received.clear();
    hc.received.clear();

    // 10 for b (whose ring takes 8), 2 for c, 1 for b, 1 for c: 14, fewer than a batch.
    let peers = [[to_b; 10].as_slice(), &[to_c, to_c, to_b, to_c]].concat();
    for (tag, &to) in peers.iter().enumerate() {
        let opts = SendOpts { cookie: tag as u64, more: true, ..SendOpts::default() };
        assert_eq!(a.send_bytes(to, hdr(tag as u64), &pattern(8, tag as u8), opts), Ok(SendStatus::Pending));
    }
    // A send to c flushes: b's ring takes 8, c's messages all go, b's last stays behind b's two.
    assert_eq!(a.send_bytes(to_c, hdr(14), &pattern(8, 14), SendOpts::default()), Ok(SendStatus::Done));
    pump_until((&mut a, &mut ha), (&mut c, &mut hc), "c's four", |_, hc| hc.received.len() == 4);
    // b has not taken anything yet: a send to it must not overtake its three staged messages.
    assert_eq!(a.send_bytes(to_b, hdr(15), &pattern(8, 15), SendOpts::default()), Err(Error::Again));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "b's eleven", |_, hb| hb.received.len() == 11);
    assert_eq!(a.send_bytes(to_b, hdr(15), &pattern(8, 15), SendOpts::default()), Ok(SendStatus::Done));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "b's last", |ha, hb| {
        hb.received.len() == 12 && ha.sends_done.len() == 14
    });
    for _ in 0..50 {
        a.progress(&mut ha);
        b.progress(&mut hb);
        c.progress(&mut hc);
    }
    let tags = |h: &Collect| h.received.iter().map(|r| r.0.tag).collect::<Vec<u64>>();
    assert_eq!(tags(&hb), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15], "b's messages, once each, in order");
    assert_eq!(tags(&hc), [10, 11, 13, 14], "c's messages, once each, in order");
    for (hdr, result, bytes) in hb.received.iter().chain(&hc.received) {
        assert_eq!((result, bytes), (&Ok(8), &pattern(8, hdr.tag as u8)), "message {}", hdr.tag);
    }
    let mut done: Vec<u64> = ha.sends_done.iter().map(|d| d.0).collect();
    done.sort_unstable();
    assert_eq!(done, (0..14).collect::<Vec<u64>>(), "each staged message reported once");
}

/// A SAR message whose first segment waits for a receiver buffer must not be overtaken by a
/// small message sent after it: messages are matched in send order (found by the 10-minute soak,
/// about once per 700,000 messages to SAR receivers).
#[test]
fn small_message_does_not_overtake_a_sar_message_waiting_for_a_buffer() {
    let d = Params::default();
    let params = Params { cma: false, counts: Counts { sar_count: 1, sar_size: 4096, ..d.counts }, ..d };
    let (mut a, mut b, to_b) = pair("sarorder", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let dl = deadline();
    let mut sent = 0u64;
    // A: takes the one SAR buffer; B: queued, its first segment waits; C, D: small.
    for (tag, len) in [(0u64, 20_000usize), (1, 20_000), (2, 100), (3, 3000)] {
        let hdr = MsgHeader { app: 1, tag, data: 0, aux: 0, len: len as u64 };
        loop {
            let opts = SendOpts { cookie: tag, delivery_complete: false, more: false, pull: false, split_early: false };
            match a.send(to_b, hdr, LocalIov::owned(pattern(len, tag as u8)), opts) {
                Err(Error::Again) => {
                    assert!(std::time::Instant::now() < dl, "message {tag} still answers Again");
                    a.progress(&mut ha);
                    b.progress(&mut hb);
                }
                other => {
                    other.unwrap();
                    break;
                }
            }
        }
        sent += 1;
    }
    while hb.received.len() < sent as usize {
        assert!(std::time::Instant::now() < dl, "only {} of {sent} received", hb.received.len());
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    let matched: Vec<u64> = hb.offered.iter().map(|m| m.hdr.tag).collect();
    assert_eq!(matched, [0, 1, 2, 3], "matching order");
}

/// Delivers message `tag` into slot `tag / 2`: the two messages of a pair write the same
/// bytes, as two RMA writes into one registration do.
struct IntoPairSlots {
    slots: Vec<Vec<u8>>,
    done: usize,
}

impl Handler for IntoPairSlots {
    fn on_message(&mut self, msg: &Incoming, _src_name: &str) -> Disposition {
        let slot = &mut self.slots[(msg.hdr.tag / 2) as usize];
        assert_eq!(msg.hdr.len as usize, slot.len(), "message {} of the wrong length", msg.hdr.tag);
        // SAFETY: the slot is never resized and is read only once every message has been
        // delivered (`done`), so it stays valid and untouched while the engine writes it.
        let dest = unsafe { LocalIov::from_raw(&[(slot.as_mut_ptr(), slot.len())]) };
        Disposition::Deliver { dest, ctx: msg.hdr.tag }
    }
    fn on_recv_done(&mut self, ctx: u64, result: Result<usize>, _dest: LocalIov) {
        assert_eq!(result, Ok(self.slots[0].len()), "message {ctx}");
        self.done += 1;
    }
    fn on_send_done(&mut self, _cookie: u64, _result: Result<()>) {}
}

/// SAR messages to one receiver enter its ring whole, in send order: a later one pushes no
/// segment while an earlier one to the same receiver still has segments to push, so two of them
/// over the same bytes (two RMA writes into one registration) leave the later one's bytes. A
/// later message used to go on once the earlier had started: with one SAR buffer, given back by
/// a receiver polling in a thread of its own, the earlier found the pool empty, the buffer came
/// back, and the later took it before the earlier looked again (found by the conformance
/// suite's lone_ops under tiny pools: a 64 KiB write's second segment landed after the next
/// write's first, and a read saw the earlier write's bytes).
#[test]
fn sar_messages_enter_the_ring_whole_in_send_order() {
    let d = Params::default();
    let segment = 4096;
    let params =
        Params { cma: false, sar_hold: 0, counts: Counts { sar_count: 1, sar_size: segment, ..d.counts }, ..d };
    let (mut a, mut b, to_b) = pair("sarwhole", params);
    let (pairs, len) = (400usize, 4 * segment as usize + 100);
    let sender = std::thread::spawn(move || {
        let mut ha = Collect::default();
        let dl = deadline();
        for tag in 0..2 * pairs as u64 {
            let hdr = MsgHeader { app: 0, tag, data: 0, aux: 0, len: len as u64 };
            let opts = SendOpts { cookie: tag, ..SendOpts::default() };
            while let Err(e) = a.send(to_b, hdr, LocalIov::owned(pattern(len, tag as u8)), opts) {
                assert_eq!(e, Error::Again, "message {tag}");
                assert!(std::time::Instant::now() < dl, "message {tag} still answers Again");
                a.progress(&mut ha);
            }
        }
        while ha.sends_done.len() < 2 * pairs {
            assert!(std::time::Instant::now() < dl, "{} of {} sends done", ha.sends_done.len(), 2 * pairs);
            a.progress(&mut ha);
        }
        assert!(ha.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", ha.sends_done);
        a
    });
    let mut hb = IntoPairSlots { slots: vec![vec![0; len]; pairs], done: 0 };
    let dl = deadline();
    while hb.done < 2 * pairs {
        assert!(std::time::Instant::now() < dl, "{} of {} messages delivered", hb.done, 2 * pairs);
        b.progress(&mut hb);
    }
    let _a = sender.join().unwrap();
    for (i, slot) in hb.slots.iter().enumerate() {
        let later = pattern(len, (2 * i + 1) as u8);
        if let Some(at) = slot.iter().zip(&later).position(|(got, want)| got != want) {
            panic!("pair {i}: byte {at} (segment {}) is not the later message's", at / segment as usize);
        }
    }
}

/// Send `request(buf, len)` with `buf` reserved for its answer.
fn send_request(a: &mut Endpoint, to_b: PeerId, cookie: u64, len: usize) -> Result<SendStatus> {
    send_read_request(a, to_b, cookie, len, None)
}

/// `send_request` for a read the chooser chose answered (`timed`: its choice): the request asks
/// its target to time its copy (`AnswerBuf::timed`) when the choice is to be learnt.
fn send_read_request(
    a: &mut Endpoint,
    to_b: PeerId,
    cookie: u64,
    len: usize,
    timed: Option<Choice>,
) -> Result<SendStatus> {
    let buf = a.reserve_answer_buf(len)?;
    let req = request(if timed.is_some() { buf.timed() } else { buf }, len);
    let opts = SendOpts { cookie, delivery_complete: true, more: false, pull: false, split_early: false };
    a.send_bytes_answered(to_b, request_hdr(cookie, &req), &req, opts, buf, timed.map(|c| (c, len)))
}

/// The fifth choice of `choose_read` for reads of `len` bytes, a timed answered read: the
/// chooser learns in runs of three, CMA first, the first of each untimed.
fn fifth_read_choice(a: &mut Endpoint, len: usize) -> Choice {
    let choice = (0..5).map(|_| a.choose_read(len).expect("measuring")).last().unwrap();
    assert!(choice.via == Via::Sar && choice.timed());
    choice
}

/// Reads timed for `choose_read` (`read_way.rs`): a read of one SAR buffer's size goes one way
/// or the other in runs while the chooser learns, CMA first; the receiver times its copy into
/// the answer buffer and says so in its answer, and the sender learns every answered read but
/// the first of each run, as it learns the CMA reads it timed itself. Nothing stays recorded
/// once the answers are in.
#[test]
fn answered_reads_are_timed_and_learnt_beside_cma_reads() {
    let params = Params { measure_protocol: true, ..Params::default() };
    let len = params.counts.sar_size as usize;
    let (mut a, mut b, to_b) = pair("readway", params);
    let (mut ha, mut hb) = (Collect::default(), Collect { answer_into: true, ..Default::default() });
    assert_eq!(a.choose_read(8 * 1024), None, "too small to be worth timing");
    assert!(a.choose_read(8 * 1024 + 1).is_some(), "reads above 8 KiB are measured");
    let mut answered = 0;
    for i in 0..12u64 {
        let choice = a.choose_read(len).expect("measuring");
        match choice.via {
            // As if read with CMA in 5 us.
            Via::Cma => a.learn_read(choice, len, 5_000),
            Via::Sar => {
                assert_eq!(send_read_request(&mut a, to_b, i, len, Some(choice)), Ok(SendStatus::Pending));
                answered += 1;
            }
        }
    }
    assert_eq!(answered, 6, "runs of three, CMA first");
    assert_eq!(a.read_answers(len), (0, 4), "CMA: the first of each run is not learnt");
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "answers", |ha, _| ha.sends_done.len() == answered);
    assert!(ha.sends_done.iter().all(|d| d.1.is_ok()), "{:?}", ha.sends_done);
    assert!(ha.answers.iter().all(|(_, data)| data.len() == len), "every answer whole");
    assert_eq!(a.read_answers(len), (4, 4), "answered reads learnt as CMA ones are");
    assert!(a.timed_reads.is_empty());
}

/// Only an answer its target placed and timed teaches the read chooser (`learn_answer`): one
/// without a time (its target answered some other way) or one that failed is no sample of an
/// answered read's cost.
#[test]
fn only_a_placed_and_timed_answer_teaches_the_read_chooser() {
    let params = Params { measure_protocol: true, ..Params::default() };
    let len = params.counts.sar_size as usize;
    let (_, mut a, _) = pair("readwayanswer", params);
    let timed = (fifth_read_choice(&mut a, len), len as u64);
    let started = std::time::Instant::now();
    a.learn_answer(timed, &RespEntry::done_timed(1, Status::Placed, len as u64, 0), started);
    a.learn_answer(timed, &RespEntry::done_timed(1, Status::Dropped, 0, 5_000), started);
    assert_eq!(a.read_answers(len), (0, 0), "an untimed or failed answer taught something");
    a.learn_answer(timed, &RespEntry::done_timed(1, Status::Placed, len as u64, 5_000), started);
    assert_eq!(a.read_answers(len), (1, 0));
}

/// A timed answered read that ends without its answer (its target gone: `fail_sends_to`)
/// leaves no record behind (`forget_timed_reads`).
#[test]
fn a_timed_read_that_ends_unanswered_is_forgotten() {
    let params = Params { measure_protocol: true, ..Params::default() };
    let len = params.counts.sar_size as usize;
    let (mut a, _b, to_b) = pair("readwayforget", params);
    let choice = fifth_read_choice(&mut a, len);
    let sent = send_read_request(&mut a, to_b, 7, len, Some(choice));
    assert_eq!((sent, a.timed_reads.len()), (Ok(SendStatus::Pending), 1));
    let mut ha = Collect::default();
    a.fail_sends_to(to_b, &mut ha);
    assert_eq!(ha.sends_done, vec![(7, Err(Error::PeerDead))]);
    assert!(a.timed_reads.is_empty(), "the ended read's record stayed");
}

/// Answers placed in the sender's own buffers (`answer_into`): every size up to
/// `ANSWER_BUFS_MAX` SAR buffers, in an inject buffer up to 4 KiB, one SAR buffer up to its
/// size and as many as it fills above, arrive intact in one response each (in a part per
/// buffer), and every reserved buffer is free again afterwards (and while none is pending, none
/// is held).
#[test]
fn answers_placed_in_the_senders_buffers_arrive_and_free_them() {
    for take_inline in [false, true] {
        answers_placed(take_inline);
    }
}

fn answers_placed(take_inline: bool) {
    let params = Params::default();
    let sar_size = params.counts.sar_size as usize;
    let (mut a, mut b, to_b) = pair(if take_inline { "placedx" } else { "placed" }, params);
    let free_before = free_buffers(&a);
    let (mut ha, mut hb) = (Collect::default(), Collect { answer_into: true, take_inline, ..Default::default() });
    let most = ANSWER_BUFS_MAX * sar_size;
    let sizes = [
        0usize,
        33,
        1024,
        INJECT_SIZE as usize - 1,
        INJECT_SIZE as usize,
        INJECT_SIZE as usize + 1,
        16384,
        sar_size,
        sar_size + 1,
        3 * sar_size - 7,
        most,
    ];
    let mut names = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        assert_eq!(send_request(&mut a, to_b, i as u64, len), Ok(SendStatus::Pending), "size {len}");
        names.push(a.acked.get(a.next_msg_id - 1).and_then(|s| s.answer).unwrap());
    }
    assert_eq!(a.answer_bufs_held(), sizes.len());
    assert!(names[..5].iter().all(|n| n.wire() & (1 << 31) == 0), "inject buffers up to 4 KiB: {names:?}");
    assert!(names[5..].iter().all(|n| n.wire() & (1 << 31) != 0), "SAR buffers above: {names:?}");
    let spanned: Vec<usize> = names.iter().map(|n| n.more().len() + 1).collect();
    assert_eq!(spanned, [1, 1, 1, 1, 1, 1, 1, 1, 2, 3, ANSWER_BUFS_MAX], "buffers per answer");
    assert_eq!(a.answer_buf_max(), most);
    assert!(matches!(a.reserve_answer_buf(most + 1), Err(Error::Invalid(_))));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "answers", |ha, _| ha.sends_done.len() == sizes.len());
    for (i, &len) in sizes.iter().enumerate() {
        assert_eq!(ha.sends_done[i], (i as u64, Ok(())));
        assert_eq!(ha.answers[i], (i as u64, pattern(len, names[i].wire() as u8)), "size {len}");
        assert_eq!(ha.answer_parts[i], spanned[i], "size {len}: a part per buffer");
        // The last request, with no other behind it, is answered a piece at a time (it is
        // long): every `PART_BYTES` up to its end announced before the whole answer, each
        // announcement the answer's first bytes. The others had requests behind them, whose
        // sender had other answers to take meanwhile: no pieces.
        let pieces: Vec<&Vec<u8>> = ha.answer_pieces.iter().filter(|p| p.0 == i as u64).map(|p| &p.1).collect();
        let step = crate::endpoint::answer::PART_BYTES as usize;
        let lone = i == sizes.len() - 1;
        let expected: Vec<usize> = if lone && len as u64 >= crate::endpoint::answer::PARTS_FROM {
            (step..len).step_by(step).collect()
        } else {
            vec![]
        };
        assert_eq!(pieces.iter().map(|p| p.len()).collect::<Vec<_>>(), expected, "size {len}: pieces announced");
        assert!(
            pieces.iter().all(|p| p[..] == ha.answers[i].1[..p.len()]),
            "size {len}: a piece not the answer's start"
        );
    }
    assert_eq!(b.stats().answers_placed, sizes.len() as u64);
    assert_eq!(a.answer_bufs_held(), 0);
    assert_eq!(free_buffers(&a), free_before, "reserved buffers not returned");
    // Every request is a few inline bytes, whatever the size of its answer.
    assert_eq!(hb.inline_taken, if take_inline { sizes.len() } else { 0 }, "requests on the express path");
}

/// An answer that spans SAR buffers takes all of them or none: with fewer free than it needs,
/// the reserve fails (`Again`) and gives back what it took, so the pool is as it was.
#[test]
fn a_spanning_answer_takes_all_its_buffers_or_none() {
    let (mut a, _b, _to_b) = pair("spanall", Params::default());
    let sar_size = a.params().counts.sar_size as usize;
    let free_before = free_buffers(&a);
    let mut held = Vec::new();
    while free_buffers(&a).1 > 2 {
        held.push(a.reserve_answer_buf(sar_size).unwrap());
    }
    assert!(matches!(a.reserve_answer_buf(3 * sar_size), Err(Error::Again)));
    assert_eq!(free_buffers(&a).1, 2, "buffers taken by a reserve that failed");
    let two = a.reserve_answer_buf(2 * sar_size).unwrap();
    assert_eq!(two.more().len(), 1);
    assert_eq!(free_buffers(&a).1, 0);
    held.push(two);
    held.into_iter().for_each(|buf| a.release_answer_buf(Some(buf)));
    assert_eq!(free_buffers(&a), free_before);
}

/// A request naming a buffer out of range, in either pool, timed or not, first or further, inject
/// buffers spanned, or buffers too small for the answer, is refused (EINVAL) with nothing
/// written; a refused request's buffers are free again.
#[test]
fn bad_answer_buffer_names_are_refused() {
    let (mut a, mut b, to_b) = pair("badname", Params::default());
    let free_before = free_buffers(&a);
    let (mut ha, mut hb) = (Collect::default(), Collect { answer_into: true, ..Default::default() });
    let counts = a.params().counts;
    let (sar, more) = (1u32 << 31, |n: u32| n << 28);
    let named = |name: u32, further: &[u16]| AnswerBuf::from_wire(name, further).unwrap();
    let bad = [
        (named(counts.inject_count as u32, &[]), 8),
        (named(u32::MAX >> 4, &[]), 8),
        (named(sar | counts.sar_count as u32, &[]), 8),
        // Asking for the copy's time (`AnswerBuf::timed`) names no other buffer.
        (named(sar | counts.sar_count as u32, &[]).timed(), 8),
        (named(u32::MAX, &[0, 1, 2]), 8),
        // Only SAR buffers are spanned.
        (named(more(1), &[1]), 8),
        // A further buffer out of range.
        (named(sar | more(2), &[1, counts.sar_count as u16]), 8),
        (named(sar | more(1), &[u16::MAX]), 8),
        (named(0, &[]), INJECT_SIZE as usize + 1),
        (named(sar, &[]), counts.sar_size as usize + 1),
        (named(sar | more(1), &[1]), 2 * counts.sar_size as usize + 1),
    ];
    // Hostile requests: the names are forged, the buffers the sender reserves are others.
    for (i, &(name, len)) in bad.iter().enumerate() {
        let buf = a.reserve_answer_buf(8).unwrap();
        let req = request(name, len);
        let opts = SendOpts { cookie: i as u64, delivery_complete: true, more: false, pull: false, split_early: false };
        a.send_bytes_answered(to_b, request_hdr(i as u64, &req), &req, opts, buf, None).unwrap();
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "refusals", |ha, _| ha.sends_done.len() == bad.len());
    let einval = Error::Refused(libc::EINVAL as u32);
    assert!(ha.sends_done.iter().all(|d| d.1 == Err(einval.clone())), "{:?}", ha.sends_done);
    assert!(ha.answers.is_empty());
    assert_eq!((b.stats().answers_placed, b.stats().corrupt_commands), (0, bad.len() as u64));
    // A request the receiver refuses outright: its buffer comes back too.
    hb.refuse = Some(13);
    send_request(&mut a, to_b, 99, 2000).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "refusal", |ha, _| ha.sends_done.len() == bad.len() + 1);
    assert_eq!(ha.sends_done.last(), Some(&(99, Err(Error::Refused(13)))));
    assert_eq!(free_buffers(&a), free_before, "reserved buffers not returned");
}

/// Two acknowledged sends to `to_b` for forged answers to finish: a 100-byte request naming an
/// answer buffer (cookie 1, tag 1) and 8 plain bytes (cookie 2, tag 2). Their message ids.
fn request_and_plain_send(a: &mut Endpoint, to_b: PeerId) -> (u64, u64) {
    send_request(a, to_b, 1, 100).unwrap();
    let with_buf = a.next_msg_id - 1;
    let hdr = MsgHeader { app: 0, tag: 2, data: 0, aux: 0, len: 8 };
    let opts = SendOpts { cookie: 2, delivery_complete: true, more: false, pull: false, split_early: false };
    a.send_bytes(to_b, hdr, &[0; 8], opts).unwrap();
    (with_buf, a.next_msg_id - 1)
}

/// A hostile receiver's answers: a length beyond the buffer is clamped to it (the handler
/// checks it against what it asked), an answer "placed" for a send that named no buffer fails
/// that send, and so does a CMA failure for a small send (which made no CMA read); a second
/// answer to a finished send finishes nothing. Buffers come back either way.
#[test]
fn hostile_placed_answers_are_clamped_or_refused() {
    let (mut a, _b, to_b) = pair("hostileans", Params::default());
    let free_before = free_buffers(&a);
    let mut ha = Collect::default();
    let (with_buf, without) = request_and_plain_send(&mut a, to_b);
    let hdr = MsgHeader { app: 0, tag: 3, data: 0, aux: 0, len: 8 };
    a.send_bytes(
        to_b,
        hdr,
        &[0; 8],
        SendOpts { cookie: 3, delivery_complete: true, more: false, pull: false, split_early: false },
    )
    .unwrap();
    let small = a.next_msg_id - 1;
    // Forged responses, as the receiver would push them into our response ring.
    let peer = crate::region::Region::open(a.name()).unwrap();
    use crate::cmd::Status::{CmaFailed, Placed};
    for (msg_id, status, value) in [(with_buf, Placed, u64::MAX), (without, Placed, 8), (small, CmaFailed, 0)] {
        let entry = RespEntry::done(msg_id, status, value);
        peer.resp_ring().push(&entry).unwrap();
    }
    let dl = deadline();
    while ha.sends_done.len() < 3 {
        assert!(std::time::Instant::now() < dl, "forged answers not handled");
        a.progress(&mut ha);
    }
    assert_eq!(ha.answers.len(), 1);
    assert_eq!((ha.answers[0].0, ha.answers[0].1.len()), (1, INJECT_SIZE as usize), "length not clamped");
    assert_eq!(ha.sends_done[0], (1, Ok(())));
    assert!(matches!(ha.sends_done[1], (2, Err(Error::Corrupt(_)))), "{:?}", ha.sends_done);
    assert!(matches!(ha.sends_done[2], (3, Err(Error::Corrupt(_)))), "{:?}", ha.sends_done);
    assert_eq!(a.outstanding(), 0);
    // Answered again: nothing is pending under that id any more.
    let corrupt = a.stats().corrupt_commands;
    peer.resp_ring().push(&RespEntry::done(small, crate::cmd::Status::Ok, 0)).unwrap();
    while a.stats().corrupt_commands == corrupt {
        assert!(std::time::Instant::now() < dl, "second answer not seen");
        a.progress(&mut ha);
    }
    assert_eq!(ha.sends_done.len(), 3, "a finished send finished again");
    assert_eq!(free_buffers(&a), free_before, "reserved buffers not returned");
}

/// A hostile receiver's announced pieces (`resp::PART`): one for a send that is not outstanding
/// or named no answer buffer is counted as corrupt and reaches no handler; one longer than the
/// buffers is clamped to them; none finishes its send.
#[test]
fn hostile_pieces_are_clamped_or_ignored() {
    let (mut a, _b, to_b) = pair("hostilepart", Params::default());
    let mut ha = Collect::default();
    let (with_buf, without) = request_and_plain_send(&mut a, to_b);
    let peer = crate::region::Region::open(a.name()).unwrap();
    for (msg_id, placed) in [(with_buf, u64::MAX), (without, 8), (with_buf + 1000, 8)] {
        peer.resp_ring().push(&RespEntry::part(msg_id, placed)).unwrap();
    }
    let dl = deadline();
    while a.stats().corrupt_commands < 2 {
        assert!(std::time::Instant::now() < dl, "forged pieces not handled");
        a.progress(&mut ha);
    }
    assert_eq!(a.stats().corrupt_commands, 2);
    assert_eq!(ha.answer_pieces.len(), 1);
    assert_eq!((ha.answer_pieces[0].0, ha.answer_pieces[0].1.len()), (1, INJECT_SIZE as usize), "not clamped");
    assert!(ha.sends_done.is_empty() && ha.answers.is_empty(), "a piece finished a send");
    assert_eq!(a.outstanding(), 2);
}

/// A hostile receiver's gathered answers (`resp::DONE_MANY`): ids that are not outstanding (never
/// sent, repeated within the entry, 0, the largest id) finish nothing and are counted as
/// corrupt, a count beyond what the entry holds is clamped, and the sends it does name finish
/// once each; a send it does not name stays outstanding.
#[test]
fn hostile_gathered_answers_finish_only_outstanding_sends() {
    let (mut a, _b, to_b) = pair("hostilemany", Params::default());
    let mut ha = Collect::default();
    let mut ids = Vec::new();
    for tag in 1..=3u64 {
        assert_eq!(a.send_bytes(to_b, hdr(tag), &[0; 8], acked(tag)), Ok(SendStatus::Pending));
        ids.push(a.next_msg_id - 1);
    }
    let peer = crate::region::Region::open(a.name()).unwrap();
    let mut entry = RespEntry::done_many(&[ids[0], ids[1] + 1000, ids[0], ids[1], u64::MAX, 0]);
    entry.status = 200;
    peer.resp_ring().push(&entry).unwrap();
    let mut empty = RespEntry::done_many(&[ids[2], ids[2]]);
    empty.status = 0;
    peer.resp_ring().push(&empty).unwrap();
    let dl = deadline();
    while a.stats().corrupt_commands < 4 || ha.sends_done.len() < 2 {
        assert!(std::time::Instant::now() < dl, "forged answers not handled");
        a.progress(&mut ha);
    }
    a.progress(&mut ha);
    assert_eq!(ha.sends_done, vec![(1, Ok(())), (2, Ok(()))]);
    assert_eq!(a.stats().corrupt_commands, 4, "the unknown, repeated, 0 and largest ids");
    assert_eq!(a.outstanding(), 1, "the third send, named by no valid answer, still waits");
}

/// A receiver that goes away with requests unanswered: they fail, and their buffers (all of
/// those an answer spans, and those of requests that never went out) are free again.
#[test]
fn answer_buffers_come_back_when_the_receiver_goes() {
    let (mut a, b, to_b) = pair("anslost", Params::default());
    let free_before = free_buffers(&a);
    let mut ha = Collect::default();
    let spanning = 3 * a.params().counts.sar_size as usize;
    for (i, len) in [100usize, 20_000, spanning].into_iter().enumerate() {
        assert_eq!(send_request(&mut a, to_b, i as u64, len), Ok(SendStatus::Pending));
    }
    assert_eq!(a.answer_bufs_held(), 3);
    // Not acknowledged: refused before anything is sent, the buffer freed at once.
    let buf = a.reserve_answer_buf(100).unwrap();
    let hdr = MsgHeader { app: 0, tag: 9, data: 0, aux: 0, len: 8 };
    assert!(a.send_bytes_answered(to_b, hdr, &request(buf, 100), SendOpts::default(), buf, None).is_err());
    drop(b);
    let dl = deadline();
    while ha.sends_done.len() < 3 {
        assert!(std::time::Instant::now() < dl, "requests to a closed receiver not failed");
        a.progress(&mut ha);
    }
    assert!(ha.sends_done.iter().all(|d| d.1 == Err(Error::PeerDead)), "{:?}", ha.sends_done);
    assert_eq!(a.answer_bufs_held(), 0);
    assert_eq!(free_buffers(&a), free_before, "reserved buffers not returned");
}

/// A pending SAR send given a new buffer (`rebuffer_pending`, as when the registration its
/// bytes came from is closed) takes the segments not yet sent from the new buffer: the old one
/// may change or go away without the receiver seeing it.
#[test]
fn a_rebuffered_sar_send_takes_its_remaining_segments_from_the_new_buffer() {
    let d = Params::default();
    let params = Params { cma: false, counts: Counts { sar_count: 2, sar_size: 16384, ..d.counts }, ..d };
    let (mut a, mut b, to_b) = pair("rebuf", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let len = 100_000;
    let mut original = pattern(len, 3);
    let hdr = MsgHeader { app: 0, tag: 7, data: 0, aux: 0, len: len as u64 };
    // SAFETY: `original` outlives the send (checked done below) and is changed only after the
    // send was given another buffer.
    let lent = unsafe { LocalIov::from_raw(&[(original.as_mut_ptr(), len)]) };
    let opts = SendOpts { cookie: 42, delivery_complete: true, more: false, pull: false, split_early: false };
    assert_eq!(a.send(to_b, hdr, lent, opts).unwrap(), SendStatus::Pending);
    // Two 16 KiB segments are out (both SAR buffers); the rest waits for the receiver.
    assert!(!a.rebuffer_pending(43, LocalIov::owned(vec![0; len])), "no send with cookie 43");
    assert!(!a.rebuffer_pending(42, LocalIov::owned(vec![0; len - 1])), "a buffer of another length");
    assert!(a.rebuffer_pending(42, LocalIov::owned(pattern(len, 3))));
    original.iter_mut().for_each(|b| *b = 0xee);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the message and its ack", |ha, hb| {
        hb.received.len() == 1 && ha.sends_done.len() == 1
    });
    assert_eq!(ha.sends_done, vec![(42, Ok(()))]);
    let (_, result, bytes) = &hb.received[0];
    assert_eq!(*result, Ok(len));
    assert!(*bytes == pattern(len, 3), "bytes from the old buffer after the rebuffer");
    drop(original);
}

/// `cma_write`: a receiver copies straight into the memory its sender names (a read's answer
/// written into the initiator's buffer), `cma_with` says when that is allowed, and a sender
/// that has gone gets nothing written.
#[test]
fn cma_write_copies_into_the_senders_memory_and_not_after_it_is_gone() {
    if !cma_or_skip("cma_write") {
        return;
    }
    let (mut a, mut b, to_b) = pair("cmawrite", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { later: true, ..Default::default() });
    assert!(!a.cma_with(to_b), "no link yet, so nothing is known of the peer");
    let hdr = MsgHeader { app: 0, tag: 0, data: 0, aux: 0, len: 8 };
    let opts = SendOpts { cookie: 1, delivery_complete: true, more: false, pull: false, split_early: false };
    assert_eq!(a.send(to_b, hdr, LocalIov::owned(pattern(8, 1)), opts), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the request", |_, hb| hb.received.len() == 1);
    assert!(a.cma_with(to_b));
    let to = hb.offered[0].answer_to();
    let mut first = vec![0u8; 5000];
    let mut second = vec![0u8; 70_000];
    let remote = [
        RemoteIov { addr: first.as_mut_ptr() as u64, len: 5000 },
        RemoteIov { addr: second.as_mut_ptr() as u64, len: 60_000 },
    ];
    let data = pattern(65_000, 4);
    assert_eq!(b.cma_write(to, &LocalIov::owned(data.clone()), &remote), Ok(65_000));
    assert_eq!(b.stats().cma_writes, 1);
    assert_eq!(first, data[..5000]);
    assert_eq!(second[..60_000], data[5000..]);
    assert!(second[60_000..].iter().all(|&x| x == 0), "written past the named range");
    let unknown = AnswerTo { src: to.src + 1, ..to };
    assert_eq!(b.cma_write(unknown, &LocalIov::owned(data.clone()), &remote), Err(Error::PeerDead), "unknown source");
    drop(a);
    second.fill(0);
    for _ in 0..1000 {
        b.progress(&mut hb);
    }
    assert!(b.cma_write(to, &LocalIov::owned(data), &remote).is_err(), "a closed sender is not written");
    assert!(second.iter().all(|&x| x == 0));
}

/// Delivers every message into one caller-owned buffer (registered memory, as a write's).
struct IntoBuffer {
    at: *mut u8,
    len: usize,
    received: Vec<(u64, Result<usize>)>,
}

impl Handler for IntoBuffer {
    fn on_message(&mut self, msg: &Incoming, _src_name: &str) -> Disposition {
        // SAFETY: the test's buffer, which outlives both endpoints' use of it.
        let dest = unsafe { LocalIov::from_raw(&[(self.at, self.len)]) };
        Disposition::Deliver { dest, ctx: msg.hdr.tag }
    }
    fn on_recv_done(&mut self, ctx: u64, result: Result<usize>, _dest: LocalIov) {
        self.received.push((ctx, result));
    }
    fn on_send_done(&mut self, _cookie: u64, _result: Result<()>) {}
}

/// A SAR message refused while it arrives (`refuse_arriving`, as when the registration it is
/// written into is closed) writes nothing more into its destination, its sender fails with the
/// errno, and the handler hears no more of it.
#[test]
fn a_message_refused_while_it_arrives_writes_no_more_and_fails_its_sender() {
    let d = Params::default();
    let params = Params { cma: false, counts: Counts { sar_count: 2, sar_size: 16384, ..d.counts }, ..d };
    let (mut a, mut b, to_b) = pair("refarr", params);
    let len = 100_000;
    let mut target = vec![0xeeu8; len];
    let sent = pattern(len, 5);
    let mut ha = Collect::default();
    let mut hb = IntoBuffer { at: target.as_mut_ptr(), len, received: Vec::new() };
    let hdr = MsgHeader { app: 0, tag: 7, data: 0, aux: 0, len: len as u64 };
    let opts = SendOpts { cookie: 42, delivery_complete: true, more: false, pull: false, split_early: false };
    assert_eq!(a.send(to_b, hdr, LocalIov::owned(sent.clone()), opts), Ok(SendStatus::Pending));
    // The first two segments (both SAR buffers) arrive and are placed.
    b.progress(&mut hb);
    let placed = target.iter().zip(&sent).position(|(t, s)| t != s).unwrap_or(len);
    assert!(placed > 0 && placed < len, "{placed} bytes placed after one step");
    assert!(!b.refuse_arriving(8, 13), "nothing arrives for ctx 8");
    assert!(b.refuse_arriving(7, 13));
    assert!(!b.refuse_arriving(7, 13), "refused already");
    let dl = deadline();
    while ha.sends_done.is_empty() {
        assert!(std::time::Instant::now() < dl, "timed out waiting for the refusal");
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    assert_eq!(ha.sends_done, vec![(42, Err(Error::Refused(13)))]);
    assert!(hb.received.is_empty(), "{:?}", hb.received);
    assert!(target[placed..].iter().all(|&x| x == 0xee), "bytes written after the refusal");
    assert_eq!(free_buffers(&b).1, 2, "SAR buffers not returned");
}

/// Messages of `sizes` sent one at a time, each into a receive of `dest_len(i)` bytes (the
/// message's length if None), the receiver taking them on the express path (`take_fill`) or
/// delivering them: both endpoints and handlers after the last answer, for the caller to check.
fn send_each_filled(
    tag: &str,
    params: Params,
    sizes: &[usize],
    dest_len: impl Fn(usize) -> Option<usize>,
    take_fill: bool,
) -> (Endpoint, Endpoint, Collect, Collect) {
    let (mut a, mut b, to_b) = pair(&format!("{tag}{}", if take_fill { "express" } else { "general" }), params);
    let (mut ha, mut hb) = (Collect::default(), Collect { take_fill, ..Collect::default() });
    for (i, &len) in sizes.iter().enumerate() {
        hb.dest_len = dest_len(i);
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts = SendOpts { cookie: i as u64, ..SendOpts::default() };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, i as u8 + 1)), opts).unwrap();
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a message", |ha, _| ha.sends_done.len() == i + 1);
    }
    assert_eq!((a.outstanding(), b.outstanding(), b.stats().corrupt_commands), (0, 0, 0));
    (a, b, ha, hb)
}

/// That the express run (`express`: the receiver's handler) placed every byte and ended every
/// message, at both ends, as the general run did; message `truncated` went into a short receive.
fn assert_express_ends_as_general(
    (express, express_sender): (&Collect, &Collect),
    (general, general_sender): (&Collect, &Collect),
    sizes: &[usize],
    dest_len: impl Fn(usize) -> Option<usize>,
    truncated: usize,
) {
    assert_eq!(express.received.len(), sizes.len());
    for (i, (hdr, result, bytes)) in express.received.iter().enumerate() {
        let len = dest_len(i).unwrap_or(sizes[i]);
        assert_eq!(hdr.tag, i as u64);
        assert!(bytes[..len] == pattern(sizes[i], i as u8 + 1)[..len], "message {i} differs");
        assert_eq!(result, &general.received[i].1, "message {i}'s outcome");
    }
    let result = &express.received[truncated].1;
    assert!(matches!(result, Err(Error::Truncated { .. })), "{result:?}");
    assert_eq!(express_sender.sends_done, general_sender.sends_done);
}

/// CMA messages of one range taken on the express path (`Handler::on_fill_express`): every byte
/// lands, a receive shorter than its message is truncated, and receiver and sender end each
/// message exactly as the general path (`on_message`, a delivery) ends it; messages the two
/// sides copy together (from `split_min`) go the general way.
#[test]
fn cma_messages_taken_express_end_as_delivered_ones_do() {
    if !cma_or_skip("cma_messages_taken_express_end_as_delivered_ones_do") {
        return;
    }
    let sizes = [INJECT_SIZE as usize + 1, 8 * 1024, 20_001, 60 * 1024, 64 * 1024, 100_000];
    // The fourth goes into a receive 100 bytes short of it.
    let dest_len = |i: usize| (i == 3).then(|| sizes[i] - 100);
    let params = Params { cma_min: 0, split_min: 64 * 1024, ..Params::default() };
    let express = send_each_filled("cma", params.clone(), &sizes, dest_len, true);
    let general = send_each_filled("cma", params, &sizes, dest_len, false);
    assert_eq!(express.0.stats().sent_cma, sizes.len() as u64);
    assert_eq!(express.3.fill_taken, 4, "all but the two from split_min on");
    assert_express_ends_as_general((&express.3, &express.2), (&general.3, &general.2), &sizes, dest_len, 3);
}

/// SAR messages whose first segment holds all of them (up to `SAR_FIRST_SEGMENT`) taken on the
/// express path (`Handler::on_fill_express`): every byte lands, a receive shorter than its
/// message is truncated, each SAR buffer comes back, and receiver and sender end each message
/// as a delivery ends it; longer messages go the general way.
#[test]
fn one_segment_sar_messages_taken_express_end_as_delivered_ones_do() {
    let first = SAR_FIRST_SEGMENT as usize;
    let sizes = [INJECT_SIZE as usize + 1, 8 * 1024, first, first + 1, 100_000, 12_345];
    // The second goes into a receive 100 bytes short of it.
    let dest_len = |i: usize| (i == 1).then(|| sizes[i] - 100);
    let params = Params { cma: false, ..Params::default() };
    let (a, mut b, ha, mut hb) = send_each_filled("sar", params.clone(), &sizes, dest_len, true);
    // Both senders kept: each holds a spare of its receiver's SAR pool.
    let (_ga, mut gb, gha, mut ghb) = send_each_filled("sar", params, &sizes, dest_len, false);
    assert_eq!(a.stats().sent_sar, sizes.len() as u64);
    assert_eq!(hb.fill_taken, 4, "all but the two longer than the first segment");
    assert_express_ends_as_general((&hb, &ha), (&ghb, &gha), &sizes, dest_len, 1);
    // Every SAR buffer is free again (on the stack, or held back cold) but the sender's spare.
    b.progress(&mut hb);
    gb.progress(&mut ghb);
    let free = free_buffers(&b).1;
    assert!(free + 1 >= b.params.counts.sar_count as usize, "SAR buffers lost: {free} free");
    assert_eq!(free, free_buffers(&gb).1);
}

/// Two endpoints for the tests of split copies (`split`): CMA from the first byte, splits
/// from 64 KiB. None where CMA cannot run (`cma_or_skip`).
fn split_pair(tag: &str) -> Option<(Endpoint, Endpoint, PeerId)> {
    if !cma_or_skip(tag) {
        return None;
    }
    Some(pair(tag, Params { cma_min: 0, split_min: 64 * 1024, ..Params::default() }))
}

/// `split_pair` whose sender stops `pause_ms` after each take of a tail, before it writes it,
/// and whose receiver leaves every offer open until the sender takes it.
fn split_pair_slow_writer(tag: &str, pause_ms: u64) -> Option<(Endpoint, Endpoint, PeerId)> {
    let (mut a, mut b, to_b) = split_pair(tag)?;
    b.split_offer_wait = std::time::Duration::from_secs(5);
    a.split_pause_after_take = std::time::Duration::from_millis(pause_ms);
    Some((a, b, to_b))
}

/// Split copies (`split`), one thread driving both endpoints: the sender never sees the offer
/// before the receiver's head is in, so the receiver withdraws it and reads the tail itself;
/// every byte arrives, in a buffer exactly the message's size and in a larger one.
#[test]
fn a_split_offer_the_sender_does_not_take_is_withdrawn() {
    let Some((mut a, mut b, to_b)) = split_pair("splitalone") else { return };
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let sizes = [64 * 1024usize, 1 << 20, 300_001];
    for (i, &len) in sizes.iter().enumerate() {
        hb.dest_len = Some(len + 4096 * i);
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts = SendOpts { cookie: i as u64, ..SendOpts::default() };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, i as u8 + 1)), opts).unwrap();
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a split message", |ha, _| ha.sends_done.len() == i + 1);
    }
    assert_eq!((b.stats().splits_offered, b.stats().splits_taken, a.stats().splits_written), (3, 0, 0));
    for (i, (hdr, result, bytes)) in hb.received.iter().enumerate() {
        let len = sizes[i];
        assert_eq!((hdr.tag, result), (i as u64, &Ok(len)));
        assert!(bytes[..len] == pattern(len, i as u8 + 1)[..], "message {i} differs");
    }
    assert!(ha.sends_done.iter().all(|(_, r)| r.is_ok()));
    assert_eq!((a.outstanding(), b.outstanding(), b.stats().corrupt_commands), (0, 0, 0));
}

/// A thread that sends messages of `sizes` (tag and pattern `i` for the `i`th) from `a` to
/// `to_b`, each once the last is done, and returns `a` once all are, each done well.
fn send_in_turn(mut a: Endpoint, to_b: PeerId, sizes: Vec<usize>) -> std::thread::JoinHandle<Endpoint> {
    std::thread::spawn(move || {
        let mut ha = Collect::default();
        let dl = deadline();
        for (i, &n) in sizes.iter().enumerate() {
            let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: n as u64 };
            let opts = SendOpts { cookie: i as u64, ..SendOpts::default() };
            a.send(to_b, hdr, LocalIov::owned(pattern(n, i as u8)), opts).unwrap();
            while ha.sends_done.len() < i + 1 {
                assert!(std::time::Instant::now() < dl, "timed out waiting for send {i}");
                a.progress(&mut ha);
            }
        }
        assert!(ha.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", ha.sends_done);
        a
    })
}

/// `split_pair` whose receiver measures ways (`choose_busy_read`) and expects the replies of
/// two timed pushed reads of `len` bytes (`expect_pushed_read`); the CMA reads its chooser asked
/// for while learning are learnt as taking 5 us.
fn split_pair_expecting_pushed_reads(tag: &str, len: usize) -> Option<(Endpoint, Endpoint, PeerId)> {
    let (a, mut b, to_b) = split_pair(tag)?;
    expect_two_pushed_reads(&mut b, len);
    Some((a, b, to_b))
}

/// Have receiver `b` measure ways and expect the replies of two timed pushed reads of `len`
/// bytes (`split_pair_expecting_pushed_reads`).
fn expect_two_pushed_reads(b: &mut Endpoint, len: usize) {
    b.params.measure_protocol = true;
    let below = b.early_split_min() - 1;
    assert_eq!(b.choose_busy_read(below), None, "a reply below half of split_min is not split");
    let early = b.early_split_min();
    assert!(early < len / 2 && b.choose_busy_read(early).is_some(), "a reply of half of split_min is split");
    let mut expected = 0;
    // Runs of three while learning, CMA first, the first of each run untimed.
    for _ in 0..6 {
        let choice = b.choose_busy_read(len).expect("measuring");
        match choice.via {
            Via::Cma => b.learn_busy_read(choice, len, 5_000),
            Via::Sar => {
                expected += usize::from(choice.timed());
                b.expect_pushed_read(choice, len);
            }
        }
    }
    assert_eq!((expected, b.pushed_timed.len()), (2, 2), "two timed pushed reads expected");
    assert_eq!(b.busy_read_figures(len), (0, 5_000 * 1024 / len as u64), "CMA learnt, pushed not yet");
}

/// A pushed read from a busy target (`read_way.rs`) is timed by the split of its reply: the
/// receiver's half, counted for both halves, once the sender wrote the other. Two replies of
/// the expected length teach two figures; a message of another length teaches nothing.
#[test]
fn pushed_reads_are_learnt_from_the_split_of_their_replies() {
    let len = 256 * 1024;
    let Some((a, mut b, to_b)) = split_pair_expecting_pushed_reads("pushedlearnt", len) else { return };
    b.split_offer_wait = std::time::Duration::from_secs(5);
    let sizes = [len + 4096, len, len];
    let sender = send_in_turn(a, to_b, sizes.to_vec());
    let mut hb = Collect { dest_len: Some(len + 4096), ..Default::default() };
    receive_until(&mut b, &mut hb, sizes.len(), "timed out waiting for the replies");
    let a = sender.join().unwrap();
    for (i, (_, result, bytes)) in hb.received.iter().enumerate() {
        assert_eq!(result, &Ok(sizes[i]));
        assert!(bytes[..sizes[i]] == pattern(sizes[i], i as u8)[..], "message {i} differs");
    }
    assert_eq!((b.stats().splits_taken, a.stats().splits_written), (3, 3), "every tail written by the sender");
    assert!(b.pushed_timed.is_empty(), "both expectations met");
    let (pushed, _) = b.busy_read_figures(len);
    assert!(pushed > 0, "the pushed reads' figure is learnt from the heads");
}

/// A split head of `head` bytes of `len`, read in `took`, is a pushed read of `len` bytes that
/// took as long for each half (`learn_pushed_head`); a split of another length is no sample.
#[test]
fn a_split_head_counts_for_both_halves() {
    let len = 128 * 1024;
    let Some((_, mut b, _)) = split_pair_expecting_pushed_reads("pushedhalves", len) else { return };
    b.learn_pushed_head(len as u64 * 2, len as u64, std::time::Duration::from_micros(10));
    assert_eq!((b.pushed_timed.len(), b.busy_read_figures(len).0), (2, 0), "another length taught");
    b.learn_pushed_head(len as u64, len as u64 / 2, std::time::Duration::from_micros(10));
    // 10 us for half: 20 us for all 128 KiB, 156 ns a KiB.
    assert_eq!((b.pushed_timed.len(), b.busy_read_figures(len).0), (1, 20_000 * 1024 / len as u64));
}

/// A split whose offer the sender never takes (the receiver reads the tail itself) is no
/// sample of a pushed read: the expectations stay, nothing is learnt.
#[test]
fn a_split_the_receiver_finished_alone_teaches_no_pushed_read() {
    let len = 128 * 1024;
    let Some((mut a, mut b, to_b)) = split_pair_expecting_pushed_reads("pushedalone", len) else { return };
    let (mut ha, mut hb) = (Collect::default(), Collect { dest_len: Some(len), ..Default::default() });
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
    a.send(to_b, hdr, LocalIov::owned(pattern(len, 3)), SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a split message", |ha, _| ha.sends_done.len() == 1);
    assert_eq!((b.stats().splits_offered, b.stats().splits_taken), (1, 0));
    assert!(hb.received[0].2[..len] == pattern(len, 3)[..]);
    assert_eq!((b.pushed_timed.len(), b.busy_read_figures(len).0), (2, 0));
}

/// From half of `split_min` a CMA message is split only in a one-way stream (`Endpoint::splits`):
/// one of 40 KiB alone is read whole, as a ping-pong's is; of two sent together, the first is
/// split and the second, alone by its turn, is not; and none while the receiver has a send of
/// its own waiting (two processes sending each other, MPI's exchanges). Every byte arrives.
#[test]
fn a_message_below_split_min_splits_only_in_a_one_way_stream() {
    let Some((mut a, mut b, to_b)) = split_pair("splitstream") else { return };
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let len = 40 * 1024;
    let send = |a: &mut Endpoint, i: u64| {
        let hdr = MsgHeader { app: 0, tag: i, data: 0, aux: 0, len: len as u64 };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, i as u8)), SendOpts { cookie: i, ..SendOpts::default() })
            .unwrap();
    };
    send(&mut a, 0);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a message alone", |ha, _| ha.sends_done.len() == 1);
    assert_eq!(b.stats().splits_offered, 0, "alone: read whole");
    send(&mut a, 1);
    send(&mut a, 2);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "two messages", |ha, _| ha.sends_done.len() == 3);
    assert_eq!(b.stats().splits_offered, 1, "the first of two split, the last not");
    // The receiver sends too, and a does not take it in until both of its messages are done.
    let to_a = b.add_peer(a.name()).unwrap();
    let back = MsgHeader { app: 0, tag: 9, data: 0, aux: 0, len: len as u64 };
    b.send(to_a, back, LocalIov::owned(pattern(len, 9)), SendOpts { cookie: 9, ..SendOpts::default() }).unwrap();
    send(&mut a, 3);
    send(&mut a, 4);
    receive_with_answers_only((&mut a, &mut ha), (&mut b, &mut hb), 5);
    assert_eq!(b.stats().splits_offered, 1, "none while a send of the receiver's waits");
    // The split one completes once its tail is in, which may be after the next.
    assert_eq!(tags_and_patterns_checked(&hb), [(0, len), (1, len), (2, len), (3, len), (4, len)]);
}

/// `b` progresses until `n` messages are in, `a` taking only its answers: a message `b` sent
/// it stays in its ring, its send waiting.
fn receive_with_answers_only((a, ha): (&mut Endpoint, &mut Collect), (b, hb): (&mut Endpoint, &mut Collect), n: usize) {
    let dl = deadline();
    while hb.received.len() < n {
        assert!(std::time::Instant::now() < dl, "{} of {n} messages in", hb.received.len());
        b.progress(hb);
        a.drain_responses(ha);
    }
}

/// The (tag, length) of every message received, sorted, each checked whole and holding its
/// tag's pattern.
fn tags_and_patterns_checked(hb: &Collect) -> Vec<(u64, usize)> {
    let mut got = Vec::new();
    for (hdr, result, bytes) in &hb.received {
        let len = hdr.len as usize;
        assert_eq!(result, &Ok(len));
        assert!(bytes[..len] == pattern(len, hdr.tag as u8)[..], "message {} differs", hdr.tag);
        got.push((hdr.tag, len));
    }
    got.sort_unstable();
    got
}

/// A message the receiver asked to have split early (`split_early`: a read's reply it chose to
/// have pushed) splits from half of `split_min` alone and while a send of the receiver's
/// waits; not below that.
#[test]
fn a_message_flagged_split_early_splits_from_half_of_split_min_whatever_waits() {
    let Some((mut a, mut b, to_b)) = split_pair("splitearly") else { return };
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let early = b.early_split_min();
    let send = |a: &mut Endpoint, i: u64, len: usize| {
        let hdr = MsgHeader { app: 0, tag: i, data: 0, aux: 0, len: len as u64 };
        let opts = SendOpts { cookie: i, split_early: true, ..SendOpts::default() };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, i as u8)), opts).unwrap();
    };
    send(&mut a, 0, early);
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "a message alone", |ha, _| ha.sends_done.len() == 1);
    assert_eq!(b.stats().splits_offered, 1, "alone, at half of split_min: split");
    // The receiver's own send waits for its answer, which a does not give until the end.
    let to_a = b.add_peer(a.name()).unwrap();
    let back = MsgHeader { app: 0, tag: 9, data: 0, aux: 0, len: early as u64 };
    b.send(to_a, back, LocalIov::owned(pattern(early, 9)), SendOpts { cookie: 9, ..SendOpts::default() }).unwrap();
    send(&mut a, 1, early + 4096);
    send(&mut a, 2, early - 4096);
    receive_with_answers_only((&mut a, &mut ha), (&mut b, &mut hb), 3);
    assert_eq!(b.stats().splits_offered, 2, "split with a send of the receiver's waiting; not below half");
    assert_eq!(tags_and_patterns_checked(&hb), [(0, early), (1, early + 4096), (2, early - 4096)]);
}

/// Split copies whose sender takes the tail and fails to write it (its `process_vm_writev`
/// refused): it says so (FAILED), and the receiver reads the tail itself; every byte arrives.
#[test]
fn a_tail_the_sender_fails_to_write_is_read_by_the_receiver() {
    split_with_a_polling_sender("splitfail", true);
}

/// Split copies with the sender polling in a thread of its own: it takes the offers and writes
/// the tails while the receiver reads the heads; every byte arrives, and what the receiver
/// counts as written by its sender is what the sender counts as written.
#[test]
fn a_polling_sender_writes_the_tail_of_its_large_messages() {
    split_with_a_polling_sender("splitboth", false);
}

fn split_with_a_polling_sender(tag: &str, fail_writes: bool) {
    let Some((mut a, mut b, to_b)) = split_pair(tag) else { return };
    a.fail_split_writes = fail_writes;
    // Scheduling decides whether the sender sees an offer before the receiver's half is in
    // (under load, or in a debug build, it often does not): the receiver leaves each offer open
    // until the sender takes it, so that every one is taken here.
    b.split_offer_wait = std::time::Duration::from_secs(5);
    let n = 24usize;
    let len = 4 << 20;
    let sender = send_in_turn(a, to_b, vec![len; n]);
    let mut hb = Collect::default();
    receive_until(&mut b, &mut hb, n, "timed out waiting for the messages");
    let a = sender.join().unwrap();
    for (i, (hdr, result, bytes)) in hb.received.iter().enumerate() {
        assert_eq!((hdr.tag, result), (i as u64, &Ok(len)));
        assert!(*bytes == pattern(len, i as u8), "message {i} differs");
    }
    let (offered, taken, written) = (b.stats().splits_offered, b.stats().splits_taken, a.stats().splits_written);
    assert_eq!(offered, n as u64);
    assert_eq!(taken, written, "tails the receiver saw written against the sender's count");
    if fail_writes {
        assert_eq!((taken, a.stats().split_writes_failed), (0, n as u64), "every tail taken and not written");
    } else {
        assert_eq!(taken, n as u64, "tails the polling sender took and wrote");
    }
    assert_eq!((b.outstanding(), b.stats().corrupt_commands), (0, 0));
}

/// A claim word its sender scribbled while the tail was taken (neither this message's state nor
/// any other's): the receiver fails the message (`Claim::Garbage`) rather than take it for one
/// it may read itself (a withdrawal or a FAILED write) and complete it while the sender may
/// still write into its buffer.
#[test]
fn a_scribbled_split_claim_word_fails_the_message() {
    use crate::sync::Ordering::Relaxed;
    let len = 1 << 20;
    // The sender stops 300 ms between its take and its write.
    let Some((mut a, mut b, to_b)) = split_pair_slow_writer("splitscribble", 300) else { return };
    let sender = std::thread::spawn(move || {
        let mut ha = Collect::default();
        let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, 5)), SendOpts::default()).unwrap();
        let dl = deadline();
        while ha.sends_done.is_empty() {
            assert!(std::time::Instant::now() < dl, "the send never ended");
            a.progress(&mut ha);
        }
        ha.sends_done
    });
    let mut hb = Collect::default();
    let dl = deadline();
    // Once the sender took the tail (its claim word TAKEN), scribble over the word.
    'taken: loop {
        assert!(std::time::Instant::now() < dl, "the sender never took the tail");
        b.progress(&mut hb);
        for word in b.region.peer_slots().iter().flat_map(|slot| slot.split.iter()) {
            let now = word.load(Relaxed);
            if now != 0 && now == state_word(now >> 3, TAKEN) {
                word.store(now ^ (1 << 40), Relaxed);
                break 'taken;
            }
        }
    }
    receive_until(&mut b, &mut hb, 1, "the scribbled message never ended");
    assert!(matches!(hb.received[0].1, Err(Error::Corrupt(_))), "{:?}", hb.received[0].1);
    assert_eq!(sender.join().unwrap().len(), 1);
    assert_eq!(b.stats().splits_taken, 0);
}

/// A sender that took the tail of a split copy and stops before writing it (a SIGSTOP, a
/// debugger, a host that does not run it) for longer than a receiver closing once waited (2 s):
/// the receiver's close waits for it, so that the tail lands while the buffer is still the
/// receive's, and not after the application got it back (and may have freed it).
#[test]
fn a_receiver_closing_waits_for_a_split_writer_stopped_after_its_take() {
    let Some((mut a, mut b, to_b)) = split_pair_slow_writer("splitstop", 2500) else { return };
    let len = 1 << 20;
    let mut buf = vec![0u8; len];
    let mut hb = Collect { dest_raw: Some((buf.as_mut_ptr() as usize, len)), ..Default::default() };
    let sender = std::thread::spawn(move || {
        let mut ha = Collect::default();
        let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, 7)), SendOpts::default()).unwrap();
        let dl = deadline();
        while a.stats().splits_written + a.stats().split_writes_failed == 0 {
            assert!(std::time::Instant::now() < dl, "the sender never wrote its tail");
            a.progress(&mut ha);
        }
        a
    });
    let dl = deadline();
    while b.splits.is_empty() {
        assert!(std::time::Instant::now() < dl, "the sender never took the tail");
        b.progress(&mut hb);
    }
    drop(b);
    // What the application finds in its buffer once the close returned. (Without the wait the
    // sender writes into it afterwards: joined below, before `buf` goes.)
    let at_close = buf.clone();
    let a = sender.join().unwrap();
    assert_eq!(a.stats().splits_written, 1);
    assert!(at_close == pattern(len, 7), "the tail was not in the buffer when the receiver's close returned");
}

/// Every message of a stream of split copies arrived whole: message `i` (tag `i`) of `len` bytes
/// `pattern(len, i + first)`. By tag, not in arrival order: a split whose tail was written later
/// completes later.
fn assert_split_stream_received(hb: &Collect, len: usize, first: u8) {
    let mut received: Vec<_> = hb.received.iter().collect();
    received.sort_by_key(|(hdr, ..)| hdr.tag);
    for (i, (hdr, result, bytes)) in received.iter().enumerate() {
        assert_eq!((hdr.tag, result), (i as u64, &Ok(len)));
        assert!(*bytes == pattern(len, i as u8 + first), "message {i} differs");
    }
}

/// Split copies in a stream whose sender is slow to write (it stops after each take): the
/// receiver goes on to the next messages while the sender writes a tail, offers their tails on
/// the other claim words and leaves the offers open while the sender is busy, and the sender
/// takes them once done with the first. Every byte arrives, and the sender wrote every tail
/// (with one claim word per sender, the second message was read whole by the receiver; with
/// two, the third).
#[test]
fn a_second_split_offer_waits_open_for_a_busy_sender() {
    let Some((mut a, mut b, to_b)) = split_pair_slow_writer("splitopen", 50) else { return };
    let (n, len) = (4usize, 256 * 1024);
    let sender = std::thread::spawn(move || {
        let mut ha = Collect::default();
        for i in 0..n {
            let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
            let opts = SendOpts { cookie: i as u64, ..SendOpts::default() };
            a.send(to_b, hdr, LocalIov::owned(pattern(len, i as u8 + 1)), opts).unwrap();
        }
        let dl = deadline();
        while ha.sends_done.len() < n {
            assert!(std::time::Instant::now() < dl, "timed out waiting for the sends");
            a.progress(&mut ha);
        }
        assert!(ha.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", ha.sends_done);
        a
    });
    let mut hb = Collect::default();
    receive_until(&mut b, &mut hb, n, "timed out waiting for the messages");
    let a = sender.join().unwrap();
    assert_split_stream_received(&hb, len, 1);
    let (taken, written) = (b.stats().splits_taken, a.stats().splits_written);
    assert_eq!(
        (taken, written),
        (n as u64, n as u64),
        "tails the sender wrote: the first, and those offered while it wrote it"
    );
    assert_eq!((b.outstanding(), b.stats().corrupt_commands), (0, 0));
}

/// `n` large messages of `len` bytes from `a` to `b`, all waiting in `b`'s ring when it first
/// looks (message `i`: tag and cookie `i`, bytes `buf(i)`), received by `b` while `a` polls in a
/// thread of its own. Offers stay open until the sender takes them, and the sender stops after a
/// take, so that the offers made meanwhile wait for its next drain together. Returns both
/// endpoints and what each saw.
fn split_stream_waiting(
    tag: &str,
    n: usize,
    len: usize,
    buf: impl Fn(usize) -> LocalIov,
    prepare_receiver: impl FnOnce(&mut Endpoint),
) -> Option<(Endpoint, Endpoint, Collect, Collect)> {
    let (mut a, mut b, to_b) = split_pair_slow_writer(tag, 20)?;
    prepare_receiver(&mut b);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    // A first message connects the two, so that the large ones are the only commands waiting.
    let small = MsgHeader { app: 0, tag: 99, data: 0, aux: 0, len: 8 };
    a.send(to_b, small, LocalIov::owned(pattern(8, 1)), SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first message", |_, hb| hb.received.len() == 1);
    hb.received.clear();
    for i in 0..n {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: len as u64 };
        let opts = SendOpts { cookie: i as u64, ..SendOpts::default() };
        a.send(to_b, hdr, buf(i), opts).unwrap();
    }
    assert!(b.cmd_rx.ready_at(&b.region.cmd_ring(), n as u64 - 1), "the messages wait in the ring");
    let sender = std::thread::spawn(move || {
        let dl = deadline();
        while ha.sends_done.len() < n {
            assert!(std::time::Instant::now() < dl, "timed out waiting for the sends");
            a.progress(&mut ha);
        }
        (a, ha)
    });
    receive_until(&mut b, &mut hb, n, "timed out waiting for the messages");
    let (a, ha) = sender.join().unwrap();
    Some((a, b, ha, hb))
}

/// A stream of large messages from one sender, waiting in the receiver's ring when it looks: the
/// receiver reads the heads of all four in one call and the sender writes the tails it took in
/// one drain in one call (`split::together`); every byte arrives, each message once.
#[test]
fn the_halves_of_a_stream_are_copied_several_to_a_call() {
    let (n, len) = (4usize, 256 * 1024);
    let Some((a, b, ha, hb)) =
        split_stream_waiting("splittogether", n, len, |i| LocalIov::owned(pattern(len, i as u8 + 2)), |_| {})
    else {
        return;
    };
    assert!(ha.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", ha.sends_done);
    assert_split_stream_received(&hb, len, 2);
    assert_eq!(b.stats().split_heads_together, 1, "the four heads in one call");
    assert_eq!((b.stats().splits_taken, a.stats().splits_written), (n as u64, n as u64));
    assert!(a.stats().split_tails_together >= 1, "no tails written together");
    assert_eq!((b.outstanding(), b.stats().corrupt_commands), (0, 0));
}

/// A head left for the next message of a stream (`defer_head`: a large CMA message from the same
/// sender waits behind it) whose next message then does not split (too large for its buffer:
/// read whole, truncated) is read after that message (`read_heads_left`): the first message
/// arrives whole, its tail written by the sender, and the second truncated.
#[test]
fn a_head_left_for_a_message_that_does_not_split_is_read_after_it() {
    let len = 256 * 1024;
    let Some((mut a, mut b, to_b)) = split_pair_slow_writer("splitheadleft", 0) else { return };
    let (mut ha, mut hb) = (Collect::default(), Collect { dest_len: Some(len), ..Default::default() });
    let small = MsgHeader { app: 0, tag: 99, data: 0, aux: 0, len: 8 };
    a.send(to_b, small, LocalIov::owned(pattern(8, 1)), SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first message", |_, hb| hb.received.len() == 1);
    hb.received.clear();
    for (i, n) in [len, len + 4096].into_iter().enumerate() {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: n as u64 };
        let opts = SendOpts { cookie: i as u64, ..SendOpts::default() };
        a.send(to_b, hdr, LocalIov::owned(pattern(n, i as u8 + 2)), opts).unwrap();
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the stream", |ha, hb| {
        ha.sends_done.len() == 2 && hb.received.len() == 2
    });
    hb.received.sort_by_key(|(hdr, ..)| hdr.tag);
    let (_, first, bytes) = &hb.received[0];
    assert!(first == &Ok(len) && bytes[..len] == pattern(len, 2)[..], "{first:?}");
    let (_, second, bytes) = &hb.received[1];
    assert_eq!(second, &Err(Error::Truncated { delivered: len, sent: len + 4096 }));
    assert!(bytes[..len] == pattern(len + 4096, 3)[..len]);
    assert_eq!((b.stats().splits_offered, b.stats().splits_taken, b.stats().split_heads_together), (1, 1, 0));
    assert_eq!(b.outstanding(), 0);
}

/// The heads of a stream read in one call are one measurement, each head's time its share by
/// bytes: with two pushed reads of their length expected, the call teaches one
/// (`SplitRx::head_shared`) and the other waits for a later split.
#[test]
fn heads_read_in_one_call_teach_one_pushed_read() {
    let (n, len) = (4usize, 256 * 1024);
    let buf = |i: usize| LocalIov::owned(pattern(len, i as u8 + 2));
    let expecting = |b: &mut Endpoint| expect_two_pushed_reads(b, len);
    let Some((_, b, _, hb)) = split_stream_waiting("splitonesample", n, len, buf, expecting) else { return };
    assert_split_stream_received(&hb, len, 2);
    assert_eq!((b.stats().split_heads_together, b.stats().splits_taken), (1, n as u64), "four heads in one call");
    assert_eq!(b.pushed_timed.len(), 1, "one of the two expectations met");
    // Its share of the call by bytes: above nothing, and far below a millisecond a KiB (1 MB/s).
    let (pushed, _) = b.busy_read_figures(len);
    assert!(pushed > 0 && pushed < 1_000_000, "the pushed reads' figure: {pushed} ns a KiB");
}

/// A batch of split copies in which one message's bytes cannot be read (its sender named pages
/// it may not read: PROT_NONE): the calls that copy several halves fall short, and each side
/// copies the messages one by one instead. That message fails (its receive with the error, its
/// tail not written); the others arrive whole, each once.
#[test]
fn a_bad_message_in_a_batch_of_split_copies_fails_alone() {
    let (n, len, bad) = (4usize, 256 * 1024, 2usize);
    // SAFETY: a fresh private mapping with no access, unmapped below once both sides are done;
    // nothing in this process touches it (the sender only names it, and the kernel refuses to
    // copy from it).
    let unreadable = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert_ne!(unreadable, libc::MAP_FAILED);
    let buf = |i| {
        if i == bad {
            // SAFETY: the range is mapped (with no access) until the end of the test, and only
            // handed to the kernel's copies, which fail on it.
            unsafe { LocalIov::from_raw(&[(unreadable.cast::<u8>(), len)]) }
        } else {
            LocalIov::owned(pattern(len, i as u8 + 2))
        }
    };
    let Some((a, b, ha, hb)) = split_stream_waiting("splitbadbatch", n, len, buf, |_| {}) else { return };
    let mut received: Vec<_> = hb.received.iter().collect();
    received.sort_by_key(|(hdr, ..)| hdr.tag);
    for (i, (hdr, result, bytes)) in received.iter().enumerate() {
        assert_eq!(hdr.tag, i as u64);
        if i == bad {
            assert!(result.is_err(), "the unreadable message arrived: {result:?}");
        } else {
            assert_eq!(result, &Ok(len));
            assert!(*bytes == pattern(len, i as u8 + 2), "message {i} differs");
        }
    }
    // Each send finished once (the failed one too: the receiver answered it, Dropped).
    let mut cookies: Vec<u64> = ha.sends_done.iter().map(|(cookie, _)| *cookie).collect();
    cookies.sort_unstable();
    assert_eq!(cookies, (0..n as u64).collect::<Vec<_>>());
    assert_eq!(b.stats().split_heads_together, 1, "the four heads tried in one call");
    assert_eq!((a.stats().splits_written, a.stats().split_writes_failed), (n as u64 - 1, 1));
    assert_eq!((a.outstanding(), b.outstanding(), b.stats().corrupt_commands), (0, 0, 0));
    // SAFETY: the mapping made above; both endpoints are done with the message that named it.
    assert_eq!(unsafe { libc::munmap(unreadable, len) }, 0);
}

/// A receiver closing with an offer left open while its sender writes an earlier tail: the
/// close takes the open offer back and waits for the tail being written; the sender then finds
/// the offer withdrawn and writes nothing into a buffer the application got back.
#[test]
fn a_receiver_closing_takes_back_an_offer_left_open() {
    let Some((mut a, mut b, to_b)) = split_pair_slow_writer("splitclose", 300) else { return };
    // Each head read alone: otherwise the receiver offers both tails at once, and the sender
    // takes both in one drain (`the_halves_of_a_stream_are_copied_several_to_a_call`).
    b.split_heads_max = Some(1);
    let len = 256 * 1024;
    // Both messages land in this one buffer: the first one's tail by the sender before the
    // close returns; the second one's tail, if the sender ever took it, after.
    let mut buf = vec![0u8; len];
    let mut hb = Collect { dest_raw: Some((buf.as_mut_ptr() as usize, len)), ..Default::default() };
    let sender = std::thread::spawn(move || {
        let mut ha = Collect::default();
        for i in 0..2u8 {
            let hdr = MsgHeader { app: 0, tag: u64::from(i), data: 0, aux: 0, len: len as u64 };
            a.send(to_b, hdr, LocalIov::owned(pattern(len, 7 + i)), SendOpts::default()).unwrap();
        }
        let dl = deadline();
        while a.stats().splits_written == 0 {
            assert!(std::time::Instant::now() < dl, "the sender never wrote its first tail");
            a.progress(&mut ha);
        }
        // Long enough to take the second offer, stop and write it, had it stayed open.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(700);
        while std::time::Instant::now() < until {
            a.progress(&mut ha);
        }
        a
    });
    let dl = deadline();
    while b.splits.len() < 2 {
        assert!(std::time::Instant::now() < dl, "the receiver never had two splits under way");
        b.progress(&mut hb);
    }
    drop(b);
    let at_close = buf.clone();
    let a = sender.join().unwrap();
    assert_eq!((a.stats().splits_written, a.stats().split_writes_failed), (1, 0));
    assert!(at_close[len / 2..] == pattern(len, 7)[len / 2..], "the first tail was not in when the close returned");
    assert!(buf == at_close, "the sender wrote into the buffer after the receiver's close returned");
}

/// Split offers a receiver forged (its own claim word set to OFFERED for the message, so that the
/// sender's take would succeed): a claim word it does not have (past `SPLIT_WORDS`), a tail that
/// starts at the message's end, and tails shorter or longer than the rest of the message. The
/// sender counts each corrupt and writes nothing where it points; the message still arrives,
/// every byte.
#[test]
fn forged_split_offers_are_refused() {
    use crate::sync::Ordering::Relaxed;
    let Some((mut a, mut b, to_b)) = split_pair("splitbadword") else { return };
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    // A first message connects the two, so that the receiver knows its sender.
    let small = MsgHeader { app: 0, tag: 0, data: 0, aux: 0, len: 8 };
    a.send(to_b, small, LocalIov::owned(pattern(8, 1)), SendOpts::default()).unwrap();
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first message", |_, hb| hb.received.len() == 1);
    let len = 256 * 1024;
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
    a.send(to_b, hdr, LocalIov::owned(pattern(len, 2)), SendOpts { cookie: 1, ..SendOpts::default() }).unwrap();
    let msg_id = *a.pending.keys().next().expect("the large send waits for its answer");
    let src = b.inp.iter().next().expect("the receiver knows its sender").0;
    // Where the forged offers ask the tail to go: it must stay as it is.
    let mut target = vec![0u8; 2 * len];
    let (half, words) = ((len / 2) as u64, crate::layout::SPLIT_WORDS as u64);
    let forged = [(half, half, words), (len as u64, 0, 0), (half, half - 4096, 0), (half, half + 4096, 0)];
    for (i, &(offset, tail_len, word)) in forged.iter().enumerate() {
        let claim = &b.region.peer_slots()[src as usize].split[0];
        claim.store(state_word(msg_id, OFFERED), Relaxed);
        let mut entry =
            RespEntry { kind: resp::SPLIT, status: Status::Ok as u32, msg_id, value: offset, ..Default::default() };
        entry.data[..8].copy_from_slice(&(target.as_mut_ptr() as u64).to_le_bytes());
        entry.data[8..16].copy_from_slice(&tail_len.to_le_bytes());
        entry.data[16..24].copy_from_slice(&word.to_le_bytes());
        b.send_resp(src, entry);
        a.progress(&mut ha);
        assert_eq!((a.stats().corrupt_commands, a.stats().splits_written), (i as u64 + 1, 0), "offer {i} taken");
        let claim = &b.region.peer_slots()[src as usize].split[0];
        assert_eq!(claim.swap(0, Relaxed), state_word(msg_id, OFFERED), "offer {i}: the claim word taken");
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the large message", |ha, hb| {
        hb.received.len() == 2 && ha.sends_done.iter().any(|(cookie, _)| *cookie == 1)
    });
    let (hdr, result, bytes) = &hb.received[1];
    assert_eq!((hdr.tag, result), (1, &Ok(len)));
    assert!(*bytes == pattern(len, 2), "the large message differs");
    assert!(target.iter().all(|&x| x == 0), "a forged offer was written");
    assert!(ha.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", ha.sends_done);
}

/// A sleeper's side of the blocking waits' protocol (`WaitHandle`, as the provider's
/// `fi_cntr_wait`, `fi_cq_sread` and progress thread follow it): arm, drive, and sleep (up to
/// `slice`) if the pass did nothing while work waits for room at a peer. Counts into `sleeps`
/// (woken, timed out): a sleep that a peer's wake-up ended, or one that ran out its slice.
fn drive_or_sleep(e: &mut Endpoint, h: &mut Collect, slice: std::time::Duration, sleeps: &mut (usize, usize)) {
    let handle = e.wait_handle();
    let seq = handle.arm();
    if e.progress(h) == 0 && e.waits_for_room() {
        let slept = std::time::Instant::now();
        handle.sleep(seq, Some(slice));
        if handle.woken_since(seq) {
            sleeps.0 += 1;
        } else if slept.elapsed() >= slice {
            sleeps.1 += 1;
        }
    }
    handle.disarm();
}

/// `drive_or_sleep`'s count: `who` slept at least once waiting for `what`, and a wake-up ended
/// every sleep, none its slice.
fn assert_every_sleep_woken((woken, timed_out): (usize, usize), who: &str, what: &str) {
    assert!(woken > 0, "the {who} never slept waiting for {what}");
    assert_eq!(timed_out, 0, "sleeps of the {who} that nothing woke ({woken} woken)");
}

/// A sender whose SAR message is longer than the receiver's pool sleeps on its wake word while
/// it waits for buffers, as a blocking `fi_cntr_wait` does: the receiver, giving back buffers to
/// its empty pool, wakes it (`refill.rs`), so that every such sleep ends woken, not timed out
/// (before, each slept out its whole slice: 100 ms a sleep in the provider's waits). Every byte
/// arrives.
#[test]
fn a_sender_asleep_for_sar_buffers_is_woken_when_they_come_back() {
    let d = Params::default();
    let params = Params { cma: false, sar_hold: 0, counts: Counts { sar_count: 2, sar_size: 16384, ..d.counts }, ..d };
    let (mut a, mut b, to_b) = pair("refillwake", params);
    let len = 40 * 16384;
    let timeout = std::time::Duration::from_secs(5);
    let sender = std::thread::spawn(move || {
        let mut ha = Collect::default();
        let hdr = MsgHeader { app: 0, tag: 7, data: 0, aux: 0, len: len as u64 };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, 7)), SendOpts { cookie: 7, ..SendOpts::default() }).unwrap();
        let mut sleeps = (0, 0);
        let dl = deadline();
        while ha.sends_done.is_empty() {
            assert!(std::time::Instant::now() < dl, "timed out waiting for the send");
            drive_or_sleep(&mut a, &mut ha, timeout, &mut sleeps);
        }
        assert_eq!(ha.sends_done, [(7, Ok(()))]);
        sleeps
    });
    let mut hb = Collect::default();
    let dl = deadline();
    while hb.received.is_empty() {
        assert!(std::time::Instant::now() < dl, "timed out waiting for the message");
        b.progress(&mut hb);
        // Slower than the sender, so that it finds the pool empty and sleeps.
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let sleeps = sender.join().unwrap();
    let (hdr, result, bytes) = &hb.received[0];
    assert_eq!((hdr.tag, result), (7, &Ok(len)));
    assert!(*bytes == pattern(len, 7), "the message differs");
    assert_every_sleep_woken(sleeps, "sender", "buffers");
}

/// Staged FI_MORE messages that the receiver's ring of 4 has no room for wait at the sender,
/// which sleeps as a blocking wait does. The receiver takes them slowly and answers none (inline,
/// not delivery-complete): nothing of its reaches the sender but the room it makes. The sender
/// sleeps several times, and a wake-up ends every sleep, none runs out its slice (before the
/// room bell, `refill.rs`, each did: the provider's short slice, 1 ms, was all that ended
/// them). Every message arrives, in order.
#[test]
fn a_sender_asleep_for_ring_room_is_woken_when_the_receiver_takes_entries() {
    let d = Params::default();
    let params = Params { counts: Counts { cmd_len: 4, ..d.counts }, ..d };
    let (mut a, mut b, to_b) = pair("roombell", params);
    const N: usize = 64;
    let slice = std::time::Duration::from_secs(5);
    let sender = std::thread::spawn(move || {
        let mut ha = Collect::default();
        for i in 0..N {
            let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: 8 };
            let opts = SendOpts { cookie: i as u64, more: true, ..SendOpts::default() };
            a.send(to_b, hdr, LocalIov::owned(pattern(8, i as u8)), opts).unwrap();
        }
        let mut sleeps = (0, 0);
        let dl = deadline();
        while ha.sends_done.len() < N {
            assert!(std::time::Instant::now() < dl, "timed out with {} of {N} sends done", ha.sends_done.len());
            drive_or_sleep(&mut a, &mut ha, slice, &mut sleeps);
        }
        assert_eq!(ha.sends_done, (0..N as u64).map(|c| (c, Ok(()))).collect::<Vec<_>>());
        sleeps
    });
    let mut hb = Collect::default();
    let dl = deadline();
    while hb.received.len() < N {
        assert!(std::time::Instant::now() < dl, "timed out with {} of {N} messages received", hb.received.len());
        b.progress(&mut hb);
        // Slower than the sender, so that it finds the ring full and sleeps.
        std::thread::sleep(std::time::Duration::from_micros(300));
    }
    let sleeps = sender.join().unwrap();
    for (i, (hdr, result, bytes)) in hb.received.iter().enumerate() {
        assert_eq!((hdr.tag, result), (i as u64, &Ok(8)), "message {i}");
        assert!(*bytes == pattern(8, i as u8), "message {i} differs");
    }
    assert_every_sleep_woken(sleeps, "sender", "ring room");
}

/// The room bell wakes the peers that asked, not every peer: of four senders asleep (armed) on
/// their wake words, the one whose staged messages found the receiver's ring full is woken by
/// the receiver's pass, and of the three with nothing waiting, those whose entries in the
/// receiver's table have another bit than its own (`wake::room_sender_bit`) are not.
#[test]
fn the_room_bell_wakes_the_sender_that_asked_not_the_others() {
    let d = Params::default();
    let params = Params { counts: Counts { cmd_len: 4, ..d.counts }, ..d };
    let (mut a, mut b, to_b) = pair("bellwho", params.clone());
    let mut others: Vec<(Endpoint, PeerId)> = (0..3)
        .map(|i| {
            let mut e = Endpoint::create(&name(&format!("bellwho{i}")), params.clone()).unwrap();
            let to = e.add_peer(b.name()).unwrap();
            (e, to)
        })
        .collect();
    let mut hb = Collect::default();
    // Every sender connected and its first message taken, b's ring empty again.
    let hdr = |tag| MsgHeader { app: 0, tag, data: 0, aux: 0, len: 8 };
    for (e, to) in std::iter::once((&mut a, to_b)).chain(others.iter_mut().map(|(e, to)| (e, *to))) {
        let dl = deadline();
        while e.send(to, hdr(0), LocalIov::owned(pattern(8, 0)), SendOpts::default()) == Err(Error::Again) {
            assert!(std::time::Instant::now() < dl, "a first send was refused until the deadline");
            e.progress(&mut Collect::default());
            b.progress(&mut hb);
        }
    }
    let dl = deadline();
    while hb.received.len() < 4 {
        assert!(std::time::Instant::now() < dl, "{} of 4 first messages received", hb.received.len());
        b.progress(&mut hb);
    }
    for (e, _) in others.iter_mut() {
        e.progress(&mut Collect::default());
    }
    a.progress(&mut Collect::default());
    let bit_of = |e: &Endpoint| {
        let (src, _) = b.inp.iter().find(|(_, p)| p.name == e.name()).expect("a connected sender");
        crate::wake::room_sender_bit(src)
    };
    let a_bit = bit_of(&a);
    let other_bits: Vec<u32> = others.iter().map(|(e, _)| bit_of(e)).collect();
    assert!(other_bits.iter().any(|&bit| bit != a_bit), "every sender shares the asker's bit");
    let wa = a.wait_handle();
    let seq_a = wa.arm();
    let waits: Vec<_> = others.iter().map(|(e, _)| e.wait_handle()).collect();
    let seqs: Vec<u32> = waits.iter().map(|w| w.arm()).collect();
    let mut ha = Collect::default();
    for i in 1..=8u64 {
        let opts = SendOpts { cookie: i, more: true, ..SendOpts::default() };
        a.send(to_b, hdr(i), LocalIov::owned(pattern(8, i as u8)), opts).unwrap();
    }
    a.progress(&mut ha);
    assert!(a.waits_for_room(), "eight messages fitted a ring of four");
    b.progress(&mut hb);
    assert!(wa.woken_since(seq_a), "the sender that found the ring full was not woken");
    for ((w, &seq), &bit) in waits.iter().zip(&seqs).zip(&other_bits) {
        assert_eq!(w.woken_since(seq), bit == a_bit, "a sender with bit {bit:#x} (the asker's {a_bit:#x})");
        w.disarm();
    }
    wa.disarm();
    let dl = deadline();
    while hb.received.len() < 12 {
        assert!(std::time::Instant::now() < dl, "{} of 12 messages received", hb.received.len());
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    let tags: Vec<u64> = hb.received[4..].iter().map(|(h, _, _)| h.tag).collect();
    assert_eq!(tags, [1, 2, 3, 4, 5, 6, 7, 8]);
}

/// The other ring: a receiver whose acknowledgements the sender's response ring of 4 has no room
/// for keeps them (`resp_backlog`) and sleeps as a progress thread does. The sender takes its
/// responses late and slowly and sends nothing more meanwhile: its taking them must wake the
/// receiver (a wake-up ends every sleep, none runs out its slice), and every send completes.
#[test]
fn a_receiver_asleep_for_response_room_is_woken_when_the_sender_takes_responses() {
    let d = Params::default();
    let params = Params { counts: Counts { resp_len: 4, ..d.counts }, ..d };
    let (mut a, mut b, to_b) = pair("respbell", params);
    const N: usize = 32;
    let slice = std::time::Duration::from_secs(5);
    for i in 0..N {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, aux: 0, len: 8 };
        let opts = SendOpts { cookie: i as u64, delivery_complete: true, ..SendOpts::default() };
        let dl = deadline();
        // Room in b's command ring (1,024 entries by default) for all, once connected.
        while a.send(to_b, hdr, LocalIov::owned(pattern(8, i as u8)), opts) == Err(Error::Again) {
            assert!(std::time::Instant::now() < dl, "send {i} refused until the deadline");
            a.progress(&mut Collect::default());
        }
    }
    let receiver = std::thread::spawn(move || {
        let mut hb = Collect::default();
        let mut sleeps = (0, 0);
        let dl = deadline();
        while hb.received.len() < N || b.waits_for_room() {
            assert!(std::time::Instant::now() < dl, "timed out with {} of {N} received", hb.received.len());
            drive_or_sleep(&mut b, &mut hb, slice, &mut sleeps);
        }
        (hb.received.len(), sleeps)
    });
    // Late: the receiver has filled our response ring and keeps the rest.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut ha = Collect::default();
    let dl = deadline();
    while ha.sends_done.len() < N {
        assert!(std::time::Instant::now() < dl, "timed out with {} of {N} sends done", ha.sends_done.len());
        a.progress(&mut ha);
        std::thread::sleep(std::time::Duration::from_micros(300));
    }
    let (received, sleeps) = receiver.join().unwrap();
    assert_eq!(received, N);
    let mut done = ha.sends_done.clone();
    done.sort_by_key(|d| d.0);
    assert_eq!(done, (0..N as u64).map(|c| (c, Ok(()))).collect::<Vec<_>>());
    assert_every_sleep_woken(sleeps, "receiver", "response room");
}

/// A message sent alone (after a poll) above `pingpong_inline_max` goes through an inject
/// buffer; one sent right after another (a stream) inline; one sent alone when no inject buffer
/// is free inline after all. Every byte arrives, in order.
#[test]
fn a_message_sent_alone_goes_through_an_inject_buffer_and_a_stream_inline() {
    let mut params = Params::default();
    params.counts.inject_count = 1;
    let (mut a, mut b, to_b) = pair("alone", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let len = crate::endpoint::send::PINGPONG_INLINE_MAX + 1;
    assert!(len <= INLINE_MAX, "the message would go inline in a stream");
    // Connected and acknowledged first, so that every send below goes out at once.
    let opts = acked(0);
    assert!(a.send_bytes(to_b, hdr(0), &pattern(8, 0), opts).is_ok());
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the first message", |ha, _| ha.sends_done.len() == 1);
    let sent = |a: &Endpoint| (a.stats().sent_inline, a.stats().sent_inject);
    let before = sent(&a);
    let send = |a: &mut Endpoint, tag: u64| {
        let h = MsgHeader { len: len as u64, ..hdr(tag) };
        assert_eq!(a.send_bytes(to_b, h, &pattern(len, tag as u8), SendOpts::default()), Ok(SendStatus::Done));
    };
    a.progress(&mut ha);
    send(&mut a, 1);
    assert_eq!(sent(&a), (before.0, before.1 + 1), "alone: through an inject buffer");
    send(&mut a, 2);
    assert_eq!(sent(&a), (before.0 + 1, before.1 + 1), "right after another: inline");
    a.progress(&mut ha);
    send(&mut a, 3);
    assert_eq!(sent(&a), (before.0 + 2, before.1 + 1), "alone, the one inject buffer in flight: inline");
    receive_until(&mut b, &mut hb, 4, "the three messages");
    for (tag, (h, result, bytes)) in hb.received[1..].iter().enumerate().map(|(i, m)| (i as u64 + 1, m)) {
        assert_eq!(h.tag, tag, "in order");
        assert_eq!(*result, Ok(len));
        assert_eq!(*bytes, pattern(len, tag as u8), "message {tag}");
    }
}

/// Two endpoints that send to each other map each other's region once (`mapped_region`): the
/// link to a peer shares the mapping of the same peer as a sender, whichever direction came
/// first, and the messages of both directions arrive intact.
#[test]
fn a_peer_that_sends_and_receives_is_mapped_once() {
    let (mut a, mut b, to_b) = pair("mapped_once", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    // a links to b first (b's region opened), then b meets a (a's region opened).
    exchange_one((&mut a, &mut ha), (&mut b, &mut hb), to_b, 0, 100);
    let to_a = b.add_peer(a.name()).unwrap();
    // b's link to a takes the mapping b made as a's receiver; a meets b as a sender through
    // the mapping of its link.
    exchange_one((&mut b, &mut hb), (&mut a, &mut ha), to_a, 0, 5000);
    exchange_one((&mut a, &mut ha), (&mut b, &mut hb), to_b, 1, 5000);
    let shared = |ep: &Endpoint, peer: PeerId, name: &str| {
        let link = ep.out[peer as usize].link.as_ref().expect("linked");
        let (_, sender) = ep.inp.iter().find(|(_, s)| s.name == name).expect("met as a sender");
        Arc::ptr_eq(&link.region, &sender.region)
    };
    assert!(shared(&b, to_a, a.name()), "b maps a's region twice");
    assert!(shared(&a, to_b, b.name()), "a maps b's region twice");
    for ep in [&a, &b] {
        assert_eq!(ep.stats().corrupt_commands, 0, "{:?}", ep.stats());
    }
}

/// An endpoint whose `kind` operations sent alone were taught, 16 times over, that each of
/// `rows` (length, ns by our CMA copy, ns the ordinary way) took those times.
fn taught_lone(name: &str, kind: super::lone::Lone, rows: [(usize, u64, u64); 3]) -> Endpoint {
    use super::measured::Via;
    let (mut a, _b, _) = pair(name, Params { measure_protocol: true, ..Params::default() });
    for _ in 0..16 {
        for (len, cma_ns, ordinary_ns) in rows {
            let c = a.choose_lone(kind, len).expect("measuring");
            a.learn_lone(kind, c, len, if c.via == Via::Cma { cma_ns } else { ordinary_ns });
        }
    }
    a
}

/// Reads sent alone of up to `lone::SMALL_READ_TOP` learn in a chooser of their own: taught that
/// our CMA read wins for them and the target's answer for larger ones, each settles on its own
/// way (one chooser for both would settle both on one).
#[test]
fn reads_alone_up_to_2_kib_learn_apart_from_larger_ones() {
    use super::lone::{Lone, SMALL_READ_TOP};
    let a = taught_lone("lonesmall", Lone::Read, [(1024, 600, 1000), (SMALL_READ_TOP, 700, 1100), (4096, 1500, 900)]);
    assert!(a.lone_settled_on_cma(Lone::Read, 1024) && a.lone_settled_on_cma(Lone::Read, SMALL_READ_TOP));
    assert!(!a.lone_settled_on_cma(Lone::Read, SMALL_READ_TOP + 1), "larger reads settled on our read too");
    assert!(!a.lone_settled_on_cma(Lone::Write, 1024), "writes learnt from reads");
}

/// Writes sent alone of up to `lone::SMALL_WRITE_TOP` likewise: through an inject buffer a write
/// costs its two copies, above it SAR's; here our copy wins the first and loses the second.
#[test]
fn writes_alone_up_to_an_inject_buffer_learn_apart_from_larger_ones() {
    use super::lone::{Lone, SMALL_WRITE_TOP};
    let a =
        taught_lone("lonesmallw", Lone::Write, [(3000, 900, 1300), (SMALL_WRITE_TOP, 1000, 1400), (6000, 1800, 1200)]);
    assert!(a.lone_settled_on_cma(Lone::Write, 3000) && a.lone_settled_on_cma(Lone::Write, SMALL_WRITE_TOP));
    assert!(!a.lone_settled_on_cma(Lone::Write, SMALL_WRITE_TOP + 1), "larger writes settled on our copy too");
    assert!(!a.lone_settled_on_cma(Lone::Read, 3000), "reads learnt from writes");
}

/// A request taken with `Disposition::Later` and answered afterwards into the buffers its
/// sender named (`answer_into`: how the provider answers a read whose request came as a
/// delivery): each request completes with its answer's bytes, one buffer's worth or several;
/// once its sender is gone, one more is answered to nobody.
#[test]
fn requests_taken_later_are_answered_into_their_senders_buffers() {
    let (mut a, mut b, to_b) = pair("laterinto", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { later: true, ..Default::default() });
    let sizes = [(1u64, 1000usize), (2, 100_000), (3, 64)];
    for (cookie, len) in sizes {
        assert_eq!(send_read_request(&mut a, to_b, cookie, len, None), Ok(SendStatus::Pending));
    }
    receive_until(&mut b, &mut hb, 3, "the requests");
    let requests: Vec<_> = hb.offered.iter().zip(&hb.received).map(|(m, (_, _, req))| (*m, req.clone())).collect();
    for (m, req) in &requests[..2] {
        let (buf, len) = parse_request(req);
        b.answer_into(m.answer_to(), buf, &LocalIov::owned(pattern(len, m.hdr.tag as u8)));
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the answers", |ha, _| ha.sends_done.len() == 2);
    assert_eq!(ha.sends_done, [(1, Ok(())), (2, Ok(()))]);
    let answers: Vec<_> =
        ha.answers.iter().map(|(c, data)| (*c, data.len(), data == &pattern(data.len(), *c as u8))).collect();
    assert_eq!(answers, [(1, 1000, true), (2, 100_000, true)]);
    // The third request's sender is gone when it is answered: nothing is written for it.
    let (m, req) = &requests[2];
    let src = m.src;
    b.forget_in_peer(src, &mut hb);
    let (buf, len) = parse_request(req);
    b.answer_into(m.answer_to(), buf, &LocalIov::owned(pattern(len, 3)));
    for _ in 0..20 {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    assert_eq!(ha.sends_done.len(), 2, "a forgotten sender's request answered: {:?}", ha.sends_done);
}
