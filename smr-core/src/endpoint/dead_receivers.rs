//! The sends to a receiver that died, and the answers it may have left behind.
//!
//! When the liveness tick finds a receiver dead, it drains our response ring: the answers the
//! receiver published before it died complete their sends, and only the sends it never answered
//! fail (`check_peers`). The drain stops at an entry that another, live, peer has claimed and is
//! still writing (preempted between its claim and its publish); an answer the dead receiver
//! published behind that entry is read only once the entry is done. So the sends wait, the
//! receiver `Dying`, until our head has passed every position it could have claimed (all below
//! the tail we read after seeing it dead): then what it answered has completed, and the rest
//! fails. Failing them at once gave an error for a message the receiver had taken (one kill
//! storm in ten: the victim killed while the four processes connect, under load).
//!
//! The wait is bounded by `stall_timeout`, the time after which a stalled entry of a dead
//! producer is skipped: a live producer stopped mid-write (a debugger, SIGSTOP) must not hold a
//! dead receiver's sends forever. An answer read after that is late: its send is remembered
//! until the head has passed the tail read when it failed, and the answer is then dropped as
//! late (`Stats::late_answers`), not counted as a peer's error.

use super::{Endpoint, Handler, PeerId};
use crate::clock::Instant;

/// Dead receivers whose sends wait for answers, and sends failed while answers might still come.
#[derive(Default)]
pub(super) struct DeadReceivers {
    dying: Vec<Dying>,
    /// The failed sends' message ids, and the response ring's tail when they failed.
    failed: Vec<(Vec<u64>, u64)>,
}

/// A dead receiver that sends still wait on.
struct Dying {
    peer: PeerId,
    /// Our response ring's tail read after we saw it dead: every answer it published is below.
    until: u64,
    since: Instant,
}

impl Endpoint {
    /// On the liveness tick, after a drain of our response ring: `dead` are the dead receivers
    /// that sends still wait on. Fail the sends of each whose answers are all read, or that has
    /// waited `stall_timeout`. Returns the number of completions raised.
    pub(super) fn fail_sends_to_dead(&mut self, dead: &[PeerId], h: &mut impl Handler) -> usize {
        // A receiver whose sends all completed meanwhile is no longer waited on.
        self.dead_receivers.dying.retain(|d| dead.contains(&d.peer));
        for &peer in dead {
            if !self.dead_receivers.dying.iter().any(|d| d.peer == peer) {
                let until = self.resp_rx.claimed(&self.region.resp_ring());
                self.dead_receivers.dying.push(Dying { peer, until, since: Instant::now() });
            }
        }
        let timeout = self.params.stall_timeout;
        let mut events = 0;
        let mut i = 0;
        while i < self.dead_receivers.dying.len() {
            let d = &self.dead_receivers.dying[i];
            if self.resp_rx.passed(d.until) || d.since.elapsed() >= timeout {
                let peer = self.dead_receivers.dying.swap_remove(i).peer;
                events += self.fail_sends_to(peer, h);
            } else {
                i += 1;
            }
        }
        events
    }

    /// The sends `ids` failed because their receiver died: their answers may still come.
    pub(super) fn expect_late_answers(&mut self, ids: impl Iterator<Item = u64>) {
        let until = self.resp_rx.claimed(&self.region.resp_ring());
        if !self.resp_rx.passed(until) {
            self.dead_receivers.failed.push((ids.collect(), until));
        }
    }

    /// An answer to `msg_id`, which no send waits for: a late one (`Stats::late_answers`), or
    /// a peer's error (`Stats::corrupt_commands`).
    pub(super) fn on_unmatched_answer(&mut self, msg_id: u64) {
        if self.dead_receivers.failed.iter().any(|(ids, _)| ids.contains(&msg_id)) {
            self.stats.late_answers += 1;
        } else {
            self.stats.corrupt_commands += 1;
        }
    }

    /// On the liveness tick: forget the failed sends whose dead receivers' answers are all read.
    pub(super) fn forget_late_answers(&mut self) {
        if self.dead_receivers.failed.is_empty() {
            return;
        }
        let rx = &self.resp_rx;
        self.dead_receivers.failed.retain(|&(_, until)| !rx.passed(until));
    }

    #[cfg(test)]
    pub(super) fn expects_late_answers(&self) -> bool {
        !self.dead_receivers.failed.is_empty()
    }
}
