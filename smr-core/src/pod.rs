//! Plain-old-data: types that may be copied to and from shared memory byte for byte.

/// A type for which every bit pattern is a valid value and which holds no pointers.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs made of integers and integer arrays, with no padding
/// that matters: a peer may write any bytes into them.
pub unsafe trait Pod: Copy + 'static {
    /// How many leading bytes of this value carry information. Rings copy only these, so a
    /// small message touches one cache line instead of the whole slot. The answer may come
    /// from peer-written bytes: callers clamp it to the size of the type.
    fn wire_len(&self) -> usize {
        core::mem::size_of::<Self>()
    }
}

/// Cache-line padding for contended counters: 128 bytes, because x86_64 prefetches lines in pairs.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct CachePadded<T>(pub T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
