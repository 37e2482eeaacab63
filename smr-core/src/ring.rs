//! Bounded many-producer, single-consumer ring with one sequence stamp per slot (Vyukov).
//!
//! Producers (peers) claim a slot with one CAS on `tail`, fill it, and publish it by moving the
//! slot's stamp from `pos` to `pos + 1`. The consumer (the region's owner) keeps its `head` in
//! private memory, so a peer cannot corrupt it; it reads a slot when the stamp says "published"
//! and hands the slot to the next lap by setting the stamp to `pos + capacity`. The consumer never
//! waits: it either takes an entry or reports that none is ready.
//!
//! A producer that died between its claim and its publish would stall the consumer forever; the
//! consumer can `skip` such a slot, handing it to the next lap. It must never skip the slot of a
//! producer that is alive, however slow: that producer would go on to write into a slot a later
//! lap's producer owns (loom model `ring_skipped_slot_reused_by_next_lap`). So every producer
//! keeps a **claim record**, one word in a cache line of its own (`Ring::with_claim_record`;
//! the engine's is in the peer-table entry of the pair, `layout::PeerSlot`): before its CAS on
//! `tail` it writes there the positions it is about to claim (`claim_word`), and it clears the
//! word once it has published them or given up. The CAS is a release and the consumer's look at
//! `tail` an acquire, so a consumer that sees a position claimed also sees the claimant's record
//! naming it. When its head stays claimed but unpublished, the consumer (`StallWatch::check`)
//! asks its caller whether any record naming the head belongs to a live process; only if none
//! does, it skips. A dead process writes nothing more, so its half-written entry is never read
//! and the slot is never written twice. A stale record (a producer that lost the CAS for the
//! position it named, and is retrying) only makes the consumer wait a little longer.
//!
//! The claim touches only `tail`, the producer's record and a load of the slot's stamp; the
//! stamp's line, which the consumer polls, is written once, by the publish. (It used to be
//! marked `WRITING` with a CAS before the entry was written, which moved that line to the
//! producer twice per entry: 15-20% of an 8-64 byte message's latency on a host whose cache-line
//! handoff is slow; docs/perf/where-the-time-goes.md.)
//!
//! Everything here works on references handed in by the caller: slices of a shared mapping in
//! the real engine, heap allocations under loom.

use crate::pod::{CachePadded, Pod};
use crate::sync::{prefetch, spin_hint, AtomicU64, Ordering, Prefetch, UnsafeCell};

/// How often a producer retries when other producers keep moving `tail` under it.
const PRODUCER_RETRIES: u32 = 1 << 12;

/// Bytes of an entry that share the cache line with its 8-byte stamp.
pub(crate) const FIRST_LINE_BYTES: usize = 64 - 8;

/// Set in every claim record that names positions (a cleared record is 0).
const CLAIMING: u64 = 1 << 63;

/// The claim record of a producer about to claim the `n` positions from `pos`: the low 32 bits
/// of `pos`, and `n` above them (a batch is at most a ring's capacity, below 2^31).
pub fn claim_word(pos: u64, n: u64) -> u64 {
    CLAIMING | (n & 0x7FFF_FFFF) << 32 | (pos & u64::from(u32::MAX))
}

/// True if the claim record `record` names position `pos` (compared within 2^32 positions: a
/// record lives only for the few instructions of one push, so it never trails by that much).
pub fn names(record: u64, pos: u64) -> bool {
    let n = ((record >> 32) & 0x7FFF_FFFF) as u32;
    record & CLAIMING != 0 && (pos as u32).wrapping_sub(record as u32) < n
}

/// How far a slot's stamp is ahead of position `pos` (negative: the slot still holds, or is
/// still receiving, last lap's entry).
fn lead_at(stamp: u64, pos: u64) -> i64 {
    stamp.wrapping_sub(pos) as i64
}

/// Cache lines a slot spans up to the end of an entry of `entry_bytes` (its stamp included).
pub fn slot_lines<T>(entry_bytes: usize) -> usize {
    (std::mem::offset_of!(Slot<T>, value) + entry_bytes).div_ceil(64)
}

/// One slot: the stamp and the entry it guards.
#[repr(C)]
pub struct Slot<T> {
    stamp: AtomicU64,
    value: UnsafeCell<T>,
}

// SAFETY: the stamp protocol hands each slot's value to one thread at a time: a producer between
// its claim and its publish, the consumer between the publish and the release.
unsafe impl<T: Pod + Send> Sync for Slot<T> {}

impl<T: Pod + Default> Slot<T> {
    /// A slot as the owner initialises it (heap-backed instances and tests).
    pub fn new(pos: u64) -> Self {
        Slot { stamp: AtomicU64::new(pos), value: UnsafeCell::new(T::default()) }
    }
}

/// The shared control block: only the producers' claim counter.
#[repr(C)]
pub struct RingCtl {
    tail: CachePadded<AtomicU64>,
}

impl RingCtl {
    pub fn new() -> Self {
        RingCtl { tail: CachePadded(AtomicU64::new(0)) }
    }

    /// loom models only: overwrite the claim counter, as a scribbling peer would.
    #[cfg(loom)]
    pub fn scribble(&self, tail: u64) {
        self.tail.store(tail, Ordering::Relaxed);
    }
}

impl Default for RingCtl {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a push did not enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// Every slot is in use: retry after the consumer made progress.
    Full,
    /// Other producers kept winning, or the stamps make no sense: retry later.
    Busy,
}

/// What the consumer found at its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pop<T> {
    Item(T),
    /// Nothing claimed at the head.
    Empty,
    /// The head slot is claimed (or scribbled on) but not published.
    Pending,
}

/// A view of one ring: its control block and its slots.
pub struct Ring<'a, T> {
    ctl: &'a RingCtl,
    slots: &'a [Slot<T>],
    mask: u64,
    /// The pushing producer's claim record (None: its claims are not recorded, and a consumer
    /// would skip them as a dead producer's: tests and tools only).
    record: Option<&'a AtomicU64>,
    /// A position a push through this ring saw free (`with_free_hint`).
    hint: Option<&'a AtomicU64>,
}

impl<'a, T: Pod> Ring<'a, T> {
    /// `slots.len()` must be a power of two (checked once where a region's rings are resolved;
    /// were it not, `pos & mask` would still index inside `slots`, only not as a ring).
    #[inline]
    pub fn new(ctl: &'a RingCtl, slots: &'a [Slot<T>]) -> Self {
        debug_assert!(slots.len().is_power_of_two(), "ring capacity must be a power of two");
        Ring { ctl, slots, mask: slots.len() as u64 - 1, record: None, hint: None }
    }

    /// Push through this view with `record` as the producer's claim record (see the module's
    /// comment): a word no other producer of this ring writes, in a cache line the consumer
    /// reads only when its head stalls. The consumer's caller must be able to find it and judge
    /// whether its producer lives.
    #[inline]
    pub fn with_claim_record(mut self, record: &'a AtomicU64) -> Self {
        self.record = Some(record);
        self
    }

    /// Push through this view with `hint` as a note, kept by the producers of one process, of
    /// the position after their last push if its slot was free then (`FREE_HINT_NONE`: none
    /// known). A claim of that position then need not read its slot's stamp: the consumer
    /// polls that line while it waits, so the read waited for the line to come from its cache,
    /// with the producer stalled (in a 64-byte ping-pong the stamp's load took 84% of
    /// `push_with`'s samples), where a store waits in the store buffer. A free slot stays free
    /// for its position until that position is claimed, and the claim's CAS on `tail` succeeds
    /// only if no one claimed it: so a note of position `p`, taken by an acquire of `p`'s free
    /// stamp and passed on by release and acquire, is as good as the stamp's read when `tail`
    /// is `p` (loom model `ring_free_hint`).
    #[inline]
    pub fn with_free_hint(mut self, hint: &'a AtomicU64) -> Self {
        self.hint = Some(hint);
        self
    }

    /// After a push's publish of `pos`: note `pos + 1` in the free hint if its slot is free now.
    /// Read now, the stamp is rarely one the consumer polls (it polls `pos`, or reads it).
    #[inline(always)]
    fn note_free_after(&self, pos: u64) {
        if let Some(hint) = self.hint {
            let next = pos.wrapping_add(1);
            let free = self.slots[(next & self.mask) as usize].stamp.load(Ordering::Acquire) == next;
            hint.store(if free { next } else { FREE_HINT_NONE }, Ordering::Release);
        }
    }

    /// Whether the free hint names `pos` (see `with_free_hint`).
    #[inline(always)]
    fn hinted_free(&self, pos: u64) -> bool {
        self.hint.is_some_and(|hint| hint.load(Ordering::Acquire) == pos)
    }

    /// Record that this producer is about to claim the `n` positions from `pos`.
    #[inline(always)]
    fn announce(&self, pos: u64, n: u64) {
        if let Some(record) = self.record {
            record.store(claim_word(pos, n), Ordering::Relaxed);
        }
    }

    /// Clear the claim record: every position it named is published, or was never claimed.
    /// A release, so that a consumer that sees it cleared also sees the publishes.
    #[inline(always)]
    fn withdraw(&self) {
        if let Some(record) = self.record {
            record.store(0, Ordering::Release);
        }
    }

    pub fn capacity(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Ask for the cache `lines` of the slot `ahead` positions past `tail` in a writable state:
    /// a producer sending one entry after another (a stream) then finds the slots it is about to
    /// claim already in its cache, instead of waiting at each claim for the lines to come from
    /// the consumer that released them. A hint only: nothing is read or written.
    #[inline]
    pub fn prefetch_for_claim(&self, ahead: u64, lines: core::ops::Range<usize>) {
        if lines.is_empty() || self.capacity() <= ahead {
            return;
        }
        let pos = self.ctl.tail.load(Ordering::Relaxed).wrapping_add(ahead);
        let slot = (&self.slots[(pos & self.mask) as usize] as *const Slot<T>).cast::<u8>();
        // Addresses of the slot's lines (a prefetch reads nothing, so no pointer here is
        // dereferenced; `wrapping_add` because the end may lie past the slot's last byte).
        let end_line = lines.end.min(slot_lines::<T>(size_of::<T>()));
        let (mut line, end) = (slot.wrapping_add(lines.start.min(end_line) * 64), slot.wrapping_add(end_line * 64));
        while line < end {
            crate::sync::prefetch_addr(line, Prefetch::Write);
            line = line.wrapping_add(64);
        }
    }

    /// Owner only, before the ring is published: every slot free for lap 0.
    pub fn reset(&self) {
        self.ctl.tail.store(0, Ordering::Relaxed);
        for (pos, slot) in self.slots.iter().enumerate() {
            slot.stamp.store(pos as u64, Ordering::Relaxed);
        }
    }

    /// Enqueue a copy of `value`.
    pub fn push(&self, value: &T) -> Result<(), PushError> {
        let pos = self.claim()?;
        self.write_claimed(pos, value);
        self.published(pos)
    }

    /// Enqueue an entry written in place: `fill` gets the claimed slot, holding whatever an
    /// earlier entry left there, and must set every byte the consumer reads (the entry's
    /// `wire_len`). Saves building the entry elsewhere and copying it in.
    pub fn push_with(&self, fill: impl FnOnce(&mut T)) -> Result<(), PushError> {
        let pos = self.claim()?;
        self.fill_claimed(pos, fill);
        self.published(pos)
    }

    /// Tests: claim the next position and publish nothing there, as a producer preempted (or
    /// killed) between its claim and its publish leaves it.
    #[cfg(test)]
    pub(crate) fn claim_unpublished(&self) -> u64 {
        self.claim().expect("a free slot")
    }

    /// After a push's publish of `pos`: clear the claim record (unless, in a loom model, the
    /// push "died" on its way, which leaves the record as a killed process would), and note
    /// whether the next slot is free (`with_free_hint`).
    #[inline(always)]
    fn published(&self, pos: u64) -> Result<(), PushError> {
        #[cfg(loom)]
        if hooks::is_dead() {
            return Ok(());
        }
        self.withdraw();
        self.note_free_after(pos);
        Ok(())
    }

    /// Claim the next position on `tail`: one CAS when the slot there is free for this lap,
    /// after recording the position in the claim record. On an error the record is cleared.
    fn claim(&self) -> Result<u64, PushError> {
        for _ in 0..PRODUCER_RETRIES {
            let tail = self.ctl.tail.load(Ordering::Relaxed);
            let slot = &self.slots[(tail & self.mask) as usize];
            prefetch(&slot.stamp, Prefetch::Write);
            let hinted = self.hinted_free(tail);
            #[cfg(loom)]
            seen::count(&seen::HINTED_CLAIMS, hinted);
            let lead = if hinted { 0 } else { lead_at(slot.stamp.load(Ordering::Acquire), tail) };
            if lead == 0 {
                self.announce(tail, 1);
                // Release: a consumer that sees the claim (an acquire of `tail`) sees the record.
                if self.ctl.tail.compare_exchange_weak(tail, tail + 1, Ordering::Release, Ordering::Relaxed).is_err() {
                    spin_hint();
                    continue;
                }
                return Ok(tail);
            }
            if lead < 0 {
                // The slot still holds (or is still receiving: a lead of minus a lap) last lap's
                // entry: the ring is full.
                #[cfg(loom)]
                seen::count(&seen::FULL_WHILE_WRITING, lead == -(self.capacity() as i64));
                self.withdraw();
                return Err(PushError::Full);
            }
            // Another producer claimed this position after we read `tail`.
            spin_hint();
        }
        self.withdraw();
        Err(PushError::Busy)
    }

    /// Enqueue copies of `values` in order with one claim of consecutive positions (one CAS on
    /// `tail` for the lot, where `push` takes one per entry): as many as there are free slots
    /// for, at least one. Returns how many were enqueued; the rest are the caller's to retry.
    pub fn push_batch(&self, values: &[T]) -> Result<usize, PushError> {
        if values.is_empty() {
            return Ok(0);
        }
        for _ in 0..PRODUCER_RETRIES {
            let tail = self.ctl.tail.load(Ordering::Relaxed);
            // Free for this lap: the consumer released them (in order), no producer took them.
            let free = (0..values.len() as u64)
                .take_while(|&k| {
                    self.slots[((tail + k) & self.mask) as usize].stamp.load(Ordering::Acquire) == tail + k
                })
                .count();
            if free == 0 {
                if lead_at(self.slots[(tail & self.mask) as usize].stamp.load(Ordering::Acquire), tail) < 0 {
                    self.withdraw();
                    return Err(PushError::Full); // last lap's entry is still there
                }
                spin_hint(); // another producer is ahead of us at `tail`
                continue;
            }
            let n = free as u64;
            self.announce(tail, n);
            // Release, as in `claim`.
            if self.ctl.tail.compare_exchange_weak(tail, tail + n, Ordering::Release, Ordering::Relaxed).is_err() {
                spin_hint();
                continue;
            }
            for (k, value) in values[..free].iter().enumerate() {
                self.write_claimed(tail + k as u64, value);
                #[cfg(loom)]
                if hooks::is_dead() {
                    return Ok(k + 1);
                }
            }
            self.withdraw();
            return Ok(free);
        }
        self.withdraw();
        Err(PushError::Busy)
    }

    /// Copy `value` into the slot of position `pos`, which this producer claimed on `tail`, and
    /// publish it.
    fn write_claimed(&self, pos: u64, value: &T) {
        let len = value.wire_len().min(size_of::<T>());
        // The first line in one copy of a size known here (a few moves, where a length known
        // only at run time takes a `memcpy` call), as `peek_into` reads it; the rest, if any,
        // as `take_rest` does.
        let first = FIRST_LINE_BYTES.min(size_of::<T>());
        self.fill_claimed(pos, |slot| {
            let (src, dst) = ((value as *const T).cast::<u8>(), (slot as *mut T).cast::<u8>());
            // SAFETY: two distinct `T`s (ours and the claimed slot); `first` and `len` are at
            // most the size of `T`.
            unsafe {
                core::ptr::copy_nonoverlapping(src, dst, first);
                if len > first {
                    core::ptr::copy_nonoverlapping(src.add(first), dst.add(first), len - first);
                }
            }
        })
    }

    /// Let `fill` write the slot of position `pos`, which this producer claimed on `tail`, and
    /// publish it. The claim record still names `pos`: the caller clears it after.
    fn fill_claimed(&self, pos: u64, fill: impl FnOnce(&mut T)) {
        let slot = &self.slots[(pos & self.mask) as usize];
        #[cfg(any(loom, feature = "test-hooks"))]
        if hooks::dies_mid_copy() {
            // The entry is built aside, then half of it copied in, and this producer stops for
            // good (a test's stand-in for a SIGKILL during the copy).
            // SAFETY: the slot is ours (as below); `T: Pod`, so a bitwise copy is a valid `T`.
            let mut entry: T = slot.value.with(|cell| unsafe { core::ptr::read(cell) });
            fill(&mut entry);
            let len = entry.wire_len().min(size_of::<T>());
            slot.value.with_mut(|cell| {
                // SAFETY: as for `fill` below; `len / 2` is at most the size of `T`.
                unsafe { core::ptr::copy_nonoverlapping((&entry as *const T).cast::<u8>(), cell.cast::<u8>(), len / 2) }
            });
            hooks::die();
            return;
        }
        slot.value.with_mut(|cell| {
            // SAFETY: the CAS on `tail` gave this producer the position, and its slot's stamp
            // was this lap's free one: no other producer claims it (its stamp is no other
            // position's free stamp until it moves), the consumer does not read it before the
            // stamp moves to `pos + 1`, and does not skip it while this producer's claim record
            // names it and this producer lives. So nothing else touches it meanwhile. `T: Pod`:
            // whatever bytes it holds are a valid `T`.
            fill(unsafe { &mut *cell })
        });
        // Nobody else moves the stamp of a slot claimed by a live producer: a plain store
        // publishes.
        slot.stamp.store(pos + 1, Ordering::Release);
    }
}

/// A free hint that names no position (`Ring::with_free_hint`): positions count up from 0 and
/// never reach it.
pub const FREE_HINT_NONE: u64 = u64::MAX;

/// Test hooks for the loom models (`--cfg loom` only): how often `push` met the rare
/// interleavings the models exist to reach, so that they can assert those happened. Loom runs a
/// model's threads as coroutines on the test's own OS thread, so a thread-local count is the sum
/// over one test's executions, untouched by tests running in parallel and unseen by the model.
#[cfg(loom)]
pub mod seen {
    use std::cell::Cell;
    use std::thread::LocalKey;

    std::thread_local! {
        /// `push` found the ring full while last lap's producer was still copying into the slot.
        pub static FULL_WHILE_WRITING: Cell<u64> = const { Cell::new(0) };
        /// A claim took its position on the free hint's word, without reading the slot's stamp.
        pub static HINTED_CLAIMS: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn count(key: &'static LocalKey<Cell<u64>>, happened: bool) {
        key.with(|n| n.set(n.get() + u64::from(happened)));
    }
}

/// Test hooks that stop a producer in the middle of copying its entry (half of it written, its
/// claim record naming the slot), as a SIGKILL at that instant would. Only in `--cfg loom` builds and with the
/// `test-hooks` feature (which only the multi-process tests enable); production builds have no
/// trace of them.
#[cfg(any(loom, feature = "test-hooks"))]
pub mod hooks {
    #[cfg(loom)]
    loom::thread_local! {
        static DIE: core::cell::Cell<bool> = core::cell::Cell::new(false);
    }

    /// loom: the calling model thread's next `push` writes half its entry and returns `Ok`
    /// without publishing or clearing its claim record; the thread must not touch the ring
    /// again (it is "dead").
    #[cfg(loom)]
    pub fn die_in_next_push() {
        DIE.with(|d| d.set(true));
    }

    #[cfg(loom)]
    pub(crate) fn dies_mid_copy() -> bool {
        DIE.with(|d| d.replace(false))
    }

    // Set once the thread "died" in its push: the push returns at once, leaving its claim
    // record naming the slot as a killed process would (a live thread's push clears it).
    #[cfg(loom)]
    loom::thread_local! {
        static DEAD: core::cell::Cell<bool> = core::cell::Cell::new(false);
    }

    #[cfg(loom)]
    pub(crate) fn die() {
        DEAD.with(|d| d.set(true));
    }

    #[cfg(loom)]
    pub(crate) fn is_dead() -> bool {
        DEAD.with(|d| d.get())
    }

    /// The environment variable naming the push (1 = the first of this process) that stops in
    /// the middle of its copy: it prints `PARKED_MID_COPY` on stdout and sleeps until killed
    /// (or exits with status 3 after a minute).
    #[cfg(not(loom))]
    pub const DIE_ENV: &str = "RSHM_TEST_DIE_MID_COPY";

    #[cfg(not(loom))]
    pub(crate) fn dies_mid_copy() -> bool {
        use crate::sync::{AtomicU64, Ordering};
        use std::sync::OnceLock;
        static AT: OnceLock<u64> = OnceLock::new();
        static PUSHES: AtomicU64 = AtomicU64::new(0);
        let at = *AT.get_or_init(|| std::env::var(DIE_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(0));
        at != 0 && PUSHES.fetch_add(1, Ordering::Relaxed) + 1 == at
    }

    #[cfg(not(loom))]
    pub(crate) fn die() {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "PARKED_MID_COPY pid={}", std::process::id());
        let _ = out.flush();
        // Until the test kills us; a minute at most, so that a test that died leaves no process.
        std::thread::sleep(std::time::Duration::from_secs(60));
        std::process::exit(3)
    }
}

/// The consumer's private state: where it reads next.
#[derive(Debug, Default)]
pub struct Consumer {
    head: u64,
}

impl Consumer {
    pub fn new() -> Self {
        Consumer { head: 0 }
    }

    /// Take the entry at the head, if one is published. Wait-free.
    pub fn pop<T: Pod>(&mut self, ring: &Ring<'_, T>) -> Pop<T> {
        // SAFETY: `T: Pod`: all-zero bytes are a valid `T`.
        let mut value: T = unsafe { core::mem::zeroed() };
        match self.pop_into(ring, &mut value) {
            Pop::Item(()) => Pop::Item(value),
            Pop::Empty => Pop::Empty,
            Pop::Pending => Pop::Pending,
        }
    }

    /// `pop`, into the caller's entry: only the bytes in use (`Pod::wire_len`) are copied, and
    /// the rest of `value` keeps what it held. For large entries that saves clearing and moving
    /// the whole of one per pop.
    pub fn pop_into<T: Pod>(&mut self, ring: &Ring<'_, T>, value: &mut T) -> Pop<()> {
        match self.peek_into(ring, value) {
            Pop::Item(_) => {
                self.take_rest(ring, value);
                Pop::Item(())
            }
            Pop::Empty => Pop::Empty,
            Pop::Pending => Pop::Pending,
        }
    }

    /// The first step of `pop_into`, for a caller that reads the rest of a published entry
    /// straight from its slot rather than from a copy: copy what shares the stamp's cache line
    /// into `value` (an entry's header, whose `wire_len` says how much more is in use), keep
    /// the slot, and say where the entry lies in it. The caller then `release`s it, or
    /// `take_rest` if it wants the whole entry in `value` after all. Until then, `peek_into`
    /// returns the same entry again.
    ///
    /// A peer can still write the slot before the release (a well-behaved one does not): read
    /// from it in place only bytes whose value nothing depends on, such as a message's payload
    /// that is copied out once; anything checked must come from the copy in `value`.
    #[inline]
    pub fn peek_into<T: Pod>(&self, ring: &Ring<'_, T>, value: &mut T) -> Pop<*const T> {
        let slot = &ring.slots[(self.head & ring.mask) as usize];
        let stamp = slot.stamp.load(Ordering::Acquire);
        if stamp == self.head.wrapping_add(1) {
            let first = FIRST_LINE_BYTES.min(size_of::<T>());
            return Pop::Item(slot.value.with(|cell| {
                // SAFETY: the Acquire load saw the producer's Release publish, so the entry is
                // complete; `T: Pod` makes any bytes a peer wrote a valid `T`; `first` is at
                // most the size of `T`.
                unsafe { core::ptr::copy_nonoverlapping(cell.cast::<u8>(), (value as *mut T).cast::<u8>(), first) };
                cell
            }));
        }
        // Not reading `tail` here keeps the producers' hot line out of the consumer's cache
        // while it polls; `stalled` looks at it when the caller wants to know.
        if stamp == self.head {
            Pop::Empty
        } else {
            Pop::Pending
        }
    }

    /// After `peek_into` returned an entry: copy the rest of it that is in use (bytes from the
    /// end of the first line up to `value.wire_len()`, read from the header `peek_into` copied)
    /// and `release` its slot. `peek_into` and this are `pop_into`.
    #[inline]
    pub fn take_rest<T: Pod>(&mut self, ring: &Ring<'_, T>, value: &mut T) {
        let first = FIRST_LINE_BYTES.min(size_of::<T>());
        let len = value.wire_len().min(size_of::<T>());
        if len > first {
            let out = (value as *mut T).cast::<u8>();
            ring.slots[(self.head & ring.mask) as usize].value.with(|cell| {
                // SAFETY: the entry at the head is published (`peek_into`'s Acquire load) and
                // not yet released, so it is ours to read; bytes `first..len` lie inside a `T`.
                unsafe { core::ptr::copy_nonoverlapping(cell.cast::<u8>().add(first), out.add(first), len - first) }
            });
        }
        self.release(ring);
    }

    /// After `peek_into` returned an entry: hand its slot to the next lap and move to the next.
    #[inline]
    pub fn release<T: Pod>(&mut self, ring: &Ring<'_, T>) {
        let slot = &ring.slots[(self.head & ring.mask) as usize];
        slot.stamp.store(self.head.wrapping_add(ring.capacity()), Ordering::Release);
        self.head = self.head.wrapping_add(1);
        prefetch(&ring.slots[(self.head & ring.mask) as usize].stamp, Prefetch::Read);
    }

    /// True if a producer claimed the head position and has not published it: with `Pending`,
    /// the states `skip` may resolve. Reads the producers' counter, so call it rarely (on a
    /// timer), not on every poll. An acquire of that counter: the claim records of whoever
    /// claimed up to it are seen after this (`StallWatch::check` reads them next).
    pub fn stalled<T: Pod>(&self, ring: &Ring<'_, T>) -> bool {
        let slot = &ring.slots[(self.head & ring.mask) as usize];
        let claimed_ahead = ring.ctl.tail.load(Ordering::Acquire).wrapping_sub(self.head) as i64;
        slot.stamp.load(Ordering::Acquire) == self.head && claimed_ahead > 0
    }

    /// Give up on a head slot that stayed `Pending` (or claimed and unpublished): hand it to the
    /// next lap and move on. Returns false if the entry got published meanwhile (then `pop` it
    /// instead). The caller must have seen that no claim record naming the head belongs to a
    /// live producer (after `stalled`): such a producer would go on to write into a slot the
    /// next lap owns.
    pub fn skip<T: Pod>(&mut self, ring: &Ring<'_, T>) -> bool {
        let slot = &ring.slots[(self.head & ring.mask) as usize];
        let stamp = slot.stamp.load(Ordering::Acquire);
        if stamp == self.head.wrapping_add(1) {
            return false;
        }
        let next_lap = self.head.wrapping_add(ring.capacity());
        if slot.stamp.compare_exchange(stamp, next_lap, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        self.head = self.head.wrapping_add(1);
        true
    }

    /// Owner only, on the slow path (its liveness tick): put the producers' claim counter back
    /// if it says what no honest run can: fewer claims than the consumer has taken, or more
    /// than a lap ahead of it (a peer scribbled over it, and every producer would otherwise
    /// answer `Busy` or `Full` for good). The new value is the first position from the head
    /// whose slot is free for its lap; it is set with a CAS from the value judged, so a claim
    /// that moved the counter meanwhile wins and the check runs again next time. True if it
    /// repaired. Honest producers never leave such a value (the consumer only passes positions
    /// that were claimed, and a producer claims only a slot the consumer released), and the CAS
    /// reads the latest value, so a stale load cannot trigger it (loom model `ring_repair_*`).
    /// (A producer that claimed a position at or after the new value from a scribbled counter
    /// shares its slot with the next claimant: what a scribbling peer can do to entries anyway,
    /// and the consumer checks every entry it reads.)
    pub fn repair_tail<T: Pod>(&self, ring: &Ring<'_, T>) -> bool {
        let tail = ring.ctl.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(self.head) <= ring.capacity() {
            return false;
        }
        let fixed = (0..ring.capacity())
            .map(|k| self.head.wrapping_add(k))
            .find(|&pos| ring.slots[(pos & ring.mask) as usize].stamp.load(Ordering::Acquire) == pos)
            .unwrap_or(self.head.wrapping_add(ring.capacity()));
        ring.ctl.tail.compare_exchange(tail, fixed, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// True if the head slot is free for its lap (a producer may have claimed its position on
    /// `tail` but not begun to write it): `pop` would return `Empty`. One load, for callers that
    /// skip the rest of a drain when nothing came.
    #[inline]
    pub fn is_empty<T: Pod>(&self, ring: &Ring<'_, T>) -> bool {
        ring.slots[(self.head & ring.mask) as usize].stamp.load(Ordering::Acquire) == self.head
    }

    /// True if `pop` would return an item now (for deciding whether to sleep).
    #[inline]
    pub fn ready<T: Pod>(&self, ring: &Ring<'_, T>) -> bool {
        self.ready_at(ring, 0)
    }

    /// True if the entry `ahead` places after the head is published: with 1, for a caller still
    /// holding the head (`peek_into`, not yet released), whether another entry waits behind it.
    #[inline]
    pub fn ready_at<T: Pod>(&self, ring: &Ring<'_, T>, ahead: u64) -> bool {
        let pos = self.head.wrapping_add(ahead);
        ring.slots[(pos & ring.mask) as usize].stamp.load(Ordering::Acquire) == pos.wrapping_add(1)
    }

    /// How many entries this consumer has taken or skipped.
    pub fn position(&self) -> u64 {
        self.head
    }

    /// The position up to which producers have claimed slots: every entry pushed before this
    /// call sits below it. Peer-written: a value past a full ring's worth is taken as that.
    pub fn claimed<T: Pod>(&self, ring: &Ring<'_, T>) -> u64 {
        let tail = ring.ctl.tail.load(Ordering::Acquire);
        if tail.wrapping_sub(self.head) > ring.capacity() {
            return self.head.wrapping_add(ring.capacity());
        }
        tail
    }

    /// Whether this consumer has taken or skipped every entry below position `pos`.
    pub fn passed(&self, pos: u64) -> bool {
        self.head.wrapping_sub(pos) as i64 >= 0
    }
}

/// Tracks a consumer whose head stopped advancing, and decides when to `skip` it: a producer
/// that claimed the head position and died before writing it would otherwise block the ring.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub struct StallWatch {
    since: Option<(u64, crate::clock::Instant)>,
}

#[cfg(not(loom))]
impl StallWatch {
    /// The consumer saw `Pending` at its head: start the clock for this position.
    pub fn note(&mut self, consumer: &Consumer) {
        let head = consumer.position();
        if !matches!(self.since, Some((at, _)) if at == head) {
            self.since = Some((head, crate::clock::Instant::now()));
        }
    }

    /// Called on a timer: also notices a claimed-but-unpublished head (which `pop` reports as
    /// `Empty`), and skips a head stuck for `timeout` unless `claimant_lives(head)` says a live
    /// producer's claim record names it (that one is waited for, however long). True if it
    /// skipped.
    pub fn check<T: Pod>(
        &mut self,
        consumer: &mut Consumer,
        ring: &Ring<'_, T>,
        timeout: core::time::Duration,
        claimant_lives: impl FnOnce(u64) -> bool,
    ) -> bool {
        // First the acquire of `tail` (in `stalled`), then the records.
        if consumer.stalled(ring) {
            self.note(consumer);
        }
        let Some((at, since)) = self.since else { return false };
        if at != consumer.position() {
            self.since = None;
            return false;
        }
        if since.elapsed() < timeout || claimant_lives(at) {
            return false;
        }
        let moved = consumer.skip(ring);
        if moved {
            self.since = None;
        }
        moved
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Default, Debug, PartialEq)]
    #[repr(C)]
    struct Val(u64);
    // SAFETY: a single integer.
    unsafe impl Pod for Val {}

    fn ring_parts(cap: usize) -> (RingCtl, Vec<Slot<Val>>) {
        (RingCtl::new(), (0..cap as u64).map(Slot::new).collect())
    }

    #[test]
    fn fifo_until_full_then_drains() {
        let (ctl, slots) = ring_parts(4);
        let ring = Ring::new(&ctl, &slots);
        let mut c = Consumer::new();
        assert_eq!(c.pop(&ring), Pop::Empty);
        assert!(!c.ready(&ring), "nothing published yet");
        for i in 0..4 {
            ring.push(&Val(i)).unwrap();
        }
        assert!(c.ready(&ring) && c.ready_at(&ring, 3) && !c.ready_at(&ring, 4));
        assert_eq!(ring.push(&Val(9)), Err(PushError::Full));
        assert_eq!(ring.push_batch(&[Val(9), Val(10)]), Err(PushError::Full), "a batch is refused as full, not busy");
        for i in 0..4 {
            assert_eq!(c.pop(&ring), Pop::Item(Val(i)));
        }
        assert_eq!(c.pop(&ring), Pop::Empty);
        for lap in 0..10u64 {
            assert!(c.is_empty(&ring));
            ring.push(&Val(lap)).unwrap();
            assert!(!c.is_empty(&ring), "lap {lap}: a published entry is not empty");
            assert_eq!(c.pop(&ring), Pop::Item(Val(lap)));
        }
        assert!(c.is_empty(&ring));
    }

    /// A push notes the next position in the free hint only while its slot is free; a claim
    /// trusts the hint only at that position, so a hint another producer's claim made stale,
    /// or one a full ring left, changes nothing: entries come out once each, in order, and a
    /// full ring is still refused.
    #[test]
    fn the_free_hint_names_only_a_free_next_position() {
        let (ctl, slots) = ring_parts(2);
        let hint = AtomicU64::new(FREE_HINT_NONE);
        let hinted = Ring::new(&ctl, &slots).with_free_hint(&hint);
        let plain = Ring::new(&ctl, &slots);
        let mut c = Consumer::new();
        hinted.push(&Val(0)).unwrap();
        assert_eq!(hint.load(Ordering::Relaxed), 1, "position 1 is free");
        // Another producer (no hint) claims position 1: the hint is stale, and the ring is full.
        plain.push(&Val(1)).unwrap();
        assert_eq!(hinted.push(&Val(2)), Err(PushError::Full), "a stale hint is not trusted");
        assert_eq!(c.pop(&plain), Pop::Item(Val(0)));
        hinted.push(&Val(2)).unwrap();
        assert_eq!(hint.load(Ordering::Relaxed), FREE_HINT_NONE, "position 3 still holds entry 1");
        assert_eq!(hinted.push(&Val(3)), Err(PushError::Full));
        for v in [1, 2] {
            assert_eq!(c.pop(&plain), Pop::Item(Val(v)));
        }
        hinted.push(&Val(3)).unwrap();
        assert_eq!(hint.load(Ordering::Relaxed), 4, "position 4 is free");
        hinted.push(&Val(4)).unwrap();
        for v in [3, 4] {
            assert_eq!(c.pop(&plain), Pop::Item(Val(v)));
        }
        assert_eq!(c.pop(&plain), Pop::Empty);
    }

    /// An entry two cache lines long, every word set from one seed.
    #[derive(Clone, Copy, Debug, PartialEq)]
    #[repr(C)]
    struct Wide([u64; 16]);
    // SAFETY: plain integers.
    unsafe impl Pod for Wide {}
    impl Wide {
        fn of(seed: u64) -> Self {
            Wide(std::array::from_fn(|k| seed * 100 + k as u64))
        }
    }

    /// `peek_into` copies the first line only and keeps the slot: the rest is read in place (or
    /// copied by `take_rest`), the same entry is found again, and a producer cannot reuse the
    /// slot until it is released.
    #[test]
    fn a_peeked_entry_stays_in_its_slot_until_released() {
        let ctl = RingCtl::new();
        let slots: Vec<Slot<Wide>> =
            (0..2u64).map(|pos| Slot { stamp: AtomicU64::new(pos), value: UnsafeCell::new(Wide([0; 16])) }).collect();
        let ring = Ring::new(&ctl, &slots);
        let mut c = Consumer::new();
        ring.push(&Wide::of(1)).unwrap();
        ring.push(&Wide::of(2)).unwrap();
        let mut kept = Wide([u64::MAX; 16]);
        let Pop::Item(in_slot) = c.peek_into(&ring, &mut kept) else { panic!("nothing published") };
        let first_words = FIRST_LINE_BYTES / 8;
        assert_eq!(kept.0[..first_words], Wide::of(1).0[..first_words], "the first line copied");
        assert!(kept.0[first_words..].iter().all(|&w| w == u64::MAX), "the rest left in the slot");
        // SAFETY: the peeked entry, in its slot until the release below.
        assert_eq!(unsafe { *in_slot }, Wide::of(1), "the whole entry read in place");
        assert_eq!(ring.push(&Wide::of(3)), Err(PushError::Full), "a peeked slot is not free");
        assert!(matches!(c.peek_into(&ring, &mut kept), Pop::Item(p) if p == in_slot), "found again");
        c.take_rest(&ring, &mut kept);
        assert_eq!(kept, Wide::of(1));
        ring.push(&Wide::of(3)).unwrap();
        assert_eq!(c.pop(&ring), Pop::Item(Wide::of(2)));
        assert_eq!(c.pop(&ring), Pop::Item(Wide::of(3)));
        assert_eq!(c.pop(&ring), Pop::Empty);
    }

    #[test]
    fn claimed_but_unpublished_slot_is_pending_and_skippable() {
        let (ctl, slots) = ring_parts(4);
        let ring = Ring::new(&ctl, &slots);
        let mut c = Consumer::new();
        // A producer claims position 0 and dies before publishing.
        ctl.tail.store(1, Ordering::Relaxed);
        ring.push(&Val(7)).unwrap();
        assert_eq!(c.pop(&ring), Pop::Empty);
        assert!(c.is_empty(&ring), "is_empty agrees with pop on a claimed, unwritten head");
        assert!(c.stalled(&ring));
        assert!(c.skip(&ring));
        assert!(!c.stalled(&ring));
        assert_eq!(c.pop(&ring), Pop::Item(Val(7)));
        // The skipped slot is free for the next lap (position 4).
        assert_eq!(slots[0].stamp.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn claim_words_name_exactly_their_positions() {
        assert!(!names(0, 0), "a cleared record names nothing");
        let one = claim_word(7, 1);
        assert!(names(one, 7) && !names(one, 6) && !names(one, 8));
        assert!(!names(one & !CLAIMING, 7), "a word without the claiming bit (a scribble) names nothing");
        let batch = claim_word(u64::from(u32::MAX) - 1, 3); // across the 32-bit wrap
        for pos in [u64::from(u32::MAX) - 1, u64::from(u32::MAX), 1 << 32] {
            assert!(names(batch, pos), "{pos}");
        }
        assert!(!names(batch, (1 << 32) + 1) && !names(batch, u64::from(u32::MAX) - 2));
        assert!(names(claim_word(5 + (3 << 32), 1), 5), "positions compare within 2^32");
    }

    /// A producer's record names its position from before its claim until after its publish,
    /// and is clear again once the push returns, whatever the outcome.
    #[test]
    fn a_push_records_its_claim_until_published() {
        let (ctl, slots) = ring_parts(2);
        let record = AtomicU64::new(0);
        let ring = Ring::new(&ctl, &slots).with_claim_record(&record);
        let mut c = Consumer::new();
        for pos in 0..2 {
            ring.push_with(|v| {
                assert!(names(record.load(Ordering::Relaxed), pos), "record while filling {pos}");
                // At the head, claimed and not yet published: the consumer sees a stall.
                assert_eq!(c.stalled(&ring), pos == 0);
                *v = Val(pos);
            })
            .unwrap();
            assert_eq!(record.load(Ordering::Relaxed), 0, "cleared after the publish");
        }
        assert_eq!(ring.push(&Val(9)), Err(PushError::Full));
        assert_eq!(record.load(Ordering::Relaxed), 0, "cleared after a refusal");
        assert_eq!(c.pop(&ring), Pop::Item(Val(0)));
        assert_eq!(ring.push_batch(&[Val(2), Val(3)]), Ok(1));
        assert_eq!(record.load(Ordering::Relaxed), 0, "cleared after a batch");
        for want in 1..3 {
            assert_eq!(c.pop(&ring), Pop::Item(Val(want)));
        }
    }

    /// `StallWatch::check` skips a stalled head only once `claimant_lives` denies it, and asks
    /// about the head's position.
    #[test]
    fn a_stall_is_skipped_only_when_no_live_claimant_names_the_head() {
        let (ctl, slots) = ring_parts(4);
        let ring = Ring::new(&ctl, &slots);
        let mut c = Consumer::new();
        ctl.tail.store(1, Ordering::Relaxed); // position 0 claimed, never published
        let mut watch = StallWatch::default();
        let zero = core::time::Duration::ZERO;
        assert!(!watch.check(&mut c, &ring, zero, |head| {
            assert_eq!(head, 0);
            true
        }));
        assert_eq!(c.position(), 0, "a live claimant is waited for");
        assert!(watch.check(&mut c, &ring, zero, |_| false));
        assert_eq!(c.position(), 1);
    }

    #[test]
    fn scribbled_stamp_never_yields_an_item() {
        let (ctl, slots) = ring_parts(4);
        let ring = Ring::new(&ctl, &slots);
        let mut c = Consumer::new();
        slots[0].stamp.store(u64::MAX - 3, Ordering::Relaxed);
        assert_eq!(c.pop(&ring), Pop::Pending);
        assert!(c.skip(&ring));
        assert_eq!(c.pop(&ring), Pop::Empty);
    }

    #[test]
    fn owner_repairs_a_scribbled_claim_counter() {
        let (ctl, slots) = ring_parts(4);
        let ring = Ring::new(&ctl, &slots);
        let mut c = Consumer::new();
        for i in 0..3 {
            ring.push(&Val(i)).unwrap();
        }
        assert_eq!(c.pop(&ring), Pop::Item(Val(0)));
        assert!(!c.repair_tail(&ring), "an honest counter is left alone");
        assert_eq!(c.claimed(&ring), 3);
        for bad in [u64::MAX - 5, 0, 1000, c.position() + 4 + 1] {
            ctl.tail.store(bad, Ordering::Relaxed);
            assert_eq!(c.claimed(&ring), c.position() + 4, "{bad}: at most a lap past the head is claimed");
            let refused = ring.push(&Val(9));
            assert!(matches!(refused, Err(PushError::Full | PushError::Busy)), "{bad}: {refused:?}");
            assert!(c.repair_tail(&ring), "{bad}");
            assert_eq!(ctl.tail.load(Ordering::Relaxed), 3, "{bad}");
        }
        // Positions 1 and 2 are published, 3 is free: producers go on from there.
        ring.push(&Val(3)).unwrap();
        ring.push(&Val(4)).unwrap();
        assert_eq!(ring.push(&Val(5)), Err(PushError::Full));
        for i in 1..5 {
            assert_eq!(c.pop(&ring), Pop::Item(Val(i)));
        }
        // A counter a full lap ahead is still honest (every slot claimed).
        for i in 0..4 {
            ring.push(&Val(i)).unwrap();
        }
        assert!(!c.repair_tail(&ring));
        // Two taken: the first free position from the head (7) is 9, in the ring's second slot.
        for i in 0..2 {
            assert_eq!(c.pop(&ring), Pop::Item(Val(i)));
        }
        ctl.tail.store(1000, Ordering::Relaxed);
        assert!(c.repair_tail(&ring));
        assert_eq!(ctl.tail.load(Ordering::Relaxed), 9);
    }

    #[test]
    fn threads_push_every_value_exactly_once() {
        let (ctl, slots) = ring_parts(64);
        let ring = Ring::new(&ctl, &slots);
        // Miri interprets every step: a few hundred pushes still interleave there.
        const PER: u64 = if cfg!(miri) { 100 } else { 20_000 };
        let mut seen = vec![0u8; (4 * PER) as usize];
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let ring = &ring;
                s.spawn(move || {
                    for i in 0..PER {
                        let v = Val(t * PER + i);
                        while ring.push(&v).is_err() {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let mut c = Consumer::new();
            let mut got = 0;
            while got < 4 * PER {
                if let Pop::Item(Val(v)) = c.pop(&ring) {
                    seen[v as usize] += 1;
                    got += 1;
                }
            }
        });
        assert!(seen.iter().all(|&n| n == 1));
    }
}
