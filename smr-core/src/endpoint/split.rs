//! A large CMA message copied by both processes at once.
//!
//! One `process_vm_readv` moves 12-13 GB/s on this project's VM; the receiver reading half while
//! the sender writes the other half into the receiver's buffer with `process_vm_writev` moved
//! 21-26 GB/s (docs/perf/protocols.md). So a receiver that matched a CMA message into one buffer
//! offers the sender the tail of the copy (a `resp::SPLIT` naming where it goes) and reads the
//! head itself.
//!
//! The tail is claimed through a word of the sender's entry in the receiver's peer table
//! (`PeerSlot::split`: the message id above, the state in the low bits). The receiver sets it
//! OFFERED before it offers; the sender takes it with a compare-and-swap, OFFERED -> TAKEN,
//! writes, then stores WRITTEN (or FAILED). When its own part is done the receiver looks: WRITTEN
//! completes the message; an offer the sender has not taken it withdraws with a compare-and-swap
//! and reads the tail itself, so a sender that is not polling (or never saw the offer) costs it
//! nothing but the offer; FAILED it reads the tail itself too. TAKEN it waits for, in later
//! passes, because the sender is writing into the receive's buffer: the receive completes only
//! once nothing will write into it any more (the sender's WRITTEN or FAILED, or its death), and
//! an endpoint closing, or a registration closing under the write, waits for it too, for as long
//! as the sender lives (`until_written`).

use super::{Endpoint, Handler, SrcId};
use crate::cmd::{resp, RemoteIov, RespEntry, Status};
use crate::error::{Error, Result};
use crate::iov::LocalIov;
use crate::sync::{AtomicU64, Ordering};

const OFFERED: u64 = 1;
const TAKEN: u64 = 2;
const WRITTEN: u64 = 3;
const FAILED: u64 = 4;
const WITHDRAWN: u64 = 5;

fn word(msg_id: u64, state: u64) -> u64 {
    (msg_id << 3) | state
}

/// A message whose tail the sender took and is writing.
pub(super) struct SplitRx {
    src: SrcId,
    msg_id: u64,
    len: u64,
    /// The sender's ranges of the tail, for reading it ourselves if the sender fails.
    tail: Vec<RemoteIov>,
    offset: usize,
    dest: LocalIov,
    ctx: u64,
    /// How our own part, the head, went.
    head: Result<()>,
    started: std::time::Instant,
}

/// Who has the tail, once the receiver's head is in.
enum Claim {
    /// The sender is writing it.
    Taken,
    /// The sender wrote it.
    Written,
    /// The receiver: it withdrew the offer, or the sender failed.
    Ours,
    /// The word holds no state of this message: the sender scribbled it.
    Garbage,
}

/// The ranges of `iovs` covering bytes `off..off+len`.
fn sub_ranges(iovs: &[RemoteIov], mut off: u64, mut len: u64) -> Vec<RemoteIov> {
    let mut out = Vec::new();
    for r in iovs {
        if len == 0 {
            break;
        }
        if off >= r.len {
            off -= r.len;
            continue;
        }
        let n = (r.len - off).min(len);
        out.push(RemoteIov { addr: r.addr + off, len: n });
        off = 0;
        len -= n;
    }
    out
}

/// The sender's part of a split: the tail from `offset`, written to `dest` in the receiver.
fn offer(msg_id: u64, offset: u64, dest: RemoteIov) -> RespEntry {
    let mut entry =
        RespEntry { kind: resp::SPLIT, status: Status::Ok as u32, msg_id, value: offset, ..Default::default() };
    entry.data[..8].copy_from_slice(&dest.addr.to_le_bytes());
    entry.data[8..16].copy_from_slice(&dest.len.to_le_bytes());
    entry
}

impl Endpoint {
    /// Receiver: copy a CMA message of `len` bytes from `iovs` into `dest` with the sender's
    /// help, if it is large enough and its tail goes into one buffer of ours; None, with nothing
    /// done, otherwise.
    pub(super) fn split_read(
        &mut self,
        src: SrcId,
        msg_id: u64,
        iovs: &[RemoteIov],
        dest: &mut LocalIov,
        len: u64,
    ) -> Option<Split> {
        if len < self.params.split_min as u64 || (dest.len() as u64) < len || msg_id >= 1 << 60 {
            return None;
        }
        // One claim word per sender: while it writes one tail, its next messages are ours alone.
        if self.splits.iter().any(|s| s.src == src) {
            return None;
        }
        // The tail's start: half, on a page boundary; it must land in one buffer of ours.
        let offset = ((len / 2) & !4095) as usize;
        let tail_len = len - offset as u64;
        let mut vecs = crate::iov::IoVecs::new();
        dest.iovecs_from(offset, &mut vecs);
        let first = vecs.first()?;
        if (first.iov_len as u64) < tail_len || offset == 0 {
            return None;
        }
        let dest_tail = RemoteIov { addr: first.iov_base as u64, len: tail_len };
        let started = std::time::Instant::now();
        self.split_word(src)?.store(word(msg_id, OFFERED), Ordering::Release);
        self.stats.splits_offered += 1;
        self.send_resp(src, offer(msg_id, offset as u64, dest_tail));
        let (head, tail) = (sub_ranges(iovs, 0, offset as u64), sub_ranges(iovs, offset as u64, tail_len));
        let head = self.read_exactly(src, &head, dest, 0);
        let elapsed = |t: std::time::Instant| (t.elapsed().as_nanos() as u64).max(1);
        #[cfg(any(test, feature = "test-hooks"))]
        if head.is_ok() {
            let until = std::time::Instant::now() + self.split_offer_wait;
            while std::time::Instant::now() < until
                && self.split_word(src).is_some_and(|w| w.load(Ordering::Acquire) == word(msg_id, OFFERED))
            {
                std::hint::spin_loop();
            }
        }
        let mut claim = self.withdraw(src, msg_id);
        if matches!(claim, Claim::Taken) {
            // The sender started about when we did and copies as fast: wait for it here, a
            // little longer than our own half took, rather than start on the next message,
            // which may go into the same buffer (a window of receives into one buffer, as the
            // bandwidth benchmarks post them) and then both copies fight over its lines. A
            // sender that is slower than that (descheduled) is waited for in later passes.
            let head_took = started.elapsed();
            let until = std::time::Instant::now() + head_took + head_took / 2 + std::time::Duration::from_micros(20);
            while matches!(claim, Claim::Taken) && std::time::Instant::now() < until {
                std::hint::spin_loop();
                claim = Self::claim_of(self.claim_now(src), msg_id);
            }
        }
        Some(match claim {
            Claim::Taken => {
                let dest = std::mem::replace(dest, LocalIov::owned(Vec::new()));
                Split::Later(SplitRx { src, msg_id, len, tail, offset, dest, ctx: 0, head, started })
            }
            Claim::Written => {
                self.stats.splits_taken += 1;
                Split::Done(head.map(|()| elapsed(started)))
            }
            Claim::Ours => {
                let all = head.and_then(|()| self.read_exactly(src, &tail, dest, offset));
                Split::Done(all.map(|()| elapsed(started)))
            }
            Claim::Garbage => Split::Done(Err(Error::Corrupt("split claim word"))),
        })
    }

    /// Read all of `remote` from sender `src` into `dest` at `off`. A read that failed, or fell
    /// short, because the sender died fails with its death (`dead_if_gone`), as whole-message
    /// reads do (a kill mid-stream failed a message with ESRCH).
    fn read_exactly(&mut self, src: SrcId, remote: &[RemoteIov], dest: &mut LocalIov, off: usize) -> Result<()> {
        let want: u64 = remote.iter().map(|r| r.len).sum();
        let read = crate::cma::read_from(self.live_pid(src)?, remote, dest, off);
        let read = read.and_then(|n| if n as u64 == want { Ok(n) } else { Err(Error::Os(libc::EFAULT)) });
        self.dead_if_gone(src, read).map(drop)
    }

    /// The receiver's head is in: withdraw the offer if it is still open, and say who has the
    /// tail.
    fn withdraw(&self, src: SrcId, msg_id: u64) -> Claim {
        let Some(claim) = self.split_word(src) else { return Claim::Garbage };
        match claim.compare_exchange(
            word(msg_id, OFFERED),
            word(msg_id, WITHDRAWN),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Claim::Ours,
            Err(now) => Self::claim_of(now, msg_id),
        }
    }

    fn claim_of(now: u64, msg_id: u64) -> Claim {
        match now {
            w if w == word(msg_id, TAKEN) => Claim::Taken,
            w if w == word(msg_id, WRITTEN) => Claim::Written,
            w if w == word(msg_id, FAILED) || w == word(msg_id, WITHDRAWN) => Claim::Ours,
            _ => Claim::Garbage,
        }
    }

    /// The claim word's value for sender `src` (0, no message's state, if there is no entry).
    fn claim_now(&self, src: SrcId) -> u64 {
        self.split_word(src).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Our peer-table entry's claim word for sender `src`.
    fn split_word(&self, src: SrcId) -> Option<&AtomicU64> {
        self.region.peer_slots().get(src as usize).map(|s| &s.split)
    }

    /// Receiver: the splits whose tails their senders were writing. Returns how many finished.
    /// Whether a writer is still alive is asked (a system call) once per liveness interval.
    pub(super) fn check_splits(&mut self, h: &mut impl Handler) -> usize {
        let look_alive = self.last_liveness.elapsed() >= self.params.liveness_interval;
        let mut finished = 0;
        let mut i = 0;
        while i < self.splits.len() {
            let (src, msg_id) = (self.splits[i].src, self.splits[i].msg_id);
            let now = self.claim_now(src);
            let claim = Self::claim_of(now, msg_id);
            if matches!(claim, Claim::Taken) && (!look_alive || self.live_pid(src).is_ok()) {
                i += 1;
                continue;
            }
            let mut s = self.splits.swap_remove(i);
            let head = std::mem::replace(&mut s.head, Ok(()));
            let result = match claim {
                Claim::Written => {
                    self.stats.splits_taken += 1;
                    head
                }
                Claim::Ours => head.and_then(|()| {
                    let (tail, offset) = (std::mem::take(&mut s.tail), s.offset);
                    self.read_exactly(src, &tail, &mut s.dest, offset)
                }),
                // Its writer died mid-write.
                Claim::Taken => Err(Error::PeerDead),
                Claim::Garbage => Err(Error::Corrupt("split claim word")),
            };
            self.finish_split(s, result, h);
            finished += 1;
        }
        finished
    }

    /// Answer the sender (with the whole copy's time) and report the delivery.
    fn finish_split(&mut self, s: SplitRx, result: Result<()>, h: &mut impl Handler) {
        let result = result.map(|()| s.len as usize);
        let ns = (s.started.elapsed().as_nanos() as u64).max(1);
        let entry = match result {
            Ok(n) => RespEntry::done_timed(s.msg_id, Status::Ok, n as u64, ns),
            Err(_) => RespEntry::done(s.msg_id, Status::Dropped, 0),
        };
        self.send_resp(s.src, entry);
        h.on_recv_done(s.ctx, result, s.dest);
    }

    /// Sender: the receiver offers us the tail of message `entry.msg_id`. Take it and write it,
    /// if the message is still ours to send and the offer still open.
    pub(super) fn on_split_offer(&mut self, entry: &RespEntry) {
        let msg_id = entry.msg_id;
        let Some(send) = self.pending.get(&msg_id) else { return };
        if send.sar_next.is_some() || send.sar_continuation || msg_id >= 1 << 60 {
            return;
        }
        let offset = entry.value;
        let dest = RemoteIov {
            addr: u64::from_le_bytes(entry.data[..8].try_into().expect("8 bytes")),
            len: u64::from_le_bytes(entry.data[8..16].try_into().expect("8 bytes")),
        };
        // A peer's numbers: the tail must be exactly the rest of our message.
        if offset >= send.hdr.len || dest.len != send.hdr.len - offset {
            self.stats.corrupt_commands += 1;
            return;
        }
        // No send to a peer whose pid means nothing here (another pid namespace's) goes by CMA,
        // so such a peer's request for its tail is a mistake, never a CMA write to that pid.
        let Some(link) =
            self.out.get(send.peer as usize).and_then(|o| o.link.as_ref()).filter(|l| l.owner.pid_usable())
        else {
            return;
        };
        let Some(claim) = link.region.peer_slots().get(link.slot as usize).map(|s| &s.split) else { return };
        if claim
            .compare_exchange(word(msg_id, OFFERED), word(msg_id, TAKEN), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return; // withdrawn: the receiver reads it all
        }
        #[cfg(test)]
        std::thread::sleep(self.split_pause_after_take);
        let wrote = crate::cma::write_part_to(link.owner.ident().pid, &send.buf, offset as usize, &[dest]);
        let ok = matches!(wrote, Ok(n) if n as u64 == dest.len);
        #[cfg(test)]
        let ok = ok && !self.fail_split_writes;
        self.stats.splits_written += u64::from(ok);
        self.stats.split_writes_failed += u64::from(!ok);
        // A locked exchange, not a plain store: it orders every store of the kernel's copy
        // before it, fast-string stores included, which a release store alone may not.
        claim.swap(word(msg_id, if ok { WRITTEN } else { FAILED }), Ordering::SeqCst);
        // A receiver that left the tail to a later pass may be asleep (fi_cq_sread, a progress
        // thread): no command of ours follows to wake it.
        crate::wake::notify(link.region.wake_word());
    }

    /// Wait while `writing` says a sender that took a tail may still write it into a buffer
    /// that is about to go back to the application, for as long as that sender lives. No bound
    /// would be safe: the sender writes with one `process_vm_writev` after its take, at memory
    /// speed (a tail of tens of GiB takes seconds), and may be stopped between the two for any
    /// time (SIGSTOP, a debugger, a host that does not run it); a write after we gave up would
    /// land in memory the application may have freed. Its WRITTEN or FAILED ends the wait, and
    /// so does its death (`writing` asks its watch). The usual wait is microseconds: spin, then
    /// sleep in short steps.
    fn until_written(&self, writing: impl Fn(&Self) -> bool) {
        let started = std::time::Instant::now();
        while writing(self) {
            if started.elapsed() < std::time::Duration::from_millis(1) {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }

    /// Whether the sender of `s` is still writing its tail (it took it, and is alive).
    fn writing(&self, s: &SplitRx) -> bool {
        let now = self.claim_now(s.src);
        now == word(s.msg_id, TAKEN) && self.inp.get(&s.src).is_some_and(|p| p.watch.alive())
    }

    /// Before the region goes: wait for senders still writing into our receives' buffers
    /// (`until_written`).
    pub(super) fn wait_for_split_writers(&mut self) {
        self.until_written(|ep| ep.splits.iter().any(|s| ep.writing(s)));
    }

    /// The destination delivered with `ctx` is about to become invalid (a registration closed
    /// under a write): if a sender is writing a tail into it, wait until it stops
    /// (`until_written`), and refuse the message with `errno`. False when no split is under way
    /// for `ctx`.
    pub(super) fn refuse_split(&mut self, ctx: u64, errno: u32) -> bool {
        let Some(i) = self.splits.iter().position(|s| s.ctx == ctx) else { return false };
        self.until_written(|ep| ep.writing(&ep.splits[i]));
        let s = self.splits.swap_remove(i);
        self.send_resp(s.src, RespEntry::done(s.msg_id, Status::Refused, errno.into()));
        true
    }
}

#[cfg(any(test, feature = "test-hooks"))]
impl Endpoint {
    /// Tests: leave each split offer open up to `wait` for the sender to take it, once our half
    /// is in, instead of taking the tail back at once.
    pub fn set_split_offer_wait(&mut self, wait: std::time::Duration) {
        self.split_offer_wait = wait;
    }
}

/// What `split_read` did.
pub(super) enum Split {
    /// The whole message is in (the time to report, 0 for none), or the copy failed.
    Done(Result<u64>),
    /// The sender is writing the tail: keep it (set its `ctx`) until `check_splits` finishes it.
    Later(SplitRx),
}

impl SplitRx {
    pub(super) fn with_ctx(mut self, ctx: u64) -> SplitRx {
        self.ctx = ctx;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_ranges_cut_where_asked() {
        let iovs = [RemoteIov { addr: 1000, len: 10 }, RemoteIov { addr: 5000, len: 20 }];
        assert_eq!(sub_ranges(&iovs, 0, 5), vec![RemoteIov { addr: 1000, len: 5 }]);
        assert_eq!(sub_ranges(&iovs, 8, 10), vec![RemoteIov { addr: 1008, len: 2 }, RemoteIov { addr: 5000, len: 8 }]);
        assert_eq!(sub_ranges(&iovs, 10, 100), vec![RemoteIov { addr: 5000, len: 20 }]);
        assert_eq!(sub_ranges(&iovs, 30, 5), vec![]);
    }
}
