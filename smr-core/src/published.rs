//! Registrations an endpoint publishes in its region, so that a peer may read or write them with
//! CMA on its own: no command, no answer, no step of the owner's progress.
//!
//! The owner writes an entry (key, range, flags) under a sequence count (odd while it writes);
//! a peer takes an entry only from a read between two equal even counts.
//!
//! - **Reads** check the count again after their copy: an entry withdrawn or rewritten meanwhile
//!   (a registration closed during the copy) makes the peer do the read the ordinary way,
//!   through the owner, which then answers with the registration as it stands. Bytes read from
//!   memory the owner already released are thrown away, never reported.
//! - **Writes** cannot be taken back, so they are announced instead: the writer counts itself
//!   in the entry's `writers` before it checks the count and copies (`begin_write`), and out
//!   after (`end_write`); an owner rewriting the entry marks it odd first and then waits until
//!   no writer is counted. Either the writer sees the odd count and does not copy, or the owner
//!   sees the writer and waits for its copy (loom model `published_withdraw_waits_for_a_write`).
//!   A count that stays up may be a writer's that died mid-copy, or a scribble, which must not
//!   hang `fi_close`; or a live writer's that is slow or stopped between its count and its copy
//!   (SIGSTOP, a debugger, a host that does not run it), whose copy must not land after the
//!   application got its memory back. So a writer also marks what it writes in a word of its
//!   own that the owner can judge (`endpoint::direct`: its entry of the owner's peer table,
//!   marked before it is counted), and past `WRITERS_LOOK_AFTER` the owner asks (`writing`)
//!   whether a live writer marks the entry: it waits for as long as one does, and no longer
//!   once none does.
//!
//! The owner withdraws an entry before `fi_close(mr)` returns, so no peer's copy touches memory
//! the application may already have freed and still reports success.
//!
//! **Counted copies.** A registration whose remote writes (reads) the owner must count, into a
//! FI_REMOTE_WRITE (FI_REMOTE_READ) counter of the registration or of the endpoint, is published
//! with `COUNT_WRITES` (`COUNT_READS`): a peer's copy of it is admitted as a write is (a counted
//! read too, so that a withdrawal waits for it), and the peer adds one to the entry's count
//! (`MrCounts`) after its copy and before it counts itself out (`count`). The owner takes what
//! the counts moved by since it last looked (`Publisher::take_counts`) on its progress passes,
//! and once more after a withdrawal, which waited for every admitted copy: no counted copy is
//! lost, none is counted twice. The counts are peers' words: a move no run of copies could make
//! (`COUNT_STEP_MAX`, or backwards) is a scribble, taken as nothing.
//!
//! **A seal against scribbles.** Every entry carries `seal`, a mix of its sequence count and
//! fields that the owner computes when it writes the entry; a peer takes an entry only if the
//! seal matches what it read. Without it, bytes a faulty peer scribbled over an entry (a base,
//! a length, flags) between two rewrites would be taken as the owner's word, and a peer's CMA
//! copy would land in, or read from, other bytes of the owner's memory than the registration:
//! silent corruption the owner never sees. A mismatch sends the peer the ordinary way, through
//! the owner, which checks against its own records. The seal catches garbage, not a forger who
//! computes it (a process of the same user that could do that could as well write the owner's
//! memory with CMA directly). The owner puts scribbled entries back from its private copies on
//! its liveness tick (`Publisher::repair`), so that peers copy directly again.
//!
//! Keys are placed by open addressing from `key % slots`, and a slot once used keeps `USED`, so
//! a lookup walks from the key's home slot and stops at the first slot never used: O(1) for the
//! few registrations a process has. The owner keeps which slots are live in its own memory
//! (`Publisher`), never trusting the shared flags, which a hostile peer may scribble over.
//!
//! For a peer everything here is the owner's word: a lying owner can make a reader copy the
//! wrong bytes of the owner's own address space (the kernel checks every address), nothing more.

use crate::sync::{fence, spin_hint, AtomicU64, Ordering};

/// One published registration, in the owner's region (`layout`): written by the owner under a
/// sequence count, read by peers. All zero until first used.
#[repr(C, align(64))]
pub struct MrSlot {
    /// Odd while the owner rewrites the entry; every rewrite moves it on.
    pub seq: AtomicU64,
    pub key: AtomicU64,
    /// The registered range in the owner's address space.
    pub base: AtomicU64,
    pub len: AtomicU64,
    pub flags: AtomicU64,
    /// Peers copying into the registration now (`begin_write`..`end_write`).
    pub writers: AtomicU64,
    /// `seal(seq, key, base, len, flags)` as the owner wrote them: a peer takes the entry only
    /// if it matches.
    pub seal: AtomicU64,
    /// Copies peers made of a counted registration, on a line of their own: peers add to them,
    /// lookups read the line above.
    pub counts: MrCounts,
}

/// How many counted copies peers made of one entry (`COUNT_READS`, `COUNT_WRITES`), ever: the
/// owner keeps what it has taken (`Publisher::take_counts`).
#[repr(C, align(64))]
pub struct MrCounts {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
}

impl MrCounts {
    /// The count of copies of kind `access` (`REMOTE_READ`, else writes).
    fn of(&self, access: u64) -> &AtomicU64 {
        if access == REMOTE_READ {
            &self.reads
        } else {
            &self.writes
        }
    }

    /// Both counts (reads, writes). Acquire: pairs with `count`'s Release.
    fn now(&self) -> [u64; 2] {
        [self.reads.load(Ordering::Acquire), self.writes.load(Ordering::Acquire)]
    }
}

impl MrSlot {
    /// A never-used entry, for tables outside a region (tests and models).
    pub fn unused() -> MrSlot {
        MrSlot {
            seq: AtomicU64::new(0),
            key: AtomicU64::new(0),
            base: AtomicU64::new(0),
            len: AtomicU64::new(0),
            flags: AtomicU64::new(0),
            writers: AtomicU64::new(0),
            seal: AtomicU64::new(0),
            counts: MrCounts { reads: AtomicU64::new(0), writes: AtomicU64::new(0) },
        }
    }
}

/// The slot was written at least once: lookups walk past it.
pub const USED: u64 = 1;
/// The slot holds a registration now.
pub const LIVE: u64 = 2;
/// Peers may read it.
pub const REMOTE_READ: u64 = 4;
/// Remote addresses are virtual addresses (FI_MR_VIRT_ADDR), not offsets.
pub const VIRT_ADDR: u64 = 8;
/// Peers may write it.
pub const REMOTE_WRITE: u64 = 16;
/// The owner counts peers' reads of it: a reader is admitted as a writer is, and counts its copy.
pub const COUNT_READS: u64 = 32;
/// The owner counts peers' writes into it: a writer counts its copy.
pub const COUNT_WRITES: u64 = 64;

/// The most a count may move between two looks of the owner's: more (or a move backwards) is a
/// scribble, not copies. Each copy is a system call; four billion of them between two progress
/// passes of the owner would take a peer over an hour.
pub const COUNT_STEP_MAX: u64 = 1 << 32;

/// How long an owner rewriting an entry waits for the writers counted in it before it asks
/// whether a live writer marks the entry (a copy of up to `WRITE_MAX` takes milliseconds; a
/// count no live writer explains is a dead writer's or a scribble).
#[cfg(not(loom))]
pub const WRITERS_LOOK_AFTER: std::time::Duration = std::time::Duration::from_millis(20);
/// The most bytes a peer writes into a published registration in one copy.
pub const WRITE_MAX: u64 = 64 << 20;

/// An entry as a peer read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub slot: u32,
    pub seq: u64,
    pub key: u64,
    pub base: u64,
    pub len: u64,
    pub flags: u64,
}

impl Published {
    /// The owner's address of a remote access of `len` bytes at `addr` (a virtual address or an
    /// offset, as the entry says), if it lies inside the registration.
    pub fn target(&self, addr: u64, len: u64) -> Option<u64> {
        let start = if self.flags & VIRT_ADDR != 0 { addr.checked_sub(self.base)? } else { addr };
        if start.checked_add(len)? > self.len {
            return None;
        }
        self.base.checked_add(start)
    }

    /// Whether the owner lets peers do `access` (`REMOTE_READ`, `REMOTE_WRITE`) on their own.
    pub fn allows(&self, access: u64) -> bool {
        self.flags & access == access
    }

    /// Whether the owner counts peers' copies of kind `access` (`REMOTE_READ`, `REMOTE_WRITE`):
    /// each must then be admitted (`begin_write`) and counted (`count`).
    pub fn counts(&self, access: u64) -> bool {
        self.flags & count_flag(access) != 0
    }
}

/// The flag that says copies of kind `access` are counted.
fn count_flag(access: u64) -> u64 {
    if access == REMOTE_READ {
        COUNT_READS
    } else {
        COUNT_WRITES
    }
}

fn home(key: u64, slots: usize) -> usize {
    (key % slots as u64) as usize
}

/// The check word of an entry with these words: a multiply-xorshift mix, so that a scribble over
/// any bit of them (or of the seal) makes a mismatch but for a chance of one in 2^64. About 20
/// instructions, on a path that goes on to a system call.
pub fn seal(seq: u64, key: u64, base: u64, len: u64, flags: u64) -> u64 {
    const MUL: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = 0x5EA1_ED0F_2E61_57E2_u64;
    for w in [seq, key, base, len, flags] {
        h = (h ^ w).wrapping_mul(MUL);
        h ^= h >> 29;
    }
    h
}

/// What the owner last wrote into one slot (key, base, len, flags), kept in its own memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Written {
    key: u64,
    base: u64,
    len: u64,
    flags: u64,
}

/// The owner's private record of the slots it filled: what it last wrote into each (never-used
/// slots: all zero; a slot is live when its flags say `LIVE`). Empty until the first publish.
#[derive(Debug, Default)]
pub struct Publisher {
    written: Vec<Written>,
    /// Each slot's counts (reads, writes) as the owner last took them (`take_counts`).
    taken: Vec<[u64; 2]>,
}

/// What peers' counted copies of one entry moved by since the owner last looked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    pub reads: u64,
    pub writes: u64,
    /// A count moved by more than `COUNT_STEP_MAX`, or backwards: scribbled, taken as nothing.
    pub scribbled: bool,
}

impl Publisher {
    /// Publish a registration; None when every slot is taken (peers then go through the owner).
    pub fn publish(&mut self, slots: &[MrSlot], key: u64, base: u64, len: u64, flags: u64) -> Option<u32> {
        let n = slots.len().min(64);
        let free = (0..n).map(|i| (home(key, n) + i) % n).find(|&i| !self.is_live(i))?;
        // The slot is not live (withdrawn, or never used): no writer copies into it. One counted
        // there now read it before its withdrawal and is refused by its count check (it counts
        // itself out at once), or died: nobody to wait for beyond the count's first look.
        let nobody = |_: u32| false;
        self.write(slots, free, Written { key, base, len, flags: flags | USED | LIVE }, &nobody);
        // Counts start from where they stand: copies of the slot's earlier registrations were
        // taken at their withdrawal.
        self.taken[free] = slots[free].counts.now();
        Some(free as u32)
    }

    /// What peers' counted copies of `slot` (reads, writes) moved by since the last call, or
    /// since it was published. Called on progress passes, and after `withdraw` (which waited
    /// for every admitted copy) for the last of them. The Acquire loads pair with `count`: the
    /// bytes a counted write placed are visible once it is taken.
    pub fn take_counts(&mut self, slots: &[MrSlot], slot: u32) -> Counted {
        let (Some(s), Some(taken)) = (slots.get(slot as usize), self.taken.get_mut(slot as usize)) else {
            return Counted::default();
        };
        let now = s.counts.now();
        let moved = [now[0].wrapping_sub(taken[0]), now[1].wrapping_sub(taken[1])];
        *taken = now;
        if moved.iter().any(|&m| m > COUNT_STEP_MAX) {
            return Counted { scribbled: true, ..Counted::default() };
        }
        Counted { reads: moved[0], writes: moved[1], scribbled: false }
    }

    /// Take a published entry back; peers that read it before see their copy refused, and a
    /// peer's write under way is over when this returns. `writing(slot)`: whether a live peer
    /// marks that it copies into `slot` (see the module's comment), asked only while a count of
    /// writers stays up.
    pub fn withdraw(&mut self, slots: &[MrSlot], slot: u32, writing: &dyn Fn(u32) -> bool) {
        let slot = slot as usize;
        if self.is_live(slot) && slot < slots.len() {
            self.write(slots, slot, Written { flags: USED, ..Written::default() }, writing);
        }
    }

    fn is_live(&self, slot: usize) -> bool {
        self.written.get(slot).is_some_and(|w| w.flags & LIVE != 0)
    }

    /// Rewrite slot `i` with `w`, and remember it.
    fn write(&mut self, slots: &[MrSlot], i: usize, w: Written, writing: &dyn Fn(u32) -> bool) {
        if self.written.len() < slots.len().min(64) {
            self.written.resize(slots.len().min(64), Written::default());
            self.taken.resize(slots.len().min(64), [0; 2]);
        }
        write(&slots[i], w, Writers::WaitFor(&|| writing(i as u32)));
        self.written[i] = w;
    }

    /// Owner only, on its liveness tick: put back every entry whose shared words differ from
    /// what the owner last wrote there (a peer scribbled over them: peers would refuse it by its
    /// seal and take the ordinary path for good, or an odd count would stop their lookups).
    /// Returns how many entries it rewrote. Honest runs never differ: only the owner writes these
    /// words, and it rewrites an entry whole before it returns.
    ///
    /// The rewrite does not wait for the writers counted in the entry (which a scribble may have
    /// set for good): it puts back the registration that stands, so a peer still copying into
    /// it, admitted before the scribble, copies where it may; and no peer was admitted by the
    /// scribbled words, which fail the seal.
    pub fn repair(&mut self, slots: &[MrSlot]) -> u32 {
        let mut repaired = 0;
        for (i, w) in self.written.iter().copied().enumerate().take(slots.len()) {
            let s = &slots[i];
            let seq = s.seq.load(Ordering::Relaxed);
            let now = Written {
                key: s.key.load(Ordering::Relaxed),
                base: s.base.load(Ordering::Relaxed),
                len: s.len.load(Ordering::Relaxed),
                flags: s.flags.load(Ordering::Relaxed),
            };
            // A never-used slot is not sealed: lookups stop at it.
            let sealed = || s.seal.load(Ordering::Relaxed) == seal(seq, w.key, w.base, w.len, w.flags);
            if seq & 1 == 0 && now == w && (w.flags & USED == 0 || sealed()) {
                continue;
            }
            write(s, w, Writers::Ignore);
            repaired += 1;
        }
        repaired
    }

    /// How many entries are live.
    pub fn count(&self) -> u32 {
        (0..self.written.len()).filter(|&i| self.is_live(i)).count() as u32
    }
}

/// Whether a rewrite waits for the peers counted as writing into the entry.
#[derive(Clone, Copy)]
enum Writers<'a> {
    /// The entry changes what it names (publish, withdraw): a peer's copy must be over first.
    /// Whether a live peer marks that it writes into the entry (`Publisher::withdraw`).
    WaitFor(&'a dyn Fn() -> bool),
    /// The entry is put back as it stands (`Publisher::repair`).
    Ignore,
}

/// Rewrite one entry under its sequence count (the owner is its only writer).
fn write(s: &MrSlot, Written { key, base, len, flags }: Written, writers: Writers) {
    // Even whatever a peer may have scribbled there: odd marks the rewrite.
    let seq = s.seq.load(Ordering::Relaxed) & !1;
    s.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
    // Orders the odd count before the look at `writers` (and pairs with `begin_write`'s fence):
    // a writer counted after this sees the odd count and stays out.
    fence(Ordering::SeqCst);
    if let Writers::WaitFor(writing) = writers {
        wait_for_writers(s, writing);
    }
    s.key.store(key, Ordering::Relaxed);
    s.base.store(base, Ordering::Relaxed);
    s.len.store(len, Ordering::Relaxed);
    s.flags.store(flags, Ordering::Relaxed);
    s.seal.store(seal(seq.wrapping_add(2), key, base, len, flags), Ordering::Relaxed);
    s.seq.store(seq.wrapping_add(2), Ordering::Release);
}

/// Wait until no peer copies into the entry (`begin_write`), or, once `WRITERS_LOOK_AFTER` has
/// passed, until no live peer marks that it does (`writing`: the count is a dead writer's, or
/// scribbled).
fn wait_for_writers(s: &MrSlot, writing: &dyn Fn() -> bool) {
    #[cfg(loom)]
    let _ = writing;
    #[cfg(not(loom))]
    let (start, mut spins) = (std::time::Instant::now(), 0u32);
    while s.writers.load(Ordering::Acquire) != 0 {
        spin_hint();
        #[cfg(not(loom))]
        {
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                // The writer may be waiting for this CPU.
                std::thread::yield_now();
                if start.elapsed() > WRITERS_LOOK_AFTER {
                    if !writing() {
                        return;
                    }
                    // A live writer stopped or slow: look again in a while, not in a spin.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
        }
    }
}

/// Count ourselves in as a writer of the entry `p` was read from, if it still stands: true, and
/// the owner keeps the registration until `end_write`; false, and nothing is counted (take the
/// ordinary path).
pub fn begin_write(slots: &[MrSlot], p: &Published) -> bool {
    let Some(s) = slots.get(p.slot as usize) else { return false };
    // Release: an owner that sees us counted also sees the mark our caller made before.
    s.writers.fetch_add(1, Ordering::Release);
    // Pairs with the owner's fence in `write`: either the owner sees us counted, or we see its
    // odd (or moved) count.
    fence(Ordering::SeqCst);
    if s.seq.load(Ordering::Relaxed) == p.seq {
        return true;
    }
    s.writers.fetch_sub(1, Ordering::Release);
    false
}

/// Count a copy of kind `access` that `begin_write` admitted into the entry `p` was read from,
/// before `end_write`: a withdrawal, which waits for the admitted copies, then finds it counted.
/// Release: the owner that takes the count sees the bytes the copy placed.
pub fn count(slots: &[MrSlot], p: &Published, access: u64) {
    if let Some(s) = slots.get(p.slot as usize) {
        s.counts.of(access).fetch_add(1, Ordering::Release);
    }
}

/// The copy `begin_write` admitted is over: the owner may rewrite the entry.
pub fn end_write(slots: &[MrSlot], p: &Published) {
    if let Some(s) = slots.get(p.slot as usize) {
        s.writers.fetch_sub(1, Ordering::Release);
    }
}

/// Find the live entry for `key` in a peer's table. None when there is none, when the owner
/// is rewriting the entries on the way, or when one on the way fails its seal (scribbled): the
/// caller takes the ordinary path then.
pub fn lookup(slots: &[MrSlot], key: u64) -> Option<Published> {
    let n = slots.len();
    if n == 0 {
        return None;
    }
    for i in 0..n {
        let slot = (home(key, n) + i) % n;
        let s = &slots[slot];
        let seq = s.seq.load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let (k, base, len, flags, sealed) = (
            s.key.load(Ordering::Relaxed),
            s.base.load(Ordering::Relaxed),
            s.len.load(Ordering::Relaxed),
            s.flags.load(Ordering::Relaxed),
            s.seal.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) != seq || flags & USED == 0 {
            return None;
        }
        if sealed != seal(seq, k, base, len, flags) {
            return None;
        }
        if flags & LIVE != 0 && k == key {
            return Some(Published { slot: slot as u32, seq, key, base, len, flags });
        }
    }
    None
}

/// Whether the entry `p` was read from still stands, unchanged (checked after a copy). The
/// fence orders the copy before this load: an owner that withdrew the entry and then released
/// the memory (munmap or free, after `withdraw` returned) is seen to have withdrawn it by a copy
/// that saw the memory gone (loom model `published_withdraw_races_a_read`).
pub fn unchanged(slots: &[MrSlot], p: &Published) -> bool {
    fence(Ordering::Acquire);
    slots.get(p.slot as usize).is_some_and(|s| s.seq.load(Ordering::Acquire) == p.seq)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn table() -> Vec<MrSlot> {
        (0..64).map(|_| MrSlot::unused()).collect()
    }

    #[test]
    fn published_entries_are_found_until_withdrawn() {
        let t = table();
        let mut p = Publisher::default();
        assert_eq!(lookup(&t, 5), None);
        // Keys with the same home slot (5, 69, 133) probe past each other.
        let a = p.publish(&t, 5, 0x1000, 100, REMOTE_READ).unwrap();
        let b = p.publish(&t, 69, 0x2000, 200, REMOTE_READ | VIRT_ADDR).unwrap();
        let c = p.publish(&t, 133, 0x3000, 300, REMOTE_READ).unwrap();
        assert_eq!((a, b, c), (5, 6, 7));
        let found = lookup(&t, 69).unwrap();
        assert_eq!((found.base, found.len, found.flags & VIRT_ADDR), (0x2000, 200, VIRT_ADDR));
        p.withdraw(&t, b, &nobody);
        assert_eq!(lookup(&t, 69), None);
        assert!(!unchanged(&t, &found), "a withdrawn entry must fail the check after a copy");
        assert_eq!(lookup(&t, 133).unwrap().base, 0x3000, "found past a withdrawn slot");
        // A withdrawn entry keeps key 0, which is a key too (OpenSHMEM's data segment is key 0).
        let zero = p.publish(&t, 0, 0x5000, 50, REMOTE_READ).unwrap();
        assert_eq!(lookup(&t, 0).map(|e| e.base), Some(0x5000));
        p.withdraw(&t, zero, &nobody);
        assert_eq!(lookup(&t, 0), None, "key 0 withdrawn");
        assert_eq!(p.count(), 2);
        let again = p.publish(&t, 69, 0x4000, 10, REMOTE_READ).unwrap();
        assert_eq!(again, 6, "the withdrawn slot is reused");
        let now = lookup(&t, 69).unwrap();
        assert!(unchanged(&t, &now));
        assert_eq!(now.base, 0x4000);
        for key in 1000..1000 + 61 {
            p.publish(&t, key, 0, 1, 0).unwrap();
        }
        assert_eq!(p.publish(&t, 7777, 0, 1, 0), None, "a full table says so");
        assert_eq!(lookup(&t, 5).unwrap().base, 0x1000);
    }

    #[test]
    fn writers_are_admitted_while_the_entry_stands() {
        let t = table();
        let mut p = Publisher::default();
        let slot = p.publish(&t, 12, 0x1000, 100, REMOTE_WRITE).unwrap();
        let e = lookup(&t, 12).unwrap();
        assert!(e.allows(REMOTE_WRITE) && !e.allows(REMOTE_READ), "a write-only entry");
        assert!(begin_write(&t, &e));
        assert_eq!(t[slot as usize].writers.load(Ordering::Relaxed), 1);
        end_write(&t, &e);
        assert_eq!(t[slot as usize].writers.load(Ordering::Relaxed), 0);
        p.withdraw(&t, slot, &nobody);
        assert!(!begin_write(&t, &e), "an entry withdrawn since the lookup admits no writer");
        assert_eq!(t[slot as usize].writers.load(Ordering::Relaxed), 0, "a refused writer is not left counted");
    }

    #[test]
    fn counts_are_taken_from_where_they_stood_and_a_scribbled_move_is_nothing() {
        let t = table();
        let mut p = Publisher::default();
        // Counts left by an earlier registration in the slot (or scribbled) before it was
        // published: the new one starts from them.
        t[3].counts.writes.store(40, Ordering::Relaxed);
        let slot = p.publish(&t, 3, 0x1000, 100, REMOTE_WRITE | COUNT_WRITES).unwrap();
        assert_eq!(slot, 3);
        let e = lookup(&t, 3).unwrap();
        assert!(e.counts(REMOTE_WRITE) && !e.counts(REMOTE_READ));
        for _ in 0..3 {
            assert!(begin_write(&t, &e));
            count(&t, &e, REMOTE_WRITE);
            end_write(&t, &e);
        }
        assert_eq!(p.take_counts(&t, slot), Counted { reads: 0, writes: 3, scribbled: false });
        assert_eq!(p.take_counts(&t, slot), Counted::default());
        // Backwards, or further than copies could go: nothing, and counting goes on from there.
        t[3].counts.writes.fetch_sub(1, Ordering::Relaxed);
        assert_eq!(p.take_counts(&t, slot), Counted { scribbled: true, ..Counted::default() });
        t[3].counts.reads.fetch_add(COUNT_STEP_MAX + 1, Ordering::Relaxed);
        assert_eq!(p.take_counts(&t, slot), Counted { scribbled: true, ..Counted::default() });
        count(&t, &e, REMOTE_WRITE);
        count(&t, &e, REMOTE_READ);
        assert_eq!(p.take_counts(&t, slot), Counted { reads: 1, writes: 1, scribbled: false });
        // A move of exactly `COUNT_STEP_MAX` is one copies could make: it is counted.
        t[3].counts.writes.fetch_add(COUNT_STEP_MAX, Ordering::Relaxed);
        assert_eq!(p.take_counts(&t, slot), Counted { reads: 0, writes: COUNT_STEP_MAX, scribbled: false });
        assert_eq!(p.take_counts(&t, 99), Counted::default(), "a slot outside the table");
    }

    /// No peer marks that it writes (`Publisher::withdraw`'s `writing`).
    fn nobody(_: u32) -> bool {
        false
    }

    #[test]
    fn a_scribbled_writer_count_delays_a_withdrawal_boundedly() {
        let t = table();
        let mut p = Publisher::default();
        let slot = p.publish(&t, 3, 0x1000, 100, REMOTE_WRITE).unwrap();
        t[slot as usize].writers.store(5, Ordering::Relaxed);
        let asked = std::sync::atomic::AtomicU32::new(0);
        let writing = |s: u32| {
            assert_eq!(s, slot);
            asked.fetch_add(1, Ordering::Relaxed);
            false
        };
        let start = std::time::Instant::now();
        p.withdraw(&t, slot, &writing);
        let took = start.elapsed();
        assert!(took >= WRITERS_LOOK_AFTER, "the owner waited {took:?} for writers still counted");
        assert_eq!(asked.load(Ordering::Relaxed), 1, "whether a live writer marks the entry, asked once");
        assert_eq!(lookup(&t, 3), None, "withdrawn after the wait");
    }

    /// A writer counted in the entry that is alive and marks it (`writing`), but stopped for
    /// longer than any bound before its copy: the withdrawal returns only once its copy is over.
    #[test]
    fn a_live_writer_is_waited_for_however_long_it_is_stopped() {
        use std::sync::atomic::AtomicBool;
        let t = table();
        let mut p = Publisher::default();
        let slot = p.publish(&t, 4, 0x1000, 100, REMOTE_WRITE).unwrap();
        let e = lookup(&t, 4).unwrap();
        let (marked, copied) = (AtomicBool::new(true), AtomicBool::new(false));
        assert!(begin_write(&t, &e));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // Stopped between its count and its copy, for longer than the first look.
                std::thread::sleep(WRITERS_LOOK_AFTER * 10);
                copied.store(true, Ordering::SeqCst);
                end_write(&t, &e);
                marked.store(false, Ordering::SeqCst);
            });
            p.withdraw(&t, slot, &|_| marked.load(Ordering::SeqCst));
            assert!(copied.load(Ordering::SeqCst), "the withdrawal returned before the writer's copy");
        });
        assert_eq!(lookup(&t, 4), None);
    }

    /// The words of an entry a peer reads, as a list of the shared cells.
    fn cells(s: &MrSlot) -> [&AtomicU64; 7] {
        [&s.seq, &s.key, &s.base, &s.len, &s.flags, &s.writers, &s.seal]
    }

    #[test]
    fn a_scribbled_entry_is_refused_by_its_seal_and_put_back_by_the_owner() {
        let t = table();
        let mut p = Publisher::default();
        let slot = p.publish(&t, 7, 0x10_000, 4096, REMOTE_READ | REMOTE_WRITE).unwrap() as usize;
        let honest = lookup(&t, 7).unwrap();
        assert_eq!(p.repair(&t), 0, "nothing to repair in an honest table");
        // A plausible forgery: the base moved to other memory of the owner's, the count left even.
        t[slot].base.store(0x20_000, Ordering::Relaxed);
        assert_eq!(lookup(&t, 7), None, "a forged base must not be taken for the owner's word");
        assert_eq!(p.repair(&t), 1);
        assert_eq!(lookup(&t, 7).map(|e| (e.base, e.len, e.flags)), Some((honest.base, honest.len, honest.flags)));
        assert_eq!(p.repair(&t), 0, "a repaired entry stays repaired");
        // A count left odd (a rewrite that never ends) is put back too.
        t[slot].seq.fetch_or(1, Ordering::Relaxed);
        assert_eq!(lookup(&t, 7), None);
        assert_eq!(p.repair(&t), 1);
        assert!(lookup(&t, 7).is_some());
        // A writers count scribbled up for good does not stop the repair, nor make it wait.
        t[slot].len.store(1 << 40, Ordering::Relaxed);
        t[slot].writers.store(3, Ordering::Relaxed);
        let start = std::time::Instant::now();
        assert_eq!(p.repair(&t), 1);
        assert!(start.elapsed() < WRITERS_LOOK_AFTER, "the repair waited for writers");
        assert_eq!(lookup(&t, 7).unwrap().len, 4096);
        t[slot].writers.store(0, Ordering::Relaxed);
        // A withdrawn entry forged back to life under its old key is refused and put back.
        p.withdraw(&t, slot as u32, &nobody);
        t[slot].flags.store(USED | LIVE | REMOTE_WRITE, Ordering::Relaxed);
        t[slot].key.store(7, Ordering::Relaxed);
        t[slot].base.store(0x20_000, Ordering::Relaxed);
        assert_eq!(lookup(&t, 7), None);
        assert_eq!(p.repair(&t), 1);
        assert_eq!(lookup(&t, 7), None, "still withdrawn");
        assert_eq!(p.repair(&t), 0);
    }

    #[test]
    fn no_single_flipped_bit_makes_a_lookup_answer_other_words() {
        let t = table();
        let mut p = Publisher::default();
        let slot = p.publish(&t, 9, 0x7f00_1234_5000, 1 << 20, REMOTE_READ | REMOTE_WRITE | VIRT_ADDR).unwrap();
        let honest = lookup(&t, 9).unwrap();
        let s = &t[slot as usize];
        for (w, cell) in cells(s).into_iter().enumerate() {
            for bit in 0..64 {
                cell.fetch_xor(1 << bit, Ordering::Relaxed);
                match lookup(&t, 9) {
                    // Only the writers count is not sealed: it says nothing about where a copy goes.
                    Some(e) => assert!(e == honest && w == 5, "word {w} bit {bit} flipped, lookup answered {e:?}"),
                    None => assert_ne!(w, 5, "the writers count is not the entry's word"),
                }
                cell.fetch_xor(1 << bit, Ordering::Relaxed);
            }
        }
        assert_eq!(lookup(&t, 9), Some(honest));
        assert_eq!(p.repair(&t), 0);
    }

    #[test]
    fn addresses_are_checked_against_the_registration() {
        let offsets = Published { slot: 0, seq: 2, key: 1, base: 0x10_000, len: 4096, flags: LIVE };
        assert_eq!(offsets.target(0, 4096), Some(0x10_000));
        assert_eq!(offsets.target(96, 4000), Some(0x10_000 + 96));
        assert_eq!(offsets.target(97, 4000), None);
        assert_eq!(offsets.target(u64::MAX, 2), None);
        let virt = Published { flags: LIVE | VIRT_ADDR, ..offsets };
        assert_eq!(virt.target(0x10_000 + 10, 10), Some(0x10_000 + 10));
        assert_eq!(virt.target(0x10_000 - 1, 1), None);
        assert_eq!(virt.target(0x10_000, 4097), None);
    }

    #[test]
    fn a_scribbled_table_is_survived() {
        let t = table();
        let mut p = Publisher::default();
        p.publish(&t, 3, 0x1000, 100, REMOTE_READ).unwrap();
        // A peer marks the slot odd (mid-rewrite) forever: readers take the other path, and
        // the owner's next rewrite still ends on an even count.
        t[3].seq.store(7, Ordering::Relaxed);
        assert_eq!(lookup(&t, 3), None);
        p.withdraw(&t, 3, &nobody);
        assert_eq!(t[3].seq.load(Ordering::Relaxed) & 1, 0);
        // A peer clears the live flag of another entry: the owner's record still knows the slot
        // is taken, so a new registration does not land on it.
        let s = p.publish(&t, 9, 0x2000, 100, REMOTE_READ).unwrap();
        t[s as usize].flags.store(0, Ordering::Relaxed);
        assert_ne!(p.publish(&t, 9 + 64, 0x3000, 100, REMOTE_READ), Some(s));
    }
}
