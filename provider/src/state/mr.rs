//! The domain's registrations by key, and the check every remote access passes
//! (`MrTable::resolve`).

use rshm_ffi as ffi;
use smr_core::idmap::IdMap;

/// What one registration covers.
#[derive(Debug, Clone)]
pub struct MrEntry {
    /// Fixed once registered: `total` is summed from it.
    iov: smr_core::iov::Ranges,
    pub access: u64,
    /// Counters bound with FI_REMOTE_WRITE / FI_REMOTE_READ (ids in the domain's slab).
    pub write_cntr: Option<usize>,
    pub read_cntr: Option<usize>,
    /// The bytes `iov` covers, summed once here rather than on every remote access.
    total: u64,
}

impl MrEntry {
    pub fn new(iov: smr_core::iov::Ranges, access: u64) -> MrEntry {
        let total = iov.iter().map(|&(_, l)| l as u64).sum();
        MrEntry { iov, access, write_cntr: None, read_cntr: None, total }
    }

    /// The memory the registration covers.
    pub fn iov(&self) -> &smr_core::iov::Ranges {
        &self.iov
    }
}

#[derive(Default)]
pub struct MrTable {
    pub by_key: IdMap<u64, MrEntry>,
    /// Remote addresses are virtual addresses (FI_MR_VIRT_ADDR), not offsets.
    pub virt_addr: bool,
    /// The domain chooses keys (FI_MR_PROV_KEY).
    pub prov_key: bool,
    next_key: u64,
}

/// Why a peer's access was refused (a positive errno for the engine's refusal).
pub const REFUSED: u32 = ffi::FI_EACCES;

impl MrTable {
    /// The key of a new registration: the application's, or with FI_MR_PROV_KEY the next one
    /// not in use.
    pub fn key_for(&mut self, requested: u64) -> u64 {
        if !self.prov_key {
            return requested;
        }
        while self.by_key.contains_key(&self.next_key) {
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
        let mr = self.by_key.get(&key).ok_or_else(|| refuse("no such key"))?;
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
            Some(end) if end <= mr.total => Ok((start, mr)),
            _ => Err(refuse("beyond the region")),
        }
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
