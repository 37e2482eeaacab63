//! Bulk copies into and out of shared memory, with `rep movsb` only where it measured faster.
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
//!
//! The exception is a copy of 8 KiB up to a whole SAR segment *into* shared memory that the
//! other process reads (`copy_to_shared`: an answer's pieces, a message or a write of 8-32 KiB,
//! a stream's last segment). The lines it writes were last read by that process; the
//! AVX loop's stores fetch each of them back from the other CPU first, and `rep movsb` measured
//! 2-3x faster here (two threads on the two CPUs handing a buffer back and forth: 8-64 KiB at
//! 37-55 GB/s with the loop, 101-128 GB/s with `rep movsb`; at 4 KiB the loop was ahead). Whole
//! segments keep the loop: with `rep movsb` they gained 3-9% while the host placed the two CPUs
//! close, but lost 10-30% in long streams when it placed them apart (a cache-line handoff of
//! 0.2 us instead of 0.02). Copies *out* of shared memory keep the loop too: `rep movsb` there
//! made a pushed read of 256 KiB-1 MiB 40-60% slower (docs/perf/where-the-time-goes.md,
//! forty-fourth session).

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

/// The lengths for which `copy_to_shared` takes `rep movsb`: from 8 KiB, and short of a whole
/// SAR segment (32 KiB by default), the copy a long stream repeats.
const MOVSB_MIN: usize = 8192;
const MOVSB_END: usize = 32 * 1024;

/// Copy `len` bytes from `src` to `dst`, where `dst` is shared memory that another process reads
/// (see the module's documentation for why this differs from `copy_bytes`).
///
/// # Safety
/// As `copy_bytes`.
#[inline]
pub unsafe fn copy_to_shared(src: *const u8, dst: *mut u8, len: usize) {
    // (Not under Miri, which runs no inline assembly.)
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if (MOVSB_MIN..MOVSB_END).contains(&len) {
        // SAFETY: `rep movsb` copies `len` bytes from `src` to `dst`, ascending (the direction
        // flag is clear on entry to an asm block); the ranges are valid and do not overlap by
        // this function's contract. It clobbers only the three registers named.
        unsafe {
            core::arch::asm!(
                "rep movsb",
                inout("rcx") len => _,
                inout("rsi") src => _,
                inout("rdi") dst => _,
                options(nostack, preserves_flags)
            )
        };
        return;
    }
    // SAFETY: per this function's contract.
    unsafe { copy_bytes(src, dst, len) }
}

/// The loop: one vector at the start, then four vectors at a time from the destination's next
/// 32-byte boundary, then single vectors, then one last vector that ends at the last byte (the
/// first and the last may rewrite bytes already copied, with the same values: the ranges do not
/// overlap). Aligned stores because a destination that is not (an application's buffer from
/// `malloc` sits 16 bytes past a boundary) would have every other 32-byte store split across two
/// cache lines: a 4 KiB copy to such a buffer moved 42 GB/s with unaligned stores and 57 with
/// aligned ones here, hot in cache, and one at the boundary 57-63 either way.
///
/// # Safety
/// As `copy_bytes`, with AVX present and `len` at least 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn copy_avx(src: *const u8, dst: *mut u8, len: usize) {
    use core::arch::x86_64::{
        __m256i, _mm256_loadu_si256 as load, _mm256_store_si256 as store_aligned, _mm256_storeu_si256 as store,
    };
    const W: usize = size_of::<__m256i>();
    debug_assert!(len >= W);
    // SAFETY: every load reads W bytes at `src + k` and every store writes W bytes at `dst + k`
    // with `k + W <= len` (the first pair at 0, the last at `len - W`, in range since
    // `len >= W`): inside the ranges the caller vouched for. From `head` on, `dst + k` is a
    // multiple of W (`head` takes `dst` to its next boundary and `k` grows by multiples of W),
    // as the aligned stores need; the loads need no alignment.
    unsafe {
        store(dst.cast(), load(src.cast()));
        let head = W - (dst as usize & (W - 1));
        let mut at = head;
        while at + 4 * W <= len {
            let a = load(src.add(at).cast());
            let b = load(src.add(at + W).cast());
            let c = load(src.add(at + 2 * W).cast());
            let d = load(src.add(at + 3 * W).cast());
            store_aligned(dst.add(at).cast(), a);
            store_aligned(dst.add(at + W).cast(), b);
            store_aligned(dst.add(at + 2 * W).cast(), c);
            store_aligned(dst.add(at + 3 * W).cast(), d);
            at += 4 * W;
        }
        while at + W <= len {
            store_aligned(dst.add(at).cast(), load(src.add(at).cast()));
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

    /// Copy with `copy` a source at every offset pairing into a destination filled with 0xee, for
    /// every length of `lens`: the bytes arrive, and nothing around them is touched.
    fn copies_exactly(lens: impl Iterator<Item = usize>, copy: unsafe fn(*const u8, *mut u8, usize)) {
        for len in lens {
            for (src_off, dst_off) in [(0, 0), (1, 0), (0, 7), (13, 31), (32, 3), (5, 5)] {
                let src = pattern(len + src_off, len as u8);
                let mut dst = vec![0xeeu8; len + dst_off + 64];
                // SAFETY: two distinct vectors, `src` holding `len` bytes from `src_off` and `dst`
                // at least `len` from `dst_off`; `copy` has `copy_bytes`'s contract.
                unsafe { copy(src[src_off..].as_ptr(), dst[dst_off..].as_mut_ptr(), len) };
                assert_eq!(&dst[dst_off..dst_off + len], &src[src_off..], "len {len} offsets {src_off}/{dst_off}");
                assert!(dst[..dst_off].iter().all(|&b| b == 0xee), "wrote before the range: len {len}");
                assert!(dst[dst_off + len..].iter().all(|&b| b == 0xee), "wrote past the range: len {len}");
            }
        }
    }

    /// Every length around the loop's thresholds and vector widths, at every alignment of source
    /// and destination within a vector.
    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let lens = (0..80).chain(LOOP_MIN - 40..LOOP_MIN + 200).chain([4096, 4097, 65535, 65536, 65536 + 31]);
        copies_exactly(lens, copy_bytes);
    }

    /// The AVX loop itself, below `LOOP_MIN` too (where `copy_bytes` would not call it).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx_loop_copies_every_length_from_one_vector() {
        if !std::arch::is_x86_feature_detected!("avx") {
            return;
        }
        for len in [32, 33, 63, 64, 65, 127, 128, 129, 4095, 4096, 4100] {
            // Every offset of the destination from a vector boundary: the aligned stores start
            // at a different byte of the source for each.
            for dst_off in 0..32 {
                let src = pattern(len, 3);
                let mut dst = vec![0u8; len + dst_off + 16];
                // SAFETY: AVX is present (checked); `src` and `dst` are distinct and long enough.
                unsafe { copy_avx(src.as_ptr(), dst.as_mut_ptr().add(dst_off), len) };
                assert_eq!(&dst[dst_off..dst_off + len], &src[..], "len {len} offset {dst_off}");
                assert!(dst[..dst_off].iter().all(|&b| b == 0), "wrote before the range: len {len} offset {dst_off}");
                assert!(
                    dst[dst_off + len..].iter().all(|&b| b == 0),
                    "wrote past the range: len {len} offset {dst_off}"
                );
            }
        }
    }

    /// `copy_to_shared` around its `rep movsb` threshold, at every pairing of offsets used above.
    #[test]
    fn copies_into_shared_memory_every_length_and_alignment_exactly() {
        let lens = [0, 1, 4096, MOVSB_MIN - 1, MOVSB_MIN, MOVSB_MIN + 1, 3 * MOVSB_MIN + 17, 65536 + 31];
        copies_exactly(lens.into_iter(), copy_to_shared);
    }

    #[test]
    #[should_panic(expected = "destination shorter")]
    fn a_short_destination_is_refused() {
        copy_slice(&mut [0u8; 3], &[1, 2, 3, 4]);
    }
}
