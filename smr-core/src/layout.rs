//! The shared layout of a region: header, geometry of its parts, peer table and wake word.
//!
//! A region is one file:
//! ```text
//! page 0   RegionHeader (magic, version, owner, geometry, ready flag)
//!          WakeWord (own 128-byte block)
//!          command ring: RingCtl + Slot<CmdEntry> x cmd_len        (peers -> owner)
//!          response ring: RingCtl + Slot<RespEntry> x resp_len     (peers -> owner)
//!          inject pool: StackHead + links + inject_count x INJECT_SIZE
//!          SAR pool:    StackHead + links + sar_count x sar_size
//!          peer table:  PeerSlot x max_peers
//!          MR table:    MrSlot x MR_SLOTS (registrations peers may copy with CMA: `published`)
//!          OwnerBeat    (own 128-byte block: how often the owner progressed with nothing of its own)
//! ```
//! Offsets are computed by one pure function from the counts, so a peer validates a header by
//! recomputing the geometry from the counts and comparing it field by field.

use crate::cmd::{CmdEntry, RespEntry};
use crate::error::{Error, Result};
use crate::free_stack::StackHead;
use crate::pod::{CachePadded, Pod};
pub use crate::published::MrSlot;
use crate::ring::{RingCtl, Slot};
use crate::shm::SharedSafe;
use crate::sync::{AtomicU32, AtomicU64};
use std::mem::{align_of, offset_of, size_of};

pub const MAGIC: u64 = u64::from_le_bytes(*b"RSHMREG\0");
/// 2: command entries carry a third provider word (`aux`); inline payload 200 bytes.
/// 3: response entries carry up to 32 bytes of answer data (one cache line per slot).
/// 4: a request may name a buffer of the sender's pools for its answer, which the receiver
///    writes into that buffer (`Status::Placed`; `endpoint::answer`).
/// 5: the owner publishes registrations that peers may read with CMA on their own (`MrSlot`),
///    and counts its progress calls with nothing of its own outstanding (`OwnerBeat`).
/// 6: command slots of 1,088 bytes, inline payload up to 1,032 bytes.
/// 7: peers may write published registrations too (`published::REMOTE_WRITE`), counted in the
///    entry while they copy (`MrSlot::writers`).
/// 8: a sender records the inject buffer it holds for its next message, or that carries its
///    last one, and the SAR buffer it copies a segment into, in its peer-table entry
///    (`PeerSlot::held`, `PeerSlot::sar_held`).
/// 9: a peer-table entry being claimed names its claimant's pid in its state word
///    (`SLOT_CLAIMED` in the low two bits), so that a claimant killed mid-claim loses it.
/// 10: a sender's peer-table entry names who copies the tail of its large CMA message (`split`).
/// 11: the owner counts every progress call too (`OwnerBeat::polls`).
/// 12: one response may finish several messages (`resp::DONE_MANY`).
/// 13: the provider's atomic requests carry an op id only when a reply names it, and reads
///     answered in one trip have a short request (both fit the command's first line).
/// 14: response slots of two cache lines: an answer carries up to 96 bytes, every other
///     response stays in the first line (`cmd::FIRST_LINE_DATA`).
/// 15: the owner says when it has a CPU to spare without polling (`OwnerBeat::spare`).
/// 16: an answer placed in buffers may be announced a piece at a time as it is copied in
///     (`resp::PART`).
/// 17: identities name their pid namespace (`RegionHeader::owner_ns`; a peer-table entry's
///     64-bit state word carries its sender's pid and namespace), and the owner holds a lock on its
///     region file for life (`FLAG_OWNER_LOCK`), by which peers of another pid namespace judge
///     it.
/// 18: a SAR segment command carries its sender's sequence number (`cmd::SarSeg::seq`), which the
///     sender's record of the buffer it copies into names (`PeerSlot::sar_held_msg`) instead of
///     a key of the message id and the offset, whose 30 bits of offset capped messages at 1 GiB.
/// 19: ring slots are no longer marked `WRITING` before they are written; every producer records
///     the positions it claims in a cache line of its own instead, in the peer-table entry of
///     the pair (`PeerSlot::cmd_claim`, `PeerSlot::resp_claim`, a cache line each: 256 bytes in all).
/// 20: a CONNECT names its sender's incarnation (in `tag`), and is a sender's first command in a
///    ring: by it a receiver tells a successor's commands from those a sender it forgot left in
///    the same entry (`endpoint::peers::Forgotten`).
/// 21: a published registration carries a seal over its words (`MrSlot::seal`), without which
///    peers take the ordinary path.
/// 22: a sender no longer takes the peer-table entry of a dead one: the owner frees it once it
///    has handled every command the dead sender pushed and decided about the buffers it held
///    (`endpoint::spare::Decision`), so that its queued messages are still known for its own.
/// 23: a popped buffer's link names who popped it (a sender's entry index, `free_stack::pop_as`),
///    and a sender records the buffer its pop tries before the pop's head CAS (`held::PENDING`,
///    which takes a bit of the record's incarnation tag), so that a sender killed in its pop
///    loses no buffer.
/// 24: a sender copying into a published registration with CMA marks which one in its entry of
///    the owner's table (`PeerSlot::mr_write`): a withdrawal waits for a live writer for as long
///    as it lives, not at most a second.
/// 25: a peer that found one of the owner's rings full says so, a bit for its group of peers
///    (`WakeWord::room_wanted`), and the owner wakes those peers once it has taken entries
///    (`wake::want_room`).
/// 26: a receiver times a large message's CMA read or SAR copies only when its sender asks
///    (`cmd::FLAG_TIMED`): a sender of 25, which never asks, would never learn which is faster.
/// 27: a published registration whose remote writes (reads) the owner counts says so
///    (`published::COUNT_WRITES`, `COUNT_READS`), and peers count their copies of it on a second
///    line of its entry (`MrSlot::counts`: 128 bytes an entry).
/// 28: a sender's peer-table entry has `SPLIT_WORDS` claim words for split copies, on the
///    receiver's claim-record line (`PeerSlot::split`), and an offer names which it uses.
/// 29: seven claim words per sender (`SPLIT_WORDS`), for splits whose halves are copied
///    several to a system call (`endpoint::split::together`).
/// 30: `cmd::proto::COMPACT_AUX`: a message of up to 16 bytes with `aux` or an answer wanted and
///    no CQ data (an RMA write) travels in the slot's first line, its `msg_id` in `data`.
pub const LAYOUT_VERSION: u32 = 30;
/// Longest region name, without the terminating NUL.
pub const NAME_MAX: usize = 63;
/// Size of one inject buffer (defined with the commands that name them, which check against it).
pub use crate::cmd::INJECT_SIZE;
/// Alignment of every part, so data buffers start on page boundaries.
const PART_ALIGN: u64 = 4096;

/// Header flag: the owner may be read with process_vm_readv (CMA).
pub const FLAG_CMA: u32 = 1;
/// Header flag: the owner holds the owner lock on the region file while it lives
/// (`liveness::hold_owner_lock`).
pub const FLAG_OWNER_LOCK: u32 = 2;

/// Counts that define a region's geometry. Chosen by the owner; read by peers from the header.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub cmd_len: u64,
    pub resp_len: u64,
    pub inject_count: u64,
    pub sar_count: u64,
    pub sar_size: u64,
    pub max_peers: u64,
}

/// Where each part lives.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub counts: Counts,
    pub wake: u64,
    pub cmd_ctl: u64,
    pub cmd_slots: u64,
    pub resp_ctl: u64,
    pub resp_slots: u64,
    pub inject_head: u64,
    pub inject_links: u64,
    pub inject_data: u64,
    pub sar_head: u64,
    pub sar_links: u64,
    pub sar_data: u64,
    pub peers: u64,
    pub mrs: u64,
    pub beat: u64,
    pub size: u64,
}

/// Limits that keep a hostile header from asking for absurd geometry.
const MAX_RING: u64 = 1 << 20;
const MAX_BUFFERS: u64 = 1 << 16;
const MAX_SAR_SIZE: u64 = 1 << 24;
const MAX_PEERS: u64 = 1 << 20;

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Geometry {
    /// Lay out a region for `counts`, or say why the counts are unacceptable.
    pub fn compute(counts: Counts) -> Result<Geometry> {
        let ok_ring = |n: u64| n.is_power_of_two() && (2..=MAX_RING).contains(&n);
        if !ok_ring(counts.cmd_len) || !ok_ring(counts.resp_len) {
            return Err(Error::Invalid("queue lengths must be powers of two in 2..=2^20"));
        }
        if counts.inject_count == 0 || counts.inject_count > MAX_BUFFERS {
            return Err(Error::Invalid("inject buffer count out of range"));
        }
        if counts.sar_count == 0 || counts.sar_count > MAX_BUFFERS {
            return Err(Error::Invalid("SAR buffer count out of range"));
        }
        if counts.sar_size < 4096 || counts.sar_size > MAX_SAR_SIZE || counts.sar_size % 64 != 0 {
            return Err(Error::Invalid("SAR buffer size out of range"));
        }
        if counts.max_peers == 0 || counts.max_peers > MAX_PEERS {
            return Err(Error::Invalid("peer table size out of range"));
        }
        let mut at = align_up(size_of::<RegionHeader>() as u64, 128);
        let mut part = |bytes: u64, align: u64| {
            let off = align_up(at, align);
            at = off + bytes;
            off
        };
        let wake = part(size_of::<WakeWord>() as u64, 128);
        let cmd_ctl = part(size_of::<RingCtl>() as u64, PART_ALIGN);
        let cmd_slots = part(counts.cmd_len * size_of::<Slot<CmdEntry>>() as u64, 128);
        let resp_ctl = part(size_of::<RingCtl>() as u64, PART_ALIGN);
        let resp_slots = part(counts.resp_len * size_of::<Slot<RespEntry>>() as u64, 128);
        let inject_head = part(size_of::<StackHead>() as u64, PART_ALIGN);
        let inject_links = part(counts.inject_count * 4, 128);
        let inject_data = part(counts.inject_count * INJECT_SIZE, PART_ALIGN);
        let sar_head = part(size_of::<StackHead>() as u64, PART_ALIGN);
        let sar_links = part(counts.sar_count * 4, 128);
        let sar_data = part(counts.sar_count * counts.sar_size, PART_ALIGN);
        let peers = part(counts.max_peers * size_of::<PeerSlot>() as u64, PART_ALIGN);
        let mrs = part(MR_SLOTS * size_of::<MrSlot>() as u64, PART_ALIGN);
        let beat = part(size_of::<OwnerBeat>() as u64, 128);
        let size = align_up(at, PART_ALIGN);
        Ok(Geometry {
            counts,
            wake,
            cmd_ctl,
            cmd_slots,
            resp_ctl,
            resp_slots,
            inject_head,
            inject_links,
            inject_data,
            sar_head,
            sar_links,
            sar_data,
            peers,
            mrs,
            beat,
            size,
        })
    }

    /// The start of every part, in layout order.
    pub fn part_offsets(&self) -> [u64; 14] {
        [
            self.wake,
            self.cmd_ctl,
            self.cmd_slots,
            self.resp_ctl,
            self.resp_slots,
            self.inject_head,
            self.inject_links,
            self.inject_data,
            self.sar_head,
            self.sar_links,
            self.sar_data,
            self.peers,
            self.mrs,
            self.beat,
        ]
    }

    pub fn inject_offset(&self, index: u32) -> Result<u64> {
        if u64::from(index) >= self.counts.inject_count {
            return Err(Error::Corrupt("inject buffer index out of range"));
        }
        Ok(self.inject_data + u64::from(index) * INJECT_SIZE)
    }

    /// Bytes of the SAR pool (its buffers' data).
    pub fn sar_pool_len(&self) -> u64 {
        self.counts.sar_count.saturating_mul(self.counts.sar_size)
    }

    /// Bytes of the inject pool (its buffers' data).
    pub fn inject_pool_len(&self) -> u64 {
        self.counts.inject_count.saturating_mul(INJECT_SIZE)
    }

    /// The pools' data, (offset, length) in ascending order: what a region reserves in /dev/shm
    /// only when it is first used.
    pub fn pools(&self) -> [(u64, u64); 2] {
        [(self.inject_data, self.inject_pool_len()), (self.sar_data, self.sar_pool_len())]
    }

    /// Bytes a region reserves in /dev/shm when it is created: all but its pools.
    pub fn reserved_at_creation(&self) -> u64 {
        self.size - self.pools().iter().map(|&(_, len)| len).sum::<u64>()
    }

    pub fn sar_offset(&self, index: u32) -> Result<u64> {
        if u64::from(index) >= self.counts.sar_count {
            return Err(Error::Corrupt("SAR buffer index out of range"));
        }
        Ok(self.sar_data + u64::from(index) * self.counts.sar_size)
    }
}

/// Page 0 of every region.
#[repr(C)]
pub struct RegionHeader {
    pub magic: u64,
    pub layout_version: u32,
    pub flags: u32,
    pub owner_pid: u32,
    /// The owner's pid namespace (`liveness::own_namespace`): its pid means it only there.
    pub owner_ns: u32,
    pub owner_start: u64,
    /// Random per creation: tells a restarted owner of the same name from the old one.
    pub incarnation: u64,
    pub name: [u8; NAME_MAX + 1],
    pub geometry: Geometry,
    /// Written last, with Release, by the owner: 1 = everything above is valid.
    pub ready: AtomicU32,
    pub _pad2: u32,
}

pub const READY: u32 = 1;
/// Written by an owner that closed its endpoint: senders stop sending and fail what waits.
pub const CLOSED: u32 = 2;

/// The futex a blocked owner sleeps on; senders wake it only when `armed` is set.
#[repr(C)]
pub struct WakeWord {
    pub seq: CachePadded<AtomicU32>,
    pub armed: AtomicU32,
    /// The peers that found one of the owner's rings full, a bit for a group of them
    /// (`wake::want_room`). Beside `armed`, which every push reads: written only when a ring is
    /// full, so the line stays shared.
    pub room_wanted: AtomicU32,
}

/// One entry of the peer table: a sender announces itself here before it sends.
#[repr(C, align(128))]
pub struct PeerSlot {
    /// `SLOT_FREE`, or `SLOT_CLAIMED` / `SLOT_READY` in the low two bits with the sender's pid
    /// (bits 2-31) and pid namespace (bits 32-63) above them (`endpoint::entry::slot_word`).
    pub state: AtomicU64,
    /// The sender's start time (`liveness::ProcessIdentity::start`).
    pub start: AtomicU64,
    pub incarnation: AtomicU64,
    pub name: [AtomicU64; (NAME_MAX + 1) / 8],
    /// The buffer of our inject pool that this sender holds (for its next message, or carrying
    /// one we may not have handled yet), tagged with its incarnation (0: none), and the id of
    /// the message it carries: a `held::Record` (`endpoint::spare`).
    pub held: AtomicU64,
    pub held_msg: AtomicU64,
    /// The same for the SAR buffer this sender is copying a segment into (the segment's
    /// sequence number, `cmd::SarSeg::seq`).
    pub sar_held: AtomicU64,
    pub sar_held_msg: AtomicU64,
    /// Unused since version 28 (the claim words of split copies moved to `split`).
    _unused: u64,
    /// The sender's claim record for our command ring (`ring::Ring::with_claim_record`): the
    /// positions it is claiming right now, if any. Its own cache line: the sender stores to it
    /// on every message, and we read it only when our ring's head stalls.
    pub cmd_claim: AtomicU64,
    /// The slot of our table of published registrations (`published`) that this sender is
    /// copying into with CMA right now, plus one (0: none), so that a withdrawal waits for a live
    /// writer however long it takes (`endpoint::direct`). On the claim record's line: the same
    /// writer stores it, and we read it only while a withdrawal waits.
    pub mr_write: AtomicU64,
    _cmd_claim_line: [u64; 6],
    /// Our claim record for this sender's response ring, in our region like everything we
    /// write for it. Its own cache line, for the same reasons. (The two share a 128-byte pair
    /// rather than take one each: a pair each cost every region 128 KiB more of /dev/shm at
    /// creation, past issue 8's 4 MiB an endpoint with every pool in use. Each line stays in
    /// its writer's cache, so neither misses, and nothing fetches its pair.)
    pub resp_claim: AtomicU64,
    /// Who copies the tails of this sender's large CMA messages (`endpoint::split`): a word per
    /// split under way, each holding its message's id and the claim's state. More than one, so
    /// that the receiver reads the heads of the next messages while the sender writes the
    /// tails of the last ones. On this line, which the receiver writes anyway (`resp_claim`),
    /// rather than on the first pair, which the sender writes with every inject message.
    pub split: [AtomicU64; SPLIT_WORDS],
}

/// Split copies under way at once per sender (`PeerSlot::split`): as many as the rest of the
/// line of `resp_claim` holds.
pub const SPLIT_WORDS: usize = 7;

/// How often the owner progresses, for peers choosing how to make a large read or write. Only
/// the owner writes it; its own cache line, so the owner's stores do not touch the lines senders
/// read on every message.
#[repr(C, align(128))]
pub struct OwnerBeat {
    /// Progress calls made with no operation of the owner's own outstanding: a peer that sees it
    /// move between two of its large reads knows the owner has a CPU to spare for them
    /// (`Endpoint::peer_is_free`).
    pub free_polls: AtomicU64,
    /// Every progress call: a peer that sees it move knows the owner is in the provider and
    /// answers requests within microseconds, even while busy with its own operations
    /// (`Endpoint::peer_progresses`).
    pub polls: AtomicU64,
    /// Nonzero while the owner has a CPU to spare for peers without polling: its application
    /// sleeps in a blocking wait and a progress thread serves requests (`Endpoint::set_spare`,
    /// `Endpoint::peer_has_spare_cpu`).
    pub spare: AtomicU64,
}

/// Entries of the MR table.
pub const MR_SLOTS: u64 = 64;

/// States of a peer-table entry (`PeerSlot::state`, in its low two bits): free; being claimed;
/// filled by its claimant. The last two name the sender above them (`endpoint::entry::slot_word`).
pub const SLOT_FREE: u64 = 0;
pub const SLOT_CLAIMED: u64 = 1;
pub const SLOT_READY: u64 = 2;

// SAFETY: integers and atomics only; every bit pattern is valid.
unsafe impl SharedSafe for RegionHeader {}
// SAFETY: atomics only.
unsafe impl SharedSafe for WakeWord {}
// SAFETY: atomics and integers only; every bit pattern is valid.
unsafe impl SharedSafe for PeerSlot {}
// SAFETY: atomics only.
unsafe impl SharedSafe for MrSlot {}
// SAFETY: an atomic.
unsafe impl SharedSafe for OwnerBeat {}
// SAFETY: atomics only.
unsafe impl SharedSafe for RingCtl {}
// SAFETY: atomics only.
unsafe impl SharedSafe for StackHead {}
// SAFETY: an atomic.
unsafe impl SharedSafe for AtomicU32 {}
// SAFETY: an atomic stamp and a `Pod` value in a cell.
unsafe impl<T: Pod> SharedSafe for Slot<T> {}

// The shared layout is part of the wire format: pin it down at compile time.
const _: () = {
    assert!(size_of::<RegionHeader>() <= 4096);
    assert!(offset_of!(RegionHeader, magic) == 0);
    assert!(offset_of!(RegionHeader, layout_version) == 8);
    assert!(offset_of!(RegionHeader, owner_pid) == 16);
    assert!(offset_of!(RegionHeader, incarnation) == 32);
    assert!(offset_of!(RegionHeader, name) == 40);
    assert!(offset_of!(RegionHeader, geometry) == 104);
    assert!(size_of::<Geometry>() == 21 * 8);
    assert!(offset_of!(RegionHeader, ready) == 104 + 21 * 8);
    assert!(size_of::<OwnerBeat>() == 128);
    assert!(size_of::<MrSlot>() == 128);
    assert!(offset_of!(MrSlot, counts) == 64);
    // `published::Publisher` fills at most 64 slots (`publish`).
    assert!(MR_SLOTS <= 64);
    assert!(size_of::<WakeWord>() == 256);
    assert!(size_of::<PeerSlot>() == 256);
    assert!(offset_of!(PeerSlot, cmd_claim) == 128);
    assert!(offset_of!(PeerSlot, resp_claim) == 192);
    assert!(size_of::<RingCtl>() == 128);
    assert!(size_of::<Slot<CmdEntry>>() == 17 * 64);
    assert!(size_of::<Slot<RespEntry>>() == 128);
    assert!(align_of::<Slot<CmdEntry>>() == 8);
};

#[cfg(test)]
mod tests {
    use super::*;

    fn counts() -> Counts {
        Counts { cmd_len: 256, resp_len: 256, inject_count: 8, sar_count: 4, sar_size: 65536, max_peers: 16 }
    }

    #[test]
    fn parts_are_ordered_aligned_and_inside() {
        let g = Geometry::compute(counts()).unwrap();
        let offs = g.part_offsets();
        assert!(offs.windows(2).all(|w| w[0] < w[1]));
        assert!(offs.iter().all(|o| o % 128 == 0));
        assert_eq!(g.inject_data % 4096, 0);
        assert!(g.peers + 16 * 128 <= g.mrs);
        assert!(g.mrs + MR_SLOTS * size_of::<MrSlot>() as u64 <= g.beat);
        assert!(g.beat + 128 <= g.size);
        assert_eq!(g.sar_offset(3).unwrap(), g.sar_data + 3 * 65536);
        assert!(g.sar_offset(4).is_err());
        assert!(g.inject_offset(8).is_err());
    }

    /// Every part holds what it was laid out for, in layout order, before the next part starts:
    /// a part too short would let one ring's slots or one pool's buffers run into the next.
    #[test]
    fn each_part_holds_its_contents_before_the_next() {
        for c in [
            counts(),
            Counts { cmd_len: 2, resp_len: 1 << 20, inject_count: 1000, sar_count: 2000, sar_size: 4160, max_peers: 1 },
        ] {
            let g = Geometry::compute(c).unwrap();
            let lens = [
                size_of::<WakeWord>() as u64,
                size_of::<RingCtl>() as u64,
                c.cmd_len * size_of::<Slot<CmdEntry>>() as u64,
                size_of::<RingCtl>() as u64,
                c.resp_len * size_of::<Slot<RespEntry>>() as u64,
                size_of::<StackHead>() as u64,
                c.inject_count * 4,
                c.inject_count * INJECT_SIZE,
                size_of::<StackHead>() as u64,
                c.sar_count * 4,
                c.sar_count * c.sar_size,
                c.max_peers * size_of::<PeerSlot>() as u64,
                MR_SLOTS * size_of::<MrSlot>() as u64,
                size_of::<OwnerBeat>() as u64,
            ];
            let offs = g.part_offsets();
            assert!(offs[0] >= size_of::<RegionHeader>() as u64, "the wake word overlaps the header");
            let ends: Vec<u64> = offs.iter().zip(lens).map(|(o, l)| o + l).collect();
            assert!(ends.iter().zip(&offs[1..]).all(|(end, next)| end <= next), "{c:?}: {offs:?} {ends:?}");
            assert!(ends[13] <= g.size && g.size % PART_ALIGN == 0 && g.size - ends[13] < PART_ALIGN);
            for part in [g.cmd_ctl, g.resp_ctl, g.inject_head, g.inject_data, g.sar_head, g.sar_data, g.peers, g.mrs] {
                assert_eq!(part % PART_ALIGN, 0);
            }
            // The buffers: each at its own place in its pool, the last ending where the pool does.
            let last_inject = c.inject_count as u32 - 1;
            assert_eq!(g.inject_offset(0).unwrap(), g.inject_data);
            assert_eq!(g.inject_offset(last_inject).unwrap() + INJECT_SIZE, g.inject_data + g.inject_pool_len());
            assert!(g.inject_offset(last_inject + 1).is_err());
            assert_eq!(g.sar_offset(1).unwrap(), g.sar_data + c.sar_size);
            assert_eq!(g.sar_offset(c.sar_count as u32 - 1).unwrap() + c.sar_size, g.sar_data + g.sar_pool_len());
            assert_eq!(g.pools(), [(g.inject_data, lens[7]), (g.sar_data, lens[10])]);
            assert_eq!(g.reserved_at_creation(), g.size - lens[7] - lens[10]);
        }
    }

    /// Each limit is taken at its bound and refused one past it, so that neither an owner's
    /// largest legal region is refused by its peers nor a hostile header's one step further is
    /// mapped.
    #[test]
    fn counts_are_taken_up_to_their_limits_and_no_further() {
        let ok = |c: Counts| Geometry::compute(c).is_ok();
        for (at_limit, past) in [
            (Counts { cmd_len: 2, ..counts() }, Counts { cmd_len: 1, ..counts() }),
            (Counts { cmd_len: MAX_RING, ..counts() }, Counts { cmd_len: MAX_RING * 2, ..counts() }),
            (Counts { resp_len: 2, ..counts() }, Counts { resp_len: 0, ..counts() }),
            (Counts { resp_len: MAX_RING, ..counts() }, Counts { resp_len: 96, ..counts() }),
            (Counts { inject_count: 1, ..counts() }, Counts { inject_count: 0, ..counts() }),
            (Counts { inject_count: MAX_BUFFERS, ..counts() }, Counts { inject_count: MAX_BUFFERS + 1, ..counts() }),
            (Counts { sar_count: 1, ..counts() }, Counts { sar_count: 0, ..counts() }),
            (Counts { sar_count: MAX_BUFFERS, ..counts() }, Counts { sar_count: MAX_BUFFERS + 1, ..counts() }),
            (Counts { sar_size: 4096, ..counts() }, Counts { sar_size: 4032, ..counts() }),
            (Counts { sar_size: MAX_SAR_SIZE, ..counts() }, Counts { sar_size: MAX_SAR_SIZE + 64, ..counts() }),
            (Counts { sar_size: 4096 + 64, ..counts() }, Counts { sar_size: 4096 + 32, ..counts() }),
            (Counts { max_peers: 1, ..counts() }, Counts { max_peers: 0, ..counts() }),
            (Counts { max_peers: MAX_PEERS, ..counts() }, Counts { max_peers: MAX_PEERS + 1, ..counts() }),
        ] {
            assert!(ok(at_limit), "refused {at_limit:?}");
            assert!(!ok(past), "took {past:?}");
        }
    }

    #[test]
    fn absurd_counts_are_rejected() {
        for bad in [
            Counts { cmd_len: 3, ..counts() },
            Counts { resp_len: 1 << 30, ..counts() },
            Counts { inject_count: 0, ..counts() },
            Counts { sar_size: 100, ..counts() },
            Counts { max_peers: u64::MAX, ..counts() },
        ] {
            assert!(Geometry::compute(bad).is_err(), "{bad:?}");
        }
    }
}
