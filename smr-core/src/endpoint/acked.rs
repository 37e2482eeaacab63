//! The acknowledged small sends waiting for their answers, by message id.
//!
//! Every acknowledged operation (a write or base atomic with delivery completion, a read, a
//! fetching atomic) goes in when it is sent and out when its answer arrives: twice per
//! operation on the initiator's path of a stream of atomics, whose initiator is the busier side
//! (SOS `shmem_bw_atomics_perf`). A hash map took about 55 instructions each way (callgrind,
//! `rshm-fi-bench --tests atomic_rate`). Message ids are handed out consecutively, so the sends
//! outstanding at once nearly always lie within a short run of ids: a table indexed by the id's
//! low bits holds them with one compare each way. A send whose place is still taken by an older
//! one (outstanding while `WINDOW` later ids went out: a slow receiver among fast ones) goes to
//! a map beside it, so nothing is ever refused or overwritten.
//!
//! The ids looked up come from answers a peer wrote: an id that is not ours, or no longer
//! outstanding, matches no entry (the whole id is compared) and is reported as not found.

use super::send::AckedSend;
use super::PeerId;
use crate::idmap::IdMap;

/// Places in the table: more than the operations a caller keeps in flight (SOS's window of 64,
/// fabtests' 64), few enough that a scan of them (liveness tick, dead peer) is cheap.
const WINDOW: usize = 256;

/// A place in the table: `id` 0 when free (message ids start at 1).
#[derive(Clone, Copy)]
struct Place {
    id: u64,
    send: AckedSend,
}

const FREE: Place = Place { id: 0, send: AckedSend { peer: 0, cookie: 0, answer: None } };

pub(super) struct AckedSends {
    table: Box<[Place; WINDOW]>,
    /// Sends whose place was taken when they went out.
    overflow: IdMap<u64, AckedSend>,
    in_table: usize,
}

impl Default for AckedSends {
    fn default() -> Self {
        AckedSends { table: Box::new([FREE; WINDOW]), overflow: IdMap::default(), in_table: 0 }
    }
}

#[inline(always)]
fn place_of(id: u64) -> usize {
    (id as usize) & (WINDOW - 1)
}

impl AckedSends {
    /// Record send `id` (never 0, never already recorded).
    #[inline]
    pub fn insert(&mut self, id: u64, send: AckedSend) {
        debug_assert_ne!(id, 0, "message ids start at 1");
        let place = &mut self.table[place_of(id)];
        if place.id == 0 {
            *place = Place { id, send };
            self.in_table += 1;
        } else {
            self.overflow.insert(id, send);
        }
    }

    /// Take send `id` out, if it is outstanding.
    #[inline]
    pub fn remove(&mut self, id: u64) -> Option<AckedSend> {
        let place = &mut self.table[place_of(id)];
        if place.id == id && id != 0 {
            place.id = 0;
            self.in_table -= 1;
            return Some(place.send);
        }
        if self.overflow.is_empty() {
            return None;
        }
        self.overflow.remove(&id)
    }

    /// Send `id`, if it is outstanding.
    pub fn get(&self, id: u64) -> Option<&AckedSend> {
        let place = &self.table[place_of(id)];
        if place.id == id && id != 0 {
            return Some(&place.send);
        }
        self.overflow.get(&id)
    }

    pub fn len(&self) -> usize {
        self.in_table + self.overflow.len()
    }

    /// Nothing waits for its answer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every outstanding send, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &AckedSend> {
        let table = (self.in_table > 0).then(|| self.table.iter().filter(|p| p.id != 0).map(|p| &p.send));
        table.into_iter().flatten().chain(self.overflow.values())
    }

    /// Take out every send to `peer`, as (message id, send).
    pub fn take_to(&mut self, peer: PeerId) -> Vec<(u64, AckedSend)> {
        let mut taken = Vec::new();
        if self.in_table > 0 {
            for place in self.table.iter_mut().filter(|p| p.id != 0 && p.send.peer == peer) {
                taken.push((place.id, place.send));
                place.id = 0;
            }
            self.in_table -= taken.len();
        }
        self.overflow.retain(|&id, s| {
            let to_peer = s.peer == peer;
            if to_peer {
                taken.push((id, *s));
            }
            !to_peer
        });
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(peer: PeerId, cookie: u64) -> AckedSend {
        AckedSend { peer, cookie, answer: None }
    }

    #[test]
    fn sends_come_out_by_id_in_table_and_overflow() {
        let mut acked = AckedSends::default();
        assert!(acked.is_empty());
        // Id 1 stays outstanding while WINDOW more go out: 1 + WINDOW lands on its place.
        let ids: Vec<u64> = (1..=(WINDOW as u64 + 2)).collect();
        for &id in &ids {
            acked.insert(id, send((id % 3) as PeerId, id * 10));
        }
        assert_eq!(acked.len(), ids.len());
        assert_eq!(acked.overflow.len(), 2, "ids 257 and 258 found their places taken");
        assert_eq!(acked.get(WINDOW as u64 + 1).map(|s| s.cookie), Some((WINDOW as u64 + 1) * 10));
        // Unknown ids, a peer's guesses included, match nothing.
        for bogus in [0, WINDOW as u64 + 3, 1 + 2 * WINDOW as u64, u64::MAX] {
            assert!(acked.remove(bogus).is_none(), "id {bogus}");
        }
        assert_eq!(acked.len(), ids.len());
        assert!(!acked.is_empty());
        // Out of order, each exactly once.
        for &id in ids.iter().rev().step_by(2).chain(ids.iter().step_by(2)) {
            assert_eq!(acked.remove(id).map(|s| s.cookie), Some(id * 10), "id {id}");
            assert!(acked.remove(id).is_none(), "id {id} came out twice");
        }
        assert_eq!(acked.len(), 0);
        assert!(acked.is_empty());
        assert_eq!(acked.values().count(), 0);
    }

    #[test]
    fn take_to_takes_exactly_one_peers_sends() {
        let mut acked = AckedSends::default();
        for id in 1..=600u64 {
            acked.insert(id, send((id % 4) as PeerId, id));
            if id % 5 != 0 {
                // Most complete at once, so that later ids reuse places and a few overflow.
                if id > 300 {
                    acked.remove(id - 300);
                }
            }
        }
        let before: Vec<u64> = acked.values().map(|s| s.cookie).collect();
        let mut taken: Vec<u64> = acked
            .take_to(2)
            .into_iter()
            .map(|(id, s)| {
                assert_eq!(id, s.cookie);
                id
            })
            .collect();
        taken.sort_unstable();
        let mut expected: Vec<u64> = before.iter().copied().filter(|c| c % 4 == 2).collect();
        expected.sort_unstable();
        assert!(!expected.is_empty());
        assert_eq!(taken, expected);
        assert_eq!(acked.len(), before.len() - expected.len());
        assert!(acked.values().all(|s| s.peer != 2));
    }
}
