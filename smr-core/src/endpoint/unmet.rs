//! Entries of our peer table whose sender died before we accepted its connection request.
//!
//! A sender's entry passes to another only once we free it, after every command the sender
//! pushed is handled (`spare::Decision`, `claim_slot`). We free the entry of a sender we knew
//! when we forget it (`forget_in_peer`), and of one whose CONNECT we read and could not accept
//! (`accept`). One that died before its CONNECT was in (killed between filling the entry and
//! the push, or its push skipped as a stalled slot), or whose CONNECT was garbage, we never
//! meet: its entry would stay taken for good. So each liveness tick looks at a window of the
//! table for READY entries of dead senders we do not know and have no decision about, and
//! decides about each once our ring has passed every position claimed when we saw it dead (a
//! dead process claims nothing more): had it a CONNECT there, we read it by then.

use super::entry::{sender_alive, slot_sender};
use super::{Endpoint, SrcId};
use crate::layout::SLOT_READY;
use crate::sync::Ordering;

/// Entries looked at per tick: the table has up to `max_peers` (1,024) entries, and a tick runs
/// inside a progress call. Senders' entries cluster at the start (`claim_slot`), where a short
/// table (the usual 64 or fewer in use) is covered every tick.
const WINDOW: usize = 64;

impl Endpoint {
    /// On the liveness tick: decide (later) about the entries of dead senders we do not know in
    /// the next window of the table. Returns how many were found.
    pub(super) fn find_unmet_dead(&mut self) -> usize {
        let table = self.region.peer_slots();
        let start = self.unmet_cursor.min(table.len());
        let end = (start + WINDOW).min(table.len());
        self.unmet_cursor = if end == table.len() { 0 } else { end };
        let found: Vec<(SrcId, u64)> = (start..end)
            .filter_map(|i| {
                let (slot, src) = (&table[i], i as SrcId);
                let state = slot.state.load(Ordering::Acquire);
                let incarnation = slot.incarnation.load(Ordering::Relaxed);
                let unmet_dead = state & 3 == SLOT_READY
                    && self.inp.incarnation(src) != Some(incarnation)
                    && !self.decision_waits(src, incarnation)
                    && !self.is_parked(src)
                    && !sender_alive(slot, slot_sender(state, slot));
                unmet_dead.then_some((src, incarnation))
            })
            .collect();
        for &(src, incarnation) in &found {
            self.decide_later(src, incarnation);
        }
        found.len()
    }
}
