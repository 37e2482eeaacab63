//! Buffers the application passes, as the engine's `Ranges`: checked once, at the entry point.

use crate::error::{FiError, FiResult};
use crate::getinfo::IOV_LIMIT;
use rshm_ffi as ffi;
use smr_core::iov::Ranges;
use std::ffi::c_void;

/// One buffer as an iov list.
pub fn one(buf: *const c_void, len: usize) -> FiResult<Ranges> {
    Ok(one_range(one_addr(buf, len)?, len))
}

/// A buffer checked already (`one_addr`) as an iov list: an empty one has no range.
pub fn one_range(addr: usize, len: usize) -> Ranges {
    let mut r = Ranges::new();
    push_range(&mut r, addr, len);
    r
}

/// The application's buffer of `len` bytes at `addr` (checked by `one_addr`) as a slice: none
/// when it is empty, whose address may be NULL.
///
/// # Safety
/// `len` bytes at `addr` must stay readable, and unchanged, while the slice is used.
pub unsafe fn bytes<'a>(addr: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: per this function's contract, `len > 0` readable bytes at `addr`.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

/// Add a range to `r` unless it is empty.
#[inline(always)]
fn push_range(r: &mut Ranges, addr: usize, len: usize) {
    if len > 0 {
        r.push((addr, len));
    }
}

/// One of the caller's iovecs, checked by `check` (`one_addr` for a buffer of a data call,
/// `registered_addr` for memory registered for peers), added to `out`.
#[inline(always)]
fn push_iovec(
    out: &mut Ranges,
    v: ffi::iovec,
    check: impl Fn(*const c_void, usize) -> FiResult<usize>,
) -> FiResult<()> {
    push_range(out, check(v.iov_base, v.iov_len)?, v.iov_len);
    Ok(())
}

/// Memory the application registers for peers (`fi_mr_reg`), checked as a buffer of a data call
/// is (`one_addr`), but for one idiom: all of memory, from address 0 (NULL) to the end of the
/// address space or beyond, as OpenSHMEM's remote-virtual-addressing build registers
/// [0, 2^64 - 1) once for everything. Peers' accesses to it are checked as they come, against the
/// memory the process has then (CMA by the kernel; a target's own copies, `state::mr`).
pub fn registered_addr(buf: *const c_void, len: usize) -> FiResult<usize> {
    if buf.is_null() && len >= USER_SPACE_END {
        return Ok(0);
    }
    one_addr(buf, len)
}

/// One registered range (`registered_addr`) as an iov list.
pub fn registered(buf: *const c_void, len: usize) -> FiResult<Ranges> {
    Ok(one_range(registered_addr(buf, len)?, len))
}

/// Where every 64-bit Linux user address space ends, or before: 2^57 (x86-64 with 5-level page
/// tables ends at 2^56, arm64 at 2^52). A buffer that runs past it is no buffer at all.
pub const USER_SPACE_END: usize = 1 << 57;

/// One buffer, checked as `one` checks it (NULL only when empty; within a user address space,
/// which a length such as SIZE_MAX is not: max_msg_size is SIZE_MAX), by its address.
pub fn one_addr(buf: *const c_void, len: usize) -> FiResult<usize> {
    if buf.is_null() && len > 0 {
        return Err(FiError::INVAL);
    }
    match (buf as usize).checked_add(len) {
        Some(end) if end <= USER_SPACE_END => Ok(buf as usize),
        _ => Err(FiError::INVAL),
    }
}

/// The caller's iovec array of a data call as an iov list (each range checked by `one_addr`).
///
/// # Safety
/// `iov` must be NULL or point to `count` iovecs.
pub unsafe fn many(iov: *const ffi::iovec, count: usize) -> FiResult<Ranges> {
    // SAFETY: the caller's contract.
    unsafe { many_checked(iov, count, one_addr) }
}

/// `many` with each range checked by `check` (`registered_addr` for `fi_mr_regv` and
/// `fi_mr_regattr`; a direct call: the sends' path takes it through `many`).
///
/// # Safety
/// `iov` must be NULL or point to `count` iovecs.
#[inline(always)]
pub unsafe fn many_checked(
    iov: *const ffi::iovec,
    count: usize,
    check: impl Fn(*const c_void, usize) -> FiResult<usize> + Copy,
) -> FiResult<Ranges> {
    if count > IOV_LIMIT || (iov.is_null() && count > 0) {
        return Err(FiError::INVAL);
    }
    let mut out = Ranges::new();
    if count == 1 {
        // One iovec, what a *msg call usually passes: no capacity to set up, no loop.
        // SAFETY: per the contract, one readable iovec (non-NULL: checked above).
        push_iovec(&mut out, unsafe { *iov }, check)?;
        return Ok(out);
    }
    out.reserve(count);
    for i in 0..count {
        // SAFETY: per the contract, `count` readable iovecs.
        push_iovec(&mut out, unsafe { *iov.add(i) }, check)?;
    }
    Ok(out)
}

/// Copy `src` into the memory of `dest` (application or registered ranges), as far as they
/// reach; returns the bytes copied. One range, the usual case, is one copy (none: nothing).
///
/// # Safety
/// Every range must be writable memory that nothing else touches during the call.
pub unsafe fn scatter(dest: &Ranges, src: &[u8]) -> usize {
    match *dest.as_slice() {
        [] => return 0,
        [(addr, len)] => {
            let n = len.min(src.len());
            // SAFETY: per this function's contract, `len >= n` writable bytes at `addr`.
            unsafe { smr_core::copy::copy_bytes(src.as_ptr(), addr as *mut u8, n) };
            return n;
        }
        _ => {}
    }
    // SAFETY: per this function's contract.
    unsafe { smr_core::iov::LocalIov::from_ranges(dest.clone()) }.write_at(0, src)
}

/// `scatter` of bytes that come in parts (an answer spanning buffers), in order: returns the
/// bytes copied.
///
/// # Safety
/// As `scatter`.
pub unsafe fn scatter_parts(dest: &Ranges, parts: &[&[u8]]) -> usize {
    if let [one] = parts {
        // SAFETY: per this function's contract.
        return unsafe { scatter(dest, one) };
    }
    // SAFETY: per this function's contract.
    let mut dest = unsafe { smr_core::iov::LocalIov::from_ranges(dest.clone()) };
    parts.iter().fold(0, |at, part| at + dest.write_at(at, part))
}

/// Copy the memory of `src` (application or registered ranges) into `dest`, as far as either
/// reaches; returns the bytes copied. One range, the usual case, is one copy.
///
/// # Safety
/// Every range must be readable memory that nothing else changes during the call.
pub unsafe fn gather(src: &Ranges, dest: &mut [u8]) -> usize {
    match *src.as_slice() {
        [] => return 0,
        [(addr, len)] => {
            let n = len.min(dest.len());
            // SAFETY: per this function's contract, `len >= n` readable bytes at `addr`.
            unsafe { smr_core::copy::copy_bytes(addr as *const u8, dest.as_mut_ptr(), n) };
            return n;
        }
        _ => {}
    }
    // SAFETY: per this function's contract.
    unsafe { smr_core::iov::LocalIov::from_ranges(src.clone()) }.read_at(0, dest)
}

/// Bytes `off..off + len` of the concatenation of `iov`, as ranges (shorter if `iov` ends first).
pub fn sub_ranges(iov: &Ranges, mut off: usize, mut len: usize) -> Ranges {
    let mut out = Ranges::new();
    for &(base, plen) in iov {
        if len == 0 {
            break;
        }
        if off >= plen {
            off -= plen;
            continue;
        }
        let take = (plen - off).min(len);
        out.push((base + off, take));
        len -= take;
        off = 0;
    }
    out
}

/// Lend application ranges to the engine.
///
/// # Safety
/// The ranges must stay valid and untouched until the operation completes.
pub unsafe fn lend(parts: smr_core::iov::Ranges) -> smr_core::iov::LocalIov {
    // SAFETY: per this function's contract.
    unsafe { smr_core::iov::LocalIov::from_ranges(parts) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_must_lie_in_a_user_address_space() {
        let buf = [0u8; 8];
        let at = buf.as_ptr().cast::<c_void>();
        assert_eq!(one_addr(at, 8), Ok(at as usize));
        assert_eq!(one_addr(std::ptr::null(), 0), Ok(0));
        assert_eq!(one_addr(std::ptr::null(), USER_SPACE_END), Err(FiError::INVAL), "NULL with a length");
        assert_eq!(one_addr(4096 as *const c_void, USER_SPACE_END - 4096), Ok(4096), "up to the end");
        for len in [USER_SPACE_END, 1 << 60, usize::MAX] {
            assert_eq!(one_addr(at, len), Err(FiError::INVAL), "{len:#x} bytes");
        }
    }

    /// Registered memory may be all of memory from address 0 (OpenSHMEM's remote virtual
    /// addressing), and otherwise is checked as any buffer.
    #[test]
    fn all_of_memory_may_be_registered_from_address_0() {
        assert_eq!(registered_addr(std::ptr::null(), usize::MAX), Ok(0));
        assert_eq!(registered_addr(std::ptr::null(), USER_SPACE_END), Ok(0));
        assert_eq!(registered_addr(std::ptr::null(), 4096), Err(FiError::INVAL), "NULL and a length");
        let buf = [0u8; 8];
        let at = buf.as_ptr().cast::<c_void>();
        assert_eq!(registered_addr(at, 8), Ok(at as usize));
        assert_eq!(registered_addr(at, usize::MAX), Err(FiError::INVAL), "past the address space");
    }
}
