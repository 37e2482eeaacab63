//! Responses waiting for room in their senders' response rings.
//!
//! Kept per sender, in the order they were made: a sender's responses must reach it in that
//! order (an Ok run before a later answer, a refusal before the retry's answer), but senders
//! owe each other nothing. One queue for all held every sender's responses behind those of a
//! sender whose ring stayed full because it stopped progressing (a process computing, or one
//! that never reads): the others' sends waited for it, delivery-complete ones for as long as it
//! computed (test `a_sender_that_stops_reading_answers_holds_back_only_its_own`).

use super::peers::QueuedResp;
use super::SrcId;
use std::collections::VecDeque;

/// The responses of each sender that has some waiting, in order.
#[derive(Default)]
pub(super) struct RespBacklog {
    senders: Vec<SenderBacklog>,
}

struct SenderBacklog {
    src: SrcId,
    resps: VecDeque<QueuedResp>,
}

impl RespBacklog {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    /// Whether responses to the sender in entry `src` wait (a new one goes behind them).
    #[inline]
    pub fn holds(&self, src: SrcId) -> bool {
        self.senders.iter().any(|s| s.src == src)
    }

    /// Responses waiting, all senders together.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.senders.iter().map(|s| s.resps.len()).sum()
    }

    /// Queue `resp` behind the others to its sender.
    pub fn push(&mut self, resp: QueuedResp) {
        match self.senders.iter_mut().find(|s| s.src == resp.src) {
            Some(sender) => sender.resps.push_back(resp),
            None => self.senders.push(SenderBacklog { src: resp.src, resps: VecDeque::from([resp]) }),
        }
    }

    /// Keep the senders for which `flush` (given each sender's queue, to push from the front)
    /// says responses still wait.
    pub fn flush(&mut self, mut flush: impl FnMut(&mut VecDeque<QueuedResp>) -> bool) {
        self.senders.retain_mut(|s| flush(&mut s.resps));
    }
}
