//! Lock-free stack of free buffer indices, shared by every process that maps the region.
//!
//! The head word packs a generation tag (high 32 bits) with `index + 1` (low 32 bits, 0 = empty);
//! every successful CAS bumps the tag, so a head that was popped and pushed back between our load
//! and our CAS (ABA) no longer matches. Links live in a parallel array of `u32` (`index + 1`).
//! Peers can scribble on head and links: every index read is range-checked and the retry loops
//! are bounded, so a corrupt stack yields errors, never an out-of-bounds access or a hang.

use crate::pod::CachePadded;
use crate::sync::{spin_hint, AtomicU32, AtomicU64, Ordering};

const RETRIES: u32 = 1 << 14;
/// Link value of a buffer that is popped (in use). A push first moves the link from this value,
/// so returning a buffer that is not in use (a stray or repeated release) is refused instead of
/// making the stack cyclic.
const IN_USE: u32 = u32::MAX;
const INDEX_MASK: u64 = 0xffff_ffff;

/// Shared head word.
#[repr(C)]
pub struct StackHead {
    head: CachePadded<AtomicU64>,
}

impl StackHead {
    pub fn new() -> Self {
        StackHead { head: CachePadded(AtomicU64::new(0)) }
    }
}

impl Default for StackHead {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a pop or push failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackError {
    /// No free buffer.
    Empty,
    /// The index pushed back was not popped (already free).
    NotInUse,
    /// Contention never settled, or a peer wrote an impossible index.
    Corrupt,
}

/// Test hook for the loom models (`--cfg loom` only): how many pops the generation tag alone
/// refused (the head's index was the one they loaded, but it had been popped and pushed back).
/// Loom runs a model's threads as coroutines on the test's own OS thread, so this thread-local
/// count is the sum over one test's executions, untouched by tests running in parallel.
#[cfg(loom)]
pub mod seen {
    use std::cell::Cell;

    std::thread_local! {
        pub static ABA_CAUGHT: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn count(happened: bool) {
        ABA_CAUGHT.with(|n| n.set(n.get() + u64::from(happened)));
    }
}

/// A view of one free stack.
pub struct FreeStack<'a> {
    head: &'a StackHead,
    links: &'a [AtomicU32],
}

impl<'a> FreeStack<'a> {
    pub fn new(head: &'a StackHead, links: &'a [AtomicU32]) -> Self {
        assert!(links.len() < u32::MAX as usize);
        FreeStack { head, links }
    }

    pub fn len_max(&self) -> usize {
        self.links.len()
    }

    /// Owner only, before the region is published: all buffers free, lowest index on top.
    pub fn fill(&self) {
        let n = self.links.len();
        for (i, link) in self.links.iter().enumerate() {
            let next = if i + 1 < n { i as u32 + 2 } else { 0 };
            link.store(next, Ordering::Relaxed);
        }
        let top = if n == 0 { 0 } else { 1 };
        self.head.head.store(top, Ordering::Release);
    }

    /// Take a free buffer index.
    pub fn pop(&self) -> Result<u32, StackError> {
        for _ in 0..RETRIES {
            let head = self.head.head.load(Ordering::Acquire);
            let top = (head & INDEX_MASK) as u32;
            if top == 0 {
                return Err(StackError::Empty);
            }
            let index = top - 1;
            let Some(link) = self.links.get(index as usize) else {
                return Err(StackError::Corrupt);
            };
            let next = link.load(Ordering::Relaxed);
            let new = (((head >> 32) + 1) << 32) | u64::from(next);
            match self.head.head.compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    // A garbage `next` becomes the head; the next pop range-checks it.
                    link.store(IN_USE, Ordering::Relaxed);
                    return Ok(index);
                }
                // Same top index, other tag: popped and pushed back meanwhile (ABA).
                #[cfg(loom)]
                Err(now) => seen::count(now != head && now & INDEX_MASK == head & INDEX_MASK),
                #[cfg(not(loom))]
                Err(_) => {}
            }
            spin_hint();
        }
        Err(StackError::Corrupt)
    }

    /// Return a buffer index taken by `pop`.
    pub fn push(&self, index: u32) -> Result<(), StackError> {
        let Some(link) = self.links.get(index as usize) else {
            return Err(StackError::Corrupt);
        };
        let head = self.head.head.load(Ordering::Relaxed);
        if link.compare_exchange(IN_USE, (head & INDEX_MASK) as u32, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return Err(StackError::NotInUse);
        }
        for attempt in 0..RETRIES {
            let head = if attempt == 0 { head } else { self.head.head.load(Ordering::Relaxed) };
            link.store((head & INDEX_MASK) as u32, Ordering::Relaxed);
            let new = (((head >> 32) + 1) << 32) | u64::from(index + 1);
            if self.head.head.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed).is_ok() {
                return Ok(());
            }
            spin_hint();
        }
        Err(StackError::Corrupt)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn parts(n: usize) -> (StackHead, Vec<AtomicU32>) {
        (StackHead::new(), (0..n).map(|_| AtomicU32::new(0)).collect())
    }

    #[test]
    fn pops_each_index_once_then_empty() {
        let (head, links) = parts(5);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let mut got: Vec<u32> = (0..5).map(|_| stack.pop().unwrap()).collect();
        assert_eq!(stack.pop(), Err(StackError::Empty));
        got.sort();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        stack.push(3).unwrap();
        assert_eq!(stack.pop(), Ok(3));
    }

    #[test]
    fn releasing_a_free_buffer_is_refused() {
        let (head, links) = parts(3);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        assert_eq!(stack.push(1), Err(StackError::NotInUse));
        let a = stack.pop().unwrap();
        stack.push(a).unwrap();
        assert_eq!(stack.push(a), Err(StackError::NotInUse));
        let mut got: Vec<u32> = (0..3).map(|_| stack.pop().unwrap()).collect();
        got.sort();
        assert_eq!(got, vec![0, 1, 2]);
        assert_eq!(stack.pop(), Err(StackError::Empty));
    }

    #[test]
    fn corrupt_head_and_links_give_errors() {
        let (head, links) = parts(3);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        head.head.store(77, Ordering::Relaxed);
        assert_eq!(stack.pop(), Err(StackError::Corrupt));
        assert_eq!(stack.push(3), Err(StackError::Corrupt));
        assert_eq!(stack.push(1), Err(StackError::NotInUse));
        // A link pointing out of range: the pop succeeds, the next one reports corruption.
        stack.fill();
        links[0].store(1000, Ordering::Relaxed);
        assert_eq!(stack.pop(), Ok(0));
        assert_eq!(stack.pop(), Err(StackError::Corrupt));
    }

    #[test]
    fn threads_never_hold_the_same_index() {
        let (head, links) = parts(8);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let owners: Vec<AtomicU32> = (0..8).map(|_| AtomicU32::new(0)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50_000 {
                        if let Ok(i) = stack.pop() {
                            assert_eq!(owners[i as usize].fetch_add(1, Ordering::SeqCst), 0);
                            owners[i as usize].fetch_sub(1, Ordering::SeqCst);
                            stack.push(i).unwrap();
                        }
                    }
                });
            }
        });
        let mut all: Vec<u32> = (0..8).map(|_| stack.pop().unwrap()).collect();
        all.sort();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
    }
}
