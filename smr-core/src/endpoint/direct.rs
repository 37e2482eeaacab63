//! One-sided reads and writes without the owner: registrations an endpoint publishes in its
//! region (`crate::published`), and a peer's CMA copies of them.
//!
//! The owner publishes (`publish_mr`) and withdraws (`withdraw_mr`); a peer looks an entry up
//! in the mapping of the owner's region it holds (`peer_mr`), and copies with
//! `process_vm_readv` (`read_published`: the entry must still stand after the copy) or
//! `process_vm_writev` (`write_published`: counted in the entry as a writer during the copy, so
//! that a withdrawal waits for it). A copy the owner counts (its registration is bound to a
//! FI_REMOTE_WRITE or FI_REMOTE_READ counter) is admitted as a write is, whichever way it goes,
//! and adds one to the entry's count before it counts itself out; the owner takes the counts on
//! its progress passes (`take_mr_counts`). Every failure (no link yet, CMA refused or off, the owner
//! gone or rewriting the entry) says "take the ordinary path": the request through the owner's
//! ring, which reports errors the usual way.

use super::peers::BeatSeen;
use super::{Endpoint, PeerId};
use crate::cmd::RemoteIov;
use crate::error::{Error, Result};
use crate::iov::LocalIov;
use crate::published::{self, Published};
use crate::sync::Ordering;
use std::time::{Duration, Instant};

/// How recent our last look at a peer's idle-poll count must be for a change since then to
/// say that it polls now (`peer_is_free`).
const POLLING_NOW: Duration = Duration::from_micros(200);
/// How long to watch a peer's idle-poll count for a move when the last look is too old.
const WATCH: Duration = Duration::from_micros(1);

/// Which of the owner's progress counts (`layout::OwnerBeat`) a look is about.
#[derive(Clone, Copy)]
enum Beat {
    /// Progress calls with nothing of the owner's own outstanding.
    Free,
    /// Every progress call.
    Any,
}

impl Endpoint {
    /// Publish a registration of `len` bytes at `base` under `key` for peers to read with CMA
    /// (`published` flags). None when CMA is off here or the table is full: peers then ask us.
    pub fn publish_mr(&mut self, key: u64, base: u64, len: u64, flags: u64) -> Option<u32> {
        if !self.cma_ok {
            return None;
        }
        self.publisher.publish(self.region.mr_slots(), key, base, len, flags)
    }

    /// Count one progress call, `free` when made with no operation of the caller's own
    /// outstanding (`layout::OwnerBeat`): peers then hand us work that a spare CPU does well, and
    /// while we progress at all, requests that we answer within microseconds.
    #[inline]
    pub fn note_poll(&mut self, free: bool) {
        let beat = self.region.beat();
        self.polls_made = self.polls_made.wrapping_add(1);
        beat.polls.store(self.polls_made, Ordering::Relaxed);
        if free {
            self.free_polls = self.free_polls.wrapping_add(1);
            beat.free_polls.store(self.free_polls, Ordering::Relaxed);
        }
    }

    /// Whether `peer`'s owner keeps progressing with nothing of its own outstanding: it has a
    /// CPU to spare right now. Large data to or from such a peer is faster pushed through SAR
    /// while it copies too (both CPUs copy); to or from any other (busy with its own
    /// operations, computing, asleep) as our own CMA copy, which needs nothing from it, or
    /// (reads of up to four SAR buffers from an owner that progresses: `peer_progresses`)
    /// answered into buffers of ours. False for a peer we cannot reach yet.
    pub fn peer_is_free(&mut self, peer: PeerId) -> bool {
        self.owner_moves(peer, Beat::Free)
    }

    /// Say whether this endpoint's owner has a CPU to spare for peers while it does not poll:
    /// its application sleeps in a blocking wait and a progress thread serves requests.
    pub fn set_spare(&self, spare: bool) {
        self.region.beat().spare.store(spare as u64, Ordering::Relaxed);
    }

    /// Whether `peer`'s owner said it has a CPU to spare without polling (`set_spare`): a large
    /// read it is asked to push wakes its progress thread, on a CPU that is otherwise idle.
    /// False for a peer we cannot reach yet.
    pub fn peer_has_spare_cpu(&mut self, peer: PeerId) -> bool {
        self.link(peer).is_ok_and(|link| link.region.beat().spare.load(Ordering::Relaxed) != 0)
    }

    /// Whether `peer`'s owner calls progress, whatever else it does: it moved its count of
    /// progress calls since a look of ours a moment ago, or within `POLLING_NOW` of this one as
    /// an earlier look saw, or while we watch. Such an owner answers a request within
    /// microseconds, even while its own operations keep it from polling for a few (fi_rma_bw's
    /// reads, each side's CMA reads of the other); one that computes or sleeps may take
    /// milliseconds or more.
    pub fn peer_progresses(&mut self, peer: PeerId) -> bool {
        self.owner_moves(peer, Beat::Any)
    }

    /// Whether `peer`'s owner, when last seen progressing, progressed only with operations of
    /// its own outstanding: since an earlier look it called progress (its count of every call
    /// moved) but never free (its count of free calls did not). Then it is busy with work of
    /// its own, as each side of fi_rma_bw is, and copying for us costs it a share of a CPU it
    /// uses; an owner serving only us makes free calls. A look that sees neither count move
    /// (an owner in a long call, copying a burst of ours out; or one posting its own burst)
    /// keeps what the last one said. No watching: two loads of the owner's line. False for a
    /// peer we cannot reach yet.
    pub fn peer_busy_with_own(&mut self, peer: PeerId) -> bool {
        let Ok(link) = self.link(peer) else { return false };
        let owner = link.region.beat();
        let now = [owner.polls.load(Ordering::Relaxed), owner.free_polls.load(Ordering::Relaxed)];
        let last = std::mem::replace(&mut link.seen_own, now);
        if now[0] != last[0] {
            link.busy_own = now[1] == last[1];
        }
        link.busy_own
    }

    /// Whether the owner's count `which` moves: since a look a moment ago, or while we watch
    /// for a microsecond; for `Beat::Any`, also within `POLLING_NOW` before this look.
    fn owner_moves(&mut self, peer: PeerId, which: Beat) -> bool {
        // Maps the peer's region on first use, so that the first large operation to a peer is
        // chosen as well as the next ones.
        let Ok(link) = self.link(peer) else { return false };
        let owner = link.region.beat();
        let (count, seen) = match which {
            Beat::Free => (&owner.free_polls, &mut link.seen_free),
            Beat::Any => (&owner.polls, &mut link.seen_polls),
        };
        let beat = || count.load(Ordering::Relaxed);
        let first = beat();
        let now = Instant::now();
        let last = std::mem::replace(seen, BeatSeen { count: first, at: now, moving: false, moved_at: None });
        let recent = now.saturating_duration_since(last.at) < POLLING_NOW;
        if recent && first != last.count {
            (seen.moving, seen.moved_at) = (true, Some(now));
            return true;
        }
        seen.moved_at = last.moved_at;
        let moved_lately = last.moved_at.is_some_and(|t| now.saturating_duration_since(t) < POLLING_NOW);
        if matches!(which, Beat::Any) && moved_lately {
            seen.moving = true;
            return true;
        }
        // No move since a recent look that found it still: still now (an owner that turned to
        // polling moves the count every few hundred nanoseconds). Not watching again saves a
        // microsecond per large operation to a busy peer (fi_rma_bw's two-way reads and
        // writes).
        if recent && !last.moving {
            return false;
        }
        // Nothing recent to compare with, or a count found moving then, whose owner may have
        // been busy serving our last operation since: watch for a moment. An owner in its
        // polling loop moves the count every few hundred nanoseconds.
        loop {
            std::hint::spin_loop();
            let b = beat();
            if b != first {
                let at = Instant::now();
                *seen = BeatSeen { count: b, at, moving: true, moved_at: Some(at) };
                return true;
            }
            if now.elapsed() > WATCH {
                return false;
            }
        }
    }

    /// Withdraw what `publish_mr` returned, once no peer writes into it (`published::begin_write`).
    /// A peer's read under way when this returns reports failure (and is done again through us),
    /// so the memory may go once this returns.
    pub fn withdraw_mr(&mut self, slot: u32) {
        let known = super::peers::Known { inp: &self.inp, out: &self.out, table: self.region.peer_slots() };
        let writing = |slot: u32| known.a_live_sender_writes_into(slot);
        self.publisher.withdraw(self.region.mr_slots(), slot, &writing);
    }

    /// What peers' counted copies of published `slot` moved by since the last call
    /// (`published::Publisher::take_counts`): on every progress pass of an endpoint that counts
    /// them, and after `withdraw_mr` for the last of them.
    pub fn take_mr_counts(&mut self, slot: u32) -> published::Counted {
        self.publisher.take_counts(self.region.mr_slots(), slot)
    }

    /// The registration `peer` published under `key`, if we may copy to or from it ourselves:
    /// CMA works both ways (`Published::allows` says which copies the owner lets us make). Maps
    /// the peer's region on first use; its answer to our connection request is not needed (a
    /// target that has not progressed since it started still serves reads and writes).
    pub fn peer_mr(&mut self, peer: PeerId, key: u64) -> Option<Published> {
        if !self.cma_ok {
            return None;
        }
        let link = self.link(peer).ok()?;
        if !link.cma {
            return None;
        }
        published::lookup(link.region.mr_slots(), key)
    }

    /// Copy `len` bytes of `peer`'s memory at its address `addr` into `local`, as entry `p` of
    /// its table allows, with CMA. `Err(Again)`: the entry changed during the copy, or the
    /// kernel refused CMA (then never tried again for this peer): take the ordinary path. A read
    /// the owner counts is admitted and counted as a write is (`copy_admitted`).
    pub fn read_published(&mut self, peer: PeerId, p: &Published, addr: u64, local: &mut LocalIov) -> Result<usize> {
        let len = local.len() as u64;
        let at = Self::published_target(p, published::REMOTE_READ, addr, len)?;
        let remote = [RemoteIov { addr: at, len }];
        let copied = if p.counts(published::REMOTE_READ) {
            self.copy_admitted(peer, p, published::REMOTE_READ, len, |pid| {
                crate::cma::read_from(pid, &remote, local, 0)
            })?
        } else {
            let link = self.live_link(peer)?;
            let copied = crate::cma::read_from(link.owner.ident().pid, &remote, local, 0);
            match copied {
                Ok(n) if n as u64 == len && published::unchanged(link.region.mr_slots(), p) => n,
                Err(e) => return Err(Self::direct_failed(link, e)),
                _ => return Err(Error::Again),
            }
        };
        self.stats.cma_reads += 1;
        self.stats.published_reads += 1;
        Ok(copied)
    }

    /// Copy `local` into `peer`'s memory at its address `addr`, as entry `p` of its table
    /// allows, with CMA: the bytes are in place (visible to the owner and everyone) when this
    /// returns Ok, and counted where the owner counts writes. `Err(Again)`: the entry is being
    /// rewritten, the copy fell short (the bytes placed are undefined, as for any failed write;
    /// the ordinary path writes them all again), or the kernel refused CMA (then never tried
    /// again for this peer).
    pub fn write_published(&mut self, peer: PeerId, p: &Published, addr: u64, local: &LocalIov) -> Result<usize> {
        let len = local.len() as u64;
        if len > published::WRITE_MAX {
            return Err(Error::Again);
        }
        let at = Self::published_target(p, published::REMOTE_WRITE, addr, len)?;
        let remote = [RemoteIov { addr: at, len }];
        let n =
            self.copy_admitted(peer, p, published::REMOTE_WRITE, len, |pid| crate::cma::write_to(pid, local, &remote))?;
        self.stats.published_writes += 1;
        Ok(n)
    }

    /// Make `copy` (given the owner's pid) of `len` bytes, an `access` admitted into entry `p`
    /// (`published::begin_write`): a withdrawal waits for it. Counted where the owner counts
    /// that access (`published::count`, before the copy counts itself out), and the owner woken
    /// if it sleeps, so that a thread of its asleep in a counter's wait sees the count.
    fn copy_admitted(
        &mut self,
        peer: PeerId,
        p: &Published,
        access: u64,
        len: u64,
        copy: impl FnOnce(u32) -> Result<usize>,
    ) -> Result<usize> {
        #[cfg(test)]
        let pause = self.published_pause_after_count;
        let link = self.live_link(peer)?;
        let slots = link.region.mr_slots();
        // Our mark in our entry of the owner's table, made before we are counted: a withdrawal
        // waits for our copy for as long as we live, however long we take or are stopped.
        let mark = &link.region.peer_slots().get(link.slot as usize).ok_or(Error::Again)?.mr_write;
        mark.store(u64::from(p.slot) + 1, Ordering::Relaxed);
        if !published::begin_write(slots, p) {
            mark.store(0, Ordering::Relaxed);
            return Err(Error::Again);
        }
        #[cfg(test)]
        std::thread::sleep(pause);
        let copied = copy(link.owner.ident().pid);
        let whole = matches!(copied, Ok(n) if n as u64 == len);
        let counted = whole && p.counts(access);
        if counted {
            published::count(slots, p, access);
        }
        published::end_write(slots, p);
        mark.store(0, Ordering::Relaxed);
        if counted {
            crate::wake::notify(link.region.wake_word());
        }
        match copied {
            Ok(n) if whole => Ok(n),
            Err(e) => Err(Self::direct_failed(link, e)),
            Ok(_) => Err(Error::Again),
        }
    }

    /// The owner's address of an access `p` allows, or why not.
    fn published_target(p: &Published, access: u64, addr: u64, len: u64) -> Result<u64> {
        if !p.allows(access) {
            return Err(Error::Again);
        }
        p.target(addr, len).ok_or(Error::Invalid("outside the published registration"))
    }

    /// The link to `peer` if its owner is open and was alive a moment ago (`Watch::alive_lately`):
    /// a dead owner's pid may already belong to another process, never copy to or from it blindly.
    fn live_link(&mut self, peer: PeerId) -> Result<&mut super::peers::Link> {
        let link = self.out.get_mut(peer as usize).and_then(|o| o.link.as_mut()).ok_or(Error::Again)?;
        if link.region.closed() {
            return Err(Error::Again);
        }
        if !link.owner.alive_lately() {
            return Err(Error::Again);
        }
        Ok(link)
    }

    /// A direct copy failed: a refusal by policy turns CMA off for this peer.
    fn direct_failed(link: &mut super::peers::Link, e: Error) -> Error {
        if crate::cma::refused(&e) {
            link.cma = false;
        }
        Error::Again
    }
}
