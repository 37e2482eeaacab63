//! Answers that arrive after their sends failed because the receiver died.
//!
//! When the liveness tick finds a receiver dead, it drains our response ring and fails the
//! sends that receiver left unanswered (`check_peers`). The drain stops at an entry that
//! another, live, peer has claimed and is still writing (preempted between its claim and its
//! publish); an answer the dead receiver published behind that entry is read only once the entry
//! is done, and by then its send has failed. Such an answer is no peer's error: its send is
//! remembered here until our response ring's head has passed every position the dead receiver
//! could have claimed (all below the tail we read when we failed its sends: we had seen it dead
//! before), and the answer is then dropped as late. Counted as corrupt, it failed one kill
//! storm in ten (the victim killed while the four processes connect, under load).

use super::Endpoint;

/// Sends failed because their receiver died, whose answers may still be in our response ring.
#[derive(Default)]
pub(super) struct LateAnswers {
    /// The failed sends' message ids, and the response ring's tail when they failed.
    failed: Vec<(Vec<u64>, u64)>,
}

impl Endpoint {
    /// The sends `ids` failed because their receiver died: their answers may still come.
    pub(super) fn expect_late_answers(&mut self, ids: impl Iterator<Item = u64>) {
        let until = self.resp_rx.claimed(&self.region.resp_ring());
        if !self.resp_rx.passed(until) {
            self.late.failed.push((ids.collect(), until));
        }
    }

    /// An answer to `msg_id`, which no send waits for: a late one (`Stats::late_answers`), or
    /// a peer's error (`Stats::corrupt_commands`).
    pub(super) fn on_unmatched_answer(&mut self, msg_id: u64) {
        if self.late.failed.iter().any(|(ids, _)| ids.contains(&msg_id)) {
            self.stats.late_answers += 1;
        } else {
            self.stats.corrupt_commands += 1;
        }
    }

    /// On the liveness tick: forget the failed sends whose dead receivers' answers are all read.
    pub(super) fn forget_late_answers(&mut self) {
        if self.late.failed.is_empty() {
            return;
        }
        let rx = &self.resp_rx;
        self.late.failed.retain(|&(_, until)| !rx.passed(until));
    }

    #[cfg(test)]
    pub(super) fn expects_late_answers(&self) -> bool {
        !self.late.failed.is_empty()
    }
}
