//! The halves of several split copies in one system call.
//!
//! A `process_vm_readv` or `process_vm_writev` of a split's 32 KiB half costs about as much again
//! as its copy in its fixed part (the pid's lookup, the access check, the iovecs' import, the
//! pages' pinning): a C program that copied the halves of four messages a call took 1.66 us a
//! message to read and 2.02 to write, against 2.26 and 2.40 with a call each
//! (docs/perf/where-the-time-goes.md, eighty-second session). So, in a stream:
//! - the receiver offers the tail of a CMA message and, when the next command waiting is
//!   another CMA message from the same sender, leaves its head for later (`heads`): it reads the
//!   heads of up to `HEADS_MAX` messages in one call once it offers the last of them, or once
//!   the next command turns out not to be one (`read_heads_left`, after that command);
//! - the sender takes every tail offered to it in one drain of its responses and writes them in
//!   one call at the drain's end (`write_tails`).
//!
//! A message alone (a ping-pong's) copies its halves as before: the next command is not there.
//! A call that copies less than all (a range gone bad, the peer dying) is followed by a call per
//! message, so that each message gets its own outcome.

use super::{state_word, FAILED, WRITTEN};
use crate::cmd::{op, proto, CmdEntry, RemoteIov, FLAG_SPLIT_EARLY};
use crate::endpoint::{Endpoint, PeerId, SrcId};
use crate::error::Result;
use crate::iov::LocalIov;
use crate::layout::SPLIT_WORDS;
use crate::sync::Ordering;
use std::time::{Duration, Instant};

/// The most heads read in one call: four took most of what eight saved in the C program.
const HEADS_MAX: usize = 4;

/// A tail of one of our messages that we took (OFFERED -> TAKEN) and write at the end of the
/// drain of our responses.
pub(in crate::endpoint) struct TailTaken {
    pub(super) peer: PeerId,
    /// The receiver's claim word for it.
    pub(super) word: usize,
    pub(super) msg_id: u64,
    /// Where the tail starts in our message.
    pub(super) offset: usize,
    /// Where it goes in the receiver.
    pub(super) dest: RemoteIov,
}

impl Endpoint {
    /// Receiver, having offered the tail of a message from `src`: whether to leave its head to be
    /// read with the next message's. So if the next command waiting is a CMA message from the same
    /// sender that will split too (`would_split`), fewer than `HEADS_MAX` heads wait, and a claim
    /// word would be left for that message.
    pub(super) fn defer_head(&self, src: SrcId) -> bool {
        #[cfg(test)]
        let heads_max = self.split_heads_max.unwrap_or(HEADS_MAX);
        #[cfg(not(test))]
        let heads_max = HEADS_MAX;
        if self.heads.len() + 1 >= heads_max || self.words_in_use(src) + 1 >= SPLIT_WORDS {
            return false;
        }
        let mut next = CmdEntry::default();
        // Only the header, which shares the slot's first line; the slot stays where it is.
        let waiting = matches!(self.cmd_rx.peek_into(&self.region.cmd_ring(), &mut next), crate::ring::Pop::Item(_));
        waiting
            && next.op == op::MSG
            && next.proto == proto::IOV
            && next.src == src
            && self.would_split(next.len, 1, next.flags & FLAG_SPLIT_EARLY != 0)
    }

    /// Receiver: read the heads waiting in `heads` (all from `src`) and ours, `head` into `dest`
    /// up to `offset`, in one call where it can. The waiting ones go on to `splits`, each with
    /// its share of the call's time. Returns how our head went and our share of the time.
    pub(super) fn read_heads_with(
        &mut self,
        src: SrcId,
        head: &[RemoteIov],
        dest: &mut LocalIov,
        offset: usize,
    ) -> (Result<()>, Duration) {
        if self.heads.first().is_some_and(|s| s.src != src) {
            self.read_heads_left();
        }
        if self.heads.is_empty() {
            let started = Instant::now();
            let read = self.read_exactly(src, head, dest, 0);
            return (read, started.elapsed());
        }
        let mut waiting = std::mem::take(&mut self.heads);
        let started = Instant::now();
        let remote: Vec<RemoteIov> =
            waiting.iter().flat_map(|s| s.head_src.iter().copied()).chain(head.iter().copied()).collect();
        let want: u64 = remote.iter().map(|r| r.len).sum();
        let read = {
            let mut local: Vec<(&mut LocalIov, usize, usize)> =
                waiting.iter_mut().map(|s| (&mut s.dest, 0, s.offset)).collect();
            local.push((dest, 0, offset));
            self.live_pid(src).and_then(|pid| crate::cma::read_spans(pid, &mut local, &remote))
        };
        let all_in = matches!(read, Ok(n) if n as u64 == want);
        self.stats.split_heads_together += 1;
        let took = started.elapsed();
        let share = |len: usize| took.mul_f64(len as f64 / want.max(1) as f64);
        for mut s in waiting {
            s.head = if all_in { Ok(()) } else { self.read_exactly(s.src, &s.head_src, &mut s.dest, 0) };
            s.head_took = share(s.offset);
            s.head_shared = true;
            s.head_src = Vec::new();
            self.splits.push(s);
        }
        let ours = if all_in { Ok(()) } else { self.read_exactly(src, head, dest, 0) };
        (ours, share(offset))
    }

    /// Receiver: read the heads waiting in `heads`, without one of ours (the command after them
    /// was not a message to split), and hand them to `splits`.
    pub(in crate::endpoint) fn read_heads_left(&mut self) {
        let Some(mut last) = self.heads.pop() else { return };
        let head_src = std::mem::take(&mut last.head_src);
        let mut dest = std::mem::replace(&mut last.dest, LocalIov::owned(Vec::new()));
        (last.head, last.head_took) = self.read_heads_with(last.src, &head_src, &mut dest, last.offset);
        last.dest = dest;
        self.splits.push(last);
    }

    /// Sender: write the tails taken in this drain of our responses (`tails`), those to one
    /// receiver in one call where it can, and say so in their claim words.
    pub(in crate::endpoint) fn write_tails(&mut self) {
        let tails = std::mem::take(&mut self.tails);
        #[cfg(test)]
        std::thread::sleep(self.split_pause_after_take);
        for run in tails.chunk_by(|a, b| a.peer == b.peer) {
            self.write_tails_to(run);
        }
    }

    /// `write_tails` for the tails `run`, all to one receiver.
    fn write_tails_to(&mut self, run: &[TailTaken]) {
        let Some(link) = self.out.get(run[0].peer as usize).and_then(|o| o.link.as_ref()) else { return };
        let pid = link.owner.ident().pid;
        // Ours until the receiver's answer, which waits for the claim words: still pending.
        let bufs: Vec<Option<&LocalIov>> = run.iter().map(|t| self.pending.get(&t.msg_id).map(|s| &s.buf)).collect();
        let all_written = run.len() > 1 && bufs.iter().all(Option::is_some) && {
            let local: Vec<(&LocalIov, usize, usize)> =
                run.iter().zip(&bufs).filter_map(|(t, b)| b.map(|b| (b, t.offset, t.dest.len as usize))).collect();
            let remote: Vec<RemoteIov> = run.iter().map(|t| t.dest).collect();
            let want: u64 = remote.iter().map(|r| r.len).sum();
            matches!(crate::cma::write_spans(pid, &local, &remote), Ok(n) if n as u64 == want)
        };
        let mut written = 0u64;
        for (t, buf) in run.iter().zip(&bufs) {
            let ok = all_written
                || buf.is_some_and(|b| {
                    matches!(crate::cma::write_part_to(pid, b, t.offset, &[t.dest]), Ok(n) if n as u64 == t.dest.len)
                });
            #[cfg(test)]
            let ok = ok && !self.fail_split_writes;
            written += u64::from(ok);
            if let Some(claim) = link.region.peer_slots().get(link.slot as usize).and_then(|s| s.split.get(t.word)) {
                // A locked exchange, not a plain store: it orders every store of the kernel's
                // copy before it, fast-string stores included, which a release store alone may
                // not.
                claim.swap(state_word(t.msg_id, if ok { WRITTEN } else { FAILED }), Ordering::SeqCst);
            }
        }
        // A receiver that left the tails to a later pass may be asleep (fi_cq_sread, a progress
        // thread): no command of ours follows to wake it.
        crate::wake::notify(link.region.wake_word());
        self.stats.splits_written += written;
        self.stats.split_writes_failed += run.len() as u64 - written;
        self.stats.split_tails_together += u64::from(all_written);
    }
}
