//! FI_MORE batching: small messages sent with `SendOpts::more` wait here, already built (inline
//! payload copied, inject buffer filled), and go into their peer's ring together: one claim of
//! consecutive slots (`Ring::push_batch`) and one wake-up per peer, instead of one of each per
//! message. The batch goes out on the next send without `more`, before any large send, and on
//! every `progress`, so it never waits on the caller forgetting to flush.

use super::{Endpoint, PeerId};
use crate::cmd::CmdEntry;
use crate::error::{Error, Result};
use crate::ring::PushError;

/// The staged messages, in the order they were sent; `meta[i]` belongs to `entries[i]`.
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
        self.entries.is_empty()
    }

    /// Messages to `peer` are still waiting for room in its ring.
    fn holds(&self, peer: PeerId) -> bool {
        self.meta.iter().any(|m| m.peer == peer)
    }
}

impl Endpoint {
    /// Stage a built message for `peer`.
    pub(super) fn stage(&mut self, peer: PeerId, entry: CmdEntry, cookie: Option<u64>) {
        self.staged.entries.push(entry);
        self.staged.meta.push(Meta { peer, cookie });
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
        let Staged { entries, meta } = std::mem::take(&mut self.staged);
        let mut start = 0;
        while start < entries.len() {
            let peer = meta[start].peer;
            let end = start + meta[start..].iter().take_while(|m| m.peer == peer).count();
            let blocked = self.staged.meta.iter().any(|m| m.peer == peer);
            let sent = if blocked { 0 } else { self.push_staged(peer, &entries[start..end], &meta[start..end]) };
            self.staged.entries.extend_from_slice(&entries[start + sent..end]);
            self.staged.meta.extend_from_slice(&meta[start + sent..end]);
            start = end;
        }
    }

    /// One peer's run of staged messages into its ring: how many went in (all of them, failed,
    /// if the peer is gone).
    fn push_staged(&mut self, peer: PeerId, entries: &[CmdEntry], meta: &[Meta]) -> usize {
        let Some(link) = self.out.get(peer as usize).and_then(|p| p.link.as_ref()) else {
            self.report_staged(meta, Err(Error::PeerDead));
            return entries.len();
        };
        let n = match link.region.cmd_ring().push_batch(entries) {
            Ok(n) => n,
            Err(PushError::Full | PushError::Busy | PushError::Skipped) => return 0,
        };
        crate::wake::notify(link.region.wake_word());
        self.stats.batches += 1;
        self.report_staged(&meta[..n], Ok(()));
        n
    }

    fn report_staged(&mut self, meta: &[Meta], result: Result<()>) {
        let done = meta.iter().filter_map(|m| m.cookie).map(|c| (c, result.clone()));
        self.staged_done.extend(done);
    }
}
