//! A hostile peer's one-sided commands against a target, at random: whatever a command's header
//! and payload say (kind, key, address, length, atomic descriptor, read request), the target
//! writes nothing outside a registration that lets peers write, and hands the engine only
//! memory of a registration that allows the access: to fill (`Disposition::Deliver` of a
//! write), to copy out (`AnswerInto`) or to send (a reply of registered memory). Memory around
//! the registrations and a read-only registration keep their bytes, and nothing panics. Both
//! addressing modes: offsets (scalable) and virtual addresses (FI_MR_VIRT_ADDR).
//!
//! The engine's side is played here: a payload of the command's length (or shorter: a sender
//! that stopped) is copied into what a `Deliver` or `Later` names, and `on_delivered` follows.

use super::*;
use crate::state::ep::read_req::{ReadReq, ReturnBy};
use crate::state::ep::sinks::{Bindings, Sinks};
use crate::state::mr::{MrEntry, MrTable};
use smr_core::cmd::{MsgHeader, RemoteIov};
use smr_core::endpoint::{AnswerBuf, Disposition, Incoming};
use smr_core::testing::Rng;

/// Each registration's size, and the guard of untouched memory around each.
const W: usize = 4096;
/// The read-write registration's key, and the read-only one's.
const RW: u64 = 0x11;
const RO: u64 = 0x22;
/// What the memory outside the read-write registration holds throughout.
const UNTOUCHED: u8 = 0xC5;
/// Commands per addressing mode.
const COMMANDS: u64 = 6000;

/// `n` random bytes.
fn bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// One of `options`, or (one time in `wild`) any value at all.
fn pick(rng: &mut Rng, options: &[u64], wild: u64) -> u64 {
    if rng.below(wild) == 0 {
        rng.next_u64()
    } else {
        options[rng.below(options.len() as u64) as usize]
    }
}

/// The test's memory: guard, read-write registration, guard, read-only registration, guard.
struct Memory {
    bytes: Vec<u8>,
}

impl Memory {
    fn new() -> Memory {
        Memory { bytes: vec![UNTOUCHED; 5 * W] }
    }

    fn base(&self) -> usize {
        self.bytes.as_ptr() as usize
    }

    /// The registration `key`'s address range.
    fn region(&self, key: u64) -> (usize, usize) {
        let at = if key == RW { W } else { 3 * W };
        (self.base() + at, self.base() + at + W)
    }

    /// Whether `[addr, addr + len)` lies in registration `key`.
    fn inside(&self, key: u64, (addr, len): (usize, usize)) -> bool {
        let (start, end) = self.region(key);
        addr >= start && addr.checked_add(len).is_some_and(|e| e <= end)
    }

    fn readable(&self, range: (usize, usize)) -> bool {
        self.inside(RW, range) || self.inside(RO, range)
    }

    /// Everything but the read-write registration still holds `UNTOUCHED` (slice comparisons:
    /// a memcmp even in the unoptimised test build).
    fn untouched_outside_rw(&self) -> bool {
        let untouched = [UNTOUCHED; 3 * W];
        self.bytes[..W] == untouched[..W] && self.bytes[2 * W..] == untouched[..]
    }
}

fn table(mem: &Memory, virt_addr: bool) -> MrTable {
    let mut mrs = MrTable::default();
    mrs.virt_addr = virt_addr;
    let remote = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
    for (key, access) in [(RW, remote), (RO, ffi::FI_REMOTE_READ as u64)] {
        let (start, _) = mem.region(key);
        mrs.insert(key, MrEntry::new([(start, W)].into_iter().collect(), access));
    }
    mrs
}

/// A command's header and payload: mostly near-valid (a real key, an address in or around a
/// registration, a valid atomic, a well-formed read request), often not.
fn command(rng: &mut Rng, mem: &Memory, virt_addr: bool) -> (MsgHeader, Vec<u8>) {
    let kinds = [KIND_WRITE, KIND_READ_REQ, KIND_ATOMIC, KIND_SEGMENTS].map(u64::from);
    let kind = pick(rng, &kinds, 8) as u8 & 0xf;
    let key = pick(rng, &[RW, RO], 6);
    // Anywhere in or around the registration, or (half the time) within a few bytes of one of
    // its ends, less a usual length: where an off-by-a-few range check would let a byte through.
    let offset = if rng.below(2) == 0 {
        rng.below(3 * W as u64) as i64 - W as i64
    } else {
        let end = pick(rng, &[0, W as u64], 1 << 20) as i64;
        end - pick(rng, &[0, 1, 4, 8, 16, 64], 1 << 20) as i64 + rng.below(17) as i64 - 8
    };
    let addr = match rng.below(8) {
        0 => rng.next_u64(),
        _ if virt_addr => (mem.region(RW).0 as i64 + offset) as u64,
        _ => offset as u64,
    };
    let mut hdr = MsgHeader { app: app(kind, rng.below(16) as u8), tag: key, aux: addr, ..Default::default() };
    let payload = match kind {
        KIND_ATOMIC => {
            let d = Desc {
                kind: [Kind::Write, Kind::Fetch, Kind::Compare][rng.below(3) as usize],
                op: rng.below(20) as u32,
                datatype: rng.below(14) as u32,
                count: pick(rng, &[1, 1, 1, 2, 7], 16) as u32,
                with_op_id: rng.below(4) == 0,
            };
            hdr.data = if rng.below(8) == 0 { rng.next_u64() } else { d.pack() };
            let n = match Desc::unpack(hdr.data) {
                Some(d) if rng.below(8) != 0 => d.payload(),
                _ => rng.below(80) as usize,
            };
            bytes(rng, n)
        }
        KIND_READ_REQ => {
            let len = pick(rng, &[0, 1, 8, 33, 96, 97, 200, 4096, 5000], 8);
            let by = match rng.below(4) {
                0 => ReturnBy::Reply,
                1 => ReturnBy::Pushed,
                2 => ReturnBy::WriteBack(vec![RemoteIov { addr: rng.next_u64(), len: rng.below(8192) }]),
                _ => AnswerBuf::from_wire(rng.next_u64() as u32, &[]).map_or(ReturnBy::Reply, ReturnBy::AnswerBuf),
            };
            let req = ReadReq { op_id: rng.below(4), len, by }.encode().to_vec();
            if rng.below(6) == 0 {
                let n = rng.below(40) as usize;
                bytes(rng, n)
            } else {
                req
            }
        }
        // A list for the operation after it (`APP_SEGMENTED`, set at random above): 0 to 5
        // ranges, in and around the registrations, now and then not whole.
        KIND_SEGMENTS => {
            let n = rng.below(6) as usize;
            let mut list = Vec::new();
            for _ in 0..n {
                let (key, at) = (pick(rng, &[RW, RO], 6), if virt_addr { mem.region(RW).0 as u64 } else { 0 });
                let addr = at.wrapping_add(rng.below(2 * W as u64)).wrapping_sub(pick(rng, &[0, 8], 4));
                let len = pick(rng, &[0, 1, 8, 64, W as u64], 8);
                [key, addr, len].iter().for_each(|w| list.extend_from_slice(&w.to_le_bytes()));
            }
            if rng.below(8) == 0 {
                list.truncate(rng.below(list.len() as u64 + 1) as usize);
            }
            list
        }
        _ => {
            let n = pick(rng, &[0, 1, 8, 64, 1000, W as u64, W as u64 + 8], 8) as usize % (2 * W);
            bytes(rng, n)
        }
    };
    hdr.len = if rng.below(10) == 0 { pick(rng, &[0, 1, 1 << 20], 4) } else { payload.len() as u64 };
    (hdr, payload)
}

/// Check what the target handed the engine for message `msg`, play the engine's part, and
/// report the delivery.
#[allow(clippy::too_many_arguments)]
fn engine_part(
    target: &mut Target<'_>,
    msg: &Incoming,
    d: Disposition,
    payload: &[u8],
    (mem, virt_addr): (&Memory, bool),
    rng: &mut Rng,
    sinks: &mut Sinks,
) {
    match d {
        Disposition::Deliver { dest, ctx } | Disposition::Later { dest, ctx } => {
            let mut dest = dest;
            let copied = match &mut dest {
                LocalIov::Owned(v) => {
                    let n = payload.len().min(v.len());
                    v[..n].copy_from_slice(&payload[..n]);
                    n
                }
                LocalIov::Lent { parts, .. } => {
                    let mut n = 0;
                    for &(addr, len) in parts.iter() {
                        assert!(mem.inside(RW, (addr, len)), "a write lent memory outside the writable registration");
                        let take = len.min(payload.len() - n.min(payload.len()));
                        // SAFETY: inside the test's read-write registration (checked above).
                        unsafe { std::ptr::copy_nonoverlapping(payload[n..].as_ptr(), addr as *mut u8, take) };
                        n += take;
                    }
                    n
                }
            };
            let result = if rng.below(10) == 0 { Err(EngineError::Corrupt("the sender stopped")) } else { Ok(copied) };
            target.on_delivered((ctx & !CTX_TARGET) as usize, result, dest, sinks);
        }
        Disposition::AnswerInto { data: LocalIov::Lent { parts, .. }, .. } => {
            assert!(parts.iter().all(|&p| mem.readable(p)), "an answer copies memory outside the registrations");
        }
        Disposition::AnswerWith(data) if kind_of(msg.hdr.app) == KIND_READ_REQ && msg.hdr.app & APP_SEGMENTED == 0 => {
            // A small read answered with its bytes: those the header names, from a registration.
            let (key, addr) = (msg.hdr.tag, msg.hdr.aux as usize);
            let start = if virt_addr { addr } else { mem.region(key).0.wrapping_add(addr) };
            let range = (start, data.as_slice().len());
            assert!(mem.inside(key, range), "a read answered with memory outside its registration: {:?}", msg.hdr);
            // SAFETY: inside the test's memory (checked above).
            let there = unsafe { std::slice::from_raw_parts(start as *const u8, range.1) };
            assert_eq!(data.as_slice(), there, "a read answered with other bytes than the memory's");
        }
        _ => {}
    }
}

/// What the target queued to send: a reply of registered memory reads only registrations.
fn check_outbox(rma: &mut RmaState, mem: &Memory) {
    for out in rma.outbox.drain(..) {
        if let Outgoing::Reply { data: ReplyData::Memory(ranges), .. } = out {
            assert!(ranges.iter().all(|&p| mem.readable(p)), "a reply sends memory outside the registrations");
        }
    }
}

#[test]
fn hostile_one_sided_commands_touch_only_what_registrations_allow() {
    for virt_addr in [false, true] {
        let mem = Memory::new();
        let mrs = table(&mem, virt_addr);
        let mut rma = RmaState::default();
        let (mut cqs, mut cntrs) = (slab::Slab::new(), slab::Slab::new());
        let b = Bindings::default();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(virt_addr));
        let mut outcomes = [0u64; 2];
        for msg_id in 0..COMMANDS {
            let (hdr, payload) = command(&mut rng, &mem, virt_addr);
            let msg = Incoming { key: msg_id, src: 1, src_gen: 1, msg_id, hdr, acked: rng.below(2) == 0 };
            let mut sinks = Sinks::new(&mut cqs, &mut cntrs, &b);
            let mut target = Target { rma: &mut rma, mrs: &mrs };
            // The engine offers a payload that is here in full first, and the message otherwise.
            let offered =
                if payload.len() as u64 == hdr.len { target.on_payload(&msg, &payload, &mut sinks) } else { None };
            let d = match offered {
                Some(d) => d,
                None => target.on_message(&msg),
            };
            outcomes[usize::from(matches!(d, Disposition::Refuse(_)))] += 1;
            engine_part(&mut target, &msg, d, &payload, (&mem, virt_addr), &mut rng, &mut sinks);
            check_outbox(&mut rma, &mem);
            assert!(mem.untouched_outside_rw(), "command {msg_id} ({hdr:?}) wrote outside the writable registration");
        }
        assert!(rma.target.is_empty(), "every delivered operation finished");
        // Both outcomes came up often: the commands reached the code that applies them.
        assert!(outcomes.iter().all(|&n| n > COMMANDS / 10), "taken and refused: {outcomes:?} (virt_addr {virt_addr})");
    }
}
