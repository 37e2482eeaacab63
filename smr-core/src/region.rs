//! A region: one endpoint's shared-memory file, created by its owner, mapped by its peers.
//!
//! The owner creates the file exclusively, writes the header, initialises every part, and sets
//! `ready` last. A peer validates magic, version, `ready`, the geometry (recomputed from the
//! counts) and the file size before it reads anything else, and from then on uses its private
//! copy of the geometry: a peer rewriting the header later cannot move our view of the parts.

use crate::cmd::{CmdEntry, RespEntry};
use crate::error::{Error, Result};
use crate::free_stack::{FreeStack, StackHead};
use crate::layout::*;
use crate::liveness::{ProcessIdentity, Watch};
use crate::ring::{Ring, RingCtl, Slot};
use crate::shm::{self, Mapping};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// How old a region without a valid header must be before we take it for a crashed creation.
const HALF_CREATED_GRACE: Duration = Duration::from_secs(2);
/// The header's bytes before `ready`: the fields the owner writes once, at creation.
const HEADER_FIELDS: usize = std::mem::offset_of!(RegionHeader, ready);

/// Region names double as endpoint addresses: keep them printable and short.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid("region name must be 1..=63 characters of [A-Za-z0-9_.:-]"))
    }
}

pub fn name_bytes(name: &str) -> [u8; NAME_MAX + 1] {
    let mut out = [0u8; NAME_MAX + 1];
    out[..name.len()].copy_from_slice(name.as_bytes());
    out
}

/// Where one ring lives in the mapping: resolved once, because senders and the owner build a
/// ring view for every message.
struct RingParts<T> {
    ctl: *const RingCtl,
    slots: *const Slot<T>,
    len: usize,
}

impl<T: crate::pod::Pod> RingParts<T> {
    fn resolve(map: &Mapping, ctl: u64, slots: u64, len: u64) -> Result<RingParts<T>> {
        let ctl: &RingCtl = map.at(ctl)?;
        let slots: &[Slot<T>] = map.slice(slots, len)?;
        if !slots.len().is_power_of_two() {
            return Err(Error::Corrupt("ring length is not a power of two"));
        }
        Ok(RingParts { ctl, slots: slots.as_ptr(), len: slots.len() })
    }

    /// # Safety
    /// The mapping these parts were resolved in must still be mapped (true while its `Region`
    /// lives).
    #[inline]
    unsafe fn ring(&self) -> Ring<'_, T> {
        // SAFETY: resolved (bounds- and alignment-checked) in the region's own mapping, which
        // outlives the borrow of `self`.
        unsafe { Ring::new(&*self.ctl, std::slice::from_raw_parts(self.slots, self.len)) }
    }
}

/// Where one free stack lives in the mapping, resolved once like the rings.
struct StackParts {
    head: *const StackHead,
    links: *const AtomicU32,
    len: usize,
}

impl StackParts {
    fn resolve(map: &Mapping, head: u64, links: u64, len: u64) -> Result<StackParts> {
        let head: &StackHead = map.at(head)?;
        let links: &[AtomicU32] = map.slice(links, len)?;
        Ok(StackParts { head, links: links.as_ptr(), len: links.len() })
    }

    /// # Safety
    /// The mapping these parts were resolved in must still be mapped.
    unsafe fn stack(&self) -> FreeStack<'_> {
        // SAFETY: resolved (bounds- and alignment-checked) in the region's own mapping, which
        // outlives the borrow of `self`.
        unsafe { FreeStack::new(&*self.head, std::slice::from_raw_parts(self.links, self.len)) }
    }
}

/// A mapped region with a trusted copy of its geometry.
pub struct Region {
    cmd: RingParts<CmdEntry>,
    resp: RingParts<RespEntry>,
    inject: StackParts,
    sar: StackParts,
    map: Mapping,
    geo: Geometry,
    name: String,
    owner: ProcessIdentity,
    incarnation: u64,
    flags: u32,
    is_owner: bool,
    /// The peer table, resolved once like the rings: senders reach their entry on every message
    /// (their claim record, `cmd_ring_as`).
    peers: *const PeerSlot,
    peers_len: usize,
    /// The wake word, resolved once too: every push wakes through it (`wake::notify`), and the
    /// owner looks at it on every poll (`wake::room_wanted`).
    wake: *const WakeWord,
    /// The SAR pool's pages are reserved and our page-table entries for them filled in
    /// (`map_sar_pool`): private to this mapping, not shared memory.
    sar_mapped: AtomicBool,
    /// The inject pool's pages are reserved (`map_inject_pool`); private to this mapping.
    inject_mapped: AtomicBool,
    /// The command ring's free hint for this process's pushes (`Ring::with_free_hint`); private
    /// to this mapping, not shared memory.
    cmd_free_hint: AtomicU64,
    /// Held by the owner for the region's life (`FLAG_OWNER_LOCK`); None in a peer's view.
    _owner_lock: Option<crate::liveness::OwnerLock>,
    /// Set by the owner as it marks the region closed: `repair_header` no longer marks it ready.
    closing: AtomicBool,
    /// The owner's name in the table of names unlinked on a fatal signal (`signal_unlink`).
    signal_entry: Option<crate::signal_unlink::Registered>,
}

impl Region {
    /// Create `name` for this process, reclaiming a region a dead process left behind.
    pub fn create(name: &str, counts: Counts, flags: u32) -> Result<Region> {
        check_name(name)?;
        let geo = Geometry::compute(counts)?;
        let me = ProcessIdentity::current()?;
        for _ in 0..4 {
            // The pools are reserved when they are first used (`map_inject_pool`,
            // `map_sar_pool`): an endpoint that never receives a message through them holds
            // 2.5 MiB less of /dev/shm.
            match Mapping::create_lazy(name, geo.size as usize, &geo.pools()) {
                Ok(map) => return Ok(Self::init(map, geo, name, me, flags)),
                Err(Error::Os(libc::EEXIST)) => reclaim_if_stale(name)?,
                Err(e) => return Err(e),
            }
        }
        Err(Error::AddrInUse)
    }

    fn init(map: Mapping, geo: Geometry, name: &str, me: ProcessIdentity, flags: u32) -> Region {
        let incarnation = random_u64();
        // Peers of another pid namespace judge us by this lock; without it they cannot judge
        // us at all (and take us for alive), so its failure costs only that.
        let owner_lock = crate::liveness::hold_owner_lock(name, &map).ok();
        let flags = if owner_lock.is_some() { flags | FLAG_OWNER_LOCK } else { flags };
        let (cmd, resp, inject, sar) = Self::parts(&map, &geo).expect("geometry computed for this mapping");
        let peers = map
            .slice::<PeerSlot>(geo.peers, geo.counts.max_peers)
            .expect("geometry computed for this mapping")
            .as_ptr();
        let wake: *const WakeWord = map.at(geo.wake).expect("geometry computed for this mapping");
        let region = Region {
            cmd,
            resp,
            inject,
            sar,
            map,
            geo,
            name: name.to_string(),
            owner: me,
            incarnation,
            flags,
            is_owner: true,
            peers,
            peers_len: geo.counts.max_peers as usize,
            wake,
            sar_mapped: AtomicBool::new(false),
            inject_mapped: AtomicBool::new(false),
            cmd_free_hint: AtomicU64::new(crate::ring::FREE_HINT_NONE),
            _owner_lock: owner_lock,
            closing: AtomicBool::new(false),
            signal_entry: crate::signal_unlink::register(name),
        };
        region.write_header_fields(&region.header_image());
        region.cmd_ring().reset();
        region.resp_ring().reset();
        region.inject_stack().fill();
        region.sar_stack().fill();
        region.header().ready.store(READY, Ordering::Release);
        region
    }

    /// Map a peer's region and validate it.
    pub fn open(name: &str) -> Result<Region> {
        check_name(name)?;
        let map = Mapping::open(name)?;
        if map.len() < size_of::<RegionHeader>() {
            return Err(Error::Corrupt("region smaller than its header"));
        }
        let hdr: &RegionHeader = map.at(0)?;
        if hdr.magic == 0 {
            // Sized but the header is not written yet: the owner is still creating it.
            return Err(Error::Again);
        }
        if hdr.magic != MAGIC {
            return Err(Error::Corrupt("bad region magic"));
        }
        if hdr.layout_version != LAYOUT_VERSION {
            return Err(Error::Corrupt("unsupported region layout version"));
        }
        match hdr.ready.load(Ordering::Acquire) {
            READY => {}
            // Its owner closed it and is about to unlink it: as good as gone.
            CLOSED => return Err(Error::NoSuchPeer),
            _ => return Err(Error::Again),
        }
        let geo = hdr.geometry;
        if Geometry::compute(geo.counts)? != geo {
            return Err(Error::Corrupt("region geometry does not match its counts"));
        }
        if geo.size > map.len() as u64 {
            return Err(Error::Corrupt("region smaller than its geometry"));
        }
        if hdr.name != name_bytes(name) {
            return Err(Error::Corrupt("region header names another endpoint"));
        }
        let owner = header_owner(hdr);
        let (incarnation, flags) = (hdr.incarnation, hdr.flags);
        let (cmd, resp, inject, sar) = Self::parts(&map, &geo)?;
        let peers = map.slice::<PeerSlot>(geo.peers, geo.counts.max_peers)?.as_ptr();
        let wake: *const WakeWord = map.at(geo.wake)?;
        Ok(Region {
            cmd,
            resp,
            inject,
            sar,
            map,
            geo,
            name: name.to_string(),
            owner,
            incarnation,
            flags,
            is_owner: false,
            peers,
            peers_len: geo.counts.max_peers as usize,
            wake,
            sar_mapped: AtomicBool::new(false),
            inject_mapped: AtomicBool::new(false),
            cmd_free_hint: AtomicU64::new(crate::ring::FREE_HINT_NONE),
            _owner_lock: None,
            closing: AtomicBool::new(false),
            signal_entry: None,
        })
    }

    #[allow(clippy::type_complexity)]
    fn parts(
        map: &Mapping,
        geo: &Geometry,
    ) -> Result<(RingParts<CmdEntry>, RingParts<RespEntry>, StackParts, StackParts)> {
        let c = &geo.counts;
        Ok((
            RingParts::resolve(map, geo.cmd_ctl, geo.cmd_slots, c.cmd_len)?,
            RingParts::resolve(map, geo.resp_ctl, geo.resp_slots, c.resp_len)?,
            StackParts::resolve(map, geo.inject_head, geo.inject_links, c.inject_count)?,
            StackParts::resolve(map, geo.sar_head, geo.sar_links, c.sar_count)?,
        ))
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn owner(&self) -> ProcessIdentity {
        self.owner
    }

    /// A liveness watch of the owner: by pid in our pid namespace, by its lock on the region
    /// file in another (by nothing, so alive, where it holds none).
    pub fn watch_owner(&self) -> Watch {
        if judged_by_lock(self.owner, self.flags) {
            return Watch::by_lock(self.owner, self.map.shared_fd());
        }
        Watch::new(self.owner)
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
    pub fn flags(&self) -> u32 {
        self.flags
    }
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// True once the owner closed its endpoint. Only the owner's own mark counts: a word that a
    /// hostile peer scribbled over is not taken for a close (a dead owner is noticed through
    /// its process, not through this word), so it cannot cut the owner off from its other peers.
    pub fn closed(&self) -> bool {
        self.header().ready.load(Ordering::Acquire) == CLOSED
    }

    /// The header as the owner wrote it, up to `ready` (which `repair_header` judges apart):
    /// every field from what only the owner holds, padding zero as in the fresh file.
    fn header_image(&self) -> [u8; HEADER_FIELDS] {
        // SAFETY: `RegionHeader` is integers, bytes and an atomic integer, for which all-zero
        // bytes are valid.
        let mut h: RegionHeader = unsafe { core::mem::zeroed() };
        h.magic = MAGIC;
        h.layout_version = LAYOUT_VERSION;
        h.flags = self.flags;
        h.owner_pid = self.owner.pid;
        h.owner_ns = self.owner.ns;
        h.owner_start = self.owner.start;
        h.incarnation = self.incarnation;
        h.name = name_bytes(&self.name);
        h.geometry = self.geo;
        let mut out = [0u8; HEADER_FIELDS];
        // SAFETY: `h` is a live local of at least `HEADER_FIELDS` bytes (the offset of `ready`
        // in it), read as bytes (zeroed first, so padding is initialised).
        unsafe {
            core::ptr::copy_nonoverlapping((&h as *const RegionHeader).cast::<u8>(), out.as_mut_ptr(), HEADER_FIELDS)
        };
        out
    }

    /// Owner only: write the header's fields, as `header_image` makes them.
    fn write_header_fields(&self, image: &[u8; HEADER_FIELDS]) {
        self.map.write_bytes(0, image).expect("the header lies in the mapping");
    }

    /// Owner only, on the slow path (its liveness tick): put back the header a hostile peer
    /// scribbled over: its fields, which a sender checks when it opens the region (a bad magic
    /// would keep every sender that reconnects out for good), and `ready`, which a sender takes
    /// for a close when it reads `CLOSED` (a byte scribbled there cuts it off, and it then
    /// reopens). A sender that opens while a scribble stands fails and tries again later. True
    /// if it repaired.
    pub fn repair_header(&self) -> bool {
        if !self.is_owner || self.closing.load(Ordering::Relaxed) {
            return false;
        }
        let want = self.header_image();
        let mut now = [0u8; HEADER_FIELDS];
        let fields_ok = self.map.read_bytes(0, &mut now).is_ok() && now == want;
        if !fields_ok {
            self.write_header_fields(&want);
        }
        let ready_ok = self.header().ready.load(Ordering::Acquire) == READY;
        if !ready_ok {
            self.header().ready.store(READY, Ordering::Release);
        }
        !(fields_ok && ready_ok)
    }

    /// Owner only: tell every sender that this endpoint is gone, before unlinking.
    pub fn mark_closed(&self) {
        if self.is_owner {
            self.closing.store(true, Ordering::Relaxed);
            self.header().ready.store(CLOSED, Ordering::Release);
        }
    }

    /// True unless the file shrank under us (touching a truncated tail would fault).
    pub fn intact(&self) -> bool {
        self.map.file_len().map(|l| l as u64 >= self.geo.size).unwrap_or(false)
    }

    pub fn header(&self) -> &RegionHeader {
        self.map.at(0).expect("validated at open")
    }

    #[inline]
    pub fn wake_word(&self) -> &WakeWord {
        // SAFETY: resolved (bounds- and alignment-checked) in our own mapping, which stays mapped
        // while `self` lives.
        unsafe { &*self.wake }
    }

    #[inline]
    pub fn cmd_ring(&self) -> Ring<'_, CmdEntry> {
        // SAFETY: `self.map` stays mapped while `self` lives.
        unsafe { self.cmd.ring() }
    }

    /// The command ring, to push into as the sender whose entry in this region's peer table is
    /// `slot`: its claim record (`ring::Ring::with_claim_record`) is that entry's `cmd_claim`,
    /// and its free hint this mapping's (`ring::Ring::with_free_hint`).
    #[inline]
    pub fn cmd_ring_as(&self, slot: u32) -> Ring<'_, CmdEntry> {
        let ring = self.cmd_ring().with_free_hint(&self.cmd_free_hint);
        match self.peer_slots().get(slot as usize) {
            Some(entry) => ring.with_claim_record(&entry.cmd_claim),
            None => ring,
        }
    }

    #[inline]
    pub fn resp_ring(&self) -> Ring<'_, RespEntry> {
        // SAFETY: `self.map` stays mapped while `self` lives.
        unsafe { self.resp.ring() }
    }

    /// Before the first copy into or out of the inject pool through this mapping: reserve its
    /// pages, left unreserved at creation (ENOSPC when /dev/shm has no room for them, instead of
    /// a SIGBUS at the first touch). One system call the first time per mapping, a load after.
    #[inline(always)]
    pub fn map_inject_pool(&self) -> Result<()> {
        if self.inject_mapped.load(Ordering::Acquire) {
            return Ok(());
        }
        self.first_use(&self.inject_mapped, self.geo.inject_data, self.geo.inject_pool_len(), false)
    }

    /// A pool's first use through this mapping (`map_inject_pool`, `map_sar_pool`): reserve its
    /// pages, map them too if asked, and remember that it is done (`mapped`).
    #[cold]
    fn first_use(&self, mapped: &AtomicBool, off: u64, len: u64, populate: bool) -> Result<()> {
        self.map.reserve(off, len)?;
        if populate {
            self.map.populate(off, len, !self.is_owner);
        }
        mapped.store(true, Ordering::Release);
        Ok(())
    }

    pub fn inject_stack(&self) -> FreeStack<'_> {
        // SAFETY: `self.map` stays mapped while `self` lives.
        unsafe { self.inject.stack() }
    }

    /// Before the first copy into or out of the SAR pool through this mapping: reserve the
    /// pool's pages (left unreserved at creation, so an endpoint whose pool is never used holds
    /// 2 MiB less; ENOSPC when /dev/shm has no room for them, instead of a SIGBUS at the first
    /// touch) and map the whole pool now, for writing in a peer's region (senders copy
    /// segments in, targets answers) and for reading in our own (we copy them out). Our SAR
    /// buffers are reused cold, in rotation (`endpoint::cold`), so without the mapping every
    /// buffer's first use faulted its pages in one at a time: a 64 KiB message over fresh
    /// buffers took about 40 us instead of 4, and the protocol chooser, whose rare rechecks of
    /// SAR kept landing on fresh buffers, kept choosing CMA. Two system calls the first time
    /// per mapping (whoever reserved the pages first, the rest find them there); a load after.
    #[inline]
    pub fn map_sar_pool(&self) -> Result<()> {
        if self.sar_mapped.load(Ordering::Acquire) {
            return Ok(());
        }
        self.first_use(&self.sar_mapped, self.geo.sar_data, self.geo.sar_pool_len(), true)
    }

    pub fn sar_stack(&self) -> FreeStack<'_> {
        // SAFETY: `self.map` stays mapped while `self` lives.
        unsafe { self.sar.stack() }
    }

    #[inline]
    pub fn peer_slots(&self) -> &[PeerSlot] {
        // SAFETY: resolved (bounds- and alignment-checked) in our own mapping, which stays mapped
        // while `self` lives.
        unsafe { std::slice::from_raw_parts(self.peers, self.peers_len) }
    }

    /// The owner's count of free polls (`OwnerBeat`). Inline: the owner stores to it on every
    /// idle poll, where an out-of-line call through the GOT cost more than the lookup.
    #[inline]
    pub fn beat(&self) -> &OwnerBeat {
        self.map.at(self.geo.beat).expect("validated geometry")
    }

    /// The registrations the owner publishes (`crate::published`).
    pub fn mr_slots(&self) -> &[MrSlot] {
        self.map.slice(self.geo.mrs, MR_SLOTS).expect("validated geometry")
    }
}

// SAFETY: the ring, stack, peer-table and wake-word pointers point into `map`, which is Send and
// Sync; they are only turned into shared references to atomics and cells that the ring, stack
// and wake protocols synchronise.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // Out of the table before the name goes: a successor may take it.
        self.signal_entry.take();
        if self.is_owner {
            // Unlink only our own incarnation: a successor may already own the name.
            if let Ok(other) = Region::open(&self.name) {
                if other.incarnation != self.incarnation {
                    return;
                }
            }
            let _ = shm::unlink(&self.name);
        }
    }
}

/// What a look at an existing region file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Occupant {
    Alive(ProcessIdentity),
    Dead(Option<ProcessIdentity>),
    /// No valid header yet and young: probably being created right now.
    Creating,
}

/// Inspect a region file without trusting it.
pub fn inspect(name: &str) -> Result<Occupant> {
    match Mapping::open(name) {
        Ok(map) => {
            if let Ok(hdr) = map.at::<RegionHeader>(0) {
                if hdr.magic == MAGIC && hdr.owner_pid != 0 {
                    let ident = header_owner(hdr);
                    return Ok(if owner_alive(&map, hdr) {
                        Occupant::Alive(ident)
                    } else {
                        Occupant::Dead(Some(ident))
                    });
                }
            }
        }
        // Empty (not yet sized): judged by age below, like a header not yet written.
        Err(Error::Again) => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::metadata(shm::file_of(name))?;
    let age = meta.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok()).unwrap_or_default();
    Ok(if age > HALF_CREATED_GRACE { Occupant::Dead(None) } else { Occupant::Creating })
}

/// The owner a region's header names.
fn header_owner(hdr: &RegionHeader) -> ProcessIdentity {
    ProcessIdentity { pid: hdr.owner_pid, start: hdr.owner_start, ns: hdr.owner_ns }
}

/// Whether the owner `hdr` (the header of `map`) names lives: by its pid in our pid namespace,
/// by its owner lock in another.
fn owner_alive(map: &Mapping, hdr: &RegionHeader) -> bool {
    let owner = header_owner(hdr);
    if !judged_by_lock(owner, hdr.flags) {
        return owner.is_alive();
    }
    crate::liveness::owner_lock_held(map.fd())
}

/// Whether `owner` (of a region whose header flags are `flags`) is judged by its owner lock
/// rather than by its pid: it is of another pid namespace, and holds the lock.
fn judged_by_lock(owner: ProcessIdentity, flags: u32) -> bool {
    !owner.pid_is_ours() && flags & FLAG_OWNER_LOCK != 0
}

/// Whether the region `name` still holds the endpoint of `incarnation` and its owner lives; a
/// region that is gone or was created again since is not. For entries of a peer table whose
/// sender is of another pid namespace (`endpoint::peers`), judged by their own region. Errs
/// towards alive where the file cannot be read.
pub fn named_owner_alive(name: &str, incarnation: u64) -> bool {
    match Mapping::open(name) {
        Ok(map) => match map.at::<RegionHeader>(0) {
            Ok(hdr) if hdr.magic == MAGIC => hdr.incarnation == incarnation && owner_alive(&map, hdr),
            _ => false,
        },
        Err(Error::NoSuchPeer) => false,
        Err(_) => true,
    }
}

fn reclaim_if_stale(name: &str) -> Result<()> {
    match inspect(name) {
        Ok(Occupant::Dead(_)) => shm::unlink(name),
        // Gone meanwhile: just try to create again.
        Err(Error::NoSuchPeer) => Ok(()),
        Ok(Occupant::Alive(_)) | Ok(Occupant::Creating) => Err(Error::AddrInUse),
        Err(e) => Err(e),
    }
}

fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        v = t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32);
    }
    v | 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Consumer;

    /// A peer that scribbles over the owner's header (its magic, a byte of `ready` turning it
    /// into `CLOSED`) keeps every sender that opens the region out, and cuts off the ones that
    /// look at `ready`, until the owner's liveness tick puts the header back.
    #[test]
    fn the_owner_puts_back_a_scribbled_header() {
        let name = unique("hdr");
        let owner = Region::create(&name, counts(), 0).unwrap();
        assert!(!owner.repair_header(), "an intact header needs no repair");
        let ready_at = std::mem::offset_of!(RegionHeader, ready) as u64;
        owner.mapping().write_bytes(0, b"XX").unwrap();
        owner.mapping().write_bytes(ready_at, &[CLOSED as u8]).unwrap();
        owner.mapping().write_bytes(std::mem::offset_of!(RegionHeader, geometry) as u64 + 3, &[0xA5]).unwrap();
        assert!(matches!(Region::open(&name), Err(Error::Corrupt(_))), "the scribbled header still opened");
        assert!(owner.closed(), "the scribbled ready byte reads as a close");
        assert!(owner.repair_header());
        assert!(!owner.closed());
        let peer = Region::open(&name).expect("the repaired header opens");
        assert_eq!(peer.geometry(), owner.geometry());
        assert!(!owner.repair_header(), "repaired once, intact since");
        owner.mark_closed();
        assert!(!owner.repair_header() && owner.closed(), "a close is the owner's: never repaired away");
    }

    /// Either half of a scribble alone is put back too: the fields with `ready` intact, and
    /// `ready` with the fields intact.
    #[test]
    fn the_owner_puts_back_either_half_of_its_header_alone() {
        let name = unique("half");
        let owner = Region::create(&name, counts(), 0).unwrap();
        owner.mapping().write_bytes(0, b"XX").unwrap();
        assert!(owner.repair_header(), "a scribbled magic, `ready` intact");
        assert!(Region::open(&name).is_ok());
        owner.header().ready.store(CLOSED, Ordering::Release);
        assert!(owner.repair_header(), "a scribbled `ready`, the fields intact");
        assert!(!owner.closed() && !owner.repair_header());
    }

    /// A pool's pages are reserved in /dev/shm at its first use through any mapping, all of
    /// them at once (ENOSPC then, rather than a SIGBUS at some later touch), and not before.
    #[test]
    fn a_pool_is_reserved_whole_at_its_first_use() {
        use std::os::unix::fs::MetadataExt;
        let name = unique("pools");
        let owner = Region::create(&name, counts(), 0).unwrap();
        let peer = Region::open(&name).unwrap();
        let geo = *owner.geometry();
        let reserved = || std::fs::metadata(shm::file_of(&name)).unwrap().blocks() * 512;
        let fresh = reserved();
        assert!(fresh <= geo.reserved_at_creation(), "{fresh} bytes reserved at creation");
        peer.map_sar_pool().unwrap();
        assert_eq!(reserved(), fresh + geo.sar_pool_len(), "the SAR pool, first used by a peer");
        owner.map_sar_pool().unwrap();
        owner.map_inject_pool().unwrap();
        assert_eq!(reserved(), fresh + geo.sar_pool_len() + geo.inject_pool_len(), "both pools");
    }

    fn counts() -> Counts {
        Counts { cmd_len: 64, resp_len: 64, inject_count: 4, sar_count: 2, sar_size: 65536, max_peers: 8 }
    }

    fn unique(tag: &str) -> String {
        format!("rshm_test_{}_{}_{}", tag, std::process::id(), random_u64() % 100000)
    }

    #[test]
    fn create_open_exchange_unlink() {
        let name = unique("region");
        let owner = Region::create(&name, counts(), 0).unwrap();
        assert!(matches!(Region::create(&name, counts(), 0), Err(Error::AddrInUse)));
        let peer = Region::open(&name).unwrap();
        assert_eq!(peer.incarnation(), owner.incarnation());
        assert_eq!(peer.geometry(), owner.geometry());
        let e = CmdEntry { len: 99, ..CmdEntry::default() };
        peer.cmd_ring().push(&e).unwrap();
        let mut c = Consumer::new();
        match c.pop(&owner.cmd_ring()) {
            crate::ring::Pop::Item(got) => assert_eq!(got.len, 99),
            other => panic!("{other:?}"),
        }
        drop(peer);
        drop(owner);
        assert!(matches!(Region::open(&name), Err(Error::NoSuchPeer)));
    }

    /// Peers of another pid namespace judge an owner by its lock. A child the owner forked and
    /// that lives on (without exec) must not keep the owner alive in their eyes once the owner
    /// has closed its region or died; before, the child's copies of the region's descriptor and
    /// mapping kept the lock, and sends to the owner waited for as long as the child lived.
    #[test]
    fn a_child_forked_by_the_owner_does_not_hold_its_lock() {
        let name = unique("forked");
        let owner = Region::create(&name, counts(), 0).unwrap();
        assert!(owner.flags() & FLAG_OWNER_LOCK != 0);
        let peer = Mapping::open(&name).unwrap();
        // SAFETY: the child calls only async-signal-safe functions (pause, _exit) until it is
        // killed.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            loop {
                // SAFETY: as above.
                unsafe { libc::pause() };
            }
        }
        assert!(crate::liveness::owner_lock_held(peer.fd()));
        drop(owner);
        let held_after_close = crate::liveness::owner_lock_held(peer.fd());
        // SAFETY: plain syscalls on our own child.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        assert!(!held_after_close, "the forked child kept the owner lock");
    }

    /// The owner of a region of another pid namespace is watched by its lock on the file,
    /// through the descriptor the mapping holds already: no duplicate per peer, so no open
    /// that can fail for want of descriptors (and fall back to a watch that never sees it die).
    #[test]
    fn an_owner_of_another_namespace_is_watched_through_the_mappings_descriptor() {
        let name = unique("foreign");
        let owner = Region::create(&name, counts(), 0).unwrap();
        let hdr = owner.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
        // SAFETY: test-only write to our own header: the owner now reads as of another pid
        // namespace, as a process in a container sharing /dev/shm would.
        unsafe { (*hdr).owner_ns = crate::liveness::own_namespace().wrapping_add(1) };
        let peer = Region::open(&name).unwrap();
        assert!(!peer.owner().pid_is_ours());
        let watch = peer.watch_owner();
        // The mapping's, the watch's and this one: counted, not the process's open descriptors,
        // which the tests running beside this one open and close.
        assert_eq!(std::sync::Arc::strong_count(&peer.map.shared_fd()), 3, "the watch holds a descriptor of its own");
        assert!(watch.alive());
        drop(owner);
        // Gone at once, but for a child another test thread forks meanwhile, which holds a copy
        // of the owner's descriptor until it execs (as in `liveness`'s test of the lock).
        let dl = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while watch.alive() {
            assert!(std::time::Instant::now() < dl, "the owner's lock outlived its region");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(peer);
        assert!(!watch.alive());
    }

    #[test]
    fn corrupt_headers_are_refused() {
        let name = unique("corrupt");
        let owner = Region::create(&name, counts(), 0).unwrap();
        let hdr = owner.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
        // SAFETY: test-only scribbling on our own header, as a hostile peer might.
        unsafe { (*hdr).geometry.counts.cmd_len = 1 << 19 };
        assert!(matches!(Region::open(&name), Err(Error::Corrupt(_))));
        // SAFETY: as above.
        unsafe { (*hdr).magic = 0x0bad };
        assert!(matches!(Region::open(&name), Err(Error::Corrupt(_))));
        // A zero magic is a header not written yet: come back later.
        // SAFETY: as above.
        unsafe { (*hdr).magic = 0 };
        assert!(matches!(Region::open(&name), Err(Error::Again)));
        assert!(Region::open("no/slash").is_err());
    }

    /// A peer opens only a ready region of the version it speaks, named as it asked, whose file
    /// holds the geometry its header gives; what is being created or closed is told apart from
    /// what is broken.
    #[test]
    fn open_takes_only_a_ready_region_that_is_what_its_header_says() {
        let name = unique("open");
        let owner = Region::create(&name, counts(), 0).unwrap();
        let hdr = owner.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
        let corrupt = |why: &str| match Region::open(&name) {
            Err(Error::Corrupt(_)) => {}
            Err(e) => panic!("{why}: {e:?}"),
            Ok(_) => panic!("{why}: opened"),
        };
        // Scribbles on our own header, as a peer or an owner of another version might leave it;
        // each is undone before the next.
        let write = |at: usize, bytes: &[u8]| owner.mapping().write_bytes(at as u64, bytes).unwrap();
        let version_at = std::mem::offset_of!(RegionHeader, layout_version);
        write(version_at, &(LAYOUT_VERSION + 1).to_ne_bytes());
        corrupt("another layout version");
        write(version_at, &LAYOUT_VERSION.to_ne_bytes());
        let last_letter = std::mem::offset_of!(RegionHeader, name) + name.len() - 1;
        write(last_letter, b"!");
        corrupt("a header naming another endpoint");
        write(last_letter, &name.as_bytes()[name.len() - 1..]);
        // Geometry that matches its counts, but of a larger region than the file.
        let larger = Geometry::compute(Counts { max_peers: 64, ..counts() }).unwrap();
        assert!(larger.size > owner.geometry().size);
        // SAFETY: test-only write to our own header (a plain-integer field), as a peer might.
        unsafe { (*hdr).geometry = larger };
        corrupt("a geometry larger than the file");
        // SAFETY: as above, putting it back.
        unsafe { (*hdr).geometry = *owner.geometry() };
        for (ready, want) in [(0, Error::Again), (7, Error::Again), (CLOSED, Error::NoSuchPeer)] {
            owner.header().ready.store(ready, Ordering::Release);
            match Region::open(&name) {
                Err(e) => assert_eq!(e, want, "ready {ready}"),
                Ok(_) => panic!("opened with ready {ready}"),
            }
        }
        owner.header().ready.store(READY, Ordering::Release);
        let peer = Region::open(&name).expect("the header restored opens");
        assert_eq!((peer.name(), peer.owner(), peer.flags()), (owner.name(), owner.owner(), owner.flags()));
        assert!(!peer.closed() && peer.intact());

        // A file shorter than a header, and an empty one (sized by nobody yet).
        let short = unique("short");
        let path = shm::file_of(&short);
        std::fs::write(&path, [0xA5u8; 100]).unwrap();
        let opened = Region::open(&short).map(|_| ());
        std::fs::write(&path, []).unwrap();
        let empty = Region::open(&short).map(|_| ());
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(opened, Err(Error::Corrupt(_))), "{opened:?}");
        assert_eq!(empty, Err(Error::Again));
    }

    /// Names are endpoint addresses: 1 to 63 printable characters of a small set.
    #[test]
    fn names_are_short_and_printable() {
        for good in ["a", "rshm_1.2:3-x", &"n".repeat(NAME_MAX)] {
            assert!(check_name(good).is_ok(), "{good}");
            assert_eq!(&name_bytes(good)[..good.len()], good.as_bytes());
            assert!(name_bytes(good)[good.len()..].iter().all(|&b| b == 0));
        }
        for bad in ["", "a/b", "a b", "nul\0", "é", &"n".repeat(NAME_MAX + 1)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    /// A peer's mapping reads as intact until the file shrinks under it.
    #[test]
    fn a_region_whose_file_shrank_is_not_intact() {
        let name = unique("shrunk");
        let owner = Region::create(&name, counts(), 0).unwrap();
        let peer = Region::open(&name).unwrap();
        assert!(peer.intact() && owner.intact());
        let file = std::fs::OpenOptions::new().write(true).open(shm::file_of(&name)).unwrap();
        file.set_len(owner.geometry().size - 4096).unwrap();
        assert!(!peer.intact() && !owner.intact());
    }

    /// What a look at a region file finds, trusting nothing in it: the owner that lives, one
    /// that died, and a file without a header, young (being created) or old (a crashed
    /// creation).
    #[test]
    fn inspect_tells_live_dead_and_unfinished_regions_apart() {
        let name = unique("inspect");
        let owner = Region::create(&name, counts(), 0).unwrap();
        assert_eq!(inspect(&name), Ok(Occupant::Alive(owner.owner())));
        assert!(named_owner_alive(&name, owner.incarnation()));
        assert!(!named_owner_alive(&name, owner.incarnation() ^ 2), "another incarnation of the name");
        let hdr = owner.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
        // SAFETY: test-only write to our own header: its owner now reads as a process that
        // cannot exist, as after a SIGKILL.
        unsafe { (*hdr).owner_start = 1 };
        let dead = ProcessIdentity { start: 1, ..owner.owner() };
        assert_eq!(inspect(&name), Ok(Occupant::Dead(Some(dead))));
        assert!(!named_owner_alive(&name, owner.incarnation()));
        // SAFETY: as above: the owner lives again, but the header has no magic (not yet
        // written, or scribbled).
        unsafe {
            (*hdr).owner_start = owner.owner().start;
            (*hdr).magic = 0;
        }
        assert_eq!(inspect(&name), Ok(Occupant::Creating), "a fresh file without a header");
        assert!(!named_owner_alive(&name, owner.incarnation()));
        let file = std::fs::File::options().write(true).open(shm::file_of(&name)).unwrap();
        file.set_modified(SystemTime::now() - HALF_CREATED_GRACE * 2).unwrap();
        assert_eq!(inspect(&name), Ok(Occupant::Dead(None)), "an old file without a header");
        drop(owner);
        assert_eq!(inspect(&name), Err(Error::NoSuchPeer));
        assert!(!named_owner_alive(&name, 0));
    }

    /// An owner of another pid namespace is judged by its lock on the region file if its
    /// header says it holds one, and is taken for alive (nothing can judge it) if it says not.
    #[test]
    fn an_owner_of_another_namespace_is_judged_by_its_lock_only_if_it_holds_one() {
        let name = unique("nolock");
        let mut owner = Region::create(&name, counts(), 0).unwrap();
        let hdr = owner.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
        // SAFETY: test-only write to our own header: the owner now reads as of another pid
        // namespace.
        unsafe { (*hdr).owner_ns = crate::liveness::own_namespace().wrapping_add(1) };
        let foreign = header_owner(owner.header());
        assert_eq!(inspect(&name), Ok(Occupant::Alive(foreign)), "its lock is held");
        owner._owner_lock = None;
        assert_eq!(inspect(&name), Ok(Occupant::Dead(Some(foreign))), "it said it holds a lock, and none is held");
        let flags_at = std::mem::offset_of!(RegionHeader, flags) as u64;
        owner.mapping().write_bytes(flags_at, &(owner.flags() & !FLAG_OWNER_LOCK).to_ne_bytes()).unwrap();
        assert_eq!(inspect(&name), Ok(Occupant::Alive(foreign)), "it holds no lock: nothing tells");
        assert!(named_owner_alive(&name, owner.incarnation()));
    }

    /// An owner unlinks its name only while the file is its own: a successor that took over
    /// the name (another incarnation in the header) keeps its region.
    #[test]
    fn an_owner_leaves_a_successors_region_in_place() {
        let name = unique("succ");
        let owner = Region::create(&name, counts(), 0).unwrap();
        let hdr = owner.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
        // SAFETY: test-only write to our own header, as a successor's creation would leave it.
        unsafe { (*hdr).incarnation ^= 2 };
        drop(owner);
        let left = Region::open(&name).map(|r| r.incarnation());
        shm::unlink(&name).unwrap();
        assert!(left.is_ok(), "the successor's region was unlinked: {left:?}");
    }

    #[test]
    fn stale_region_of_dead_owner_is_reclaimed() {
        let name = unique("stale");
        let owner = Region::create(&name, counts(), 0).unwrap();
        let hdr = owner.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
        // SAFETY: make the header claim a process that cannot exist, as after a SIGKILL, and
        // another incarnation, so that dropping our view unmaps it without unlinking the file
        // (a killed owner never unlinks; forgetting the view would leak, which ASan reports).
        unsafe {
            (*hdr).owner_start = 1;
            (*hdr).incarnation ^= 1;
        }
        drop(owner);
        let again = Region::create(&name, counts(), 0).unwrap();
        assert!(again.owner().is_alive());
    }
}
