//! A peer-table entry: the state word that says who holds it, how a sender claims and fills
//! it, and how its receiver frees it.
//!
//! An entry is FREE, CLAIMED (a sender is filling it in) or READY (filled: name, start time,
//! incarnation). A sender takes a FREE entry, its own again, or one whose claimant died
//! mid-claim (`claim_slot`); only the receiver frees a READY one (`free_entry_of`), once every
//! command its sender pushed is handled (`spare::Decision`).

use crate::error::{Error, Result};
use crate::layout::{PeerSlot, NAME_MAX, SLOT_CLAIMED, SLOT_FREE, SLOT_READY};
use crate::liveness::ProcessIdentity;
use crate::region::{check_name, name_bytes, Region};
use crate::sync::Ordering;

/// The name a sender wrote into `slot`, if it is a region name (a peer's words: checked).
pub(super) fn slot_name(slot: &PeerSlot) -> Option<String> {
    let mut bytes = Vec::with_capacity(NAME_MAX + 1);
    for word in &slot.name {
        bytes.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
    let end = bytes.iter().position(|&b| b == 0)?;
    let name = String::from_utf8(bytes[..end].to_vec()).ok()?;
    check_name(&name).ok()?;
    Some(name)
}

/// Sender: fill in `slot`, claimed by us (`claim_slot`), and mark it READY.
pub(super) fn fill_slot(slot: &PeerSlot, name: &str, me: ProcessIdentity, incarnation: u64) {
    // A claim record or a write mark left by a predecessor that died mid-push or mid-copy
    // names nothing of ours.
    slot.cmd_claim.store(0, Ordering::Relaxed);
    slot.mr_write.store(0, Ordering::Relaxed);
    let bytes = name_bytes(name);
    for (word, chunk) in slot.name.iter().zip(bytes.chunks_exact(8)) {
        word.store(u64::from_le_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
    }
    slot.start.store(me.start, Ordering::Relaxed);
    slot.incarnation.store(incarnation, Ordering::Relaxed);
    slot.state.store(slot_word(SLOT_READY, me), Ordering::Release);
}

/// Receiver side: free entry `slot` of our peer table if it still holds the sender of
/// `incarnation`; whether it did. Another sender may hold it (a scribble rewrote it, or the
/// sender took it again under the same incarnation): that claim stays,
/// or a third sender could take the entry from under it and the holder's messages would come
/// from the wrong name. Holding the entry CLAIMED while we look keeps new claimants out; one
/// that is filling it now (CLAIMED) keeps it. `me`: this process, the claimant meanwhile.
pub(super) fn free_entry_of(slot: &PeerSlot, incarnation: u64, me: ProcessIdentity) -> bool {
    let ready = slot.state.load(Ordering::Acquire);
    if ready & 3 != SLOT_READY
        || slot.state.compare_exchange(ready, slot_word(SLOT_CLAIMED, me), Ordering::AcqRel, Ordering::Acquire).is_err()
    {
        return false;
    }
    let still_its = slot.incarnation.load(Ordering::Relaxed) == incarnation;
    slot.state.store(if still_its { SLOT_FREE } else { ready }, Ordering::Release);
    still_its
}

/// The state word of a peer-table entry in state `kind` (`SLOT_CLAIMED`, `SLOT_READY`) for
/// sender `who`: the kind in the low two bits, its pid above them (Linux pids fit in 22 bits)
/// and its pid namespace in the high half. A claimant killed before it filled the entry in is
/// found by its pid, and the entry claimed again instead of lost for good; the namespace says
/// whether that pid means anything to whoever looks.
pub(super) fn slot_word(kind: u64, who: ProcessIdentity) -> u64 {
    kind | u64::from(who.pid & 0x3FFF_FFFF) << 2 | u64::from(who.ns) << 32
}

/// The process a state word of `slot_word` names, with start time `start` (which the word
/// does not carry).
fn slot_who(state: u64, start: u64) -> ProcessIdentity {
    ProcessIdentity { pid: (state as u32) >> 2, start, ns: (state >> 32) as u32 }
}

/// The sender a READY entry names (its state word `state`, its start time in the entry).
pub(super) fn slot_sender(state: u64, slot: &PeerSlot) -> ProcessIdentity {
    slot_who(state, slot.start.load(Ordering::Relaxed))
}

/// Whether the sender `who` that a READY entry names lives: by its pid in our pid namespace, by
/// its own region (the entry's name and incarnation) in another.
pub(super) fn sender_alive(slot: &PeerSlot, who: ProcessIdentity) -> bool {
    if who.pid_is_ours() {
        return who.is_alive();
    }
    slot_name(slot)
        .map_or(true, |name| crate::region::named_owner_alive(&name, slot.incarnation.load(Ordering::Relaxed)))
}

/// Whether the claimant an entry in state `state` (CLAIMED) names is gone. One of another pid
/// namespace cannot be judged by its pid and counts as alive: an entry it was killed in the
/// middle of claiming (a few stores) stays lost.
fn claimant_gone(state: u64) -> bool {
    let who = slot_who(state, 0);
    who.pid_is_ours() && crate::liveness::pid_gone(who.pid)
}

/// Where in a peer's table a sender's search for an entry starts: its name's hash among the
/// first `CLAIM_START_WINDOW` entries, so that senders starting together rarely contend for one
/// entry, and a sender that claims again finds its own entry first. Not across the whole table:
/// a sender's id (its entry) is the length of the receiver's tables indexed by it (`SrcTable`,
/// the source cache, `handled`), and where its name hashed to anywhere up to `max_peers` (1,024),
/// each receiver's private memory varied by up to 48 KiB with the hash of the names of its
/// senders (ep_memory: 41-94 KiB per endpoint between identical runs).
const CLAIM_START_WINDOW: usize = 64;

/// Claim an entry in the peer's table: a free one, ours (a claim again, under our incarnation),
/// or one whose claimant died while it was claiming it (it pushed nothing). The entry of a
/// sender that died after it filled the entry in is the peer's to free, once it has handled
/// every command that sender pushed and decided about the buffers it held (`spare::Decision`,
/// `unmet`): taken before, the sender's queued messages were no longer known for its own, and
/// dropped (a sender that left right after its send lost its message), and a buffer we held
/// could not be recorded beside its pending record.
pub(super) fn claim_slot(region: &Region, name: &str, me: ProcessIdentity, incarnation: u64) -> Result<u32> {
    let slots = region.peer_slots();
    let n = slots.len();
    let hash = name.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
    let start = hash % n.min(CLAIM_START_WINDOW);
    for i in (0..n).map(|k| (start + k) % n) {
        let slot = &slots[i];
        let state = slot.state.load(Ordering::Acquire);
        let reusable = match state & 3 {
            _ if state == SLOT_FREE => true,
            SLOT_READY => slot.incarnation.load(Ordering::Relaxed) == incarnation,
            SLOT_CLAIMED => claimant_gone(state),
            _ => false,
        };
        if reusable
            && slot
                .state
                .compare_exchange(state, slot_word(SLOT_CLAIMED, me), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            fill_slot(slot, name, me, incarnation);
            return Ok(i as u32);
        }
    }
    Err(Error::Again)
}
