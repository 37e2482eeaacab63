//! FI_MORE batching: inline messages sent with `SendOpts::more` wait here, already built (payload
//! copied into the entry), and go into their peer's ring together: one claim of
//! consecutive slots (`Ring::push_batch`) and one wake-up per peer, instead of one of each per
//! message. The batch goes out on the next send without `more`, before any large send, on every
//! `progress`, and whenever `BATCH_MAX` messages are staged, so it never waits on the caller
//! forgetting to flush, and the receiver starts on a long run while the sender builds the rest.

use super::{Endpoint, PeerId};
use crate::cmd::CmdEntry;
use crate::error::{Error, Result};

/// Staged messages that make the batch go out at once. A longer batch saves little more (one
/// claim per 16 messages already), while holding all of a long run back until its last message
/// serialises the two sides: the receiver would idle while the sender builds the whole run
/// (measured: a 64-message window sent as one batch ran at 0.72x the rate of plain sends).
pub(super) const BATCH_MAX: usize = 16;

/// The staged messages, in the order they were sent; `meta[i]` belongs to `entries[i]`. Entries
/// past `meta.len()` are kept to be written over, as ring slots are: a command is over a
/// kilobyte, and clearing and moving one per staged message cost more than the batching saved.
#[derive(Default)]
pub(super) struct Staged {
    entries: Vec<CmdEntry>,
    meta: Vec<Meta>,
}

#[derive(Clone, Copy)]
struct Meta {
    peer: PeerId,
    /// The cookie to report once the message is in the ring; None for an acknowledged send,
    /// which its answer completes (and the liveness checks fail, should the peer die first).
    cookie: Option<u64>,
}

impl Staged {
    pub(super) fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Messages to `peer` are still waiting for room in its ring.
    fn holds(&self, peer: PeerId) -> bool {
        self.meta.iter().any(|m| m.peer == peer)
    }
}

impl Endpoint {
    /// Stage a message for `peer`, built by `fill` in place (over an earlier entry's bytes:
    /// `fill` sets every field the command uses).
    pub(super) fn stage_with(&mut self, peer: PeerId, cookie: Option<u64>, fill: impl FnOnce(&mut CmdEntry)) {
        let at = self.staged.meta.len();
        if self.staged.entries.len() <= at {
            self.staged.entries.push(CmdEntry::default());
        }
        fill(&mut self.staged.entries[at]);
        self.staged.meta.push(Meta { peer, cookie });
        if self.staged.meta.len() >= BATCH_MAX {
            self.flush_staged();
        }
    }

    /// Before a send without `more` to `peer`: push what is staged. False if messages to `peer`
    /// are still waiting for room in its ring: the new one must not overtake them (Again).
    pub(super) fn flush_staged_before(&mut self, peer: PeerId) -> bool {
        if self.staged.is_empty() {
            return true;
        }
        self.flush_staged();
        !self.staged.holds(peer)
    }

    /// Push every staged message that fits into its peer's ring, per peer in one batch, in
    /// order; what does not fit stays staged (behind it, nothing of the same peer moves).
    pub(super) fn flush_staged(&mut self) {
        // Taken out for the pushes (which report into `self`) and put back with its capacity;
        // what stays is moved to the front, in order.
        let mut staged = std::mem::take(&mut self.staged);
        let (mut kept, mut start, len) = (0, 0, staged.meta.len());
        while start < len {
            let peer = staged.meta[start].peer;
            let end = start + staged.meta[start..].iter().take_while(|m| m.peer == peer).count();
            let blocked = staged.meta[..kept].iter().any(|m| m.peer == peer);
            let sent =
                if blocked { 0 } else { self.push_staged(peer, &staged.entries[start..end], &staged.meta[start..end]) };
            staged.entries.copy_within(start + sent..end, kept);
            staged.meta.copy_within(start + sent..end, kept);
            kept += end - start - sent;
            start = end;
        }
        staged.meta.truncate(kept);
        self.staged = staged;
    }

    /// One peer's run of staged messages into its ring: how many went in (all of them, failed,
    /// if the peer is gone).
    fn push_staged(&mut self, peer: PeerId, entries: &[CmdEntry], meta: &[Meta]) -> usize {
        let Some(link) = self.out.get(peer as usize).and_then(|p| p.link.as_ref()) else {
            self.report_staged(meta, Err(Error::PeerDead));
            return entries.len();
        };
        let us = crate::wake::room_sender_bit(link.slot);
        let n = match link.region.cmd_ring_as(link.slot).push_batch(entries) {
            Ok(n) => n,
            Err(refused) => {
                super::peers::no_room(&link.region, us, refused);
                return 0;
            }
        };
        crate::wake::notify(link.region.wake_word());
        if n < entries.len() {
            // The rest found the ring full.
            crate::wake::want_room(link.region.wake_word(), us);
        }
        self.stats.batches += 1;
        self.report_staged(&meta[..n], Ok(()));
        n
    }

    fn report_staged(&mut self, meta: &[Meta], result: Result<()>) {
        let done = meta.iter().filter_map(|m| m.cookie).map(|c| (c, result.clone()));
        self.staged_done.extend(done);
    }
}
