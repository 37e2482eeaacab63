//! An address vector's state: peer names by fi_addr_t (an index), and back.

use crate::error::{FiError, FiResult};
use std::collections::HashMap;

#[derive(Default)]
pub struct AvState {
    pub names: Vec<Option<String>>,
    pub by_name: HashMap<String, u64>,
    /// Endpoints bound to this AV, whose peer caches an AV change must reset.
    pub eps: Vec<usize>,
    free: Vec<u64>,
}

impl AvState {
    pub fn name(&self, addr: u64) -> Option<&str> {
        self.names.get(addr as usize)?.as_deref()
    }

    /// The fi_addr a peer name was inserted as (for FI_SOURCE).
    pub fn addr_of(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).copied()
    }

    /// Every insert takes a new index, also for a name already present: with FI_AV_TABLE,
    /// callers compute fi_addr values from insertion order (MPICH does).
    pub fn insert(&mut self, name: String) -> u64 {
        let addr = match self.free.pop() {
            Some(a) => {
                self.names[a as usize] = Some(name.clone());
                a
            }
            None => {
                self.names.push(Some(name.clone()));
                (self.names.len() - 1) as u64
            }
        };
        // FI_SOURCE reports the first fi_addr a name was inserted as.
        self.by_name.entry(name).or_insert(addr);
        addr
    }

    pub fn remove(&mut self, addr: u64) -> FiResult<()> {
        let slot = self.names.get_mut(addr as usize).ok_or(FiError::INVAL)?;
        let name = slot.take().ok_or(FiError::INVAL)?;
        if self.by_name.get(&name) == Some(&addr) {
            self.by_name.remove(&name);
            // Another entry of the same name, if any, now answers for it.
            if let Some(other) = self.names.iter().position(|n| n.as_deref() == Some(name.as_str())) {
                self.by_name.insert(name, other as u64);
            }
        }
        self.free.push(addr);
        Ok(())
    }
}
