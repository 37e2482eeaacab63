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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::layout::Counts;

    /// A region of `max_peers` entries, named for the test `tag`.
    fn table(tag: &str, max_peers: u64) -> Region {
        let counts = Counts { cmd_len: 16, resp_len: 16, inject_count: 4, sar_count: 1, sar_size: 4096, max_peers };
        Region::create(&format!("rshm_test_entry_{tag}_{}", std::process::id()), counts, 0).unwrap()
    }

    /// A sender that claims again under its incarnation gets its own entry back, filled in with
    /// its name and identity; under another incarnation it is another sender, in another entry.
    #[test]
    fn a_sender_claims_its_own_entry_again() {
        let r = table("again", 6);
        let me = ProcessIdentity::current().unwrap();
        let first = claim_slot(&r, "sender_a", me, 11).unwrap();
        assert_eq!(claim_slot(&r, "sender_a", me, 11), Ok(first));
        let entry = &r.peer_slots()[first as usize];
        assert_eq!(slot_name(entry).as_deref(), Some("sender_a"));
        let state = entry.state.load(Ordering::Acquire);
        assert_eq!((state & 3, slot_sender(state, entry)), (SLOT_READY, me));
        let successor = claim_slot(&r, "sender_a", me, 12).unwrap();
        assert_ne!(successor, first, "a new incarnation took its predecessor's entry");
    }

    /// Every entry of a table of any length is found, whatever entry a sender's search starts
    /// at; one being claimed by a live process is left to it, one whose claimant died is taken.
    #[test]
    fn every_entry_is_found_and_a_live_claimant_keeps_its_own() {
        let r = table("full", 6);
        let me = ProcessIdentity::current().unwrap();
        assert_eq!(r.peer_slots()[2].state.load(Ordering::Relaxed), SLOT_FREE, "a fresh table");
        // Entry 2 is being claimed by a live process (this one).
        r.peer_slots()[2].state.store(slot_word(SLOT_CLAIMED, me), Ordering::Release);
        let mut got: Vec<u32> = (0..5).map(|i| claim_slot(&r, &format!("sender_{i}"), me, 100 + i).unwrap()).collect();
        got.sort();
        assert_eq!(got, vec![0, 1, 3, 4, 5]);
        assert_eq!(claim_slot(&r, "sender_5", me, 105), Err(Error::Again), "a live claimant's entry was taken");
        let dead = ProcessIdentity { pid: crate::liveness::dead_pid(), ..me };
        r.peer_slots()[2].state.store(slot_word(SLOT_CLAIMED, dead), Ordering::Release);
        assert_eq!(claim_slot(&r, "sender_5", me, 105), Ok(2), "a dead claimant's entry");
        // The one free entry of a table of any length is found from wherever a sender's
        // search starts (its name's hash).
        for n in [1, 5, 6, 7] {
            let r = table(&format!("len{n}"), n);
            for free in 0..n as usize {
                for (i, entry) in r.peer_slots().iter().enumerate() {
                    let state = if i == free { SLOT_FREE } else { slot_word(SLOT_CLAIMED, me) };
                    entry.state.store(state, Ordering::Release);
                }
                for i in 0..16 {
                    assert_eq!(claim_slot(&r, &format!("s{i}"), me, 200), Ok(free as u32), "{n} entries, sender {i}");
                    assert!(free_entry_of(&r.peer_slots()[free], 200, me));
                }
            }
        }
    }

    /// A sender's search starts among the first `CLAIM_START_WINDOW` entries of however long a
    /// table: the receiver's tables indexed by sender grow to the highest entry in use.
    #[test]
    fn a_search_starts_near_the_head_of_the_table() {
        let r = table("window", 1024);
        let me = ProcessIdentity::current().unwrap();
        for i in 0..200 {
            let got = claim_slot(&r, &format!("a_sender_named_{i}"), me, 300 + i).unwrap();
            assert!((got as usize) < CLAIM_START_WINDOW, "sender {i} in entry {got}");
            assert!(free_entry_of(&r.peer_slots()[got as usize], 300 + i, me));
        }
    }
}
