//! Lock-free stack of free buffer indices, shared by every process that maps the region.
//!
//! The head word packs a generation tag (high 32 bits) with `index + 1` (low 32 bits, 0 = empty);
//! every successful CAS bumps the tag, so a head that was popped and pushed back between our load
//! and our CAS (ABA) no longer matches. Links live in a parallel array of `u32` (`index + 1`).
//! Peers can scribble on head and links: every index read is range-checked and the retry loops
//! are bounded, so a corrupt stack yields errors, never an out-of-bounds access or a hang.
//!
//! A scribbled stack would stay broken: every pop answers `Corrupt` (or `Empty`), or buffers cut
//! off from the list never come out again. The owner therefore checks the stack on its
//! liveness tick (`repair`, the slow path only). It walks the list from a head it read; the
//! stack needs repair if the walk meets an index out of range, a cycle or a popped buffer
//! (impossible for an honest list: every successful pop and push bumps the head's tag, and a
//! pop marks its buffer `IN_USE` (Release) only after its CAS moved the head, so a walk that read
//! that mark (Acquire) also sees the head moved and gives up), or if some buffer is neither in
//! the list nor marked `IN_USE` (an orphan). An honest run leaves an orphan only for an
//! instant: a push between its link write and its head CAS, or a pop between its head CAS and its
//! `IN_USE` mark. So the owner acts only when it saw the same head and the same finding on
//! `patience` checks in a row (the caller makes that `stall_timeout` or more), and never on a
//! buffer *spoken for*: one that a pop or a push of a process that may still run announced
//! before its CAS (the caller's `spoken_for`: the pending records of `held`, which the owner
//! clears only once it has decided about a holder that is gone). A live process stopped in that
//! one step, however long (SIGSTOP, a debugger, an oversubscribed host), so keeps its buffer;
//! relinked, the buffer could be popped by another process before the stopped one's mark, and
//! held by two. An orphan nobody speaks for is a dead process's, or cut off by a scribble, and
//! goes back (a sender killed in its pop, whose record the owner has decided about).
//! The rebuild detaches the list (CAS of the head it walked to an empty head), links every
//! buffer not marked `IN_USE` and not spoken for in index order, and installs that list with a
//! CAS from the empty head.
//!
//! Whatever a scribbler does, a pop never hands out a buffer that is marked `IN_USE` (popped and
//! not yet returned): when the top's link says `IN_USE` and the head has not moved, the stack
//! is corrupt and the pop says so instead of handing the buffer out a second time.
//!
//! A pop by a process that may die first (a sender taking a buffer of its receiver's pool)
//! tells its caller the index it tries before each head CAS, and tags the mark with the
//! caller's name (`pop_as`), so that whoever decides about a dead popper's record can tell
//! whether its pop took the buffer (`popped_as`; `held`).

use crate::pod::CachePadded;
use crate::sync::{fence, spin_hint, AtomicU32, AtomicU64, Ordering};

const RETRIES: u32 = 1 << 14;
/// Link bit of a buffer that is popped (in use); the other 31 bits name who popped it
/// (`pop_as`: a sender's slot in the owner's peer table), all ones for an untagged pop. A push
/// first moves the link from an in-use value, so returning a buffer that is not in use (a stray
/// or repeated release) is refused instead of making the stack cyclic. Free links are `index + 1`
/// (pools are far below 2^31 buffers: `new`).
const IN_USE_BIT: u32 = 1 << 31;
/// The mark of an untagged pop (`pop`).
const IN_USE: u32 = u32::MAX;
/// The tag of an untagged pop; `pop_as` takes tags below it.
pub const UNTAGGED: u32 = IN_USE & !IN_USE_BIT;

fn in_use(link: u32) -> bool {
    link & IN_USE_BIT != 0
}
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

    /// loom models only: overwrite the head word, as a scribbling peer would.
    #[cfg(loom)]
    pub fn scribble(&self, head: u64) {
        self.head.store(head, Ordering::Relaxed);
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
        assert!(links.len() < IN_USE_BIT as usize);
        FreeStack { head, links }
    }

    /// No free buffer at this instant (a peer may push one right after): one load of the head.
    pub fn looks_empty(&self) -> bool {
        self.head.head.load(Ordering::Relaxed) & INDEX_MASK == 0
    }

    /// True if buffer `index` is popped and not yet pushed back (false for one out of range).
    pub fn in_use(&self, index: u32) -> bool {
        self.links.get(index as usize).is_some_and(|l| in_use(l.load(Ordering::Relaxed)))
    }

    /// True if buffer `index` is in use, popped by `pop_as(tag, ..)` (false for one out of range).
    /// Only the popper and, after it, whoever the buffer is passed to write its link, so while
    /// neither pushed it back the answer stays.
    pub fn popped_as(&self, index: u32, tag: u32) -> bool {
        tag < UNTAGGED && self.links.get(index as usize).is_some_and(|l| l.load(Ordering::Acquire) == IN_USE_BIT | tag)
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
        self.pop_as(UNTAGGED, |_| {})
    }

    /// `pop`, marking the buffer as popped by `tag` (below `UNTAGGED`), and telling `announce`
    /// the index it is about to take before each attempt's head CAS. A popper that may die
    /// records the announced index first: whoever decides about it later knows which buffer
    /// it may have taken, and `popped_as` says whether it did (until the buffer is pushed back).
    #[inline(always)]
    pub fn pop_as(&self, tag: u32, mut announce: impl FnMut(u32)) -> Result<u32, StackError> {
        let mark = IN_USE_BIT | tag.min(UNTAGGED);
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
            if in_use(next) {
                // The top was popped: by another pop since we read the head (then the head
                // moved; the fence pairs with its Release mark so that we see that), or it is
                // in the list twice (scribbled): never hand out a buffer someone holds.
                fence(Ordering::Acquire);
                if self.head.head.load(Ordering::Relaxed) == head {
                    return Err(StackError::Corrupt);
                }
                spin_hint();
                continue;
            }
            let new = (((head >> 32) + 1) << 32) | u64::from(next);
            // Before the CAS (whose release orders it first): a popper that dies after the CAS
            // has announced the buffer it took.
            announce(index);
            match self.head.head.compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    // A garbage `next` becomes the head; the next pop range-checks it.
                    // Release: a `repair` walk that reads this mark also sees our head CAS.
                    link.store(mark, Ordering::Release);
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
        self.push_refilling(index).map(|_| ())
    }

    /// `push`, saying whether the stack was empty until this push (`Ok(true)`). A sender that
    /// found it empty may be waiting for a buffer: the first push after the empty head it read
    /// is this one (a pop cannot move an empty head), so whoever makes such a push can wake it.
    pub fn push_refilling(&self, index: u32) -> Result<bool, StackError> {
        let Some(link) = self.links.get(index as usize) else {
            return Err(StackError::Corrupt);
        };
        let head = self.head.head.load(Ordering::Relaxed);
        // Release on the link (here and below, free on x86): an owner's `repair` walk that reads
        // a link we wrote also sees the head as it was when we took the buffer, so it cannot take
        // a list in motion for an impossible one (loom model `free_stack_repair_inspect_*`).
        let mark = link.load(Ordering::Relaxed);
        if !in_use(mark)
            || link.compare_exchange(mark, (head & INDEX_MASK) as u32, Ordering::Release, Ordering::Relaxed).is_err()
        {
            return Err(StackError::NotInUse);
        }
        for attempt in 0..RETRIES {
            let head = if attempt == 0 { head } else { self.head.head.load(Ordering::Relaxed) };
            link.store((head & INDEX_MASK) as u32, Ordering::Release);
            let new = (((head >> 32) + 1) << 32) | u64::from(index + 1);
            if self.head.head.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed).is_ok() {
                return Ok(head & INDEX_MASK == 0);
            }
            spin_hint();
        }
        Err(StackError::Corrupt)
    }
}

/// What the owner remembers between its checks of one stack (`FreeStack::repair`).
#[derive(Debug, Default)]
pub struct StackCheck {
    /// Scratch: which buffers the walk met.
    seen: Vec<bool>,
    /// The head and a fingerprint of what was wrong at the last check that found something.
    last: Option<(u64, u64)>,
    /// How many checks in a row found exactly that.
    times: u32,
}

/// What one check found wrong with a stack walked from one head value (`FreeStack::inspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    Sound,
    /// Moved while we walked: someone is using it, look again next time.
    Moving,
    /// The list meets an index out of range, a cycle or a popped buffer: no honest run leaves
    /// that. The value tells one finding from another.
    Impossible(u64),
    /// Sound, but some buffers are neither in the list nor marked `IN_USE`: cut off by a
    /// scribble, or (for an instant) between a pop's or a push's head CAS and its link.
    Orphans(u64),
}

impl FreeStack<'_> {
    /// Owner only, on the slow path (its liveness tick): if the stack is broken (see the module
    /// comment) and stayed broken in the same way for `patience` checks in a row with its head
    /// unmoved, rebuild it from every buffer not marked `IN_USE`. True if it did.
    ///
    /// On a scribbled stack this may hand back a buffer whose `IN_USE` mark was scribbled away
    /// while a sender held it (the scribbler could as well have written into its data).
    ///
    /// `spoken_for` lists the buffers that a pop or push in progress announced (see the module's
    /// comment): they are neither orphans nor relinked. It is asked only when something is wrong,
    /// and always after the links it judges were read, so that it sees the announcement of any
    /// pusher whose link it read as free (the announcement precedes the push's release of the
    /// link) and of any popper whose head CAS the walk saw (it precedes that CAS).
    pub fn repair(&self, check: &mut StackCheck, patience: u32, spoken_for: impl Fn() -> Vec<u32>) -> bool {
        let walked = self.head.head.load(Ordering::Acquire);
        let fingerprint = match self.inspect_from(walked, &mut check.seen, &spoken_for) {
            Finding::Sound | Finding::Moving => {
                check.last = None;
                return false;
            }
            Finding::Impossible(f) | Finding::Orphans(f) => f,
        };
        if check.last == Some((walked, fingerprint)) {
            check.times += 1;
        } else {
            check.last = Some((walked, fingerprint));
            check.times = 1;
        }
        if check.times < patience {
            return false;
        }
        check.last = None;
        // Detach the list: from here on no pop reaches the buffers we relink.
        let empty = ((walked >> 32) + 1) << 32;
        if self.head.head.compare_exchange(walked, empty, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        let mut free: Vec<u32> =
            (0..self.links.len() as u32).filter(|&i| !in_use(self.links[i as usize].load(Ordering::Acquire))).collect();
        let spoken = spoken_for();
        free.retain(|i| !spoken.contains(i));
        for pair in free.windows(2) {
            self.links[pair[0] as usize].store(pair[1] + 1, Ordering::Relaxed);
        }
        if let Some(&last) = free.last() {
            self.links[last as usize].store(0, Ordering::Relaxed);
        }
        let top = free.first().map_or(0, |&i| u64::from(i) + 1);
        let rebuilt = (((empty >> 32) + 1) << 32) | top;
        // Fails only if a sender returned a buffer in the instant since the detach: its list stays
        // (free buffers only), the rest of ours waits for the next checks, which find it orphaned.
        self.head.head.compare_exchange(empty, rebuilt, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Walk the list from its head and say what is wrong with it (what `repair` acts on).
    /// (Nothing spoken for: every buffer in a pop's or push's step is an orphan.)
    pub fn inspect(&self, check: &mut StackCheck) -> Finding {
        self.inspect_from(self.head.head.load(Ordering::Acquire), &mut check.seen, &Vec::new)
    }

    /// `inspect` from `walked`, the head just read; the buffers `spoken_for` names are no orphans.
    fn inspect_from(&self, walked: u64, seen: &mut Vec<bool>, spoken_for: &dyn Fn() -> Vec<u32>) -> Finding {
        let n = self.links.len();
        seen.clear();
        seen.resize(n, false);
        let mut cur = (walked & INDEX_MASK) as u32;
        let mut impossible = false;
        while cur != 0 {
            let index = cur as usize - 1;
            // Out of range (`IN_USE` included: a popped buffer in the list) or met twice.
            if index >= n || seen[index] {
                impossible = true;
                break;
            }
            seen[index] = true;
            cur = self.links[index].load(Ordering::Acquire);
        }
        if self.head.head.load(Ordering::Acquire) != walked {
            return Finding::Moving;
        }
        if impossible {
            return Finding::Impossible(u64::from(cur));
        }
        // Orphans: neither in the list nor held, nor spoken for (asked after the links were
        // read, and only if there are any). Their indices and links are the fingerprint, so that
        // a pusher that moved on in between restarts the count.
        let mut orphans: Vec<(u32, u32)> = (self.links.iter().enumerate())
            .map(|(i, link)| (i as u32, link.load(Ordering::Acquire)))
            .filter(|&(i, l)| !seen[i as usize] && !in_use(l))
            .collect();
        if !orphans.is_empty() {
            let spoken = spoken_for();
            orphans.retain(|(i, _)| !spoken.contains(i));
        }
        if orphans.is_empty() {
            return Finding::Sound;
        }
        let fold = |f: u64, &(i, l): &(u32, u32)| (f ^ u64::from(i) << 32 ^ u64::from(l)).wrapping_mul(0x100_0000_01b3);
        Finding::Orphans(orphans.iter().fold(0, fold))
    }
}

#[cfg(all(test, not(loom)))]
impl FreeStack<'_> {
    /// Tests: `pop_as`, stopped between its head CAS and its `IN_USE` mark (the link still holds
    /// the next index it had), as a popper that a signal or the scheduler stopped there leaves it.
    pub(crate) fn pop_stopped_before_mark(&self, tag: u32, announce: impl FnMut(u32)) -> u32 {
        let top = (self.head.head.load(Ordering::Relaxed) & INDEX_MASK) as u32;
        let next = self.links[top as usize - 1].load(Ordering::Relaxed);
        let index = self.pop_as(tag, announce).expect("a free buffer");
        assert_eq!(index, top - 1, "another pop ran meanwhile");
        self.links[index as usize].store(next, Ordering::Relaxed);
        index
    }

    /// Tests: the stopped pop goes on, and marks its buffer.
    pub(crate) fn finish_stopped_pop(&self, index: u32, tag: u32) {
        self.links[index as usize].store(IN_USE_BIT | tag, Ordering::Release);
    }
}

/// Tests: the head and links of an `n`-buffer stack on the heap, not yet filled.
#[cfg(all(test, not(loom)))]
pub(crate) fn heap_parts(n: usize) -> (StackHead, Vec<AtomicU32>) {
    (StackHead::new(), (0..n).map(|_| AtomicU32::new(0)).collect())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pops_each_index_once_then_empty() {
        let (head, links) = heap_parts(5);
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
        let (head, links) = heap_parts(3);
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
        let (head, links) = heap_parts(3);
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

    /// Every buffer the stack hands out now, sorted (each pushed back afterwards).
    fn all_free(stack: &FreeStack<'_>) -> Vec<u32> {
        let mut got: Vec<u32> = std::iter::from_fn(|| stack.pop().ok()).collect();
        got.sort();
        for &i in &got {
            stack.push(i).unwrap();
        }
        got
    }

    #[test]
    fn owner_repairs_a_scribbled_head_and_links() {
        let (head, links) = heap_parts(6);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let mut check = StackCheck::default();
        assert!(!stack.repair(&mut check, 1, Vec::new), "a full, honest stack is left alone");
        let held = [stack.pop().unwrap(), stack.pop().unwrap()];
        assert!(!stack.repair(&mut check, 1, Vec::new), "a stack with buffers out is left alone");
        let top = |head: &StackHead| (head.head.load(Ordering::Relaxed) & INDEX_MASK) as usize;
        // Head out of range: pops fail until the owner repairs it, after `patience` checks.
        head.head.store(0x1234_0000_0077, Ordering::Relaxed);
        assert_eq!(stack.pop(), Err(StackError::Corrupt));
        assert!(!stack.repair(&mut check, 3, Vec::new));
        assert!(!stack.repair(&mut check, 3, Vec::new));
        assert!(stack.repair(&mut check, 3, Vec::new));
        assert_eq!(all_free(&stack), vec![2, 3, 4, 5], "the held buffers stay out");
        // A cycle through the links.
        let t = top(&head);
        links[t - 1].store(t as u32, Ordering::Relaxed);
        assert!(stack.repair(&mut check, 1, Vec::new));
        assert_eq!(all_free(&stack), vec![2, 3, 4, 5]);
        // A held buffer's index scribbled into the list: never handed out twice.
        let t = top(&head);
        links[t - 1].store(held[0] + 1, Ordering::Relaxed);
        assert_eq!(stack.pop(), Ok(t as u32 - 1));
        assert_eq!(stack.pop(), Err(StackError::Corrupt), "held buffer {} handed out again", held[0]);
        stack.push(t as u32 - 1).unwrap();
        assert!(stack.repair(&mut check, 1, Vec::new));
        assert_eq!(all_free(&stack), vec![2, 3, 4, 5]);
        // A head scribbled to "empty": every free buffer an orphan.
        head.head.store(0x99 << 32, Ordering::Relaxed);
        assert_eq!(stack.pop(), Err(StackError::Empty));
        assert!(stack.repair(&mut check, 1, Vec::new));
        assert_eq!(all_free(&stack), vec![2, 3, 4, 5]);
        // A link cut short: the buffers behind it are orphans.
        let t = top(&head);
        links[t - 1].store(0, Ordering::Relaxed);
        assert_eq!(all_free(&stack).len(), 1);
        assert!(!stack.repair(&mut check, 2, Vec::new));
        assert!(stack.repair(&mut check, 2, Vec::new));
        assert_eq!(all_free(&stack), vec![2, 3, 4, 5]);
        for i in held {
            stack.push(i).unwrap();
        }
        assert!(!stack.repair(&mut check, 1, Vec::new));
        assert_eq!(all_free(&stack), vec![0, 1, 2, 3, 4, 5]);
    }

    /// A pop stopped between its head CAS and its `IN_USE` mark, and a push stopped between
    /// freeing its link and its head CAS, each leave an orphan for as long as they are stopped.
    /// Announced (`spoken_for`), neither is relinked, however many checks find it, nor by a
    /// rebuild that another orphan causes; so when the stopped pop goes on, no other pop has
    /// the buffer too. Unannounced (a dead process's), it goes back.
    #[test]
    fn a_stopped_pop_or_push_keeps_its_buffer_through_repairs() {
        let (head, links) = heap_parts(4);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let mut check = StackCheck::default();
        // The pop of buffer 0, stopped after its CAS: its link still holds its old next.
        assert_eq!(stack.pop_stopped_before_mark(7, |_| {}), 0);
        // The push of buffer 1, stopped after freeing its link (to the head it read).
        assert_eq!(stack.pop(), Ok(1));
        links[1].store((head.head.load(Ordering::Relaxed) & INDEX_MASK) as u32, Ordering::Relaxed);
        let spoken = || vec![0, 1];
        assert!(matches!(stack.inspect(&mut check), Finding::Orphans(_)), "two buffers out of the list, not held");
        for _ in 0..10 {
            assert!(!stack.repair(&mut check, 1, spoken), "nothing unspoken for is wrong");
        }
        // Another buffer cut off: the rebuild gives it back and leaves the two alone.
        assert_eq!(stack.pop(), Ok(2));
        links[2].store(0, Ordering::Relaxed);
        assert!(stack.repair(&mut check, 1, spoken));
        assert_eq!(all_free(&stack), vec![2, 3], "a stopped pop's or push's buffer was relinked");
        // The pop goes on (its mark) and hands its buffer back; the push is forgotten (its process
        // died): unspoken for, its orphan goes back.
        stack.finish_stopped_pop(0, 7);
        stack.push(0).unwrap();
        assert!(!stack.repair(&mut check, 2, Vec::new));
        assert!(stack.repair(&mut check, 2, Vec::new));
        assert_eq!(all_free(&stack), vec![0, 1, 2, 3]);
    }

    /// A pop marks its buffer as its tag's (`popped_as`), and an untagged pop (the owner's own,
    /// `pop`) as nobody's: a dead holder whose record names a buffer the owner took must not
    /// have it given back.
    #[test]
    fn a_pop_is_known_by_its_own_tag_only() {
        let (head, links) = heap_parts(3);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let owners = stack.pop().unwrap();
        let fifth = stack.pop_as(5, |_| {}).unwrap();
        let first = stack.pop_as(0, |_| {}).unwrap();
        for tag in [0, 1, 5, UNTAGGED - 1, UNTAGGED, u32::MAX] {
            assert!(!stack.popped_as(owners, tag), "an untagged pop is known as tag {tag:#x}'s");
            assert_eq!(stack.popped_as(fifth, tag), tag == 5, "tag 5's pop asked for tag {tag:#x}");
            assert_eq!(stack.popped_as(first, tag), tag == 0, "tag 0's pop asked for tag {tag:#x}");
        }
        stack.push(fifth).unwrap();
        assert!(!stack.popped_as(fifth, 5), "a buffer pushed back is still known as popped");
        assert!(!stack.popped_as(3, 5), "an index out of range");
    }

    /// A push says whether the stack was empty until it (a waiting sender's cue), and only then.
    #[test]
    fn a_push_onto_an_empty_stack_says_so() {
        let (head, links) = heap_parts(3);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let all: Vec<u32> = (0..3).map(|_| stack.pop().unwrap()).collect();
        assert!(stack.looks_empty());
        assert_eq!(stack.push_refilling(all[1]), Ok(true));
        assert!(!stack.looks_empty());
        assert_eq!(stack.push_refilling(all[0]), Ok(false));
        assert_eq!(stack.push_refilling(all[2]), Ok(false));
    }

    /// The generation of the head word (its high half).
    fn generation(head: &StackHead) -> u64 {
        head.head.load(Ordering::Relaxed) >> 32
    }

    /// Every change of the head moves its generation on by one, a repair by two (its detach and
    /// its rebuild): a head that went from A to B and back to A is never the one a stalled pop
    /// or push read, so their CAS fails instead of installing a next link that is stale.
    #[test]
    fn every_change_of_the_head_moves_its_generation_on() {
        let (head, links) = heap_parts(4);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let mut was = generation(&head);
        let mut moved_by = |by: u64, what: &str| {
            let now = generation(&head);
            assert_eq!(now, was + by, "{what}: generation {was} -> {now}");
            was = now;
        };
        let a = stack.pop().unwrap();
        moved_by(1, "a pop");
        let b = stack.pop_as(3, |_| {}).unwrap();
        moved_by(1, "a tagged pop");
        stack.push(a).unwrap();
        moved_by(1, "a push");
        // A link cut short: the buffers behind it are orphans, which a repair links again.
        let top = (head.head.load(Ordering::Relaxed) & INDEX_MASK) as usize;
        links[top - 1].store(0, Ordering::Relaxed);
        assert!(stack.repair(&mut StackCheck::default(), 1, Vec::new));
        moved_by(2, "a repair");
        stack.push(b).unwrap();
        moved_by(1, "a push after the repair");
        assert_eq!(all_free(&stack), vec![0, 1, 2, 3]);
    }

    /// The owner acts on orphans only when the same ones stayed for `patience` checks: other
    /// orphans under the same head (a push that moved on, another buffer cut off) start the
    /// count again.
    #[test]
    fn other_orphans_start_the_count_again() {
        let (head, links) = heap_parts(4);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let (a, b) = (stack.pop().unwrap(), stack.pop().unwrap());
        let mut check = StackCheck::default();
        // `a` cut off: out of the list and not marked in use (a link of 0 reads as free).
        links[a as usize].store(0, Ordering::Relaxed);
        assert!(!stack.repair(&mut check, 2, Vec::new), "one check of orphan {a}");
        // Now `b` instead, the head unmoved.
        links[a as usize].store(IN_USE, Ordering::Relaxed);
        links[b as usize].store(0, Ordering::Relaxed);
        assert!(!stack.repair(&mut check, 2, Vec::new), "a check of another orphan was counted as the same");
        assert!(stack.repair(&mut check, 2, Vec::new), "two checks of orphan {b}");
        stack.push(a).unwrap();
        assert_eq!(all_free(&stack), vec![0, 1, 2, 3]);
    }

    /// The ABA case, played out: a pop reads the head (top A, next B), and before its CAS
    /// (`announce`) others take A and B and give A back over a buffer they held before, so the
    /// head's top is A again with another next. The stalled pop must see that and retry, not
    /// install B, which is held, as the top. Played twice: the head's last change a push of A,
    /// and a pop (of B, pushed over A and taken again), so that a generation that a pop or a
    /// push sets back or starts again is caught either way.
    #[test]
    fn a_pop_stalled_while_its_top_went_and_came_back_retries() {
        for last_a_pop in [false, true] {
            let (head, links) = heap_parts(4);
            let stack = FreeStack::new(&head, &links);
            stack.fill();
            let held_before = stack.pop().unwrap();
            let (mut played, mut inner_held) = (false, None);
            let got = stack
                .pop_as(UNTAGGED, |top| {
                    if std::mem::replace(&mut played, true) {
                        return;
                    }
                    let a = stack.pop().unwrap();
                    assert_eq!(a, top);
                    let b = stack.pop().unwrap();
                    stack.push(held_before).unwrap();
                    stack.push(a).unwrap();
                    if last_a_pop {
                        stack.push(b).unwrap();
                        assert_eq!(stack.pop(), Ok(b));
                    }
                    inner_held = Some(b);
                })
                .unwrap();
            let b = inner_held.unwrap();
            assert_ne!(got, b, "the held buffer was handed out again (last change a pop: {last_a_pop})");
            // Honest pops hand out the rest, each once: never the held B, never a corrupt stack.
            let mut rest: Vec<u32> = std::iter::from_fn(|| stack.pop().ok()).collect();
            assert_eq!(stack.pop(), Err(StackError::Empty), "last change a pop: {last_a_pop}");
            rest.extend([got, b]);
            rest.sort();
            assert_eq!(rest, vec![0, 1, 2, 3]);
        }
    }

    #[test]
    fn threads_never_hold_the_same_index() {
        let (head, links) = heap_parts(8);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let owners: Vec<AtomicU32> = (0..8).map(|_| AtomicU32::new(0)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    // Miri interprets every step: a few hundred rounds still interleave there.
                    for _ in 0..if cfg!(miri) { 200 } else { 50_000 } {
                        match stack.pop() {
                            Ok(i) => {
                                assert_eq!(owners[i as usize].fetch_add(1, Ordering::SeqCst), 0);
                                owners[i as usize].fetch_sub(1, Ordering::SeqCst);
                                stack.push(i).unwrap();
                            }
                            // Contention is no corruption: a pop whose top another took retries.
                            Err(e) => assert_eq!(e, StackError::Empty),
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
