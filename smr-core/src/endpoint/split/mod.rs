//! A large CMA message copied by both processes at once.
//!
//! One `process_vm_readv` moves 12-13 GB/s on this project's VM; the receiver reading half while
//! the sender writes the other half into the receiver's buffer with `process_vm_writev` moved
//! 21-26 GB/s (docs/perf/protocols.md). So a receiver that matched a CMA message into one buffer
//! offers the sender the tail of the copy (a `resp::SPLIT` naming where it goes) and reads the
//! head itself.
//!
//! The tail is claimed through one of the claim words of the sender's entry in the receiver's
//! peer table (`PeerSlot::split`, `SPLIT_WORDS` of them: the message id above, the state in the
//! low bits), which the offer names. The receiver sets it OFFERED before it offers; the sender
//! takes it with a compare-and-swap, OFFERED -> TAKEN, writes, then stores WRITTEN (or FAILED).
//! When its own part is done the receiver looks: WRITTEN completes the message; an offer the
//! sender has not taken it withdraws with a compare-and-swap and reads the tail itself, so a
//! sender that is not polling (or never saw the offer) costs it nothing but the offer; FAILED it
//! reads the tail itself too. An offer made while the sender writes an earlier tail of ours it
//! leaves open: the sender takes offers in order, and will take it next. TAKEN it waits for, in
//! later passes, because the sender is writing into the receive's buffer: the receive completes
//! only once nothing will write into it any more (the sender's WRITTEN or FAILED, or its death),
//! and an endpoint closing, or a registration closing under the write, waits for it too, for as
//! long as the sender lives (`until_written`). Meanwhile the receiver goes on to the next
//! message, whose head it reads while the sender writes the last one's tail: in a stream both
//! processes copy all the time, each into its own half of the buffers. Each side copies the
//! halves of several messages in one system call where a stream lets it (`together`).

mod together;

pub(super) use together::TailTaken;

use super::{Endpoint, Handler, SrcId};
use crate::cmd::{resp, RemoteIov, RespEntry, Status};
use crate::error::{Error, Result};
use crate::iov::LocalIov;
use crate::layout::SPLIT_WORDS;
use crate::sync::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(super) const OFFERED: u64 = 1;
pub(super) const TAKEN: u64 = 2;
const WRITTEN: u64 = 3;
const FAILED: u64 = 4;
const WITHDRAWN: u64 = 5;

pub(super) fn state_word(msg_id: u64, state: u64) -> u64 {
    (msg_id << 3) | state
}

/// How long an offer stays open once its sender writes no earlier tail of ours: about what the
/// sender takes to finish one tail, see the next offer in its ring and take it.
const OPEN_GRACE: Duration = Duration::from_micros(2);

/// A message whose tail the sender took and is writing, or will take once it has written an
/// earlier one.
pub(super) struct SplitRx {
    src: SrcId,
    /// Which of the sender's claim words this split uses.
    word: usize,
    msg_id: u64,
    len: u64,
    /// The sender's ranges of the head, while it waits to be read with the next ones'.
    head_src: Vec<RemoteIov>,
    /// The sender's ranges of the tail, for reading it ourselves if the sender fails.
    tail: Vec<RemoteIov>,
    offset: usize,
    dest: LocalIov,
    ctx: u64,
    /// How our own part, the head, went.
    head: Result<()>,
    started: Instant,
    /// How long our own part took.
    head_took: Duration,
    /// Whether `head_took` is this head's share of a call that read others' too (`together`),
    /// which is one measurement, not one per head: only the call's last head is a sample of a
    /// pushed read's cost (`split_taken`).
    head_shared: bool,
    /// Since when the offer is open with its sender writing nothing of ours (`OPEN_GRACE`).
    idle_since: Option<Instant>,
}

/// Who has the tail, once the receiver's head is in.
enum Claim {
    /// Nobody yet: the offer is open.
    Offered,
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

/// The sender's part of a split: the tail from `offset`, written to `dest` in the receiver,
/// claimed through claim word `word`.
fn offer(msg_id: u64, offset: u64, dest: RemoteIov, word: usize) -> RespEntry {
    let mut entry =
        RespEntry { kind: resp::SPLIT, status: Status::Ok as u32, msg_id, value: offset, ..Default::default() };
    entry.data[..8].copy_from_slice(&dest.addr.to_le_bytes());
    entry.data[8..16].copy_from_slice(&dest.len.to_le_bytes());
    entry.data[16..24].copy_from_slice(&(word as u64).to_le_bytes());
    entry
}

impl Endpoint {
    /// Whether a CMA message of `len` bytes, its command taken from the ring, is large enough
    /// to copy in halves with its sender: from `split_min`, and from half of it (`early_split_min`)
    /// where we asked for that (`early`: the reply to a read we chose to have pushed,
    /// `cmd::FLAG_SPLIT_EARLY`) or in a one-way stream: another command waits behind it (we go
    /// on to that command while the sender writes our tail; alone, as in a ping-pong, we would
    /// wait for the tail, which cost a 32 KiB ping-pong 10%), and no send of ours waits (two
    /// processes sending each other 32 KiB messages, each splitting the other's, made MPICH's
    /// IMB-MPI1 `Exchange` a third slower). A one-way stream of 32-48 KiB ran 15-35% faster split.
    pub(super) fn splits(&self, len: u64, early: bool) -> bool {
        self.would_split(len, 0, early)
    }

    /// `splits` for the message at `ahead` places after our ring's head (0: the one just taken
    /// from it), asked of the next one by `defer_head`, whose slot is still the head.
    pub(super) fn would_split(&self, len: u64, ahead: u64, early: bool) -> bool {
        len >= self.params.split_min as u64
            || len >= self.early_split_min() as u64
                && (early
                    || self.pending.is_empty()
                        && self.acked.is_empty()
                        && self.cmd_rx.ready_at(&self.region.cmd_ring(), ahead))
    }

    /// The smallest CMA message copied in halves where the receiver has other work to go on
    /// with (`splits`): half of `split_min`.
    pub fn early_split_min(&self) -> usize {
        self.params.split_min / 2
    }

    /// A split whose tail its sender wrote (`Claim::Written`) is over, our head read `head`
    /// (its first `head_len` bytes of `len`, in `took`, None for a share of a call that read
    /// several: `SplitRx::head_shared`): counted, and a sample of a pushed read's cost
    /// (`learn_pushed_head`). The shares of one call are equal per byte: taken as samples each,
    /// one slow call stood for three of the five a figure is the median of, and held the choice
    /// against every faster sample for thousands of reads (fi_rma_bw -o read, 40 KiB).
    fn split_taken(&mut self, head: &Result<()>, len: u64, head_len: u64, took: Option<Duration>) {
        self.stats.splits_taken += 1;
        if let (Ok(()), Some(took)) = (head, took) {
            self.learn_pushed_head(len, head_len, took);
        }
    }

    /// Receiver: copy a CMA message of `len` bytes from `iovs` into `dest` with the sender's
    /// help, one the caller found large enough (`splits`), if its tail goes into one buffer of
    /// ours; None, with nothing done but splits under way finished (`room_to_split`), otherwise.
    pub(super) fn split_read(
        &mut self,
        src: SrcId,
        msg_id: u64,
        iovs: &[RemoteIov],
        dest: &mut LocalIov,
        len: u64,
        h: &mut impl Handler,
    ) -> Option<Split> {
        if (dest.len() as u64) < len || msg_id >= 1 << 60 {
            return None;
        }
        self.room_to_split(src, h);
        // A claim word of this sender's that no split under way uses; with none free, the
        // message is ours alone.
        let word = self.free_split_word(src)?;
        // The tail's start: half, on a page boundary; it must land in one buffer of ours.
        let offset = ((len / 2) & !4095) as usize;
        let tail_len = len - offset as u64;
        let mut vecs = crate::iov::IoVecs::new();
        dest.iovecs_span(offset, usize::MAX, &mut vecs);
        let first = vecs.first()?;
        if (first.iov_len as u64) < tail_len || offset == 0 {
            return None;
        }
        let dest_tail = RemoteIov { addr: first.iov_base as u64, len: tail_len };
        let started = Instant::now();
        self.split_word(src, word)?.store(state_word(msg_id, OFFERED), Ordering::Release);
        self.stats.splits_offered += 1;
        self.send_resp(src, offer(msg_id, offset as u64, dest_tail, word));
        // What is kept of the split if it is not finished in this call (`dest` moves into it then).
        let mut rx = SplitRx {
            src,
            word,
            msg_id,
            len,
            head_src: sub_ranges(iovs, 0, offset as u64),
            tail: sub_ranges(iovs, offset as u64, tail_len),
            offset,
            dest: LocalIov::owned(Vec::new()),
            ctx: 0,
            head: Ok(()),
            started,
            head_took: Duration::ZERO,
            head_shared: false,
            idle_since: None,
        };
        if self.defer_head(src) {
            rx.dest = std::mem::replace(dest, LocalIov::owned(Vec::new()));
            return Some(Split::Deferred(rx));
        }
        let head_src = std::mem::take(&mut rx.head_src);
        let (head, head_took) = self.read_heads_with(src, &head_src, dest, offset);
        // The copy's time to report: our head's (its share of a call that read several), and
        // from then on whatever this message still waits for.
        let read_end = Instant::now();
        let reported = || ((head_took + read_end.elapsed()).as_nanos() as u64).max(1);
        #[cfg(any(test, feature = "test-hooks"))]
        if head.is_ok() {
            let until = Instant::now() + self.split_offer_wait;
            while Instant::now() < until
                && matches!(self.claim(src, word, msg_id), Claim::Offered)
                && !self.sender_busy(src)
            {
                std::hint::spin_loop();
            }
        }
        let mut claim = self.claim(src, word, msg_id);
        if matches!(claim, Claim::Offered) && !self.sender_busy(src) {
            claim = self.withdraw(src, word, msg_id);
        }
        if matches!(claim, Claim::Taken) && !self.cmd_rx.ready(&self.region.cmd_ring()) {
            // The sender started about when we did and copies as fast, and no other command
            // waits for us: wait for it here, a little longer than our own half took, so that
            // a message alone (a ping-pong's) completes in this pass, not in a later one after
            // the application's next poll. With commands waiting (a stream) we go on to the
            // next one, whose head we read while the sender writes this tail. A sender slower
            // than that (descheduled) is waited for in later passes.
            let until = Instant::now() + head_took + head_took / 2 + Duration::from_micros(20);
            while matches!(claim, Claim::Taken) && Instant::now() < until {
                std::hint::spin_loop();
                claim = self.claim(src, word, msg_id);
            }
        }
        Some(match claim {
            Claim::Taken | Claim::Offered => {
                rx.dest = std::mem::replace(dest, LocalIov::owned(Vec::new()));
                (rx.head, rx.head_took) = (head, head_took);
                Split::Later(rx)
            }
            Claim::Written => {
                self.split_taken(&head, len, offset as u64, Some(head_took));
                Split::Done(head.map(|()| reported()))
            }
            Claim::Ours => {
                let all = head.and_then(|()| self.read_exactly(src, &rx.tail, dest, offset));
                Split::Done(all.map(|()| reported()))
            }
            Claim::Garbage => Split::Done(Err(Error::Corrupt("split claim word"))),
        })
    }

    /// How long an open offer waits for its sender once the sender writes no earlier tail of
    /// ours (`OPEN_GRACE`; tests may ask for longer, `split_offer_wait`).
    fn open_grace(&self) -> Duration {
        #[cfg(any(test, feature = "test-hooks"))]
        return OPEN_GRACE.max(self.split_offer_wait);
        #[cfg(not(any(test, feature = "test-hooks")))]
        OPEN_GRACE
    }

    /// Every split under way: those whose heads are read, and those whose heads wait (`heads`).
    fn all_splits(&self) -> impl Iterator<Item = &SplitRx> {
        self.splits.iter().chain(self.heads.iter())
    }

    /// How many of sender `src`'s claim words splits under way use.
    fn words_in_use(&self, src: SrcId) -> usize {
        self.all_splits().filter(|s| s.src == src).count()
    }

    /// A claim word of sender `src` that no split under way uses.
    fn free_split_word(&self, src: SrcId) -> Option<usize> {
        (0..SPLIT_WORDS).find(|&w| !self.all_splits().any(|s| s.src == src && s.word == w))
    }

    /// Whether sender `src` is writing a tail of ours: it will look at a later offer only once
    /// it is done.
    fn sender_busy(&self, src: SrcId) -> bool {
        self.all_splits().any(|s| s.src == src && matches!(self.claim(src, s.word, s.msg_id), Claim::Taken))
    }

    /// Make room for splitting the next message from `src`: if every claim word of that sender's
    /// is in use, wait a little for the oldest split to finish (`check_splits`), rather than
    /// read all of the next message while the sender writes a tail into what may be the same
    /// buffer: both copies would then fight over its lines (a window of receives into one
    /// buffer, as bandwidth benchmarks post them; docs/perf/protocols.md). A little: up to
    /// three times the oldest's own half from its start (the two halves, copied at once, take
    /// about one).
    fn room_to_split(&mut self, src: SrcId, h: &mut impl Handler) {
        if self.splits.is_empty() {
            return;
        }
        self.check_splits(h);
        if self.words_in_use(src) < SPLIT_WORDS {
            return;
        }
        let Some(oldest) = self.splits.iter().filter(|s| s.src == src).min_by_key(|s| s.started) else { return };
        let until = oldest.started + oldest.head_took * 3 + Duration::from_micros(20);
        while self.words_in_use(src) >= SPLIT_WORDS && Instant::now() < until {
            std::hint::spin_loop();
            self.check_splits(h);
        }
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

    /// Withdraw the offer of `msg_id` on claim word `word` of sender `src` if it is still open,
    /// and say who has the tail.
    fn withdraw(&self, src: SrcId, word: usize, msg_id: u64) -> Claim {
        let Some(claim) = self.split_word(src, word) else { return Claim::Garbage };
        match claim.compare_exchange(
            state_word(msg_id, OFFERED),
            state_word(msg_id, WITHDRAWN),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Claim::Ours,
            Err(now) => Self::claim_of(now, msg_id),
        }
    }

    fn claim_of(now: u64, msg_id: u64) -> Claim {
        match now {
            w if w == state_word(msg_id, OFFERED) => Claim::Offered,
            w if w == state_word(msg_id, TAKEN) => Claim::Taken,
            w if w == state_word(msg_id, WRITTEN) => Claim::Written,
            w if w == state_word(msg_id, FAILED) || w == state_word(msg_id, WITHDRAWN) => Claim::Ours,
            _ => Claim::Garbage,
        }
    }

    /// Who has the tail of `msg_id`, split through claim word `word` of sender `src`, now (a
    /// word that is not there holds no message's state).
    fn claim(&self, src: SrcId, word: usize, msg_id: u64) -> Claim {
        Self::claim_of(self.split_word(src, word).map_or(0, |w| w.load(Ordering::Acquire)), msg_id)
    }

    /// Claim word `word` of sender `src`'s entry in our peer table.
    fn split_word(&self, src: SrcId, word: usize) -> Option<&AtomicU64> {
        self.region.peer_slots().get(src as usize).and_then(|s| s.split.get(word))
    }

    /// Receiver: the splits whose tails their senders were writing, or had not taken yet.
    /// Returns how many finished. Whether a writer is still alive is asked (a system call) once
    /// per liveness interval.
    pub(super) fn check_splits(&mut self, h: &mut impl Handler) -> usize {
        let look_alive = self.last_liveness.elapsed() >= self.params.liveness_interval;
        let mut finished = 0;
        let mut i = 0;
        while i < self.splits.len() {
            let (src, word, msg_id) = (self.splits[i].src, self.splits[i].word, self.splits[i].msg_id);
            let mut claim = self.claim(src, word, msg_id);
            if matches!(claim, Claim::Offered) {
                // Left open while the sender wrote an earlier tail of ours; once it writes none,
                // it has a moment to take this one before we take it back.
                if self.sender_busy(src) {
                    self.splits[i].idle_since = None;
                    i += 1;
                    continue;
                }
                let since = *self.splits[i].idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() < self.open_grace() {
                    i += 1;
                    continue;
                }
                claim = self.withdraw(src, word, msg_id);
            }
            if matches!(claim, Claim::Taken) && (!look_alive || self.live_pid(src).is_ok()) {
                i += 1;
                continue;
            }
            let mut s = self.splits.swap_remove(i);
            let head = std::mem::replace(&mut s.head, Ok(()));
            // The time to report to the sender's chooser of ways: with the tail written, our
            // half's, since the sender's ran beside it and we may see it done only passes
            // later (after the next message's head); else all of it.
            let written = matches!(claim, Claim::Written);
            let result = match claim {
                Claim::Written => {
                    self.split_taken(&head, s.len, s.offset as u64, (!s.head_shared).then_some(s.head_took));
                    head
                }
                Claim::Ours => head.and_then(|()| {
                    let (tail, offset) = (std::mem::take(&mut s.tail), s.offset);
                    self.read_exactly(src, &tail, &mut s.dest, offset)
                }),
                // Its writer died mid-write.
                Claim::Taken => Err(Error::PeerDead),
                // (An open offer was withdrawn or left above.)
                Claim::Garbage | Claim::Offered => Err(Error::Corrupt("split claim word")),
            };
            self.finish_split(s, result, written, h);
            finished += 1;
        }
        finished
    }

    /// Answer the sender (with the copy's time: our half's if the sender `written` the tail)
    /// and report the delivery.
    fn finish_split(&mut self, s: SplitRx, result: Result<()>, written: bool, h: &mut impl Handler) {
        let result = result.map(|()| s.len as usize);
        let took = if written { s.head_took } else { s.started.elapsed() };
        let ns = (took.as_nanos() as u64).max(1);
        let entry = match result {
            Ok(n) => RespEntry::done_timed(s.msg_id, Status::Ok, n as u64, ns),
            Err(ref e) => super::recv::unread(s.msg_id, e),
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
        let word = u64::from_le_bytes(entry.data[16..24].try_into().expect("8 bytes"));
        let Some(claim) = link.region.peer_slots().get(link.slot as usize).and_then(|s| s.split.get(word as usize))
        else {
            self.stats.corrupt_commands += 1;
            return;
        };
        if claim
            .compare_exchange(
                state_word(msg_id, OFFERED),
                state_word(msg_id, TAKEN),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return; // withdrawn: the receiver reads it all
        }
        // Written at the end of this drain, with the other tails taken in it (`write_tails`).
        let peer = send.peer;
        self.tails.push(TailTaken { peer, word: word as usize, msg_id, offset: offset as usize, dest });
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

    /// Whether the sender of `s` is still writing its tail (it took it, and is alive). An offer
    /// still open is withdrawn first: the buffer is about to go, and no sender may take it now.
    fn writing(&self, s: &SplitRx) -> bool {
        let taken = matches!(self.withdraw(s.src, s.word, s.msg_id), Claim::Taken);
        taken && self.inp.get(&s.src).is_some_and(|p| p.watch.alive())
    }

    /// Before the region goes: take back every offer still open, then wait for senders still
    /// writing into our receives' buffers (`until_written`). All offers first: a sender that
    /// finishes one tail takes the next open offer of ours at once.
    pub(super) fn wait_for_split_writers(&mut self) {
        for s in self.all_splits() {
            self.withdraw(s.src, s.word, s.msg_id);
        }
        self.until_written(|ep| ep.all_splits().any(|s| ep.writing(s)));
    }

    /// The destination delivered with `ctx` is about to become invalid (a registration closed
    /// under a write): if a sender is writing a tail into it, wait until it stops
    /// (`until_written`), and refuse the message with `errno`. False when no split is under way
    /// for `ctx`.
    pub(super) fn refuse_split(&mut self, ctx: u64, errno: u32) -> bool {
        if !self.heads.is_empty() {
            self.read_heads_left();
        }
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
    /// is in or once the sender wrote the tail before it, instead of taking the tail back at
    /// once.
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
    /// The tail is offered and the head waits to be read with the next message's: keep it (set
    /// its `ctx`) in `heads`.
    Deferred(SplitRx),
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
