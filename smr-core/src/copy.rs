//! Bulk copies into and out of shared memory, without `rep movsb`.
//!
//! glibc's `memcpy` moves from vector loads and stores to the `rep movsb` instruction at 2 KiB
//! (its `x86_rep_movsb_threshold`). On the AMD EPYC VMs this project is measured on, that
//! instruction crawled on the copies a shared-memory transport makes: in `fi_rma_bw -o read`
//! with 4 KiB reads, 37% of both processes' time went to `rep movsb` and the test moved 760 MB/s;
//! with the threshold raised out of the way (`GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=`
//! 100000000) it moved 3,480 MB/s, and 3 KiB reads went from 770 to 3,110 MB/s
//! (docs/perf/where-the-time-goes.md). So every copy of a payload between an application's
//! memory and a region (inject buffers, SAR segments, answer buffers, remote writes) comes
//! through here: short copies still take `memcpy` (its vector paths), longer ones a loop of
//! unaligned 32-byte AVX loads and stores (`memcpy` again on the rare x86_64 without AVX).

/// From this length on, copies take the vector loop here instead of `memcpy`: where glibc's
/// `memcpy` would start using `rep movsb`.
const LOOP_MIN: usize = 2048;

/// Copy `len` bytes from `src` to `dst`.
///
/// # Safety
/// `src` must be valid for `len` bytes of reads and `dst` for `len` bytes of writes, and the two
/// ranges must not overlap.
#[inline]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= LOOP_MIN && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: AVX is present (checked), `len` is at least one vector, and the ranges are as
        // this function's contract says.
        return unsafe { copy_avx(src, dst, len) };
    }
    // SAFETY: per this function's contract.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, len) }
}

/// The loop: four vectors at a time, then single vectors, then one last vector that ends at
/// the last byte (it may rewrite bytes already copied, with the same values: the ranges do not
/// overlap).
///
/// # Safety
/// As `copy_bytes`, with AVX present and `len` at least 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn copy_avx(src: *const u8, dst: *mut u8, len: usize) {
    use core::arch::x86_64::{__m256i, _mm256_loadu_si256 as load, _mm256_storeu_si256 as store};
    const W: usize = size_of::<__m256i>();
    debug_assert!(len >= W);
    // SAFETY: every load reads W bytes at `src + k` and every store writes W bytes at `dst + k`
    // with `k + W <= len` (the last pair at `len - W`, in range since `len >= W`): inside the
    // ranges the caller vouched for. Unaligned loads and stores need no alignment.
    unsafe {
        let mut at = 0;
        while at + 4 * W <= len {
            let a = load(src.add(at).cast());
            let b = load(src.add(at + W).cast());
            let c = load(src.add(at + 2 * W).cast());
            let d = load(src.add(at + 3 * W).cast());
            store(dst.add(at).cast(), a);
            store(dst.add(at + W).cast(), b);
            store(dst.add(at + 2 * W).cast(), c);
            store(dst.add(at + 3 * W).cast(), d);
            at += 4 * W;
        }
        while at + W <= len {
            store(dst.add(at).cast(), load(src.add(at).cast()));
            at += W;
        }
        if at < len {
            let last = len - W;
            store(dst.add(last).cast(), load(src.add(last).cast()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copy `src` into the start of `dst` (which must be at least as long).
    fn copy_slice(dst: &mut [u8], src: &[u8]) {
        assert!(dst.len() >= src.len(), "copy_slice: destination shorter than source");
        // SAFETY: two distinct borrows (one shared, one exclusive) cannot overlap; `dst` holds
        // at least `src.len()` bytes.
        unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(151).wrapping_add(seed)).collect()
    }

    /// Every length around the loop's thresholds and vector widths, at every alignment of source
    /// and destination within a vector: the bytes arrive, and nothing around them is touched.
    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let lens = (0..80).chain(LOOP_MIN - 40..LOOP_MIN + 200).chain([4096, 4097, 65535, 65536, 65536 + 31]);
        for len in lens {
            for (src_off, dst_off) in [(0, 0), (1, 0), (0, 7), (13, 31), (32, 3), (5, 5)] {
                let src = pattern(len + src_off, len as u8);
                let mut dst = vec![0xeeu8; len + dst_off + 64];
                copy_slice(&mut dst[dst_off..], &src[src_off..]);
                assert_eq!(&dst[dst_off..dst_off + len], &src[src_off..], "len {len} offsets {src_off}/{dst_off}");
                assert!(dst[..dst_off].iter().all(|&b| b == 0xee), "wrote before the range: len {len}");
                assert!(dst[dst_off + len..].iter().all(|&b| b == 0xee), "wrote past the range: len {len}");
            }
        }
    }

    /// The AVX loop itself, below `LOOP_MIN` too (where `copy_bytes` would not call it).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx_loop_copies_every_length_from_one_vector() {
        if !std::arch::is_x86_feature_detected!("avx") {
            return;
        }
        for len in [32, 33, 63, 64, 65, 127, 128, 129, 4095, 4096, 4100] {
            let src = pattern(len, 3);
            let mut dst = vec![0u8; len + 16];
            // SAFETY: AVX is present (checked); `src` and `dst` are distinct and long enough.
            unsafe { copy_avx(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert_eq!(&dst[..len], &src[..]);
            assert!(dst[len..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    #[should_panic(expected = "destination shorter")]
    fn a_short_destination_is_refused() {
        copy_slice(&mut [0u8; 3], &[1, 2, 3, 4]);
    }
}
