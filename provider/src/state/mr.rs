//! The domain's registrations by key, and the check every remote access passes
//! (`MrTable::resolve`).

use super::mapped::{self, Mappings};
use rshm_ffi as ffi;
use smr_core::idmap::IdMap;
use std::cell::RefCell;

/// What one registration covers.
#[derive(Debug)]
pub struct MrEntry {
    /// Fixed once registered: `total` is summed from it.
    iov: smr_core::iov::Ranges,
    pub access: u64,
    /// Counters bound with FI_REMOTE_WRITE / FI_REMOTE_READ (ids in the domain's slab).
    pub write_cntr: Option<usize>,
    pub read_cntr: Option<usize>,
    /// The bytes `iov` covers, summed once here rather than on every remote access.
    total: u64,
    /// For a registration of all of memory (`covers_all_of_memory`: mapped or not, so an
    /// access's bounds say nothing about whether its bytes exist): what is mapped (`mapped`).
    mapped: Option<Box<RefCell<Mappings>>>,
}

impl MrEntry {
    pub fn new(iov: smr_core::iov::Ranges, access: u64) -> MrEntry {
        // Saturating: all of memory (SIZE_MAX bytes) beside another range must not wrap.
        let total = iov.iter().fold(0u64, |t, &(_, l)| t.saturating_add(l as u64));
        let mapped = covers_all_of_memory(total).then(Box::default);
        MrEntry { iov, access, write_cntr: None, read_cntr: None, total, mapped }
    }

    /// The memory the registration covers.
    pub fn iov(&self) -> &smr_core::iov::Ranges {
        &self.iov
    }
}

/// Whether a registration of `total` bytes is one of all of memory: only such a registration,
/// from address 0, is this large (`iov::registered_addr`). `MrTable::locate` asks it of the total
/// its range check has just loaded, so that other registrations pay one compare.
fn covers_all_of_memory(total: u64) -> bool {
    total >= crate::iov::USER_SPACE_END as u64
}

/// Keys below this are looked up by index (`MrTable::direct`): the ones OpenSHMEM chooses, 0 and
/// 1, and the first a domain hands out with FI_MR_PROV_KEY. Every operation a peer sends looks
/// its key up: the vector takes a compare and a load where the hash map took about 30
/// instructions.
const DIRECT_KEYS: u64 = 64;

#[derive(Default)]
pub struct MrTable {
    /// Registrations with a key below `DIRECT_KEYS`, at that index.
    direct: Vec<Option<MrEntry>>,
    /// The others.
    hashed: IdMap<u64, MrEntry>,
    /// Remote addresses are virtual addresses (FI_MR_VIRT_ADDR), not offsets.
    pub virt_addr: bool,
    /// The domain chooses keys (FI_MR_PROV_KEY).
    pub prov_key: bool,
    next_key: u64,
}

/// Why a peer's access was refused (a positive errno for the engine's refusal).
pub const REFUSED: u32 = ffi::FI_EACCES;

impl MrTable {
    /// The registration of `key`.
    #[inline(always)]
    pub fn get(&self, key: u64) -> Option<&MrEntry> {
        if key < DIRECT_KEYS {
            self.direct.get(key as usize)?.as_ref()
        } else {
            self.hashed.get(&key)
        }
    }

    pub fn get_mut(&mut self, key: u64) -> Option<&mut MrEntry> {
        if key < DIRECT_KEYS {
            self.direct.get_mut(key as usize)?.as_mut()
        } else {
            self.hashed.get_mut(&key)
        }
    }

    pub fn contains(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// Register `entry` under `key` (the caller checked that the key is free).
    pub fn insert(&mut self, key: u64, entry: MrEntry) {
        if key < DIRECT_KEYS {
            let at = key as usize;
            if self.direct.len() <= at {
                self.direct.resize_with(at + 1, || None);
            }
            self.direct[at] = Some(entry);
        } else {
            self.hashed.insert(key, entry);
        }
    }

    pub fn remove(&mut self, key: u64) -> Option<MrEntry> {
        if key < DIRECT_KEYS {
            self.direct.get_mut(key as usize)?.take()
        } else {
            self.hashed.remove(&key)
        }
    }

    /// Every registration with its key.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &MrEntry)> {
        let direct = self.direct.iter().enumerate().filter_map(|(k, e)| Some((k as u64, e.as_ref()?)));
        direct.chain(self.hashed.iter().map(|(&k, e)| (k, e)))
    }

    /// The key of a new registration: the application's, or with FI_MR_PROV_KEY the next one
    /// not in use.
    pub fn key_for(&mut self, requested: u64) -> u64 {
        if !self.prov_key {
            return requested;
        }
        while self.contains(self.next_key) {
            self.next_key = self.next_key.wrapping_add(1);
        }
        self.next_key
    }

    /// Where a remote access of `len` bytes at `addr` under `key` starts in the registration (a
    /// byte offset into it), if the key exists, the range lies inside the registration and
    /// `access` (FI_REMOTE_READ and/or FI_REMOTE_WRITE) is allowed; else the refusal's errno,
    /// logged. Every value comes from a peer: checked arithmetic only. The one check every
    /// remote access passes (`resolve`, `resolve_in_one_range`).
    #[inline(always)]
    fn locate(&self, key: u64, addr: u64, len: u64, access: u64) -> Result<(u64, &MrEntry), u32> {
        let refuse = |why: &str| {
            crate::debug!(Mr, "remote access refused: key {key:#x} addr {addr:#x} len {len}: {why}");
            REFUSED
        };
        let mr = self.get(key).ok_or_else(|| refuse("no such key"))?;
        if mr.access & access != access {
            return Err(refuse("access not granted"));
        }
        let start = if self.virt_addr {
            let base = mr.iov.first().map_or(0, |&(b, _)| b as u64);
            addr.checked_sub(base).ok_or_else(|| refuse("below the region"))?
        } else {
            addr
        };
        match start.checked_add(len) {
            Some(end) if end <= mr.total => {}
            _ => return Err(refuse("beyond the region")),
        }
        if covers_all_of_memory(mr.total) && !mapped_for(mr, start, len, access) {
            return Err(refuse("not mapped with that access in this process"));
        }
        Ok((start, mr))
    }

    /// The memory a remote access of `len` bytes at `addr` under `key` touches, as ranges, if
    /// `locate` lets it through.
    pub fn resolve(
        &self,
        key: u64,
        addr: u64,
        len: u64,
        access: u64,
    ) -> Result<(smr_core::iov::Ranges, &MrEntry), u32> {
        let (start, mr) = self.locate(key, addr, len, access)?;
        // `start + len` fits in the registration, which lies in this address space: usize holds it.
        let ranges = match *mr.iov.as_slice() {
            // One range, the usual registration: no walk.
            [(base, _)] if len > 0 => smallvec::smallvec![(base + start as usize, len as usize)],
            _ => crate::iov::sub_ranges(&mr.iov, start as usize, len as usize),
        };
        Ok((ranges, mr))
    }

    /// `resolve` for the usual registration, one range, and an access of `len > 0` bytes: the
    /// address it starts at, without a range list. Ok(None) for a registration of more ranges
    /// (or `len` 0), which `resolve` takes.
    #[inline(always)]
    pub fn resolve_in_one_range(
        &self,
        key: u64,
        addr: u64,
        len: u64,
        access: u64,
    ) -> Result<Option<(usize, &MrEntry)>, u32> {
        let (start, mr) = self.locate(key, addr, len, access)?;
        Ok(match *mr.iov.as_slice() {
            // As in `resolve`: `start + len` fits in the registration.
            [(base, _)] if len > 0 => Some((base + start as usize, mr)),
            _ => None,
        })
    }
}

/// Whether the bytes `start..start + len` of a registration of all of memory are mapped with
/// `access` (out of line: only OpenSHMEM's remote-virtual-addressing build registers so).
#[inline(never)]
fn mapped_for(mr: &MrEntry, start: u64, len: u64, access: u64) -> bool {
    let Some(mapped) = &mr.mapped else { return true };
    let want = if access & ffi::FI_REMOTE_READ as u64 != 0 { mapped::READ } else { 0 }
        | if access & ffi::FI_REMOTE_WRITE as u64 != 0 { mapped::WRITE } else { 0 };
    let mut m = mapped.borrow_mut();
    // Within the registration (checked by the caller), which lies in this address space.
    match *mr.iov.as_slice() {
        [(base, _)] => m.allows(base + start as usize, len as usize, want),
        _ => crate::iov::sub_ranges(&mr.iov, start as usize, len as usize).iter().all(|&(a, n)| m.allows(a, n, want)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(len: usize) -> MrEntry {
        MrEntry::new([(0x1000, len)].into_iter().collect(), ffi::FI_REMOTE_WRITE as u64)
    }

    /// Keys on both sides of `DIRECT_KEYS` are found, changed, listed and removed alike.
    #[test]
    fn keys_indexed_and_hashed_behave_alike() {
        let mut t = MrTable::default();
        let keys = [0, 1, DIRECT_KEYS - 1, DIRECT_KEYS, 1 << 40, u64::MAX];
        for (i, &k) in keys.iter().enumerate() {
            assert!(!t.contains(k));
            t.insert(k, entry(i + 1));
        }
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k).map(|e| e.total), Some(i as u64 + 1), "key {k}");
        }
        assert!(t.get(2).is_none() && t.get(DIRECT_KEYS + 1).is_none(), "keys never registered");
        t.get_mut(DIRECT_KEYS).expect("registered").write_cntr = Some(7);
        t.get_mut(1).expect("registered").read_cntr = Some(8);
        assert_eq!((t.get(DIRECT_KEYS).unwrap().write_cntr, t.get(1).unwrap().read_cntr), (Some(7), Some(8)));
        let mut listed: Vec<u64> = t.iter().map(|(k, _)| k).collect();
        listed.sort_unstable();
        assert_eq!(listed, keys);
        assert_eq!(t.remove(1).map(|e| e.total), Some(2));
        assert_eq!(t.remove(u64::MAX).map(|e| e.total), Some(6));
        assert!(t.remove(1).is_none() && t.get(1).is_none() && t.get(u64::MAX).is_none());
        assert_eq!(t.iter().count(), keys.len() - 2);
        // A peer's access under a removed key is refused.
        assert_eq!(t.resolve(1, 0, 1, ffi::FI_REMOTE_WRITE as u64).err(), Some(REFUSED));
        assert!(t.resolve(0, 0, 1, ffi::FI_REMOTE_WRITE as u64).is_ok());
    }

    /// With FI_MR_PROV_KEY the domain hands out the lowest keys not in use, direct ones first.
    #[test]
    fn provider_keys_skip_those_in_use() {
        let mut t = MrTable { prov_key: true, ..MrTable::default() };
        let first = t.key_for(99);
        t.insert(first, entry(1));
        let second = t.key_for(99);
        assert_ne!(first, second);
        assert!(second < DIRECT_KEYS);
    }
}
