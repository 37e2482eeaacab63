//! An address vector's state: peer names by fi_addr_t (an index), and back.
//!
//! A name is held once. Inserting a name already present returns the fi_addr it holds and
//! counts one more use; fi_av_remove drops one use and frees the index with the last. This is
//! what libfabric's own AV (ofi_av_insert_addr) does for every provider built on it, the C shm
//! and sm2 among them, and what MPI relies on: MPICH's MPI_Comm_accept/connect inserts a peer
//! it already knows, posts receives directed at the fi_addr it got back and removes that
//! fi_addr afterwards. With a second index, messages from the peer (reported as its first
//! fi_addr) never matched those receives, and removing it must not forget the first.

use crate::error::{FiError, FiResult};
use std::collections::HashMap;

struct Entry {
    name: String,
    /// Inserts of this name not yet removed.
    uses: u32,
}

#[derive(Default)]
pub struct AvState {
    entries: Vec<Option<Entry>>,
    by_name: HashMap<String, u64>,
    /// Endpoints bound to this AV, whose peer caches an AV change must reset.
    pub eps: Vec<usize>,
    free: Vec<u64>,
}

impl AvState {
    pub fn name(&self, addr: u64) -> Option<&str> {
        Some(&self.entries.get(addr as usize)?.as_ref()?.name)
    }

    /// The fi_addr a peer name is held at (for FI_SOURCE and directed receives).
    pub fn addr_of(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).copied()
    }

    /// The fi_addr of `name`, and whether it is new (an index taken) rather than one more use
    /// of the index the name already holds. A new name takes the index freed last, else the
    /// next: with no removals, distinct names get 0, 1, 2... in insertion order (FI_AV_TABLE).
    pub fn insert(&mut self, name: String) -> (u64, bool) {
        if let Some(&addr) = self.by_name.get(&name) {
            if let Some(Some(e)) = self.entries.get_mut(addr as usize) {
                e.uses = e.uses.saturating_add(1);
            }
            return (addr, false);
        }
        let entry = Some(Entry { name: name.clone(), uses: 1 });
        let addr = match self.free.pop() {
            Some(a) => {
                self.entries[a as usize] = entry;
                a
            }
            None => {
                self.entries.push(entry);
                (self.entries.len() - 1) as u64
            }
        };
        self.by_name.insert(name, addr);
        (addr, true)
    }

    /// Drop one use of `addr`; true if that was the last and the index is free again.
    pub fn remove(&mut self, addr: u64) -> FiResult<bool> {
        let slot = self.entries.get_mut(addr as usize).ok_or(FiError::INVAL)?;
        let entry = slot.as_mut().ok_or(FiError::INVAL)?;
        entry.uses -= 1;
        if entry.uses > 0 {
            return Ok(false);
        }
        let name = slot.take().map(|e| e.name).unwrap_or_default();
        self.by_name.remove(&name);
        self.free.push(addr);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_names_take_indices_in_insertion_order() {
        let mut av = AvState::default();
        for (i, n) in ["a", "b", "c"].into_iter().enumerate() {
            assert_eq!(av.insert(n.into()), (i as u64, true));
        }
        assert_eq!(av.name(1), Some("b"));
        assert_eq!(av.addr_of("c"), Some(2));
    }

    #[test]
    fn a_name_inserted_again_shares_its_index_until_its_last_removal() {
        let mut av = AvState::default();
        av.insert("a".into());
        av.insert("b".into());
        assert_eq!(av.insert("b".into()), (1, false));
        assert_eq!(av.insert("c".into()), (2, true));
        // The second insert's removal leaves the first holder's entry in place.
        assert_eq!(av.remove(1), Ok(false));
        assert_eq!(av.name(1), Some("b"));
        assert_eq!(av.addr_of("b"), Some(1));
        assert_eq!(av.remove(1), Ok(true));
        assert_eq!(av.name(1), None);
        assert_eq!(av.addr_of("b"), None);
        assert_eq!(av.remove(1), Err(FiError::INVAL));
        // The freed index goes to the next new name.
        assert_eq!(av.insert("d".into()), (1, true));
    }
}
