//! Entries of our peer table whose sender died before we accepted its connection request.
//!
//! A new sender takes a dead sender's entry only once we have accepted that sender
//! (`PeerSlot::accepted`, `claim_slot`): until then its commands, its CONNECT first, may still
//! wait in our ring, and once another held the entry we could not tell whose they were (the
//! inline and inject messages of a sender that left right after its send completed were dropped
//! that way). A sender we accepted is forgotten, and its entry freed, by `check_peers`. One that
//! died before it pushed its CONNECT, or whose CONNECT was lost to a stalled slot or garbage,
//! never is: its entry would stay taken for good. So each liveness tick looks at a window of the
//! table for such entries, and frees one once our ring has passed every position claimed when we
//! first saw its sender dead (a dead process claims nothing more): its CONNECT, had there been
//! one, was read by then, and made it accepted or freed.

use super::peers::{free_entry_of, sender_alive, slot_sender};
use super::{Endpoint, SrcId};
use crate::layout::{PeerSlot, SLOT_READY};
use crate::sync::Ordering;

/// Entries looked at per tick: the table has up to `max_peers` (1,024) entries, and a tick runs
/// inside a progress call. Senders' entries cluster at the start (`claim_slot`), where a short
/// table (the usual 64 or fewer in use) is covered every tick.
const WINDOW: usize = 64;

/// The entries found held by a dead sender we never accepted, and where the next window starts.
#[derive(Default)]
pub(super) struct Unmet {
    dead: Vec<UnmetDead>,
    cursor: usize,
}

struct UnmetDead {
    src: SrcId,
    incarnation: u64,
    /// Our ring's claim counter when we saw the sender dead.
    until: u64,
}

/// Whether `slot` is READY for the sender of `incarnation`, and we have not accepted it.
fn holds_unaccepted(slot: &PeerSlot, incarnation: u64) -> bool {
    slot.state.load(Ordering::Acquire) & 3 == SLOT_READY
        && slot.incarnation.load(Ordering::Relaxed) == incarnation
        && slot.accepted.load(Ordering::Relaxed) != incarnation
}

impl Endpoint {
    /// On the liveness tick: free the entries of dead senders we never accepted whose commands
    /// are all handled, and look for more in the next window of the table. Returns how many
    /// entries were freed.
    pub(super) fn free_entries_of_unmet_dead(&mut self) -> usize {
        let table = self.region.peer_slots();
        let (rx, me) = (&self.cmd_rx, self.me);
        let mut freed = 0;
        self.unmet.dead.retain(|d| {
            let Some(slot) = table.get(d.src as usize).filter(|s| holds_unaccepted(s, d.incarnation)) else {
                return false;
            };
            if !rx.passed(d.until) {
                return true;
            }
            free_entry_of(slot, d.incarnation, me);
            freed += 1;
            false
        });
        let start = self.unmet.cursor.min(table.len());
        let end = (start + WINDOW).min(table.len());
        self.unmet.cursor = if end == table.len() { 0 } else { end };
        let (inp, known) = (&self.inp, &self.unmet.dead);
        let found: Vec<(SrcId, u64)> = (start..end)
            .filter_map(|i| {
                let (slot, src) = (&table[i], i as SrcId);
                let state = slot.state.load(Ordering::Acquire);
                let incarnation = slot.incarnation.load(Ordering::Relaxed);
                let unmet_dead = holds_unaccepted(slot, incarnation)
                    && inp.incarnation(src) != Some(incarnation)
                    && !known.iter().any(|d| d.src == src && d.incarnation == incarnation)
                    && !sender_alive(slot, slot_sender(state, slot));
                unmet_dead.then_some((src, incarnation))
            })
            .collect();
        for (src, incarnation) in found {
            // Its record of a held buffer is decided about at the same point.
            self.decide_later(src, incarnation);
            let until = self.cmd_rx.claimed(&self.region.cmd_ring());
            self.unmet.dead.push(UnmetDead { src, incarnation, until });
        }
        freed
    }
}
