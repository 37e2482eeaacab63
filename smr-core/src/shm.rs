//! Shared-memory files in /dev/shm and their mappings. One of the few modules with raw memory.
//!
//! # Safety
//! A `Mapping` owns one `mmap` of a whole file for its lifetime. Every typed view it hands out is
//! range- and alignment-checked against the mapping, and only for types whose every bit pattern
//! is valid (`Pod`) or that consist of atomics, so peer writes cannot create invalid values.

use crate::error::{Error, Result};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// A `MAP_SHARED` read-write mapping of a whole shm file.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    /// Shared with a watch of the owner's lock on the file (`liveness::Watch::by_lock`), which
    /// would otherwise hold a duplicate: a descriptor less per peer of another pid namespace.
    fd: Arc<OwnedFd>,
}

// SAFETY: the mapping is plain shared memory; all concurrent access goes through atomics or
// explicit byte copies, so the handle may move to and be shared between threads.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

const PAGE: usize = 4096;

/// Where POSIX shared memory lives on Linux: a region named `n` is the file `SHM_DIR/n`.
pub const SHM_DIR: &str = "/dev/shm";

/// The file of region (or any shm object) `name`.
pub fn file_of(name: &str) -> String {
    format!("{SHM_DIR}/{name}")
}

fn shm_path(name: &str) -> Result<CString> {
    CString::new(format!("/{name}")).map_err(|_| Error::Invalid("region name contains NUL"))
}

/// `shm_open(name, oflag | O_CLOEXEC, mode)`: a descriptor of our own, or the errno.
fn open_fd(name: &str, oflag: libc::c_int, mode: libc::mode_t) -> Result<OwnedFd> {
    let path = shm_path(name)?;
    // SAFETY: `path` is a valid NUL-terminated string, and shm_open returns a new descriptor
    // or -1. (A descriptor per peer region: one more try after raising the soft limit if the
    // process ran out, `fd_limit`.)
    unsafe { crate::fd_limit::retry_emfile(|| i64::from(libc::shm_open(path.as_ptr(), oflag | libc::O_CLOEXEC, mode))) }
        .map_err(Error::from)
}

impl Mapping {
    /// Create `name` exclusively (mode 0600), size it, reserve its pages and map it.
    pub fn create(name: &str, len: usize) -> Result<Mapping> {
        Self::create_lazy(name, len, &[])
    }

    /// `create`, reserving every page but those of the ranges `lazy` ((offset, length) in
    /// ascending order, not overlapping: pages that may stay unused, reserved on first use with
    /// `reserve`).
    pub fn create_lazy(name: &str, len: usize, lazy: &[(u64, u64)]) -> Result<Mapping> {
        let fd = open_fd(name, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600)?;
        // SAFETY: plain syscall on an fd we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            let err = Error::last_os();
            let _ = unlink(name);
            return Err(err);
        }
        // Reserve the pages now: on a tmpfs without room, ftruncate succeeds and the first
        // touch of a page beyond the room raises SIGBUS, in us or in a peer. fallocate says
        // ENOSPC here instead. The lazy ranges are reserved by whoever uses them first.
        let end = len as u64;
        let reserve_all_but_lazy = || {
            let mut at = 0;
            for &(off, n) in lazy {
                let start = off.clamp(at, end);
                reserve_range(&fd, at, start - at)?;
                at = off.saturating_add(n).clamp(at, end);
            }
            reserve_range(&fd, at, end - at)
        };
        if let Err(e) = reserve_all_but_lazy() {
            let _ = unlink(name);
            return Err(e);
        }
        Self::map(fd, len).inspect_err(|_| {
            let _ = unlink(name);
        })
    }

    /// Reserve the file's pages in `off..off + len` (those already there stay as they are): a
    /// range left unreserved at creation, before its first use. ENOSPC when the file system has
    /// no room for them, so that nobody touches a page the kernel cannot back (SIGBUS).
    pub fn reserve(&self, off: u64, len: u64) -> Result<()> {
        self.check(off, len, 1)?;
        reserve_range(&self.fd, off, len)
    }

    /// Map the first `len` bytes of `name`, a file that several processes share without any of
    /// them owning it (mode 0600): created if it is missing, grown to `len` if shorter (never
    /// shrunk, so that a process wanting more does not cut off one wanting less).
    pub fn open_or_create(name: &str, len: usize) -> Result<Mapping> {
        let fd = open_fd(name, libc::O_CREAT | libc::O_RDWR, 0o600)?;
        // fallocate grows a file and never shrinks it, whoever else grows it at the same time;
        // and its pages exist before anyone touches them (see `create_lazy`).
        reserve_range(&fd, 0, len as u64)?;
        // Where the file system does not allocate, ftruncate grows it instead.
        // SAFETY: plain syscall on an fd we own.
        if file_size(&fd)? < len && unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(Error::last_os());
        }
        Self::map(fd, len)
    }

    /// Map an existing region file whole, at the size `fstat` reports.
    pub fn open(name: &str) -> Result<Mapping> {
        let fd = open_fd(name, libc::O_RDWR, 0).map_err(|e| match e {
            Error::Os(libc::ENOENT) => Error::NoSuchPeer,
            e => e,
        })?;
        let len = file_size(&fd)?;
        if len == 0 {
            // Created but not yet sized: its creator is between shm_open and ftruncate.
            return Err(Error::Again);
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Mapping> {
        // SAFETY: mapping a file we hold open; the kernel picks the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os());
        }
        Ok(Mapping { base: base.cast(), len, fd: Arc::new(fd) })
    }

    /// The file's descriptor (by which a peer asks for the owner lock: `liveness::Watch::by_lock`).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The file's descriptor, for a holder that may outlive this mapping.
    pub fn shared_fd(&self) -> Arc<OwnedFd> {
        Arc::clone(&self.fd)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size of the file now: a peer may have truncated it (then touching the tail faults).
    pub fn file_len(&self) -> Result<usize> {
        file_size(&self.fd)
    }

    fn check(&self, off: u64, len: u64, align: usize) -> Result<usize> {
        let end = off.checked_add(len).ok_or(Error::Corrupt("offset overflow"))?;
        if end > self.len as u64 {
            return Err(Error::Corrupt("offset beyond region"));
        }
        if (self.base as usize + off as usize) % align != 0 {
            return Err(Error::Corrupt("misaligned offset"));
        }
        Ok(off as usize)
    }

    /// A shared reference to a `T` at `off`.
    ///
    /// `T` must be `Pod`, or be built only from atomics and `Pod` data in `UnsafeCell`s.
    pub fn at<T: SharedSafe>(&self, off: u64) -> Result<&T> {
        let off = self.check(off, size_of::<T>() as u64, align_of::<T>())?;
        // SAFETY: in bounds and aligned (checked above); `T: SharedSafe` means any bytes form a
        // valid `T` and all mutation goes through atomics or cells, so `&T` is sound even while
        // other processes write.
        Ok(unsafe { &*self.base.add(off).cast::<T>() })
    }

    /// `n` consecutive `T`s at `off`.
    pub fn slice<T: SharedSafe>(&self, off: u64, n: u64) -> Result<&[T]> {
        let bytes = n.checked_mul(size_of::<T>() as u64).ok_or(Error::Corrupt("length overflow"))?;
        let off = self.check(off, bytes, align_of::<T>())?;
        // SAFETY: as in `at`, for every element of the checked range.
        Ok(unsafe { std::slice::from_raw_parts(self.base.add(off).cast::<T>(), n as usize) })
    }

    /// Copy `src` into the mapping at `off`.
    pub fn write_bytes(&self, off: u64, src: &[u8]) -> Result<()> {
        let off = self.check(off, src.len() as u64, 1)?;
        // SAFETY: the destination range lies inside the mapping (checked); shared memory may be
        // written concurrently by a misbehaving peer, which can only garble bytes.
        unsafe { crate::copy::copy_bytes(src.as_ptr(), self.base.add(off), src.len()) };
        Ok(())
    }

    /// Copy from the mapping at `off` into `dst`.
    pub fn read_bytes(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        let off = self.check(off, dst.len() as u64, 1)?;
        // SAFETY: the source range lies inside the mapping (checked).
        unsafe { crate::copy::copy_bytes(self.base.add(off), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Fill in this process's page-table entries for `len` bytes at `off` now, for writing or
    /// for reading, rather than one page fault at a time as they are first touched (the file's
    /// pages exist: `create` reserved them). Where the kernel cannot (before Linux 5.14 it does
    /// not know the request; a file a peer cut short fails it) the pages fault in as before.
    pub fn populate(&self, off: u64, len: u64, write: bool) {
        let page = PAGE as u64;
        if self.check(off, len, 1).is_err() {
            return;
        }
        let start = off - off % page;
        let end = (off + len).div_ceil(page).saturating_mul(page).min(self.len as u64);
        let advice = if write { libc::MADV_POPULATE_WRITE } else { libc::MADV_POPULATE_READ };
        // SAFETY: a page-aligned range inside our own mapping (the mapping's base is page-aligned,
        // the range checked above against its length); the advice only maps pages, changing no
        // bytes. Its result is not needed: a failure leaves the pages to fault in.
        unsafe { libc::madvise(self.base.add(start as usize).cast(), (end - start) as usize, advice) };
    }

    /// Raw pointer to `len` bytes at `off`, for copies to or from caller-owned memory.
    pub fn bytes_ptr(&self, off: u64, len: u64) -> Result<*mut u8> {
        let off = self.check(off, len, 1)?;
        // SAFETY: in bounds (checked).
        Ok(unsafe { self.base.add(off) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` came from our own successful mmap; no references outlive `self`.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// An open file description that nothing but a one-page `PROT_NONE` mapping of its file keeps
/// alive, a mapping that fork does not copy (`MADV_DONTFORK`): the kernel releases the
/// description, and the OFD locks taken through it, when this is dropped or the process ends
/// (exit, exec or a kill), never later because a child forked without exec still holds it.
/// What the owner lock is held through (`liveness::hold_owner_lock`).
pub struct UnforkedDescription {
    /// The mapping's address, never dereferenced (an integer: the type is Send and Sync as is).
    base: usize,
}

impl UnforkedDescription {
    /// Keep `fd`'s description by a mapping alone and close `fd` (a descriptor fork would copy).
    pub fn keep(fd: OwnedFd) -> Result<UnforkedDescription> {
        // SAFETY: mapping a file we hold open, without access; the kernel picks the address.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), PAGE, libc::PROT_NONE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os());
        }
        let kept = UnforkedDescription { base: base as usize };
        // SAFETY: our own page-aligned one-page mapping; the advice changes no memory.
        if unsafe { libc::madvise(base, PAGE, libc::MADV_DONTFORK) } != 0 {
            return Err(Error::last_os());
        }
        Ok(kept)
    }
}

impl Drop for UnforkedDescription {
    fn drop(&mut self) {
        // SAFETY: our own one-page mapping, never handed out.
        unsafe { libc::munmap(self.base as *mut libc::c_void, PAGE) };
    }
}

/// A descriptor of a file description of its own (not shared with `same`'s, so that a lock taken
/// through it is not `same`'s) of the file `name` that `same` maps; EAGAIN when `name` names
/// another file now.
pub fn reopen(name: &str, same: &Mapping) -> Result<OwnedFd> {
    let fd = open_fd(name, libc::O_RDONLY, 0)?;
    if file_id(&fd)? != file_id(&same.fd)? {
        return Err(Error::Again);
    }
    Ok(fd)
}

/// `posix_fallocate` of `off..off + len` in `fd`; a file system without it (EOPNOTSUPP, EINVAL)
/// is left to fault pages in as they are touched, as before fallocate was used.
fn reserve_range(fd: &OwnedFd, off: u64, len: u64) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: plain syscall on an fd we hold open.
    let rc = unsafe { libc::posix_fallocate(fd.as_raw_fd(), off as libc::off_t, len as libc::off_t) };
    if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
        return Err(Error::Os(rc));
    }
    Ok(())
}

fn file_size(fd: &OwnedFd) -> Result<usize> {
    Ok(fstat(fd)?.st_size as usize)
}

/// Which file `fd` is (device and inode).
fn file_id(fd: &OwnedFd) -> Result<(u64, u64)> {
    let st = fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

fn fstat(fd: &OwnedFd) -> Result<libc::stat> {
    // SAFETY: `stat` is plain data; fstat fills it on success.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Error::last_os());
    }
    Ok(st)
}

/// Remove a region file. Missing files are not an error.
pub fn unlink(name: &str) -> Result<()> {
    remove(name).map(drop)
}

/// `unlink` that says whether it removed the name (false: it was gone already, perhaps removed
/// by another process at the same moment).
pub fn remove(name: &str) -> Result<bool> {
    let path = shm_path(name)?;
    // SAFETY: valid C string.
    if unsafe { libc::shm_unlink(path.as_ptr()) } != 0 {
        let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        if err != libc::ENOENT {
            return Err(Error::Os(err));
        }
        return Ok(false);
    }
    Ok(true)
}

/// Types that may be viewed in place in shared memory.
///
/// # Safety
/// Every bit pattern must be valid and all interior mutation must go through atomics or
/// `UnsafeCell`s holding `Pod` data.
pub unsafe trait SharedSafe {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::{AtomicU32, Ordering};

    /// A region name of this test process's own, removed (if left over) before it is used and
    /// again when dropped, also by a test that fails.
    struct Fresh(String);

    impl Fresh {
        fn new(tag: &str) -> Fresh {
            let name = format!("rshm_test_shm_{tag}_{}", std::process::id());
            Fresh(name)
        }
    }

    impl std::ops::Deref for Fresh {
        type Target = str;
        fn deref(&self) -> &str {
            &self.0
        }
    }

    impl Drop for Fresh {
        fn drop(&mut self) {
            let _ = unlink(&self.0);
        }
    }

    /// Bytes the file system holds for the file (its allocated blocks): what `create` reserved.
    fn allocated(map: &Mapping) -> u64 {
        fstat(map.fd()).unwrap().st_blocks as u64 * 512
    }

    /// Every view a peer's offsets and lengths can ask for is checked against the mapping: the
    /// last whole word is given, one byte further is not, nor an offset or a count whose
    /// arithmetic overflows, nor a misaligned word.
    #[test]
    fn views_end_at_the_mapping_and_words_are_aligned() {
        let name = Fresh::new("views");
        let map = Mapping::create(&name, 3 * PAGE).unwrap();
        let len = map.len() as u64;
        assert_eq!(len, 3 * PAGE as u64);
        assert!(!map.is_empty());
        let last = map.at::<AtomicU32>(len - 4).expect("the last whole word");
        last.store(7, Ordering::Relaxed);
        assert_eq!(map.slice::<AtomicU32>(len - 8, 2).unwrap()[1].load(Ordering::Relaxed), 7);
        let corrupt = |r: Result<()>| matches!(r, Err(Error::Corrupt(_)));
        assert!(corrupt(map.at::<AtomicU32>(len).map(drop)), "a word just past the end");
        assert!(corrupt(map.at::<AtomicU32>(len - 2).map(drop)), "a word across the end");
        assert!(corrupt(map.at::<AtomicU32>(u64::MAX - 1).map(drop)), "an offset that wraps");
        assert!(corrupt(map.at::<AtomicU32>(2).map(drop)), "a misaligned word");
        assert!(corrupt(map.slice::<AtomicU32>(0, len / 4 + 1).map(drop)), "one word too many");
        assert!(corrupt(map.slice::<AtomicU32>(4, u64::MAX / 2).map(drop)), "a count whose length wraps");
        assert!(map.slice::<AtomicU32>(len, 0).unwrap().is_empty(), "nothing, at the very end");
        assert!(corrupt(map.bytes_ptr(len, 1).map(drop)));
        assert!(corrupt(map.reserve(len - 1, 2)));
        map.reserve(0, len).unwrap();
    }

    /// Bytes written through the mapping are read back through another mapping of the same
    /// file (a peer's), where the copy asked for lies inside; anything reaching past the end is
    /// refused and leaves the bytes as they were.
    #[test]
    fn bytes_cross_between_two_mappings_of_a_file_and_stop_at_its_end() {
        let name = Fresh::new("bytes");
        let owner = Mapping::create(&name, PAGE).unwrap();
        let peer = Mapping::open(&name).unwrap();
        assert_eq!(peer.len(), PAGE);
        let data: Vec<u8> = (0..100u8).collect();
        owner.write_bytes(PAGE as u64 - 100, &data).unwrap();
        let mut back = [0u8; 100];
        peer.read_bytes(PAGE as u64 - 100, &mut back).unwrap();
        assert_eq!(&back[..], &data[..]);
        assert!(matches!(owner.write_bytes(PAGE as u64 - 99, &[0xEE; 100]), Err(Error::Corrupt(_))));
        let mut over = [0u8; 101];
        assert!(matches!(peer.read_bytes(PAGE as u64 - 100, &mut over), Err(Error::Corrupt(_))));
        assert!(over.iter().all(|&b| b == 0), "a refused read copies nothing");
        peer.read_bytes(PAGE as u64 - 100, &mut back).unwrap();
        assert_eq!(&back[..], &data[..], "a refused write changes nothing");
        // SAFETY: the pointer is to the 100 bytes checked above, inside the peer's mapping.
        let via_ptr = unsafe { *peer.bytes_ptr(PAGE as u64 - 1, 1).unwrap() };
        assert_eq!(via_ptr, 99);
    }

    /// `create` is exclusive and reserves every page but the lazy ranges'; `reserve` then
    /// reserves those.
    #[test]
    fn create_reserves_every_page_but_the_lazy_ones() {
        let name = Fresh::new("lazy");
        let len = 16 * PAGE;
        let lazy = [(2 * PAGE as u64, 3 * PAGE as u64), (10 * PAGE as u64, 4 * PAGE as u64)];
        let map = Mapping::create_lazy(&name, len, &lazy).unwrap();
        assert_eq!(map.file_len().unwrap(), len);
        assert_eq!(allocated(&map), (len - 7 * PAGE) as u64, "all but the 7 lazy pages");
        assert!(matches!(Mapping::create(&name, PAGE), Err(Error::Os(libc::EEXIST))), "created twice");
        map.reserve(lazy[1].0, lazy[1].1).unwrap();
        assert_eq!(allocated(&map), (len - 3 * PAGE) as u64);
        map.reserve(lazy[0].0, lazy[0].1).unwrap();
        assert_eq!(allocated(&map), len as u64);
        let whole = Fresh::new("whole");
        let map = Mapping::create(&whole, 5 * PAGE).unwrap();
        assert_eq!(allocated(&map), 5 * PAGE as u64);
    }

    /// The kilobytes of the mapping at `base` that this process's page tables hold (its `Rss` in
    /// /proc/self/smaps), or None where no mapping starts there.
    fn resident_kib(base: *mut u8) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", base as usize);
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        lines.next()?;
        let rss = lines.find_map(|l| l.strip_prefix("Rss:")).unwrap();
        Some(rss.trim().trim_end_matches("kB").trim().parse().unwrap())
    }

    /// `populate` maps in exactly the pages its range touches, from the page holding its first
    /// byte to the one holding its last, and nothing for a range outside the mapping; a dropped
    /// mapping is gone from the process.
    #[test]
    fn populate_maps_the_pages_of_its_range_and_drop_unmaps() {
        let name = Fresh::new("populate");
        let map = Mapping::create(&name, 16 * PAGE).unwrap();
        let page = PAGE as u64;
        assert_eq!(resident_kib(map.base), Some(0), "nothing touched yet");
        map.populate(16 * page - 10, 11, true);
        assert_eq!(resident_kib(map.base), Some(0), "a range past the end maps nothing");
        map.populate(page + 100, 2 * page, true);
        assert_eq!(resident_kib(map.base), Some(12), "pages 1, 2 and 3");
        map.populate(8 * page, page, false);
        assert_eq!(resident_kib(map.base), Some(16), "and page 8");
        map.populate(15 * page + 1, page - 1, true);
        assert_eq!(resident_kib(map.base), Some(20), "and the last page");
        let base = map.base;
        drop(map);
        assert_eq!(resident_kib(base), None, "still mapped after drop");
    }

    /// A reservation the file system refuses is an error (here: a descriptor opened for reading
    /// only), not taken for a file system that cannot reserve.
    #[test]
    fn a_refused_reservation_is_an_error() {
        let name = Fresh::new("refused");
        let map = Mapping::create_lazy(&name, 4 * PAGE, &[(0, 4 * PAGE as u64)]).unwrap();
        let read_only = reopen(&name, &map).unwrap();
        assert_eq!(reserve_range(&read_only, 0, PAGE as u64), Err(Error::Os(libc::EBADF)));
        assert_eq!(reserve_range(&read_only, 0, 0), Ok(()), "nothing to reserve");
    }

    /// A shared file grows to the largest length asked for and is never cut back.
    #[test]
    fn open_or_create_grows_a_file_and_never_shrinks_it() {
        let name = Fresh::new("grow");
        let small = Mapping::open_or_create(&name, PAGE).unwrap();
        assert_eq!((small.len(), small.file_len().unwrap()), (PAGE, PAGE));
        small.write_bytes(0, b"kept").unwrap();
        let large = Mapping::open_or_create(&name, 4 * PAGE).unwrap();
        assert_eq!((large.len(), large.file_len().unwrap()), (4 * PAGE, 4 * PAGE));
        let again = Mapping::open_or_create(&name, 2 * PAGE).unwrap();
        assert_eq!((again.len(), again.file_len().unwrap()), (2 * PAGE, 4 * PAGE), "not shrunk");
        let mut kept = [0u8; 4];
        again.read_bytes(0, &mut kept).unwrap();
        assert_eq!(&kept, b"kept");
    }

    /// `open`: a missing file is no peer; a created but not yet sized one is "come back later";
    /// a file a peer cut short shows in `file_len`.
    #[test]
    fn open_tells_a_missing_file_from_one_not_yet_sized() {
        let name = Fresh::new("open");
        assert!(matches!(Mapping::open(&name), Err(Error::NoSuchPeer)));
        let fd = open_fd(&name, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600).unwrap();
        assert!(matches!(Mapping::open(&name), Err(Error::Again)));
        // SAFETY: plain syscall on an fd we own.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 2 * PAGE as libc::off_t) }, 0);
        let map = Mapping::open(&name).unwrap();
        assert_eq!(map.len(), 2 * PAGE);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), PAGE as libc::off_t) }, 0);
        assert_eq!((map.len(), map.file_len().unwrap()), (2 * PAGE, PAGE));
    }

    /// `reopen` gives a description of the file a mapping maps, and "again" once the name has
    /// come to name another file; `remove` says whether it removed the name.
    #[test]
    fn reopen_knows_a_name_that_names_another_file_now() {
        let name = Fresh::new("reopen");
        let first = Mapping::create(&name, PAGE).unwrap();
        let fd = reopen(&name, &first).unwrap();
        assert_eq!(file_id(&fd).unwrap(), file_id(first.fd()).unwrap());
        assert!(!Arc::ptr_eq(&first.shared_fd(), &Arc::new(fd)));
        assert!(remove(&name).unwrap(), "the name was there");
        assert!(!remove(&name).unwrap(), "and is gone");
        assert!(matches!(reopen(&name, &first), Err(Error::NoSuchPeer | Error::Os(libc::ENOENT))));
        let second = Mapping::create(&name, PAGE).unwrap();
        assert!(matches!(reopen(&name, &first), Err(Error::Again)));
        assert!(reopen(&name, &second).is_ok());
        assert!(matches!(shm_path("a\0b"), Err(Error::Invalid(_))));
    }
}
