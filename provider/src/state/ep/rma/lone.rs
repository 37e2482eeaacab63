//! Reads and writes sent alone that took the ordinary way, timed from their start to their
//! answer, for the engine's choice between that way and our own CMA copy of the target's
//! published registration (`smr_core::endpoint::lone`, where the figures are). The answer
//! arrives inside the engine's progress, which holds the engine: what it taught waits here
//! until the next operation alone starts.

use smr_core::endpoint::lone::Lone;
use smr_core::endpoint::measured::Choice;
use smr_core::endpoint::Endpoint;
use std::time::Instant;

/// An operation alone on its way by the ordinary way, in transmit slot `slot`.
struct Timed {
    slot: usize,
    kind: Lone,
    choice: Choice,
    len: usize,
    started: Instant,
}

#[derive(Default)]
pub struct LoneOps {
    timed: Option<Timed>,
    /// The time an answered operation took: (its kind, how it was chosen, its length, ns).
    lesson: Option<(Lone, Choice, usize, u64)>,
}

impl LoneOps {
    /// An operation alone is about to be chosen: give the engine what the last one taught. One
    /// still timed never got its answer by `answered` (it failed, or its endpoint was drained):
    /// nothing of ours is outstanding now, so none will come, and its slot may be taken again.
    pub fn teach(&mut self, engine: &mut Endpoint) {
        self.timed = None;
        if let Some((kind, choice, len, ns)) = self.lesson.take() {
            engine.learn_lone(kind, choice, len, ns);
        }
    }

    /// The `kind` of `len` bytes chosen `choice`, started at `started`, is in transmit slot
    /// `slot` and waits for its answer.
    pub fn time(&mut self, slot: usize, kind: Lone, choice: Choice, len: usize, started: Instant) {
        self.timed = Some(Timed { slot, kind, choice, len, started });
    }

    /// The operation in transmit slot `slot` was answered (`ok`: it succeeded).
    #[inline(always)]
    pub fn answered(&mut self, slot: usize, ok: bool) {
        if self.timed.as_ref().is_some_and(|t| t.slot == slot) {
            let t = self.timed.take().expect("checked");
            if ok {
                self.lesson = Some((t.kind, t.choice, t.len, t.started.elapsed().as_nanos() as u64));
            }
        }
    }
}
