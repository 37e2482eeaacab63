//! Which way a read that fits one of our answer buffers goes when both are open: answered by
//! its target into that buffer (two copies, one on each CPU), or read by us from a registration
//! the target published (one `process_vm_readv`). Learnt from the reads themselves.
//!
//! Neither wins in every state of the host. `fi_rma_bw -o read` at 32 KiB, both processes
//! reading each other, the two ways alternated on this project's VM within minutes: answered
//! 8.4 GB/s against 2.3 by CMA in one run, 2.0 against 3.9 in others, where both copies of the
//! answered read crawl (docs/perf/where-the-time-goes.md). So, as for large messages
//! (`measured.rs`), the initiator times both ways per size class and reads by the cheaper one,
//! trying the other now and then:
//! - a CMA read costs its system call, timed by the initiator (`learn_read`);
//! - an answered read costs the target's copy into our buffer, which the target times when the
//!   request names the buffer `AnswerBuf::timed` and reports in its answer (`answer_into`,
//!   `RespEntry::done_timed`), plus our handler's copy out of it, timed around the handler
//!   (`learn_answer`).
//!
//! Both are copying time on some CPU, which is what two processes that read each other at once
//! (every CPU busy) and a reader waiting for one get alike pay.
//!
//! A read of half of `split_min` or more (`early_split_min`) from a target busy with operations
//! of its own (each side of `fi_rma_bw -o read`, or of OpenSHMEM's `shmem_bibw_get_perf`) has a
//! third way: the target pushes its reply as a message, whose copy the two processes split
//! (`split`: we read the first half while the target writes the second; below `split_min` at
//! our request, `cmd::FLAG_SPLIT_EARLY`). Which of that and our CMA read costs less
//! depends on the pattern, not only the host. Intel host of 2026-12-06 (eighty-fifth session),
//! GB/s per copy: in fi_rma_bw, where each process reads into the buffer the other reads, our
//! CMA reads of 64-128 KiB ran at 7.6-12 and the split's halves at 10-15 (the reads 1.5x faster
//! pushed); in `shmem_bibw_get_perf`, separate buffers, CMA reads at 17.5-19 and halves at 11-15
//! (pushed, the gets took twice as long). So a chooser of its own (`choose_busy_read`) times
//! both: our CMA read by its system call, a pushed read by the first half we read of a split
//! reply of its length (`learn_pushed_head`), counted twice for the two halves.

use super::measured::{Choice, Via};
use super::Endpoint;
use crate::cmd::RespEntry;
use std::time::Instant;

/// Reads up to this size go by the caller's fixed rule (answered in one trip): at 8 KiB that
/// took a third of a CMA read's time (docs/perf/protocols.md, "Reads: one round trip up to 16
/// KiB"). Messages are measured from 4 KiB (`measured::MEASURED_ABOVE`); reads of 4-8 KiB have
/// not been measured against CMA since.
const READS_MEASURED_ABOVE: u64 = 8 * 1024;

/// Pushed reads timed and not yet matched to a split head (`expect_pushed_read`): more are
/// dropped, oldest first (a target that replied another way leaves its expectations behind).
pub(super) const PUSHED_TIMED_MAX: usize = 16;

/// The most an answer's reported copy time counts for: a peer writes it, and one absurd figure
/// should not hold the choice (the chooser takes medians, but of a few answers only).
const REPORTED_MAX_NS: u64 = 1_000_000_000;

impl Endpoint {
    /// How to make a read of `len` bytes that the target would answer into one of our buffers
    /// at once and that we could also make ourselves with CMA: `Via::Sar` for the answered way,
    /// `Via::Cma` for ours. None when there is no choice to make (measuring is off, the read is
    /// too small to time); the caller's fixed rule then.
    pub fn choose_read(&mut self, len: usize) -> Option<Choice> {
        if !self.params.measure_protocol || len as u64 <= READS_MEASURED_ABOVE {
            return None;
        }
        self.read_chooser.choose(len as u64)
    }

    /// A read chosen `Via::Cma` copied `len` bytes in `ns`.
    pub fn learn_read(&mut self, choice: Choice, len: usize, ns: u64) {
        debug_assert_eq!(choice.via, Via::Cma, "only a read chosen for CMA is made with it");
        self.read_chooser.learn(choice, len as u64, ns);
    }

    /// Time the answer to send `msg_id`, a read of `len` bytes chosen answered
    /// (`send_bytes_answered` with `timed`).
    pub(super) fn time_answer(&mut self, msg_id: u64, (choice, len): (Choice, usize)) {
        debug_assert_eq!(choice.via, Via::Sar, "a read chosen for CMA is not answered");
        self.timed_reads.insert(msg_id, (choice, len as u64));
    }

    /// The answer of a timed read (`timed`, taken from `timed_reads`) arrived (`entry`) and our
    /// handler took it out, starting at `started`: learn what the read cost. An answer the target
    /// did not time (it refused, or answered some other way) teaches nothing.
    pub(super) fn learn_answer(&mut self, (choice, len): (Choice, u64), entry: &RespEntry, started: Instant) {
        let theirs = entry.time().min(REPORTED_MAX_NS);
        if entry.status == crate::cmd::Status::Placed as u32 && theirs > 0 {
            let ours = started.elapsed().as_nanos() as u64;
            self.read_chooser.learn(choice, len, theirs.saturating_add(ours));
        }
    }

    /// How to make a read of `len` bytes from a target busy with operations of its own
    /// (`peer_busy_with_own`) that we could also make ourselves with CMA: `Via::Sar` for its
    /// reply pushed and split, `Via::Cma` for ours. None when there is no choice to make
    /// (measuring is off, the reply would not be split): the caller's other rules then.
    pub fn choose_busy_read(&mut self, len: usize) -> Option<Choice> {
        if !self.params.measure_protocol || len < self.early_split_min() {
            return None;
        }
        self.busy_read_chooser.choose(len as u64)
    }

    /// A read chosen by `choose_busy_read` for CMA copied `len` bytes in `ns`.
    pub fn learn_busy_read(&mut self, choice: Choice, len: usize, ns: u64) {
        debug_assert_eq!(choice.via, Via::Cma, "a pushed read is learnt from its split");
        self.busy_read_chooser.learn(choice, len as u64, ns);
    }

    /// A read chosen by `choose_busy_read` to be pushed was sent: learn its cost from the
    /// next split reply of its length (`learn_pushed_head`), if the choice is timed.
    pub fn expect_pushed_read(&mut self, choice: Choice, len: usize) {
        if choice.timed() {
            if self.pushed_timed.len() == PUSHED_TIMED_MAX {
                self.pushed_timed.pop_front();
            }
            self.pushed_timed.push_back((choice, len as u64));
        }
    }

    /// We read the first `head` bytes of a split message of `len` bytes in `took`, and its
    /// sender wrote the rest: if a pushed read of that length waits to be timed, it cost that
    /// half's time for each half. Matched by length, not by operation: a split message of the
    /// same length from elsewhere is a sample of the same copies.
    pub(super) fn learn_pushed_head(&mut self, len: u64, head: u64, took: std::time::Duration) {
        if self.pushed_timed.is_empty() || head == 0 {
            return;
        }
        let Some(i) = self.pushed_timed.iter().position(|&(_, l)| l == len) else { return };
        if let Some((choice, len)) = self.pushed_timed.remove(i) {
            let ns = (took.as_nanos() as u64).saturating_mul(len) / head;
            self.busy_read_chooser.learn(choice, len, ns.max(1));
        }
    }

    /// Forget the timed reads among sends `ids` (ended without an answer).
    pub(super) fn forget_timed_reads(&mut self, ids: impl Iterator<Item = u64>) {
        if !self.timed_reads.is_empty() {
            for id in ids {
                self.timed_reads.remove(&id);
            }
        }
    }

    /// Tests: timed reads of `len` bytes so far, (answered, CMA).
    #[cfg(test)]
    pub fn read_answers(&self, len: usize) -> (u32, u32) {
        self.read_chooser.answers(len as u64)
    }

    /// Tests: the figures of reads of `len` bytes from busy targets, ns per KiB: (pushed, CMA).
    #[cfg(test)]
    pub fn busy_read_figures(&self, len: usize) -> (u64, u64) {
        self.busy_read_chooser.figures(len as u64)
    }
}
