//! Our SAR buffers go back to their free stack cold (and our inject buffers, where asked).
//!
//! A sender copying a segment into a SAR buffer of ours writes cache lines that we read last,
//! when we copied the previous segment out of that buffer. The free stack hands out the buffer
//! pushed last, so without this the sender got the very buffer we had just read: every line it
//! wrote had first to be taken out of our core's caches, and on the project's AMD EPYC VMs those
//! writes, not the copies themselves, set SAR's pace. A throwaway two-process test (one process
//! writes n bytes into a shared buffer, the other copies them out; host handoff 0.034 us),
//! rotating through K buffers, us per transfer:
//!
//! | n | K = 1 | K = 32 | K = 64 |
//! |---:|---:|---:|---:|
//! | 16 KiB | 2.48 | 2.84 | 1.89 |
//! | 64 KiB | 11.48 | 4.08 | 4.13 |
//!
//! The writer's share fell from 9.4 to 2.1 us at 64 KiB once the buffers it wrote had left the
//! reader's 1 MiB L2 for the shared L3 (the reader's share stayed at 2.0 us). So the owner gives
//! a SAR buffer back only after it has copied out of `hold` others (`Params::sar_hold`; the
//! engine ping-pong's SAR at 64 KiB: 10.8 -> 3.7-5.6 us one-way, docs/perf/protocols.md).
//!
//! Inject buffers (messages of 1-4 KiB, answers of reads up to 4 KiB) can go back the same way
//! (`Params::inject_hold`, FI_RSHM_INJECT_HOLD), but do not by default: at 4 KiB it depends on
//! how far apart the two CPUs are. `rshm-fi-bench` tagged, 50 alternated rounds on the
//! project's VM, median us per message, hold 0 against the most:
//!
//! | host state (8 B one-way) | 4 KiB ping-pong one-way | 4 KiB stream |
//! |---|---|---|
//! | CPUs close (< 0.31 us, the bench's reference) | 0.654 / 0.657 | 0.311 / 0.384 |
//! | CPUs apart (0.31-0.5 us) | 0.937 / 0.771 | 0.589 / 0.427 |
//!
//! A throwaway C ping-pong of 4 KiB through K shared buffers a direction (32-byte AVX copies)
//! agreed where the CPUs were apart (K = 1: 2.4 us one way, K = 128: 1.8) and, unlike rshm,
//! gained where they were close too (0.64 against 0.39-0.42).
//!
//! Held buffers stay `IN_USE` in the stack (popped, not yet pushed), so its repair finds no
//! orphans among them, and a region is only ever ours to hold back. Senders are never starved
//! by it: when the stack is empty as we give a buffer back, one more held buffer goes back with
//! it, so under pressure the held queue drains by one a segment; and our own answer buffers
//! (`reserve_answer_buf`) take a held one when the stack is empty.

use crate::free_stack::FreeStack;
use std::collections::VecDeque;

/// Buffers we copied out of, oldest first, not yet back on our free stack.
#[derive(Debug)]
pub(super) struct ColdReuse {
    held: VecDeque<u32>,
    /// A bit per buffer of the pool: set while it is in `held` (a give-back checks a peer's
    /// name against it in one look, where the queue would take up to `hold` of them).
    is_held: Vec<u64>,
    hold: usize,
}

impl ColdReuse {
    /// Hold back up to `hold` buffers of a pool of `count`, leaving at least an eighth of the
    /// pool (and at least one buffer) to circulate.
    pub(super) fn new(hold: usize, count: u64) -> Self {
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        let hold = hold.min(count.saturating_sub((count / 8).max(1)));
        let words = if hold == 0 { 0 } else { count.div_ceil(64) };
        ColdReuse { held: VecDeque::with_capacity(hold + 1), is_held: vec![0; words], hold }
    }

    /// We are done with `buf` (copied out of, or its answer read): hold it, and give back the
    /// oldest held buffer once more than `hold` wait, or whenever the stack is empty. True if a
    /// buffer went onto the stack while it was empty (`FreeStack::push_refilling`).
    pub(super) fn give_back(&mut self, stack: &FreeStack<'_>, buf: u32) -> bool {
        if self.hold == 0 {
            return stack.push_refilling(buf) == Ok(true);
        }
        // `buf` was named by a peer (a segment's buffer): only a buffer popped from the stack,
        // and not held already, is held; a free or repeated name is dropped, as the stack's push
        // would refuse it, so that `take` never hands out a buffer the stack holds too.
        if !stack.in_use(buf) || self.marked(buf) != Some(false) {
            return false;
        }
        self.mark(buf, true);
        self.held.push_back(buf);
        let starved = stack.looks_empty();
        // Starved: this buffer and one held one more, so that the queue shrinks under pressure.
        let due = self.held.len().saturating_sub(self.hold) + 2 * usize::from(starved);
        let mut refilled = false;
        for _ in 0..due {
            match self.held.pop_front() {
                Some(b) => {
                    self.mark(b, false);
                    refilled |= stack.push_refilling(b) == Ok(true);
                }
                None => break,
            }
        }
        refilled
    }

    /// A held buffer for our own use (the coldest), when the stack had none. A peer may have
    /// pushed a held index onto the stack meanwhile (a hostile one can name any buffer): such a
    /// buffer is free there, not ours, and is skipped.
    pub(super) fn take(&mut self, stack: &FreeStack<'_>) -> Option<u32> {
        while let Some(b) = self.held.pop_front() {
            self.mark(b, false);
            if stack.in_use(b) {
                return Some(b);
            }
        }
        None
    }

    /// Whether `buf` is held; None for a name beyond the pool.
    fn marked(&self, buf: u32) -> Option<bool> {
        let word = self.is_held.get(buf as usize / 64)?;
        Some(word & (1 << (buf % 64)) != 0)
    }

    fn mark(&mut self, buf: u32, held: bool) {
        if let Some(word) = self.is_held.get_mut(buf as usize / 64) {
            let bit = 1u64 << (buf % 64);
            *word = if held { *word | bit } else { *word & !bit };
        }
    }

    /// Buffers held now.
    pub(super) fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::free_stack::{heap_parts, StackHead};
    use crate::sync::AtomicU32;

    /// A heap-backed pool of `n` buffers, all free.
    fn pool(n: usize) -> (StackHead, Vec<AtomicU32>) {
        let (head, links) = heap_parts(n);
        FreeStack::new(&head, &links).fill();
        (head, links)
    }

    /// Pop every buffer, give them back in order: the stack sees each only after `hold` others,
    /// and hands out first the one given back longest ago among those it has.
    #[test]
    fn a_buffer_goes_back_only_after_hold_others() {
        let (head, links) = pool(16);
        let stack = FreeStack::new(&head, &links);
        let mut cold = ColdReuse::new(8, 16);
        let all: Vec<u32> = (0..16).map(|_| stack.pop().unwrap()).collect();
        // Stack empty: the first give-backs each release one more (none held yet to release
        // beyond the buffer itself), so the stack is never left empty for a sender.
        cold.give_back(&stack, all[0]);
        assert_eq!(cold.held(), 0, "an empty stack takes the buffer at once");
        for &b in &all[1..] {
            cold.give_back(&stack, b);
        }
        assert_eq!(cold.held(), 8);
        // The stack now holds all[0..8] (last pushed on top); all[8..] are held back.
        let top = stack.pop().unwrap();
        assert_eq!(top, all[7]);
        let mut out = vec![top];
        while let Ok(b) = stack.pop() {
            out.push(b);
        }
        out.sort_unstable();
        let mut want = all[..8].to_vec();
        want.sort_unstable();
        assert_eq!(out, want);
    }

    /// An empty stack as a buffer comes back releases one held buffer more than came back,
    /// until none are held: senders waiting on the pool are never left with nothing.
    #[test]
    fn an_empty_stack_drains_the_held_buffers() {
        let (head, links) = pool(16);
        let stack = FreeStack::new(&head, &links);
        let mut cold = ColdReuse::new(14, 16);
        let first: Vec<u32> = (0..12).map(|_| stack.pop().unwrap()).collect();
        for &b in &first {
            cold.give_back(&stack, b);
        }
        assert_eq!(cold.held(), 12, "four buffers still free: nothing is due");
        // Senders take everything free, and each buffer the receiver gives back at once.
        let mut in_flight: Vec<u32> = std::iter::from_fn(|| stack.pop().ok()).collect();
        let mut rounds = 0;
        while cold.held() > 0 {
            let b = in_flight.pop().expect("senders hold buffers while the receiver holds some");
            cold.give_back(&stack, b);
            in_flight.extend(std::iter::from_fn(|| stack.pop().ok()));
            rounds += 1;
        }
        assert_eq!(rounds, 12, "the held queue shrank by one a round");
        assert_eq!(in_flight.len(), 16, "every buffer reached the senders");
        assert!(cold.take(&stack).is_none());
    }

    /// Segment buffers are named by peers: a name that is free in the stack, or already held, is
    /// not held (again), and a held buffer a peer pushed meanwhile is not taken.
    #[test]
    fn free_or_repeated_names_are_not_held() {
        let (head, links) = pool(8);
        let stack = FreeStack::new(&head, &links);
        let mut cold = ColdReuse::new(4, 8);
        let (a, b) = (stack.pop().unwrap(), stack.pop().unwrap());
        cold.give_back(&stack, a);
        cold.give_back(&stack, a);
        let free = stack.pop().unwrap();
        stack.push(free).unwrap();
        cold.give_back(&stack, free);
        cold.give_back(&stack, 99);
        assert_eq!(cold.held(), 1, "only the popped buffer, once");
        cold.give_back(&stack, b);
        // A peer pushes `a` (held by us) back itself: it is free now, not ours to take.
        stack.push(a).unwrap();
        assert_eq!(cold.take(&stack), Some(b));
        assert_eq!(cold.take(&stack), None);
    }

    /// `give_back` says when a buffer went onto an empty stack, whether buffers are held back
    /// or not: a sender that found the pool empty may be asleep, waiting to be woken for it.
    #[test]
    fn a_give_back_that_refills_an_empty_stack_says_so() {
        let (head, links) = pool(16);
        let stack = FreeStack::new(&head, &links);
        for hold in [0, 8] {
            let mut cold = ColdReuse::new(hold, 16);
            let all: Vec<u32> = (0..16).map(|_| stack.pop().unwrap()).collect();
            assert!(cold.give_back(&stack, all[0]), "hold {hold}: onto the empty stack");
            assert!(!cold.give_back(&stack, all[1]), "hold {hold}: onto a stack with a buffer");
            for &b in &all[2..] {
                assert!(!cold.give_back(&stack, b), "hold {hold}: onto a stack with a buffer");
            }
            while let Some(b) = cold.take(&stack) {
                stack.push(b).unwrap();
            }
        }
    }

    /// The held marks of a pool of several words of them: a buffer of any index is held once,
    /// however often a peer names it, and comes out once.
    #[test]
    fn each_buffer_of_a_large_pool_is_held_once() {
        let (head, links) = pool(200);
        let stack = FreeStack::new(&head, &links);
        let mut cold = ColdReuse::new(150, 200);
        let mut taken: Vec<u32> = (0..150).map(|_| stack.pop().unwrap()).collect();
        for &b in &taken {
            cold.give_back(&stack, b);
            cold.give_back(&stack, b);
        }
        assert_eq!(cold.held(), 150);
        let mut back: Vec<u32> = std::iter::from_fn(|| cold.take(&stack)).collect();
        back.sort_unstable();
        taken.sort_unstable();
        assert_eq!(back, taken);
    }

    #[test]
    fn hold_is_clamped_to_leave_part_of_the_pool_circulating() {
        assert_eq!(ColdReuse::new(usize::MAX, 64).hold, 56);
        assert_eq!(ColdReuse::new(10, 64).hold, 10);
        assert_eq!(ColdReuse::new(usize::MAX, 1).hold, 0);
        assert_eq!(ColdReuse::new(0, 64).hold, 0);
    }
}
