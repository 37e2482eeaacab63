//! loom models of the lock-free structures every peer shares: the command/response ring
//! (`ring`), the free stack of buffer indices (`free_stack`), the word that records a buffer
//! held out of it (`held`) and the table of published registrations (`published`).
//!
//! Run with (the models are sized for a preemption bound of 2: a few minutes on two cores;
//! a separate target dir keeps the `--cfg loom` build from evicting the normal one):
//! ```text
//! LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p smr-core --release --test loom_models
//! ```
//! `-- --nocapture` also prints how many executions each model explored, and in how many of them
//! each interleaving a model is there for occurred. Each model asserts that every such
//! interleaving occurred at least once: a model that stops reaching its case (after a change to
//! the code, the model or the preemption bound) fails instead of passing without checking it.
//! Under `--cfg loom` the crate's atomics and cells are loom's (see `smr-core/src/sync.rs`), so
//! the instances below are heap-backed and built inside each `loom::model` run. The free stack's
//! links are `&[AtomicU32]` of the crate's `sync` flavour, which under loom is
//! `loom::sync::atomic::AtomicU32`, and so is a ring producer's claim record
//! (`Ring::with_claim_record`, a `loom::sync::atomic::AtomicU64`); loom is a dependency of
//! smr-core under `cfg(loom)`, so this test names those types directly.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use smr_core::free_stack::{self, FreeStack, StackError, StackHead};
use smr_core::held::Record;
use smr_core::pod::Pod;
use smr_core::ring::{self, Consumer, Pop, PushError, Ring, RingCtl, Slot};
use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::thread::LocalKey;

/// `loom::model`, and the number of executions it explored on stderr (`-- --nocapture`).
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    loom::model(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    eprintln!("{name}: {} executions", runs.load(std::sync::atomic::Ordering::Relaxed));
}

/// How often something happened, summed over all executions of one model. It lives outside the
/// model (a std atomic, not loom's), so loom neither explores nor resets it; loom runs one
/// execution at a time, so the sum is exact.
#[derive(Clone, Default)]
struct Tally(std::sync::Arc<AtomicU64>);

impl Tally {
    fn note(&self, happened: bool) {
        self.0.fetch_add(u64::from(happened), std::sync::atomic::Ordering::Relaxed);
    }

    /// Assert that `what` happened in at least one explored execution of `model`.
    fn assert_seen(&self, model: &str, what: &str) {
        assert_seen(model, what, self.0.load(std::sync::atomic::Ordering::Relaxed));
    }
}

fn assert_seen(model: &str, what: &str, times: u64) {
    eprintln!("{model}: {what}: {times} times");
    assert!(times > 0, "{model}: no explored execution had {what}: the model no longer reaches its case");
}

/// `model`, and how many times one of the engine's loom-only hooks (`ring::seen`,
/// `free_stack::seen`) fired during it. The hooks count per OS thread; loom runs all of a model's
/// threads on the test's own, so the difference is this model's alone.
fn model_counting(name: &str, hook: &'static LocalKey<Cell<u64>>, f: impl Fn() + Sync + Send + 'static) -> u64 {
    let before = hook.with(Cell::get);
    model(name, f);
    hook.with(Cell::get) - before
}

/// The ring's entry in these models: one integer, `producer * 100 + sequence`.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C)]
struct Val(u64);
// SAFETY: a single integer: every bit pattern is valid and it holds no pointers.
unsafe impl Pod for Val {}

/// A heap-backed ring: the control block and the slots, shared by the model's threads; and, for
/// the models whose producers keep claim records, one record per producer and whether the
/// producer is dead.
struct RingParts {
    ctl: Box<RingCtl>,
    slots: Vec<Slot<Val>>,
    /// Producer `i`'s claim record (`RingParts::producer_ring(i)`).
    records: Vec<loom::sync::atomic::AtomicU64>,
    /// Producer `i` stands for a dead process: its thread sets this (Release) after its dying
    /// push and never touches the ring again. What the engine learns by checking the process.
    dead: Vec<AtomicBool>,
    /// The free hint of producers that share one (`RingParts::hinted_ring`).
    hint: loom::sync::atomic::AtomicU64,
}

impl RingParts {
    /// A ring of `cap` slots whose producers keep no claim records.
    fn new(cap: u64) -> Arc<Self> {
        Self::with_records(cap, 0)
    }

    /// A ring of `cap` slots and claim records for `producers` producers. Only as many as the
    /// model uses: the consumer reads every one of them when its head stalls, and each read is
    /// one more point where loom switches threads.
    fn with_records(cap: u64, producers: usize) -> Arc<Self> {
        Arc::new(RingParts {
            ctl: Box::new(RingCtl::new()),
            slots: (0..cap).map(Slot::new).collect(),
            records: (0..producers).map(|_| loom::sync::atomic::AtomicU64::new(0)).collect(),
            dead: (0..producers).map(|_| AtomicBool::new(false)).collect(),
            hint: loom::sync::atomic::AtomicU64::new(ring::FREE_HINT_NONE),
        })
    }

    /// A view without a claim record: for the consumer, and for producers of models that never
    /// skip.
    fn ring(&self) -> Ring<'_, Val> {
        Ring::new(&self.ctl, &self.slots)
    }

    /// A producer's view whose pushes keep the shared free hint (`Ring::with_free_hint`).
    fn hinted_ring(&self) -> Ring<'_, Val> {
        self.ring().with_free_hint(&self.hint)
    }

    /// Producer `i`'s view: its pushes record their claims in `records[i]`.
    fn producer_ring(&self, i: usize) -> Ring<'_, Val> {
        self.ring().with_claim_record(&self.records[i])
    }

    /// Whether producer `i`'s claim record names position `pos` and, if it does, whether the
    /// producer is known to be dead. Acquire loads, after the consumer's acquire of `tail`
    /// (`stalled`); the record first (a producer is marked dead only after its last store to it).
    fn claim_of(&self, i: usize, pos: u64) -> Option<bool> {
        ring::names(self.records[i].load(Ordering::Acquire), pos).then(|| self.dead[i].load(Ordering::Acquire))
    }

    /// The check the consumer's caller makes before a skip (the engine's `claimant_lives`, over
    /// its peer table): the first producer whose claim record names position `pos` and that is
    /// not known to be dead.
    fn live_claimant(&self, pos: u64) -> Option<usize> {
        (0..self.records.len()).find(|&i| self.claim_of(i, pos) == Some(false))
    }
}

// Spinning in a model: loom explores every choice at a `yield_now`, including the unfair schedule
// in which two spinning threads keep yielding to each other while a third, preempted in the middle
// of its push, never runs again. That schedule never ends and loom reports it as "exceeded maximum
// number of branches". So in models with more than two threads nobody waits without bound:
// every thread tries a bounded number of times, and whatever was left undone shows up in the
// results, which the models check after joining everyone and draining the ring single-threaded.
// (Two-thread models may wait: each waits only for the other, which then always gets to run.)

/// Push, retrying `Full` and `Busy` at most `tries` times in all; the last result. Every `Full`
/// met is noted in `full`.
fn push_tries(ring: &Ring<'_, Val>, v: Val, tries: u32, full: &Tally) -> Result<(), PushError> {
    let mut result = ring.push(&v);
    full.note(result == Err(PushError::Full));
    for _ in 1..tries {
        if result.is_ok() {
            break;
        }
        thread::yield_now();
        result = ring.push(&v);
        full.note(result == Err(PushError::Full));
    }
    result
}

/// Pop until an entry shows up (no skipping).
fn pop_waiting(c: &mut Consumer, ring: &Ring<'_, Val>) -> Val {
    loop {
        match c.pop(ring) {
            Pop::Item(v) => return v,
            Pop::Empty | Pop::Pending => thread::yield_now(),
        }
    }
}

/// `attempts` pops while producers run, never skipping. With `stalls`, every `Empty` head is
/// also checked with `Consumer::stalled` and each one claimed but not yet published is noted
/// there (the check reads `tail`: one more switch point per poll, so only where a model wants
/// it). Honest producers never leave a head `Pending` (a claimed slot's stamp stays the free
/// one until the publish): that is only a scribbled stamp.
fn consume_some(c: &mut Consumer, ring: &Ring<'_, Val>, attempts: u32, stalls: Option<&Tally>) -> Vec<Val> {
    let mut got = Vec::new();
    for _ in 0..attempts {
        match c.pop(ring) {
            Pop::Item(v) => got.push(v),
            Pop::Empty => {
                if let Some(stalls) = stalls {
                    stalls.note(c.stalled(ring));
                }
                thread::yield_now();
            }
            Pop::Pending => panic!("head {} pending with honest producers", c.position()),
        }
    }
    got
}

/// What one poll of `poll_impatient` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Poll {
    Item(Val),
    /// The head (this position) was claimed and unpublished, no live producer's record named
    /// it, and it was skipped.
    Skipped(u64),
    /// The head (this position) was claimed and unpublished, and `claimant_lives` said a live
    /// producer's record named it: not skipped.
    Declined(u64),
    /// Nothing to take or skip (or the head got published between the look and the skip).
    Idle,
}

/// One poll of the most impatient consumer that keeps the protocol: `StallWatch::check` with a
/// zero timeout after every pop. As there: first the acquire of `tail` (`stalled`), then the
/// records (`claimant_lives(head)`), and a skip only if that says no live producer's record
/// names the head. (A `Pending` head, which only a scribbled stamp makes, is treated as the
/// engine treats it: like a stall.)
fn poll_impatient(c: &mut Consumer, ring: &Ring<'_, Val>, claimant_lives: impl FnOnce(u64) -> bool) -> Poll {
    let pop = c.pop(ring);
    if let Pop::Item(v) = pop {
        return Poll::Item(v);
    }
    let stalled = c.stalled(ring);
    if pop == Pop::Empty && !stalled {
        return Poll::Idle;
    }
    let head = c.position();
    if claimant_lives(head) {
        return Poll::Declined(head);
    }
    if c.skip(ring) {
        Poll::Skipped(head)
    } else {
        Poll::Idle
    }
}

/// After every producer returned: nothing is left half-done, so the ring drains to `Empty`.
fn drain(c: &mut Consumer, ring: &Ring<'_, Val>, got: &mut Vec<Val>) {
    loop {
        match c.pop(ring) {
            Pop::Item(v) => got.push(v),
            Pop::Empty => {
                assert!(!c.stalled(ring), "head {} claimed and never published", c.position());
                return;
            }
            Pop::Pending => panic!("head {} pending after every producer returned", c.position()),
        }
    }
}

/// Check the consumer's haul against the producers' results: every value whose push returned
/// `Ok` was taken exactly once, no other value was (nothing invented, nothing refused shows up),
/// and each producer's values came out in the order it pushed them.
fn check_outcome(popped: &[Val], results: &[(Val, Result<(), PushError>)]) {
    for producer in [1, 2] {
        let mine: Vec<u64> = popped.iter().map(|v| v.0).filter(|v| v / 100 == producer).collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "producer {producer} out of order: {popped:?}");
    }
    let mut popped_sorted = popped.to_vec();
    popped_sorted.sort_by_key(|v| v.0);
    let mut ok: Vec<Val> = results.iter().filter(|(_, r)| r.is_ok()).map(|(v, _)| *v).collect();
    ok.sort_by_key(|v| v.0);
    assert_eq!(popped_sorted, ok, "popped entries differ from successful pushes {results:?}");
}

/// (1a) Two producers, one consumer, capacity 4, two entries each: the ring never fills, so every
/// push succeeds at once (no `Full` or `Busy`), and every pushed value is popped exactly once,
/// each producer's values in the order it pushed them, and nothing else comes out.
#[test]
fn ring_two_producers_one_consumer() {
    const NAME: &str = "ring_two_producers_one_consumer";
    let stalls = Tally::default();
    let seen_stalls = stalls.clone();
    model(NAME, move || {
        let parts = RingParts::new(4);
        let producers: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|p| {
                let parts = parts.clone();
                thread::spawn(move || {
                    let ring = parts.ring();
                    [Val(p * 100), Val(p * 100 + 1)].map(|v| {
                        assert_eq!(ring.push(&v), Ok(()), "push of {v:?} into a ring with room");
                        (v, Ok(()))
                    })
                })
            })
            .collect();

        let ring = parts.ring();
        let mut c = Consumer::new();
        let mut popped = consume_some(&mut c, &ring, 4, Some(&stalls));
        let results: Vec<_> = producers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        drain(&mut c, &ring, &mut popped);
        check_outcome(&popped, &results);
        assert_eq!(popped.len(), 4);
        assert_eq!(c.position(), 4);
    });
    seen_stalls.assert_seen(NAME, "the consumer at a claimed, unpublished head (stalled)");
}

/// (1b) As (1a) with capacity 2, so four entries lap the ring and producers meet `Full`, also
/// while the other producer is between its claim and its publish. Pushes retry a bounded number
/// of times; the check is that exactly the successful ones come out, once each, in order.
#[test]
fn ring_two_producers_one_consumer_lapping() {
    two_producers_lapping_seen(
        "ring_two_producers_one_consumer_lapping",
        false,
        &ring::seen::FULL_WHILE_WRITING,
        "Full while last lap's producer was still writing the slot",
    );
}

/// (1d) As (1b), the two producers sharing one free hint (`Ring::with_free_hint`: the producers
/// of one process share their mapping's), so that claims skip the slot's stamp on a position
/// the hint names: every successful push comes out once, in order, `Full` is met as before, no
/// slot is written while the consumer still reads last lap's entry there (loom's check of the
/// slot's cell), and claims did take the hint.
#[test]
fn ring_free_hint() {
    two_producers_lapping_seen("ring_free_hint", true, &ring::seen::HINTED_CLAIMS, "a claim on the free hint");
}

/// Run `two_producers_lapping` as model `name` and check that a push met `Full` and that the
/// interleaving `counter` counts (`what`) happened.
fn two_producers_lapping_seen(name: &str, hinted: bool, counter: &'static LocalKey<Cell<u64>>, what: &str) {
    let full = Tally::default();
    let seen_full = full.clone();
    let seen = model_counting(name, counter, two_producers_lapping(full, hinted));
    seen_full.assert_seen(name, "a push refused with Full");
    assert_seen(name, what, seen);
}

/// The model of (1b) and (1d): two producers push two entries each into a ring of 2, retrying
/// twice, through views sharing one free hint if `hinted`, while one consumer pops; every `Full`
/// is noted in `full`.
fn two_producers_lapping(full: Tally, hinted: bool) -> impl Fn() + Sync + Send + 'static {
    move || {
        let parts = RingParts::new(2);
        let producers: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|p| {
                let parts = parts.clone();
                let full = full.clone();
                thread::spawn(move || {
                    let ring = if hinted { parts.hinted_ring() } else { parts.ring() };
                    let a = Val(p * 100);
                    let b = Val(p * 100 + 1);
                    let ra = push_tries(&ring, a, 2, &full);
                    let rb = push_tries(&ring, b, 2, &full);
                    [(a, ra), (b, rb)]
                })
            })
            .collect();

        let ring = parts.ring();
        let mut c = Consumer::new();
        let mut popped = consume_some(&mut c, &ring, 3, None);
        let results: Vec<_> = producers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        drain(&mut c, &ring, &mut popped);
        check_outcome(&popped, &results);
        // Nothing was claimed without being published: the position counts exactly the pushes.
        assert_eq!(c.position(), popped.len() as u64);
    }
}

/// (1c) A batch (`push_batch`: one claim for consecutive positions) beside a single push, capacity
/// 2, so the batch often finds room for only part of itself (the other producer took a slot) or
/// none (Full until the consumer pops). The batch's producer retries what was left a bounded
/// number of times. Checked as (1b): exactly the enqueued entries come out, once each, each
/// producer's in order; and a partial batch occurred.
#[test]
fn ring_batch_beside_single_push() {
    const NAME: &str = "ring_batch_beside_single_push";
    let partial = Tally::default();
    let seen_partial = partial.clone();
    model(NAME, move || {
        let parts = RingParts::new(2);
        let batcher = {
            let parts = parts.clone();
            let partial = partial.clone();
            thread::spawn(move || {
                let ring = parts.ring();
                let vals = [Val(100), Val(101)];
                let mut done = 0;
                for _ in 0..2 {
                    match ring.push_batch(&vals[done..]) {
                        Ok(n) => {
                            assert!(n >= 1 && done + n <= vals.len(), "push_batch returned {n}");
                            partial.note(n < vals.len() - done);
                            done += n;
                            if done == vals.len() {
                                break;
                            }
                        }
                        Err(PushError::Full | PushError::Busy) => thread::yield_now(),
                    }
                }
                vals.map(|v| (v, if (v.0 - 100) < done as u64 { Ok(()) } else { Err(PushError::Full) }))
            })
        };
        let single = {
            let parts = parts.clone();
            thread::spawn(move || {
                let ring = parts.ring();
                let v = Val(200);
                [(v, push_tries(&ring, v, 2, &Tally::default()))]
            })
        };
        let ring = parts.ring();
        let mut c = Consumer::new();
        let mut popped = consume_some(&mut c, &ring, 2, None);
        let mut results: Vec<_> = batcher.join().unwrap().to_vec();
        results.extend(single.join().unwrap());
        drain(&mut c, &ring, &mut popped);
        check_outcome(&popped, &results);
        assert_eq!(c.position(), popped.len() as u64, "a claimed position was never published");
    });
    seen_partial.assert_seen(NAME, "a batch enqueued only part of itself");
}

/// (2) A full ring refuses with `Full` (never `Busy` with one producer) and takes the entry once
/// the consumer has popped, across lap wraps; the consumer sees FIFO order throughout.
#[test]
fn ring_full_then_space_across_laps() {
    const NAME: &str = "ring_full_then_space_across_laps";
    let full_while_popping = Tally::default();
    let seen = full_while_popping.clone();
    model(NAME, move || {
        let parts = RingParts::new(2);
        let ring = parts.ring();
        ring.push(&Val(0)).unwrap();
        ring.push(&Val(1)).unwrap();
        assert_eq!(ring.push(&Val(2)), Err(PushError::Full));

        let consumer = {
            let parts = parts.clone();
            thread::spawn(move || {
                let ring = parts.ring();
                let mut c = Consumer::new();
                for want in 0..4 {
                    assert_eq!(pop_waiting(&mut c, &ring), Val(want));
                }
                c
            })
        };
        for v in 2..4 {
            loop {
                match ring.push(&Val(v)) {
                    Ok(()) => break,
                    Err(PushError::Full) => {
                        full_while_popping.note(true);
                        thread::yield_now();
                    }
                    Err(e) => panic!("single producer got {e:?}"),
                }
            }
        }
        let mut c = consumer.join().unwrap();

        // Lap 2 (positions 4 and 5 reuse both slots again), then full again.
        ring.push(&Val(4)).unwrap();
        ring.push(&Val(5)).unwrap();
        assert_eq!(ring.push(&Val(6)), Err(PushError::Full));
        assert_eq!(c.pop(&ring), Pop::Item(Val(4)));
        assert_eq!(c.pop(&ring), Pop::Item(Val(5)));
        assert_eq!(c.pop(&ring), Pop::Empty);
        assert_eq!(c.position(), 6);
    });
    seen.assert_seen(NAME, "a push refused with Full while the consumer was running");
}

// In the models of skips (3a, 3b) the consumer polls on a thread of its own, not on the one that
// built the claim records: loom never shows a thread again, after it yielded, a value it had seen
// before (and to an atomic's builder, its initial value counts as seen), so on that thread loom
// would not try a stale read of a record still clear, the read these models are there to rule out.

/// (3a) A live producer's claim is never skipped. One producer with a claim record pushes an
/// entry (7) and then a batch of two (8, 9: one claim, one record naming all it claimed) into a
/// two-slot ring while the most impatient consumer polls: it skips its head the moment the head
/// is claimed but unpublished, unless a live producer's record names it. The producer lives, so
/// all three entries must be popped, in order, in every interleaving: a skip would let it go on
/// to write into a slot handed to the next lap. What makes that hold is the ordering of the
/// claim: the record is written before the CAS on `tail`, which is a release, and the consumer
/// looks at `tail` with an acquire before it reads the record, so a consumer that sees a position
/// claimed also sees the record naming it (with that CAS or that load relaxed, or the record
/// written after the CAS or cleared before the publish, loom finds a skip). The ring keeps
/// working afterwards, across a lap.
#[test]
fn ring_live_claim_is_never_skipped() {
    const NAME: &str = "ring_live_claim_is_never_skipped";
    let (declined, declined_batch) = (Tally::default(), Tally::default());
    let seen = (declined.clone(), declined_batch.clone());
    model(NAME, move || {
        let parts = RingParts::with_records(2, 1);
        let producer = {
            let parts = parts.clone();
            thread::spawn(move || {
                let ring = parts.producer_ring(0);
                // Two threads: each may wait for the other.
                while ring.push(&Val(7)).is_err() {
                    thread::yield_now();
                }
                let batch = [Val(8), Val(9)];
                let mut done = 0;
                while done < batch.len() {
                    match ring.push_batch(&batch[done..]) {
                        Ok(n) => done += n,
                        Err(_) => thread::yield_now(),
                    }
                }
            })
        };
        let consumer = {
            let (parts, declined, declined_batch) = (parts.clone(), declined.clone(), declined_batch.clone());
            thread::spawn(move || {
                let ring = parts.ring();
                let mut c = Consumer::new();
                let mut popped = Vec::new();
                while popped.len() < 3 {
                    match poll_impatient(&mut c, &ring, |head| parts.live_claimant(head).is_some()) {
                        Poll::Item(v) => popped.push(v),
                        Poll::Skipped(head) => panic!("position {head}, claimed by a live producer, skipped"),
                        Poll::Declined(head) => {
                            declined.note(head == 0);
                            declined_batch.note(head > 0);
                            thread::yield_now();
                        }
                        Poll::Idle => thread::yield_now(),
                    }
                }
                (c, popped)
            })
        };
        let (mut c, popped) = consumer.join().unwrap();
        producer.join().unwrap();
        assert_eq!(popped, [Val(7), Val(8), Val(9)]);
        assert_eq!(parts.records[0].load(Ordering::Relaxed), 0, "the record left set after the pushes");
        assert_eq!(c.position(), 3);
        let ring = parts.producer_ring(0);
        assert_eq!(c.pop(&ring), Pop::Empty);
        assert!(!c.stalled(&ring));

        // The slots are usable again, including on the next lap.
        for v in 10..13 {
            ring.push(&Val(v)).unwrap();
            assert_eq!(c.pop(&ring), Pop::Item(Val(v)));
        }
        assert_eq!(c.pop(&ring), Pop::Empty);
    });
    seen.0.assert_seen(NAME, "a skip declined because the live producer's record named its claimed head");
    seen.1.assert_seen(NAME, "a skip declined because the live producer's batch record named the head");
}

/// What the consumer of (3b) took, skipped and waited for in one execution.
#[derive(Default)]
struct Haul {
    popped: Vec<Val>,
    /// Positions skipped.
    skipped: Vec<u64>,
    /// Heads a skip of which was declined because the live producer's record named them.
    named_by_live: Vec<u64>,
}

/// What the consumer of (3b) met, over all executions.
#[derive(Clone, Default)]
struct SkipTallies {
    /// Skipped a head while the producers ran.
    skipped: Tally,
    /// Popped a live entry from the slot skipped on the lap before.
    reused: Tally,
    /// Declined a skip, while the producers ran, for the dying producer (not yet known dead).
    waited_dying: Tally,
    /// Declined a skip, while the producers ran, for the live producer.
    waited_live: Tally,
    /// Skipped a head that the live producer's (then stale) record had named.
    stale: Tally,
    /// Skipped a head that the dying producer's record still named, because it was known dead.
    skipped_for_dead: Tally,
}

/// One `poll_impatient` of (3b)'s consumer: producer 0 is the dying one, 1 the live one.
fn poll_3b(c: &mut Consumer, parts: &RingParts, haul: &mut Haul, concurrent: bool, tallies: &SkipTallies) -> Poll {
    let mut named_by_dead = false;
    let poll = poll_impatient(c, &parts.ring(), |head| {
        // `RingParts::live_claimant`, noting who made the consumer wait.
        match parts.claim_of(0, head) {
            Some(false) => {
                tallies.waited_dying.note(concurrent);
                return true;
            }
            Some(true) => named_by_dead = true,
            None => {}
        }
        if parts.claim_of(1, head) == Some(false) {
            tallies.waited_live.note(concurrent);
            haul.named_by_live.push(head);
            return true;
        }
        false
    });
    match poll {
        Poll::Item(v) => {
            let pos = c.position() - 1;
            tallies.reused.note(pos >= 2 && haul.skipped.contains(&(pos - 2)));
            haul.popped.push(v);
        }
        Poll::Skipped(head) => {
            tallies.skipped.note(concurrent);
            tallies.stale.note(haul.named_by_live.contains(&head));
            tallies.skipped_for_dead.note(named_by_dead);
            haul.skipped.push(head);
        }
        Poll::Declined(_) | Poll::Idle => {}
    }
    poll
}

/// (3b) A producer (0, entry 700) dies in the middle of copying its entry
/// (`ring::hooks::die_in_next_push`): half of it written, never published, its claim record left
/// naming the slot. A live producer (1) pushes two entries (801, 802) into the same two-slot
/// ring, so its second one needs the dead one's slot on the next lap. The most impatient
/// consumer (`poll_impatient`) skips a stalled head only when no record naming it belongs to a
/// producer not known dead: the dying one's, once its thread said so, and never the live one's
/// (which it waits for, however slow). Outcome: the live producer's `Ok` entries arrive once
/// each, in order, and nothing of the dead one's (whole or half) ever does; exactly its slot is
/// skipped, if it claimed one; loom's cell tracking checks that no slot is written by two
/// producers, or read while written, in any interleaving (a consumer that skipped the dying
/// producer's slot before it knew it dead would let the live producer's next lap write it while
/// the dying one still does: loom reports that).
///
/// The live producer's record may also name the dead one's position: it announced it, lost the
/// CAS to the dying producer, and has not retried yet. Such a stale record only delays the skip
/// (the model checks the skip does happen once everyone returned).
///
/// An earlier protocol had the consumer skip any claimed head after a timeout and the producer
/// find out with a CAS on the stamp; this model (then with two live producers) found a bug in
/// it: a producer copied its entry in right after claiming `tail` and published with a CAS on
/// the stamp, so when it was skipped between the claim and the copy, its copy landed in a slot
/// that already belonged to the next lap's producer.
#[test]
fn ring_skipped_slot_reused_by_next_lap() {
    const NAME: &str = "ring_skipped_slot_reused_by_next_lap";
    let tallies = SkipTallies::default();
    let seen = tallies.clone();
    model(NAME, move || {
        let parts = RingParts::with_records(2, 2);
        let dying = {
            let parts = parts.clone();
            thread::spawn(move || {
                ring::hooks::die_in_next_push();
                let r = push_tries(&parts.producer_ring(0), Val(700), 2, &Tally::default());
                // From here on this thread stands for a dead process: it never touches the ring.
                parts.dead[0].store(true, Ordering::Release);
                r
            })
        };
        let live = {
            let parts = parts.clone();
            thread::spawn(move || {
                let ring = parts.producer_ring(1);
                let (a, b) = (Val(801), Val(802));
                let ra = push_tries(&ring, a, 3, &Tally::default());
                let rb = if ra.is_ok() { push_tries(&ring, b, 3, &Tally::default()) } else { Err(PushError::Busy) };
                [(a, ra), (b, rb)]
            })
        };
        let consumer = {
            let (parts, tallies) = (parts.clone(), tallies.clone());
            thread::spawn(move || {
                let (mut c, mut haul) = (Consumer::new(), Haul::default());
                for _ in 0..4 {
                    if matches!(poll_3b(&mut c, &parts, &mut haul, true, &tallies), Poll::Declined(_) | Poll::Idle) {
                        thread::yield_now();
                    }
                }
                (c, haul)
            })
        };
        let (mut c, mut haul) = consumer.join().unwrap();
        let dying_result = dying.join().unwrap();
        let results = live.join().unwrap();
        // Everyone returned: the dead producer's slot (if it claimed one) is skipped, everything
        // else is published, and no live record names anything.
        loop {
            match poll_3b(&mut c, &parts, &mut haul, false, &tallies) {
                Poll::Item(_) | Poll::Skipped(_) => {}
                Poll::Declined(head) => panic!("head {head} named by a live record after everyone returned"),
                Poll::Idle => break,
            }
        }
        let ring = parts.ring();
        assert_eq!(c.pop(&ring), Pop::Empty);
        assert!(!c.stalled(&ring), "a claimed position left behind");
        let popped = &haul.popped;
        assert!(!popped.iter().any(|v| v.0 / 100 == 7), "the dead producer's entry was read: {popped:?}");
        let ok: Vec<Val> = results.iter().filter(|(_, r)| r.is_ok()).map(|(v, _)| *v).collect();
        assert_eq!(*popped, ok, "the live producer's entries, once each and in order ({results:?})");
        // A dying push claims its slot (`Ok`) unless the ring was full both times it tried; only
        // that slot is ever skipped.
        assert!(matches!(dying_result, Ok(()) | Err(PushError::Full)), "{dying_result:?}");
        assert_eq!(haul.skipped.len(), usize::from(dying_result.is_ok()), "skipped {:?}", haul.skipped);
        assert_eq!(c.position(), (ok.len() + haul.skipped.len()) as u64);
    });
    seen.skipped.assert_seen(NAME, "the slot of a producer dead mid-copy skipped while the live one ran");
    seen.reused.assert_seen(NAME, "a live entry popped from the slot skipped on the lap before");
    seen.waited_dying.assert_seen(NAME, "a head waited for because its dying claimant was not known dead yet");
    seen.waited_live.assert_seen(NAME, "a head waited for because the live producer's record named it");
    seen.stale.assert_seen(NAME, "a skip delayed by the live producer's stale record (it lost that position)");
    seen.skipped_for_dead.assert_seen(NAME, "a skip of a slot still named by a record, its producer known dead");
}

/// (3c) What (3b) builds on, one thread, one execution: a push after
/// `ring::hooks::die_in_next_push` returns `Ok` with its entry unpublished and its claim record
/// still naming its position, as a process killed in the middle of its copy leaves them. So the
/// consumer waits for it while its producer is not known dead, and skips it once it is; the next
/// lap then uses the slot as any other. (Were the record cleared, (3b)'s consumer could skip the
/// slot without ever learning that its producer died, and would not check that it waits.)
#[test]
fn ring_dying_push_leaves_its_claim_named() {
    model("ring_dying_push_leaves_its_claim_named", || {
        let parts = RingParts::with_records(2, 2);
        // A thread of its own: after its dying push, a thread never touches the ring again.
        let dying = {
            let parts = parts.clone();
            thread::spawn(move || {
                ring::hooks::die_in_next_push();
                parts.producer_ring(0).push(&Val(700))
            })
        };
        assert_eq!(dying.join().unwrap(), Ok(()));
        assert!(
            ring::names(parts.records[0].load(Ordering::Relaxed), 0),
            "the dying push cleared its claim record ({:#x}): it must leave it naming its position",
            parts.records[0].load(Ordering::Relaxed)
        );
        let ring = parts.ring();
        let mut c = Consumer::new();
        assert_eq!(c.pop(&ring), Pop::Empty, "the dying push's half entry was published");
        assert!(c.stalled(&ring));
        assert_eq!(poll_impatient(&mut c, &ring, |head| parts.live_claimant(head).is_some()), Poll::Declined(0));
        parts.dead[0].store(true, Ordering::Release);
        assert_eq!(poll_impatient(&mut c, &ring, |head| parts.live_claimant(head).is_some()), Poll::Skipped(0));
        // A live producer laps the ring through the skipped slot.
        let live = parts.producer_ring(1);
        for v in 801..804 {
            live.push(&Val(v)).unwrap();
            assert_eq!(c.pop(&ring), Pop::Item(Val(v)));
        }
        assert_eq!(parts.records[1].load(Ordering::Relaxed), 0);
        assert_eq!(c.pop(&ring), Pop::Empty);
        assert!(!c.stalled(&ring));
    });
}

/// Per-index bookkeeping for the free stack models: an ownership counter (must go 0 -> 1 -> 0)
/// and a loom cell standing for the buffer itself, so that loom also checks that a buffer's
/// previous holder happens-before its next one.
struct Buffers {
    owners: Vec<AtomicU32>,
    data: Vec<UnsafeCell<u32>>,
}

impl Buffers {
    fn new(n: usize) -> Self {
        Buffers {
            owners: (0..n).map(|_| AtomicU32::new(0)).collect(),
            data: (0..n).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    /// Take index `i` as thread `me`, use its buffer.
    fn acquire(&self, i: u32, me: u32) {
        let i = i as usize;
        assert_eq!(self.owners[i].fetch_add(1, Ordering::Relaxed), 0, "index {i} held twice");
        self.data[i].with_mut(|p| {
            // SAFETY: `pop` handed index `i` to this thread alone (checked just above, and by
            // loom's own tracking of this cell): nobody else touches buffer `i` until we push it.
            unsafe { *p = me };
        });
    }

    /// Give index `i` back (the caller pushes it right after).
    fn release(&self, i: u32, me: u32) {
        let i = i as usize;
        self.data[i].with(|p| {
            // SAFETY: as in `acquire`: this thread still holds index `i`.
            assert_eq!(unsafe { *p }, me, "buffer {i} written by another holder");
        });
        assert_eq!(self.owners[i].fetch_sub(1, Ordering::Relaxed), 1);
    }
}

/// A heap-backed free stack of `n` indices plus the buffer bookkeeping.
struct StackParts {
    head: Box<StackHead>,
    links: Vec<AtomicU32>,
    bufs: Buffers,
}

impl StackParts {
    fn new(n: usize) -> Arc<Self> {
        let parts = StackParts {
            head: Box::new(StackHead::new()),
            links: (0..n).map(|_| AtomicU32::new(0)).collect(),
            bufs: Buffers::new(n),
        };
        parts.stack().fill();
        Arc::new(parts)
    }

    fn stack(&self) -> FreeStack<'_> {
        FreeStack::new(&self.head, &self.links)
    }

    fn pop(&self, me: u32) -> Option<u32> {
        let i = self.stack().pop().ok()?;
        self.bufs.acquire(i, me);
        Some(i)
    }

    fn push(&self, i: u32, me: u32) {
        self.bufs.release(i, me);
        self.stack().push(i).unwrap();
    }

    /// After every thread joined: each index comes out exactly once, then the stack is empty.
    fn assert_all_free(&self) {
        let stack = self.stack();
        let mut all: Vec<u32> = (0..self.links.len()).map(|_| stack.pop().unwrap()).collect();
        assert!(stack.pop().is_err(), "more pops than indices");
        all.sort_unstable();
        assert_eq!(all, (0..self.links.len() as u32).collect::<Vec<_>>());
    }
}

/// (4a) The ABA case: thread A loads the head (index 0, next 1) and may be preempted before its
/// CAS while thread B pops 0 and 1 and pushes 0 back. The head word is again index 0, but its
/// link now says 2; without the generation tag A's CAS would install 1, which B still holds.
#[test]
fn free_stack_aba() {
    const NAME: &str = "free_stack_aba";
    let caught = model_counting(NAME, &free_stack::seen::ABA_CAUGHT, || {
        let parts = StackParts::new(3);
        let a = {
            let parts = parts.clone();
            thread::spawn(move || {
                if let Some(i) = parts.pop(1) {
                    parts.push(i, 1);
                }
            })
        };
        let b = {
            let parts = parts.clone();
            thread::spawn(move || {
                let x = parts.pop(2);
                let y = parts.pop(2);
                if let Some(x) = x {
                    parts.push(x, 2);
                }
                // Hold `y` across the push of `x`, while A may still pop.
                if let Some(y) = y {
                    parts.push(y, 2);
                }
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        parts.assert_all_free();
    });
    assert_seen(NAME, "a pop refused by the tag alone (its index popped and pushed back meanwhile)", caught);
}

/// (4b) Three threads each pop and push back concurrently on a two-entry stack, so one of them
/// may find it empty: no index is ever held twice and all indices are there at the end.
#[test]
fn free_stack_three_threads() {
    const NAME: &str = "free_stack_three_threads";
    let empty = Tally::default();
    let seen_empty = empty.clone();
    model(NAME, move || {
        let parts = StackParts::new(2);
        let others: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|me| {
                let parts = parts.clone();
                let empty = empty.clone();
                thread::spawn(move || match parts.pop(me) {
                    Some(i) => parts.push(i, me),
                    None => empty.note(true),
                })
            })
            .collect();
        match parts.pop(3) {
            Some(i) => parts.push(i, 3),
            None => empty.note(true),
        }
        for h in others {
            h.join().unwrap();
        }
        parts.assert_all_free();
    });
    seen_empty.assert_seen(NAME, "a pop finding the stack empty");
}

/// (4c) A buffer released twice at once (a repeated release racing with itself): the in-use mark
/// on its link lets exactly one push through and refuses the other with `NotInUse`, and the stack
/// ends up with every index exactly once. (Nobody pops meanwhile: once the first release is
/// through, a pop may legitimately take the index again, and a late duplicate release of an index
/// in use cannot be told from a real one.)
#[test]
fn free_stack_double_release() {
    model("free_stack_double_release", || {
        let parts = StackParts::new(2);
        let i = parts.stack().pop().unwrap();
        let releases: Vec<_> = (0..2)
            .map(|_| {
                let parts = parts.clone();
                thread::spawn(move || parts.stack().push(i))
            })
            .collect();
        let mut results: Vec<_> = releases.into_iter().map(|h| h.join().unwrap()).collect();
        results.sort_by_key(|r| r.is_err());
        assert_eq!(results, [Ok(()), Err(StackError::NotInUse)]);
        parts.assert_all_free();
    });
}

/// (4d) A sender that finds the receiver's pool empty sleeps until woken, and the receiver's push
/// onto the empty stack wakes it (`endpoint/refill.rs`): `FreeStack::push_refilling` composed
/// with the wake word's protocol (`wake.rs`, which is not built under loom: its `arm` and
/// `notify` are written out below with the same orderings). The sender arms, then pops; the
/// receiver pushes back the only buffer and, if that push refilled the empty stack, notifies.
/// Whenever the sender's pop finds nothing, the notify saw it armed and moved the sequence it
/// would sleep on, so its sleep returns at once.
#[test]
fn free_stack_refill_wakes_a_sender_that_found_it_empty() {
    const NAME: &str = "free_stack_refill_wakes_a_sender_that_found_it_empty";
    let empty = Tally::default();
    let seen_empty = empty.clone();
    model(NAME, move || {
        let parts = StackParts::new(1);
        let held = parts.stack().pop().unwrap();
        // The sender's wake word: (sequence, armed).
        let word = Arc::new((AtomicU32::new(0), AtomicU32::new(0)));
        let receiver = {
            let (parts, word) = (parts.clone(), word.clone());
            thread::spawn(move || {
                if parts.stack().push_refilling(held) == Ok(true) {
                    // `wake::notify`
                    fence(Ordering::SeqCst);
                    if word.1.load(Ordering::Relaxed) != 0 {
                        word.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        };
        // `wake::arm`, then the progress pass's pop.
        let seq = word.0.load(Ordering::SeqCst);
        word.1.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let got = parts.stack().pop();
        receiver.join().unwrap();
        match got {
            Ok(i) => parts.stack().push(i).unwrap(),
            Err(e) => {
                assert_eq!(e, StackError::Empty);
                empty.note(true);
                assert_ne!(word.0.load(Ordering::SeqCst), seq, "the sender found the pool empty and nothing woke it");
            }
        }
        parts.assert_all_free();
    });
    seen_empty.assert_seen(NAME, "a sender finding the pool empty");
}

/// (5a) The owner's check of the claim counter (`Consumer::repair_tail`) between its pops, while
/// two producers lap a two-slot ring: no honest interleaving leaves a counter it would repair,
/// and every successful push still comes out once, in order.
#[test]
fn ring_repair_never_fires_on_honest_claims() {
    const NAME: &str = "ring_repair_never_fires_on_honest_claims";
    let full = Tally::default();
    let seen_full = full.clone();
    model(NAME, move || {
        let parts = RingParts::new(2);
        let producers: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|p| {
                let parts = parts.clone();
                let full = full.clone();
                thread::spawn(move || {
                    let ring = parts.ring();
                    let (a, b) = (Val(p * 100), Val(p * 100 + 1));
                    let ra = push_tries(&ring, a, 2, &full);
                    let rb = push_tries(&ring, b, 2, &full);
                    [(a, ra), (b, rb)]
                })
            })
            .collect();
        let ring = parts.ring();
        let mut c = Consumer::new();
        let mut popped = Vec::new();
        for _ in 0..3 {
            assert!(!c.repair_tail(&ring), "repaired an honest claim counter at head {}", c.position());
            match c.pop(&ring) {
                Pop::Item(v) => popped.push(v),
                Pop::Empty | Pop::Pending => thread::yield_now(),
            }
        }
        let results: Vec<_> = producers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        assert!(!c.repair_tail(&ring));
        drain(&mut c, &ring, &mut popped);
        check_outcome(&popped, &results);
    });
    seen_full.assert_seen(NAME, "a producer finding the ring full");
}

/// (5b) A peer scribbled the claim counter far ahead (every push answers `Full`) after one entry
/// was pushed. The owner repairs it while a producer keeps trying: the first entry and, when its
/// push succeeded, the producer's come out exactly once; and the producer gets through after the
/// repair in some execution.
#[test]
fn ring_repair_of_a_scribbled_claim_counter() {
    const NAME: &str = "ring_repair_of_a_scribbled_claim_counter";
    let through = Tally::default();
    let seen_through = through.clone();
    model(NAME, move || {
        let parts = RingParts::new(2);
        parts.ring().push(&Val(100)).unwrap();
        parts.ctl.scribble(1000);
        let producer = {
            let parts = parts.clone();
            thread::spawn(move || {
                let v = Val(200);
                (v, push_tries(&parts.ring(), v, 3, &Tally::default()))
            })
        };
        let ring = parts.ring();
        let mut c = Consumer::new();
        let mut popped = Vec::new();
        let mut repaired = false;
        for _ in 0..3 {
            thread::yield_now();
            repaired |= c.repair_tail(&ring);
            if let Pop::Item(v) = c.pop(&ring) {
                popped.push(v);
            }
        }
        let (v, r) = producer.join().unwrap();
        repaired |= c.repair_tail(&ring);
        assert!(repaired, "the scribbled counter was never repaired");
        drain(&mut c, &ring, &mut popped);
        through.note(r.is_ok());
        let mut expect = vec![Val(100)];
        if r.is_ok() {
            expect.push(v);
        }
        assert_eq!(popped, expect);
        assert!(!c.repair_tail(&ring), "the repaired counter is honest again");
    });
    seen_through.assert_seen(NAME, "the producer's push succeeding");
}

/// (5c) The owner inspects a free stack while two threads pop and push back: whatever the
/// interleaving, its walk never finds the list impossible (out of range, cyclic, or holding a
/// popped buffer), the finding `repair` acts on at once. (Orphans, a buffer between a CAS and its
/// link, are honest for an instant: `repair` waits for them to stay put.)
#[test]
fn free_stack_repair_inspect_never_finds_an_honest_list_impossible() {
    const NAME: &str = "free_stack_repair_inspect_never_finds_an_honest_list_impossible";
    let orphans = Tally::default();
    let seen_orphans = orphans.clone();
    model(NAME, move || {
        let parts = StackParts::new(3);
        let users: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|me| {
                let parts = parts.clone();
                thread::spawn(move || {
                    if let Some(i) = parts.pop(me) {
                        parts.push(i, me);
                    }
                })
            })
            .collect();
        let mut check = free_stack::StackCheck::default();
        for _ in 0..2 {
            // A free switch point: without it the preemption bound spends itself before the
            // owner ever looks at a stack in motion.
            thread::yield_now();
            let found = parts.stack().inspect(&mut check);
            assert!(!matches!(found, free_stack::Finding::Impossible(_)), "honest list found impossible");
            orphans.note(matches!(found, free_stack::Finding::Orphans(_)));
        }
        for h in users {
            h.join().unwrap();
        }
        assert_eq!(parts.stack().inspect(&mut check), free_stack::Finding::Sound);
        parts.assert_all_free();
    });
    seen_orphans.assert_seen(NAME, "a buffer between a CAS and its link (an orphan for an instant)");
}

/// (5e) A sender's pop and its giving back race the owner's repairs, each of which acts at once
/// (patience 1: a model has no time, so every check that finds an orphan stands for one that
/// stayed put for `stall_timeout`, as a pop or push stopped between its CAS and its link for that
/// long would). The sender announces the buffer in its record and gives it back through the
/// record (`held`), as the engine's senders do, and the repair leaves the buffers that pending
/// records name alone: no buffer is ever held twice (the owner pops too, and would take one
/// relinked under the sender), and at the end every index is there once.
#[test]
fn free_stack_repair_leaves_a_pending_pop_and_push_alone() {
    const NAME: &str = "free_stack_repair_leaves_a_pending_pop_and_push_alone";
    const INCARNATION: u64 = 5;
    let orphans = Tally::default();
    let seen_orphans = orphans.clone();
    model(NAME, move || {
        let parts = StackParts::new(1);
        let words = Arc::new([loom::sync::atomic::AtomicU64::new(0), loom::sync::atomic::AtomicU64::new(0)]);
        let sender = {
            let (parts, words) = (parts.clone(), words.clone());
            thread::spawn(move || {
                let (rec, stack) = (Record { word: &words[0], msg: &words[1] }, parts.stack());
                let got = stack.pop_as(1, |i| rec.announce(INCARNATION, i, Some(1))).ok();
                rec.hold_in_flight(INCARNATION, got, 1);
                if let Some(i) = got {
                    parts.bufs.acquire(i, 1);
                    parts.bufs.release(i, 1);
                    rec.give_back_in_flight(INCARNATION, i, &stack);
                }
            })
        };
        let rec = Record { word: &words[0], msg: &words[1] };
        let spoken_for = || rec.pending().into_iter().collect::<Vec<u32>>();
        let mut check = free_stack::StackCheck::default();
        for _ in 0..2 {
            thread::yield_now();
            orphans.note(matches!(parts.stack().inspect(&mut check), free_stack::Finding::Orphans(_)));
            parts.stack().repair(&mut check, 1, spoken_for);
            if let Some(i) = parts.pop(2) {
                parts.push(i, 2);
            }
        }
        sender.join().unwrap();
        assert_eq!(rec.pending(), None);
        assert_eq!(parts.stack().inspect(&mut check), free_stack::Finding::Sound);
        parts.assert_all_free();
    });
    seen_orphans.assert_seen(NAME, "the sender's buffer between a CAS and its link when the owner repairs");
}

/// (5d) A peer scribbled the head of a three-buffer stack out of range while index 0 is held.
/// The owner repairs it (once) while another thread keeps popping: no buffer is ever held twice
/// (the held one is never handed out), the popper gets buffers once the list is rebuilt (in
/// some execution), and at the end every index is there exactly once.
#[test]
fn free_stack_repair_of_a_scribbled_head() {
    const NAME: &str = "free_stack_repair_of_a_scribbled_head";
    let through = Tally::default();
    let seen_through = through.clone();
    model(NAME, move || {
        let parts = StackParts::new(3);
        let held = parts.pop(9).unwrap();
        parts.head.scribble(5 << 32 | 77);
        let popper = {
            let parts = parts.clone();
            thread::spawn(move || {
                let mut got = Vec::new();
                for _ in 0..3 {
                    match parts.pop(1) {
                        Some(i) => got.push(i),
                        None => thread::yield_now(),
                    }
                }
                got
            })
        };
        let mut check = free_stack::StackCheck::default();
        let mut repaired = false;
        // One repair: a second one could find a buffer the popper took between its CAS and its
        // `IN_USE` mark, an orphan for that instant, and `repair` acts on orphans only after they
        // stayed put for `patience` checks (`stall_timeout` in the engine), which a model
        // without time cannot express. What this model checks is the rebuild racing with pops.
        for _ in 0..2 {
            thread::yield_now();
            if !repaired {
                repaired = parts.stack().repair(&mut check, 1, Vec::new);
            }
        }
        let got = popper.join().unwrap();
        if !repaired {
            repaired = parts.stack().repair(&mut check, 1, Vec::new);
        }
        assert!(repaired, "the scribbled head was never repaired");
        assert!(!got.contains(&held), "the held buffer {held} was handed out");
        through.note(!got.is_empty());
        for i in got {
            parts.push(i, 1);
        }
        parts.push(held, 9);
        assert_eq!(parts.stack().inspect(&mut check), free_stack::Finding::Sound);
        parts.assert_all_free();
    });
    seen_through.assert_seen(NAME, "the popper getting a buffer after the repair");
}

/// The published MR table (`published`): the owner withdraws a registration, releases its
/// memory (a Release store standing for munmap), and publishes another under the same key,
/// while a peer looks the key up, "copies" (reads the memory's state) and checks the entry
/// again. A reader never takes a torn entry (the key of one version with the range of the
/// other), and a reader whose check passes copied from memory that was still there.
#[test]
fn published_withdraw_races_a_read() {
    use smr_core::published::{self, MrSlot, Publisher, REMOTE_READ};
    const KEY: u64 = 4;
    let (accepted, refused) = (Tally::default(), Tally::default());
    let (a, r) = (accepted.clone(), refused.clone());
    model("published_withdraw_races_a_read", move || {
        let table: Arc<Vec<MrSlot>> = Arc::new((0..2).map(|_| MrSlot::unused()).collect());
        let freed = Arc::new(loom::sync::atomic::AtomicU64::new(0));
        let mut owner = Publisher::default();
        let first = owner.publish(&table, KEY, 0x1000, 100, REMOTE_READ).expect("room");
        let (t, f) = (table.clone(), freed.clone());
        let writer = thread::spawn(move || {
            owner.withdraw(&t, first, &|_| false);
            f.store(1, Ordering::Release);
            owner.publish(&t, KEY, 0x2000, 200, REMOTE_READ).expect("room");
        });
        if let Some(p) = published::lookup(&table, KEY) {
            assert!(
                (p.base, p.len) == (0x1000, 100) || (p.base, p.len) == (0x2000, 200),
                "torn entry: base {:#x} len {}",
                p.base,
                p.len
            );
            let memory_gone = freed.load(Ordering::Relaxed) == 1;
            let stands = published::unchanged(&table, &p);
            if stands && p.base == 0x1000 {
                assert!(!memory_gone, "a read of released memory passed its check");
            }
            a.note(stands);
            r.note(!stands);
        }
        writer.join().unwrap();
    });
    accepted.assert_seen("published_withdraw_races_a_read", "a read that stood");
    refused.assert_seen("published_withdraw_races_a_read", "a read refused after a rewrite");
}

/// Writes into a published registration (`published::begin_write`): the owner withdraws the
/// entry and then releases the memory (a Release store standing for munmap or free) while a
/// peer looks the key up, counts itself in and "copies" (checks the memory is still there,
/// twice, around a yield). A write the entry admitted never lands in released memory: the
/// withdrawal waits for it. A write refused is refused before it touches anything.
#[test]
fn published_withdraw_waits_for_a_write() {
    use smr_core::published::{self, MrSlot, Publisher, REMOTE_WRITE};
    const KEY: u64 = 9;
    let (admitted, refused) = (Tally::default(), Tally::default());
    let (a, r) = (admitted.clone(), refused.clone());
    model("published_withdraw_waits_for_a_write", move || {
        let table: Arc<Vec<MrSlot>> = Arc::new((0..1).map(|_| MrSlot::unused()).collect());
        let freed = Arc::new(loom::sync::atomic::AtomicU64::new(0));
        let mut owner = Publisher::default();
        let slot = owner.publish(&table, KEY, 0x1000, 100, REMOTE_WRITE).expect("room");
        let (t, f) = (table.clone(), freed.clone());
        let closer = thread::spawn(move || {
            owner.withdraw(&t, slot, &|_| false);
            f.store(1, Ordering::Release);
        });
        if let Some(p) = published::lookup(&table, KEY) {
            assert!(p.allows(REMOTE_WRITE));
            let admit = published::begin_write(&table, &p);
            if admit {
                assert_eq!(freed.load(Ordering::Acquire), 0, "a write admitted into released memory");
                thread::yield_now();
                assert_eq!(freed.load(Ordering::Acquire), 0, "memory released during an admitted write");
                published::end_write(&table, &p);
            }
            a.note(admit);
            r.note(!admit);
        }
        closer.join().unwrap();
        assert_eq!(table[0].writers.load(Ordering::Relaxed), 0, "a writer left counted");
    });
    admitted.assert_seen("published_withdraw_waits_for_a_write", "a write admitted");
    refused.assert_seen("published_withdraw_waits_for_a_write", "a write refused after the withdrawal began");
}

/// Counted writes into a published registration (`published::count`, `Publisher::take_counts`):
/// the owner takes counts on a progress pass and withdraws the entry while a peer writes,
/// counting its copy; the owner then takes the counts once more, as the provider does after a
/// withdrawal. Whatever the interleaving, the counts the owner took add up to one for a write
/// admitted and to none for a write refused: no counted copy is lost to the withdrawal, none
/// counted twice.
#[test]
fn published_counts_survive_a_withdrawal() {
    use smr_core::published::{self, MrSlot, Publisher, COUNT_WRITES, REMOTE_WRITE};
    const KEY: u64 = 6;
    let (admitted, refused) = (Tally::default(), Tally::default());
    let (a, r) = (admitted.clone(), refused.clone());
    model("published_counts_survive_a_withdrawal", move || {
        let table: Arc<Vec<MrSlot>> = Arc::new((0..1).map(|_| MrSlot::unused()).collect());
        let mut owner = Publisher::default();
        let slot = owner.publish(&table, KEY, 0x1000, 100, REMOTE_WRITE | COUNT_WRITES).expect("room");
        let t = table.clone();
        let closer = thread::spawn(move || {
            let pass = owner.take_counts(&t, slot).writes;
            owner.withdraw(&t, slot, &|_| false);
            pass + owner.take_counts(&t, slot).writes
        });
        let mut wrote = 0;
        if let Some(p) = published::lookup(&table, KEY) {
            let admit = published::begin_write(&table, &p);
            if admit {
                published::count(&table, &p, REMOTE_WRITE);
                published::end_write(&table, &p);
                wrote = 1;
            }
            a.note(admit);
            r.note(!admit);
        }
        let taken = closer.join().unwrap();
        assert_eq!(taken, wrote, "the owner took {taken} counted writes of {wrote}");
    });
    admitted.assert_seen("published_counts_survive_a_withdrawal", "a counted write admitted");
    refused.assert_seen("published_counts_survive_a_withdrawal", "a write refused after the withdrawal began");
}

/// A published entry scribbled over (`published`, its seal): a peer forges the entry's base
/// while the owner repairs its table on its tick (`Publisher::repair`) and another peer looks
/// the key up. A lookup never answers the forged base, whatever the interleaving; after the
/// owner's next repair the honest entry is found again.
#[test]
fn published_repair_races_a_forgery_and_a_lookup() {
    use smr_core::published::{self, MrSlot, Publisher, REMOTE_WRITE};
    const KEY: u64 = 2;
    let (found, refused) = (Tally::default(), Tally::default());
    let (fo, re) = (found.clone(), refused.clone());
    model("published_repair_races_a_forgery_and_a_lookup", move || {
        let table: Arc<Vec<MrSlot>> = Arc::new((0..1).map(|_| MrSlot::unused()).collect());
        let mut owner = Publisher::default();
        owner.publish(&table, KEY, 0x1000, 100, REMOTE_WRITE).expect("room");
        let t = table.clone();
        let forger = thread::spawn(move || t[0].base.store(0x9000, Ordering::Relaxed));
        let t = table.clone();
        let repairer = thread::spawn(move || {
            owner.repair(&t);
            owner
        });
        let seen = published::lookup(&table, KEY);
        if let Some(p) = seen {
            assert_eq!((p.base, p.len), (0x1000, 100), "a lookup answered a forged entry");
        }
        fo.note(seen.is_some());
        re.note(seen.is_none());
        forger.join().unwrap();
        let mut owner = repairer.join().unwrap();
        owner.repair(&table);
        assert_eq!(published::lookup(&table, KEY).map(|p| p.base), Some(0x1000), "not put back");
    });
    found.assert_seen("published_repair_races_a_forgery_and_a_lookup", "the honest entry found");
    refused.assert_seen("published_repair_races_a_forgery_and_a_lookup", "a lookup refused (forged or being repaired)");
}

/// The two words of an empty `held::Record`, shared with a thread of the model.
fn record_words() -> Arc<[loom::sync::atomic::AtomicU64; 2]> {
    Arc::new([loom::sync::atomic::AtomicU64::new(0), loom::sync::atomic::AtomicU64::new(0)])
}

/// (7a) The record of a buffer held out of a free stack (`held`) by a holder that died while it
/// carried message 7, decided by the stack's owner while a new holder of the entry records a
/// buffer of its own. The owner gives the dead holder's buffer back exactly when the message was
/// not handled (`handled` below 7), never twice; the new holder records only into an empty
/// record, so its buffer is never taken for the dead one's, and the stack ends with every index
/// once.
#[test]
fn held_buffer_of_a_dead_holder_comes_back_once() {
    use smr_core::held::Record;
    const DEAD: u64 = 5;
    const SUCCESSOR: u64 = 6;
    let (recorded, refused) = (Tally::default(), Tally::default());
    let (r, f) = (recorded.clone(), refused.clone());
    model("held_buffer_of_a_dead_holder_comes_back_once", move || {
        for handled in [6, 7] {
            let parts = StackParts::new(3);
            let words = record_words();
            let rec = Record { word: &words[0], msg: &words[1] };
            let index = parts.stack().pop().unwrap();
            rec.hold_in_flight(DEAD, Some(index), 7);
            let (p, w) = (parts.clone(), words.clone());
            let owner = thread::spawn(move || Record { word: &w[0], msg: &w[1] }.decide(DEAD, handled, 0, &p.stack()));
            let own = parts.stack().pop().unwrap();
            rec.hold_in_flight(SUCCESSOR, Some(own), 1);
            let gave_back = owner.join().unwrap();
            // The owner has cleared the dead holder's record: what is left is the successor's.
            let mine = words[0].load(Ordering::Relaxed) != 0;
            assert_eq!(rec.take_spare(SUCCESSOR, 2), None, "a message's buffer taken for a spare");
            assert_eq!(gave_back, handled == 6, "the dead holder's buffer, messages handled up to {handled}");
            if !gave_back {
                // Handled: it went back with its message.
                parts.stack().push(index).unwrap();
            }
            r.note(mine);
            f.note(!mine);
            rec.clear(SUCCESSOR, own);
            assert_eq!(words[0].load(Ordering::Relaxed), 0, "a record left after the successor's clear");
            parts.stack().push(own).unwrap();
            parts.assert_all_free();
        }
    });
    recorded.assert_seen("held_buffer_of_a_dead_holder_comes_back_once", "the successor recorded its buffer");
    refused.assert_seen("held_buffer_of_a_dead_holder_comes_back_once", "the successor found the record still taken");
}

/// (7b) A holder that dies in its pop, right after it returned and before it recorded the buffer
/// as its own (`held`: its record still says pending), while another process pops the same
/// stack and holds what it got. The holder's pop announced every index it tried; the owner's
/// decision gives back exactly the buffer the holder's pop took (marked with its tag), never the
/// other process's, and the stack ends with every index once. With one buffer, one of the two
/// pops finds the stack empty after a lost race, and the holder's record then names a buffer
/// it never had.
#[test]
fn held_buffer_of_a_holder_dead_in_its_pop_comes_back_once() {
    use smr_core::held::Record;
    const DEAD: u64 = 5;
    const TAG: u32 = 3;
    let (took, lost) = (Tally::default(), Tally::default());
    let (t, l) = (took.clone(), lost.clone());
    model("held_buffer_of_a_holder_dead_in_its_pop_comes_back_once", move || {
        for n in [1, 2] {
            let parts = StackParts::new(n);
            let words = record_words();
            let p = parts.clone();
            let other = thread::spawn(move || p.stack().pop().ok());
            let rec = Record { word: &words[0], msg: &words[1] };
            let got = parts.stack().pop_as(TAG, |i| rec.announce(DEAD, i, Some(7))).ok();
            // The holder dies here.
            let others = other.join().unwrap();
            let gave_back = rec.decide(DEAD, 0, TAG, &parts.stack());
            assert_eq!(gave_back, got.is_some(), "the dead holder's buffer ({got:?}) given back");
            assert_eq!(words[0].load(Ordering::Relaxed), 0, "the record is decided");
            t.note(got.is_some());
            l.note(got.is_none() && n == 1);
            if let Some(i) = others {
                parts.stack().push(i).unwrap();
            }
            parts.assert_all_free();
        }
    });
    took.assert_seen("held_buffer_of_a_holder_dead_in_its_pop_comes_back_once", "the holder's pop took a buffer");
    lost.assert_seen("held_buffer_of_a_holder_dead_in_its_pop_comes_back_once", "the holder lost the only buffer");
}
