//! Bounded many-producer, single-consumer ring with one sequence stamp per slot (Vyukov).
//!
//! Producers (peers) claim a slot with one CAS on `tail`, fill it, and publish it by moving the
//! slot's stamp from `pos` to `pos + 1`. The consumer (the region's owner) keeps its `head` in
//! private memory, so a peer cannot corrupt it; it reads a slot when the stamp says "published"
//! and hands the slot to the next lap by setting the stamp to `pos + capacity`. The consumer never
//! waits: it either takes an entry or reports that none is ready.
//!
//! A producer that died between its claim and its publish would stall the consumer forever; the
//! consumer can `skip` such a slot after a time the caller chooses. Before it writes the entry, a
//! producer moves the stamp from `pos` to `pos | WRITING` with a CAS; `skip` hands the slot to the
//! next lap with a CAS from `pos`, so exactly one of them wins. A producer that was merely slow
//! learns that its entry was skipped before it has touched the slot, instead of writing into a
//! slot that may already hold a later lap's entry.
//!
//! A slot whose producer is inside its copy (`WRITING`) cannot be skipped that way: the producer
//! may be alive and still writing. So the `WRITING` stamp also names the writer: it is
//! `WRITING | pid << 32 | (pos mod 2^32)`, the pid being the process that mapped the ring
//! (`Ring::with_writer`; a process of another pid namespace than the ring's owner names itself
//! by `FOREIGN_WRITER` instead). When such a head stays put, the consumer asks whether that process is
//! gone (`StallWatch::check`'s `gone`); only then does `reclaim` move the stamp from exactly that
//! value to the next lap. A dead process writes nothing more, so the half-written entry is never
//! read and the slot is never written twice. A live writer, or one of unknown pid (0), is waited
//! for. Setting the `WRITING` stamp is the same one CAS as before, so the fast path costs nothing
//! more; only a stalled head pays (one liveness check per timer tick).
//!
//! Everything here works on references handed in by the caller: slices of a shared mapping in
//! the real engine, heap allocations under loom.

use crate::pod::{CachePadded, Pod};
use crate::sync::{prefetch, spin_hint, AtomicU64, Ordering, Prefetch, UnsafeCell};

/// How often a producer retries when other producers keep moving `tail` under it.
const PRODUCER_RETRIES: u32 = 1 << 12;

/// Bytes of an entry that share the cache line with its 8-byte stamp.
pub(crate) const FIRST_LINE_BYTES: usize = 64 - 8;

/// Stamp flag: the producer that claimed position `stamp & !WRITING` is copying its entry in.
/// Positions never reach 2^63, so the flag cannot collide with a plain stamp.
const WRITING: u64 = 1 << 63;

/// Where the writer's pid sits in a `WRITING` stamp, and how many bits it keeps (pids stay
/// below 2^22 on Linux).
const WRITER_SHIFT: u32 = 32;
const WRITER_BITS: u64 = (1 << 31) - 1;

/// The writer a process names in the rings of a peer of another pid namespace, where its pid
/// means nothing: this bit (above every Linux pid) and the low bits of its own endpoint's
/// incarnation, by which the ring's owner finds it among its peers
/// (`endpoint::peers::Known::foreign_writer_gone`).
pub const FOREIGN_WRITER: u32 = 1 << 30;

pub fn foreign_writer(incarnation: u64) -> u32 {
    FOREIGN_WRITER | (incarnation as u32 & (FOREIGN_WRITER - 1))
}

/// How far a slot's stamp is ahead of position `pos` (negative: the slot still holds, or is
/// still receiving, last lap's entry). A `WRITING` stamp keeps only the low 32 bits of its
/// position: compare within that window.
fn lead_at(stamp: u64, pos: u64) -> i64 {
    if stamp & WRITING != 0 {
        (stamp as u32).wrapping_sub(pos as u32) as i32 as i64
    } else {
        stamp.wrapping_sub(pos) as i64
    }
}

/// The stamp of a slot that the process `writer` (pre-shifted, see `Ring::with_writer`) is
/// copying the entry for position `pos` into.
fn writing_stamp(pos: u64, writer: u64) -> u64 {
    WRITING | writer | (pos & u64::from(u32::MAX))
}

/// True if `stamp` says some producer is copying the entry for position `pos` in.
fn writing_at(stamp: u64, pos: u64) -> bool {
    stamp & WRITING != 0 && stamp as u32 == pos as u32
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
    /// The consumer skipped our claimed slot because we took too long; the entry was dropped.
    Skipped,
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
    /// The pushing process's pid, shifted into place for `writing_stamp` (0: not named).
    writer: u64,
}

impl<'a, T: Pod> Ring<'a, T> {
    /// `slots.len()` must be a power of two (checked once where a region's rings are resolved;
    /// were it not, `pos & mask` would still index inside `slots`, only not as a ring).
    #[inline]
    pub fn new(ctl: &'a RingCtl, slots: &'a [Slot<T>]) -> Self {
        debug_assert!(slots.len().is_power_of_two(), "ring capacity must be a power of two");
        Ring { ctl, slots, mask: slots.len() as u64 - 1, writer: 0 }
    }

    /// Name the process that pushes through this view (its pid), so that a consumer can
    /// reclaim a slot it left half-written when it died. Without it (pid 0) such a slot is
    /// waited for forever.
    #[inline]
    pub fn with_writer(mut self, pid: u32) -> Self {
        self.writer = (u64::from(pid) & WRITER_BITS) << WRITER_SHIFT;
        self
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
        self.write_claimed(pos, value)
    }

    /// Enqueue an entry written in place: `fill` gets the claimed slot, holding whatever an
    /// earlier entry left there, and must set every byte the consumer reads (the entry's
    /// `wire_len`). Saves building the entry elsewhere and copying it in.
    pub fn push_with(&self, fill: impl FnOnce(&mut T)) -> Result<(), PushError> {
        let pos = self.claim()?;
        self.fill_claimed(pos, fill)
    }

    /// Claim the next position on `tail`: one CAS when the slot there is free for this lap.
    fn claim(&self) -> Result<u64, PushError> {
        for _ in 0..PRODUCER_RETRIES {
            let tail = self.ctl.tail.load(Ordering::Relaxed);
            let slot = &self.slots[(tail & self.mask) as usize];
            prefetch(&slot.stamp, Prefetch::Write);
            let stamp = slot.stamp.load(Ordering::Acquire);
            // A producer copying into the slot for position `p` leaves `p | WRITING`: treat it as
            // `p` for the lap arithmetic, but it is never free to claim.
            let writing = stamp & WRITING != 0;
            let lead = lead_at(stamp, tail);
            if lead == 0 && !writing {
                if self.ctl.tail.compare_exchange_weak(tail, tail + 1, Ordering::Relaxed, Ordering::Relaxed).is_err() {
                    spin_hint();
                    continue;
                }
                return Ok(tail);
            }
            if lead < 0 {
                // The slot still holds (or is still receiving) last lap's entry: the ring is full.
                #[cfg(loom)]
                seen::count(&seen::FULL_WHILE_WRITING, writing);
                return Err(PushError::Full);
            }
            // Another producer claimed this position after we read `tail` (it may still be
            // copying its entry in, `lead == 0` with `WRITING`).
            spin_hint();
        }
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
                    return Err(PushError::Full); // last lap's entry is still there
                }
                spin_hint(); // another producer is ahead of us at `tail`
                continue;
            }
            let n = free as u64;
            if self.ctl.tail.compare_exchange_weak(tail, tail + n, Ordering::Relaxed, Ordering::Relaxed).is_err() {
                spin_hint();
                continue;
            }
            // Positions tail..tail+n are ours. If the consumer skipped one meanwhile (it waited on
            // us past its stall timeout), stop there: the entries before it are in, the caller
            // retries the rest in order, and our later positions stay claimed-unwritten until
            // the consumer skips them too (the path of a producer it believes dead).
            for (k, value) in values[..free].iter().enumerate() {
                if let Err(e) = self.write_claimed(tail + k as u64, value) {
                    return if k == 0 { Err(e) } else { Ok(k) };
                }
            }
            return Ok(free);
        }
        Err(PushError::Busy)
    }

    /// Copy `value` into the slot of position `pos`, which this producer claimed on `tail`, and
    /// publish it.
    fn write_claimed(&self, pos: u64, value: &T) -> Result<(), PushError> {
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
    /// publish it.
    fn fill_claimed(&self, pos: u64, fill: impl FnOnce(&mut T)) -> Result<(), PushError> {
        let slot = &self.slots[(pos & self.mask) as usize];
        // Take the slot for writing *before* touching it. If the consumer skipped this
        // position after our claim, its CAS moved the stamp to the next lap and this one
        // fails: the slot may already belong to a later producer, so we must not write.
        // (Writing first and publishing with a CAS, as this code once did, let a slow
        // producer overwrite the next lap's entry: found by the loom model
        // `ring_skipped_slot_reused_by_next_lap`.)
        if let Err(_now) =
            slot.stamp.compare_exchange(pos, writing_stamp(pos, self.writer), Ordering::Acquire, Ordering::Relaxed)
        {
            // `_now` is the next lap's free stamp unless a later producer took the slot.
            #[cfg(loom)]
            seen::count(&seen::SKIPPED_AND_RETAKEN, _now != pos.wrapping_add(self.capacity()));
            return Err(PushError::Skipped);
        }
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
            return Ok(());
        }
        slot.value.with_mut(|cell| {
            // SAFETY: the CAS on `tail` gave this producer the position and the CAS to
            // `pos | WRITING` the slot: `skip` no longer takes it, no producer claims it
            // (its stamp is no lap's free stamp) and the consumer does not read it before
            // the stamp moves to `pos + 1`, so nothing else touches it meanwhile. `T: Pod`:
            // whatever bytes it holds are a valid `T`.
            fill(unsafe { &mut *cell })
        });
        // Only this producer moves a stamp out of `WRITING`, so a plain store publishes.
        slot.stamp.store(pos + 1, Ordering::Release);
        Ok(())
    }
}

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
        /// `push` learned it was skipped after a later lap's producer had taken its slot.
        pub static SKIPPED_AND_RETAKEN: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn count(key: &'static LocalKey<Cell<u64>>, happened: bool) {
        key.with(|n| n.set(n.get() + u64::from(happened)));
    }
}

/// Test hooks that stop a producer in the middle of copying its entry (half of it written, the
/// stamp `WRITING`), as a SIGKILL at that instant would. Only in `--cfg loom` builds and with the
/// `test-hooks` feature (which only the multi-process tests enable); production builds have no
/// trace of them.
#[cfg(any(loom, feature = "test-hooks"))]
pub mod hooks {
    #[cfg(loom)]
    loom::thread_local! {
        static DIE: core::cell::Cell<bool> = core::cell::Cell::new(false);
    }

    /// loom: the calling model thread's next `push` writes half its entry and returns `Ok`
    /// without publishing; the thread must not touch the ring again (it is "dead").
    #[cfg(loom)]
    pub fn die_in_next_push() {
        DIE.with(|d| d.set(true));
    }

    #[cfg(loom)]
    pub(crate) fn dies_mid_copy() -> bool {
        DIE.with(|d| d.replace(false))
    }

    #[cfg(loom)]
    pub(crate) fn die() {}

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

    /// True if a producer claimed the head position but has not started writing it: with
    /// `Pending`, the states `skip` may resolve. Reads the producers' counter, so call it
    /// rarely (on a timer), not on every poll.
    pub fn stalled<T: Pod>(&self, ring: &Ring<'_, T>) -> bool {
        let slot = &ring.slots[(self.head & ring.mask) as usize];
        let claimed_ahead = ring.ctl.tail.load(Ordering::Relaxed).wrapping_sub(self.head) as i64;
        slot.stamp.load(Ordering::Acquire) == self.head && claimed_ahead > 0
    }

    /// Give up on a head slot that stayed `Pending`: hand it to the next lap and move on.
    /// Returns false if the entry got published meanwhile (then `pop` it instead), or if its
    /// producer is copying the entry in right now (then it stays `Pending` until published).
    pub fn skip<T: Pod>(&mut self, ring: &Ring<'_, T>) -> bool {
        let slot = &ring.slots[(self.head & ring.mask) as usize];
        let stamp = slot.stamp.load(Ordering::Acquire);
        if stamp == self.head.wrapping_add(1) || writing_at(stamp, self.head) {
            return false;
        }
        let next_lap = self.head.wrapping_add(ring.capacity());
        if slot.stamp.compare_exchange(stamp, next_lap, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        self.head = self.head.wrapping_add(1);
        true
    }

    /// The pid of the process copying an entry into the head slot right now, if the stamp
    /// names one (with `Pending`): the writer `reclaim` may take the slot back from once it died.
    pub fn writer<T: Pod>(&self, ring: &Ring<'_, T>) -> Option<u32> {
        let slot = &ring.slots[(self.head & ring.mask) as usize];
        let stamp = slot.stamp.load(Ordering::Acquire);
        let pid = ((stamp >> WRITER_SHIFT) & WRITER_BITS) as u32;
        (writing_at(stamp, self.head) && pid != 0).then_some(pid)
    }

    /// Take back the head slot from `writer`, which died in the middle of copying its entry in:
    /// hand the slot to the next lap and move on, never reading the half-written entry. The
    /// caller must know `writer` is gone (a live writer would go on writing into a slot the
    /// next lap owns). False if the stamp no longer names `writer` at this position.
    pub fn reclaim<T: Pod>(&mut self, ring: &Ring<'_, T>, writer: u32) -> bool {
        let slot = &ring.slots[(self.head & ring.mask) as usize];
        let held = writing_stamp(self.head, (u64::from(writer) & WRITER_BITS) << WRITER_SHIFT);
        let next_lap = self.head.wrapping_add(ring.capacity());
        if slot.stamp.compare_exchange(held, next_lap, Ordering::AcqRel, Ordering::Acquire).is_err() {
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
    /// A producer that claimed a position at or after the new value and had not yet marked its
    /// slot loses the slot to the next claimant and learns it (`Skipped`).
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

    /// Called on a timer: also notices a claimed-but-unwritten head (which `pop` reports as
    /// `Empty`), and skips a head stuck for `timeout`; a head stuck in the middle of a copy is
    /// reclaimed only if `gone(pid)` says its writer's process no longer exists. True if it
    /// skipped or reclaimed.
    pub fn check<T: Pod>(
        &mut self,
        consumer: &mut Consumer,
        ring: &Ring<'_, T>,
        timeout: core::time::Duration,
        gone: impl FnOnce(u32) -> bool,
    ) -> bool {
        if consumer.stalled(ring) {
            self.note(consumer);
        }
        let Some((at, since)) = self.since else { return false };
        if at != consumer.position() {
            self.since = None;
            return false;
        }
        if since.elapsed() < timeout {
            return false;
        }
        let moved =
            consumer.skip(ring) || consumer.writer(ring).is_some_and(|pid| gone(pid) && consumer.reclaim(ring, pid));
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
        for i in 0..4 {
            ring.push(&Val(i)).unwrap();
        }
        assert_eq!(ring.push(&Val(9)), Err(PushError::Full));
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
        // The late producer can no longer take the slot for writing, so it cannot corrupt the
        // next lap's entry.
        assert!(slots[0].stamp.compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed).is_err());
    }

    #[test]
    fn slot_left_mid_copy_names_its_writer_and_only_it_can_be_reclaimed() {
        let (ctl, slots) = ring_parts(4);
        let ring = Ring::new(&ctl, &slots).with_writer(4242);
        let mut c = Consumer::new();
        // Position 0 as a producer of pid 4242 leaves it when it dies in the middle of its copy.
        slots[0].stamp.store(writing_stamp(0, 4242 << WRITER_SHIFT), Ordering::Relaxed);
        ctl.tail.store(1, Ordering::Relaxed);
        ring.push(&Val(8)).unwrap();
        assert_eq!(c.pop(&ring), Pop::Pending);
        assert!(!c.is_empty(&ring), "a head being written is not empty: the drain must note it");
        assert!(!c.skip(&ring), "a slot being written is not skipped");
        assert_eq!(c.writer(&ring), Some(4242));
        assert!(!c.reclaim(&ring, 4243));
        assert!(c.reclaim(&ring, 4242));
        assert_eq!(c.pop(&ring), Pop::Item(Val(8)));
        // The reclaimed slot serves the next lap (position 4 is slot 0 again).
        for i in 0..3 {
            ring.push(&Val(i)).unwrap();
        }
        for i in 0..3 {
            assert_eq!(c.pop(&ring), Pop::Item(Val(i)));
        }
        // Unnamed writers (pid 0) are never offered for reclaiming.
        slots[c.position() as usize % 4].stamp.store(writing_stamp(c.position(), 0), Ordering::Relaxed);
        assert_eq!(c.writer(&ring), None);
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
        for bad in [u64::MAX - 5, 0, 1000, c.position() + 4 + 1] {
            ctl.tail.store(bad, Ordering::Relaxed);
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
