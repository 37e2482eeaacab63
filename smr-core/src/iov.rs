//! Memory the caller lends the engine for the duration of an operation.
//!
//! # Safety
//! `LocalIov::from_raw` is the one place where the engine accepts raw caller memory; its contract
//! (valid, unaliased for writes, for as long as the operation is outstanding) is the same one
//! libfabric states for every buffer passed to a data-transfer call.

use crate::cmd::RemoteIov;

/// (address, length) ranges; one or two live inline, so the common case allocates nothing.
pub type Ranges = smallvec::SmallVec<[(usize, usize); 2]>;

/// iovecs for a CMA system call, held inline up to four (the usual message has one range): a
/// heap list cost an allocation and a free per CMA copy.
pub type IoVecs = smallvec::SmallVec<[libc::iovec; 4]>;

/// A peer's ranges for CMA, held inline up to four, for the same reason.
pub type RemoteIovs = smallvec::SmallVec<[RemoteIov; 4]>;

/// One range of the caller's memory lent for a copy into it: a posted receive's one buffer,
/// filled by the express path of a CMA or one-segment SAR message (`Handler::on_fill_express`) without the
/// `LocalIov` a delivery builds. Made only by the unsafe `new`, whose caller vouches for it.
#[derive(Debug, Clone, Copy)]
pub struct LentRange {
    addr: usize,
    len: usize,
}

impl LentRange {
    /// Lend `len` bytes at `addr`.
    ///
    /// # Safety
    /// As `LocalIov::from_raw` for a receive buffer: valid for writes, and untouched by the
    /// caller, until the copy it is handed to has returned.
    pub unsafe fn new(addr: usize, len: usize) -> LentRange {
        LentRange { addr, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn addr(&self) -> usize {
        self.addr
    }
}

/// A list of caller-owned byte ranges, or an owned buffer.
#[derive(Debug)]
pub enum LocalIov {
    Lent { parts: Ranges, total: usize },
    Owned(Vec<u8>),
}

// SAFETY: the lent ranges are plain memory the caller handed over for the operation; the engine
// only copies bytes in and out of them.
unsafe impl Send for LocalIov {}

impl LocalIov {
    /// Lend `parts` (address, length) to the engine.
    ///
    /// # Safety
    /// Every range must be valid for reads (and for writes, if used as a receive buffer), and must
    /// stay so, untouched by the caller, until the operation that takes it has completed.
    pub unsafe fn from_raw(parts: &[(*mut u8, usize)]) -> LocalIov {
        let mut ranges = Ranges::new();
        let mut total = 0;
        for &(p, len) in parts {
            if len > 0 {
                ranges.push((p as usize, len));
                total += len;
            }
        }
        LocalIov::Lent { parts: ranges, total }
    }

    /// Lend (address, length) ranges to the engine.
    ///
    /// # Safety
    /// As `from_raw`.
    pub unsafe fn from_ranges(mut parts: Ranges) -> LocalIov {
        // One range, the usual lent buffer: nothing to sum or drop.
        if let [(_, len)] = *parts.as_slice() {
            if len > 0 {
                return LocalIov::Lent { parts, total: len };
            }
        }
        let mut total = 0;
        let mut empty = false;
        for p in &parts {
            total += p.1;
            empty |= p.1 == 0;
        }
        if empty {
            parts.retain(|p| p.1 > 0);
        }
        LocalIov::Lent { parts, total }
    }

    pub fn owned(bytes: Vec<u8>) -> LocalIov {
        LocalIov::Owned(bytes)
    }

    pub fn len(&self) -> usize {
        match self {
            LocalIov::Lent { total, .. } => *total,
            LocalIov::Owned(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The owned buffer back, if this is one.
    pub fn into_owned(self) -> Option<Vec<u8>> {
        match self {
            LocalIov::Owned(v) => Some(v),
            LocalIov::Lent { .. } => None,
        }
    }

    /// The ranges as (address, length), read-only view.
    fn with_parts<R>(&self, f: impl FnOnce(&[(usize, usize)]) -> R) -> R {
        match self {
            LocalIov::Lent { parts, .. } => f(parts),
            LocalIov::Owned(v) => f(&[(v.as_ptr() as usize, v.len())]),
        }
    }

    /// The ranges as (address, length), derived from a mutable borrow so they may be written.
    fn with_parts_mut<R>(&mut self, f: impl FnOnce(&[(usize, usize)]) -> R) -> R {
        match self {
            LocalIov::Lent { parts, .. } => f(parts),
            LocalIov::Owned(v) => f(&[(v.as_mut_ptr() as usize, v.len())]),
        }
    }

    /// Copy `src` in at byte `off`, as far as it fits. Returns how many bytes were copied.
    pub fn write_at(&mut self, off: usize, src: &[u8]) -> usize {
        let mut copied = 0;
        self.with_parts_mut(|parts| {
            walk(parts, off, src.len(), |dst, n, at| {
                // SAFETY: `dst..dst+n` is inside a lent (writable per contract) or owned range;
                // `at + n <= src.len()`.
                unsafe { crate::copy::copy_bytes(src.as_ptr().add(at), dst, n) };
                copied += n;
            })
        });
        copied
    }

    /// Copy `dst.len()` bytes out from byte `off` (fewer if the iov ends). Returns the count.
    pub fn read_at(&self, off: usize, dst: &mut [u8]) -> usize {
        let mut copied = 0;
        self.with_parts(|parts| {
            walk(parts, off, dst.len(), |src, n, at| {
                // SAFETY: `src..src+n` is inside a lent or owned range; `at + n <= dst.len()`.
                unsafe { crate::copy::copy_bytes(src, dst.as_mut_ptr().add(at), n) };
                copied += n;
            })
        });
        copied
    }

    /// Copy `len` bytes from `off` straight to raw memory (a shared-memory buffer that another
    /// process reads: `copy::copy_to_shared`).
    ///
    /// # Safety
    /// `dst..dst+len` must be valid for writes (a range checked against a mapping).
    pub(crate) unsafe fn read_to_raw(&self, off: usize, dst: *mut u8, len: usize) -> usize {
        // One range, the usual case (a read's answer from one registration): one copy, no walk.
        if let LocalIov::Lent { parts, .. } = self {
            if let [(base, plen)] = *parts.as_slice() {
                let n = plen.saturating_sub(off).min(len);
                if n > 0 {
                    // SAFETY: `base + off .. + n` lies inside the lent range (`off + n <= plen`);
                    // the caller checked `dst..dst+len` lies in a mapping, and `n <= len`.
                    unsafe { crate::copy::copy_to_shared((base + off) as *const u8, dst, n) };
                }
                return n;
            }
        }
        let mut copied = 0;
        self.with_parts(|parts| {
            walk(parts, off, len, |src, n, at| {
                // SAFETY: the caller checked `dst..dst+len` lies in a mapping; `at + n <= len`.
                unsafe { crate::copy::copy_to_shared(src, dst.add(at), n) };
                copied += n;
            })
        });
        copied
    }

    /// Copy `len` bytes from raw memory (a shared-memory buffer) in at byte `off`.
    ///
    /// # Safety
    /// `src..src+len` must be valid for reads (a range checked against a mapping).
    pub(crate) unsafe fn write_from_raw(&mut self, off: usize, src: *const u8, len: usize) -> usize {
        let mut copied = 0;
        self.with_parts_mut(|parts| {
            walk(parts, off, len, |dst, n, at| {
                // SAFETY: the caller checked `src..src+len` lies in a mapping; `dst..dst+n` is ours.
                unsafe { crate::copy::copy_bytes(src.add(at), dst, n) };
                copied += n;
            })
        });
        copied
    }

    /// The one range of caller's memory this is, as (address, length): the usual lent buffer,
    /// which the CMA copies and the description of a send take without lists of ranges built,
    /// walked and trimmed (`cma`, `as_remote`). None for several ranges or an owned buffer.
    #[inline]
    pub(crate) fn lent_single(&self) -> Option<(usize, usize)> {
        match self {
            LocalIov::Lent { parts, total } => match parts[..] {
                [(addr, _)] => Some((addr, *total)),
                _ => None,
            },
            LocalIov::Owned(_) => None,
        }
    }

    /// The ranges of bytes `off..off+len` (fewer past the end), as iovecs a syscall writes into,
    /// appended to `out`.
    pub(crate) fn iovecs_span(&mut self, off: usize, len: usize, out: &mut IoVecs) {
        let len = self.len().saturating_sub(off).min(len);
        self.with_parts_mut(|parts| {
            walk(parts, off, len, |p, n, _| out.push(libc::iovec { iov_base: p.cast(), iov_len: n }))
        });
    }

    /// The ranges of bytes `off..off+len` (fewer past the end), as iovecs a syscall reads from,
    /// appended to `out`.
    pub(crate) fn iovecs_span_for_reading(&self, off: usize, len: usize, out: &mut IoVecs) {
        let len = self.len().saturating_sub(off).min(len);
        self.with_parts(|parts| {
            walk(parts, off, len, |p, n, _| out.push(libc::iovec { iov_base: p.cast(), iov_len: n }))
        });
    }

    /// The ranges as a peer sees them for CMA; `None` if there are too many to describe.
    pub(crate) fn as_remote(&self, max: usize) -> Option<RemoteIovs> {
        let mut v = RemoteIovs::new();
        if let Some((addr, len)) = self.lent_single() {
            v.push(RemoteIov { addr: addr as u64, len: len as u64 });
            return (max >= 1).then_some(v);
        }
        self.with_parts(|parts| {
            walk(parts, 0, self.len(), |p, n, _| v.push(RemoteIov { addr: p as u64, len: n as u64 }))
        });
        (v.len() <= max && !v.is_empty()).then_some(v)
    }
}

/// Visit the pieces of `parts` covering bytes `off..off+len`: (address, length, bytes before).
fn walk(parts: &[(usize, usize)], mut off: usize, mut len: usize, mut f: impl FnMut(*mut u8, usize, usize)) {
    let mut done = 0;
    for &(base, plen) in parts {
        if len == 0 {
            return;
        }
        if off >= plen {
            off -= plen;
            continue;
        }
        let take = (plen - off).min(len);
        f((base + off) as *mut u8, take, done);
        done += take;
        len -= take;
        off = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scattered_copies_cross_part_boundaries() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 5];
        // SAFETY: both arrays outlive `iov` and are not otherwise touched while it lives.
        let mut iov =
            unsafe { LocalIov::from_raw(&[(a.as_mut_ptr(), 3), (std::ptr::null_mut(), 0), (b.as_mut_ptr(), 5)]) };
        assert_eq!(iov.len(), 8);
        assert_eq!(iov.write_at(2, b"hello world"), 6);
        let mut out = [0u8; 4];
        assert_eq!(iov.read_at(1, &mut out), 4);
        assert_eq!(&out, b"\0hel");
        drop(iov);
        assert_eq!(&a, b"\0\0h");
        assert_eq!(&b, b"ello ");
    }

    /// One range and several take different paths in `from_ranges` and `read_to_raw`: the
    /// same bytes and counts from every offset, as far as the range reaches, and no byte past
    /// what is copied written; an empty range lends nothing.
    #[test]
    fn one_range_reads_as_several_do() {
        let src: Vec<u8> = (0..40u8).collect();
        let base = src.as_ptr() as usize;
        // SAFETY: `src` outlives both and is only read.
        let one = unsafe { LocalIov::from_ranges(smallvec::smallvec![(base, 40)]) };
        // SAFETY: as above.
        let two = unsafe { LocalIov::from_ranges(smallvec::smallvec![(base, 17), (base + 17, 23)]) };
        assert_eq!((one.len(), two.len()), (40, 40));
        for (off, len) in [(0, 40), (0, 8), (5, 10), (30, 20), (40, 4), (41, 4), (0, 0)] {
            let (mut x, mut y) = ([0xEEu8; 48], [0xEEu8; 48]);
            // SAFETY: both outputs hold 48 bytes, at least `len`.
            let (nx, ny) =
                unsafe { (one.read_to_raw(off, x.as_mut_ptr(), len), two.read_to_raw(off, y.as_mut_ptr(), len)) };
            assert_eq!(nx, ny, "off {off} len {len}");
            assert_eq!(nx, 40usize.saturating_sub(off).min(len), "off {off} len {len}");
            assert_eq!(x, y, "off {off} len {len}");
            assert_eq!(&x[..nx], &src[off.min(40)..off.min(40) + nx]);
            assert!(x[nx..].iter().all(|&b| b == 0xEE), "wrote past the copy: off {off} len {len}");
        }
        // SAFETY: an empty range is never read.
        let empty = unsafe { LocalIov::from_ranges(smallvec::smallvec![(base, 0)]) };
        assert!(empty.is_empty() && !one.is_empty());
        let mut z = [0xEEu8; 4];
        // SAFETY: nothing is copied.
        assert_eq!(unsafe { empty.read_to_raw(0, z.as_mut_ptr(), 4) }, 0);
    }

    /// A peer is told the ranges to copy with CMA only if they fit its description (`max`):
    /// one range as itself, several as their non-empty pieces, none for too many or none.
    #[test]
    fn ranges_are_described_for_a_peer_only_if_they_fit() {
        let src = [0u8; 40];
        let base = src.as_ptr() as usize;
        // SAFETY: `src` outlives the view, which is only described.
        let one = unsafe { LocalIov::from_ranges(smallvec::smallvec![(base, 40)]) };
        assert_eq!(one.lent_single(), Some((base, 40)));
        assert_eq!(one.as_remote(1).map(|v| v.len()), Some(1));
        assert!(one.as_remote(0).is_none());
        // SAFETY: as above.
        let three = unsafe { LocalIov::from_ranges(smallvec::smallvec![(base, 10), (base + 10, 0), (base + 20, 20)]) };
        assert_eq!(three.lent_single(), None);
        let pieces = three.as_remote(2).expect("two non-empty pieces fit two places");
        assert_eq!(
            pieces.iter().map(|r| (r.addr, r.len)).collect::<Vec<_>>(),
            [(base as u64, 10), (base as u64 + 20, 20)]
        );
        assert!(three.as_remote(1).is_none(), "two pieces described in one place");
        assert_eq!(LocalIov::owned(vec![1, 2]).lent_single(), None);
        // SAFETY: never read.
        let range = unsafe { LentRange::new(base, 0) };
        // SAFETY: as above.
        let full = unsafe { LentRange::new(base, 3) };
        assert!(range.is_empty() && !full.is_empty());
    }
}
