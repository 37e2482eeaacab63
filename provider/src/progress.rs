//! Progress: who drives the endpoints, and how waiters learn that something completed.
//!
//! CQs and counters call `cq` / `cntr` here (manual progress: reading them drives the endpoints
//! they are bound to). A domain opened with FI_PROGRESS_AUTO also gets one thread (`AutoThread`)
//! that sleeps on the wake words of all the domain's endpoints at once (futex_waitv) and drives
//! them when a peer's command arrives, so a passive target that computes, sleeps or waits on
//! another object still serves its peers. After a pass that served something it keeps polling
//! for `SPIN`, so that a stream of requests costs no wake-up each; while nothing arrives it
//! costs no CPU.
//!
//! While application threads drive progress themselves (polling CQs or counters, spinning in a
//! blocking wait), the thread stands aside: it stays off the endpoints' wake words, so senders
//! pay no wake-up syscall and this process no context switch and no second thread on the domain
//! lock for arrivals the application serves anyway. It comes back when a whole `ASIDE_CHECK`
//! passes without an application poll, or at once when a waiter goes to sleep.
//!
//! Completions made by one thread must wake waiters in another (`fi_cntr_wait` in the
//! application while the progress thread applied the remote write): the completion rings the
//! object's bell (`state::waiters`), on which blocking waits sleep.

use crate::state::cq::Reader;
use crate::state::ep::idle::YIELD_AFTER;
use crate::state::threads::{futex_wait_private, AutoThread, Control, DomainThread};
use crate::state::waiters::{self, Waitable};
use crate::state::{DomainShared, DomainState};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Drive endpoint `id` once (`EpState::drive`); returns how many events it handled.
pub fn endpoint(st: &mut DomainState, id: usize) -> usize {
    endpoint_for(st, id, None)
}

/// `endpoint`, with completions for the CQ that `reader` reads going into its array.
#[inline(always)]
fn endpoint_for(st: &mut DomainState, id: usize, reader: Option<&mut Reader>) -> usize {
    let DomainState { eps, cqs, cntrs, avs, mrs, events, .. } = st;
    let n = eps.get_mut(id).map_or(0, |ep| ep.drive(cqs, cntrs, reader, avs, mrs));
    *events = events.wrapping_add(n as u64);
    n
}

/// Endpoint ids, copied out of the state so that progress can borrow it mutably.
type Ids = smallvec::SmallVec<[usize; 8]>;

/// Drive the endpoints `ids`, with `reader` (`endpoint_for`).
fn drive(st: &mut DomainState, ids: Ids, mut reader: Option<&mut Reader>) -> usize {
    ids.into_iter().map(|id| endpoint_for(st, id, reader.as_deref_mut())).sum()
}

/// Drive the endpoints `ids` (copied out first, unless there is just one: the common case,
/// which a poll loop takes millions of times), with `reader` (`endpoint_for`).
#[inline(always)]
fn drive_these(
    st: &mut DomainState,
    ids: impl FnOnce(&DomainState) -> Option<&[usize]>,
    reader: Option<&mut Reader>,
) -> usize {
    match ids(st) {
        None | Some([]) => 0,
        Some(&[one]) => endpoint_for(st, one, reader),
        Some(many) => drive(st, many.iter().copied().collect(), reader),
    }
}

/// Drive the endpoints bound to CQ `cq`; what they complete for it while nothing is queued
/// goes into `reader`'s array, if given (`cq::Reader`).
#[inline(always)]
pub fn cq(st: &mut DomainState, cq: usize, reader: Option<&mut Reader>) -> usize {
    drive_these(st, |st| st.cqs.get(cq).map(|c| &c.eps[..]), reader)
}

/// The endpoints that can move a counter.
enum CntrEps<'a> {
    /// Those bound to it.
    Bound(&'a [usize]),
    /// Every endpoint of the domain, while memory regions count remote accesses into it (any
    /// endpoint may be targeted).
    All,
}

/// The endpoints that can move counter `cntr`.
fn cntr_eps(st: &DomainState, cntr: usize) -> Option<CntrEps<'_>> {
    st.cntrs.get(cntr).map(|c| if c.mrs > 0 { CntrEps::All } else { CntrEps::Bound(&c.eps) })
}

/// Drive the endpoints that can move counter `cntr` (`cntr_eps`). Matched here rather than
/// through `drive_these`, whose closure looks the counter up a second time: a poll loop over a
/// counter (SOS's waits) calls this on every turn, and the one look-up saved 14 instructions.
pub fn cntr(st: &mut DomainState, cntr: usize) -> usize {
    match cntr_eps(st, cntr) {
        None | Some(CntrEps::Bound([])) => 0,
        Some(CntrEps::Bound(&[one])) => endpoint(st, one),
        Some(CntrEps::Bound(many)) => drive(st, many.iter().copied().collect(), None),
        Some(CntrEps::All) => all(st),
    }
}

/// Whether a progress probe of CQ `cq` (a fi_cq_read of count 0, which can return nothing)
/// would drive only endpoints that the read of counter `cntr` drove one call before (its
/// readerr took that pass: `DomainState::poll_turn`), so that it may skip the pass. SOS reads
/// its counter's pair and then probes its target CQ on every turn of a wait; in its usual
/// single-endpoint mode all three are bound to one endpoint.
pub fn probe_is_fresh(st: &DomainState, cq: usize, cntr: usize) -> bool {
    match (st.cqs.get(cq), cntr_eps(st, cntr)) {
        (Some(_), Some(CntrEps::All)) => true,
        // One endpoint each, SOS's usual case: a comparison, not a search.
        (Some(q), Some(CntrEps::Bound(eps))) => match (&*q.eps, eps) {
            ([ours], [theirs]) => ours == theirs,
            (ours, theirs) => ours.iter().all(|e| theirs.contains(e)),
        },
        _ => false,
    }
}

/// Drive every endpoint of the domain. A domain of one endpoint, the usual case, copies out no
/// list: OpenSHMEM's default build waits on a counter that its memory regions count into, which
/// drives every endpoint (`CntrEps::All`) on every turn of the wait.
pub fn all(st: &mut DomainState) -> usize {
    if st.eps.len() == 1 {
        if let Some((id, _)) = st.eps.iter().next() {
            return endpoint(st, id);
        }
    }
    drive(st, st.eps.iter().map(|(id, _)| id).collect(), None)
}

/// Before a thread sleeps on the domain's endpoints after a poll that found nothing it waits
/// for: what that poll's progress kept for the next pass (the inject buffers of the messages it
/// took, `Endpoint::give_back_taken`) goes back now, so that it does not stay out of its
/// senders' reach while nobody progresses. (The auto-progress thread sleeps only after a pass
/// that handled nothing, which gave everything back when it began.)
pub fn before_sleep(st: &mut DomainState) {
    for (_, ep) in st.eps.iter_mut() {
        if let Some(engine) = ep.engine.as_mut() {
            engine.give_back_taken();
        }
    }
}

/// An application thread of an auto-progress domain is about to sleep in a blocking wait
/// (`asleep`), or woke from one. Before it sleeps, the progress thread must be back on the wake
/// words (`Control::app_sleeps`). While one sleeps, the domain's endpoints tell peers they have
/// a CPU to spare (`Endpoint::set_spare`): the progress thread serves them on a CPU the
/// application left idle, so a large read from them is pushed (`rma_start`).
pub fn app_asleep(shared: &DomainShared, st: &mut DomainState, asleep: bool) {
    if asleep {
        shared.progress.app_sleeps();
    }
    let before = st.apps_asleep;
    st.apps_asleep = if asleep { before + 1 } else { before.saturating_sub(1) };
    if (before == 0) != (st.apps_asleep == 0) {
        for (_, ep) in st.eps.iter() {
            if let Some(engine) = ep.engine.as_ref() {
                engine.set_spare(asleep);
            }
        }
    }
}

/// The endpoints whose arrivals can satisfy a wait on `w`: those whose wake words a waiter
/// sleeps on (None: no such object).
pub fn wait_eps(st: &DomainState, w: Waitable) -> Option<Vec<usize>> {
    Some(match w {
        Waitable::Cq(id) => st.cqs.get(id)?.eps.to_vec(),
        Waitable::Cntr(id) => match cntr_eps(st, id)? {
            CntrEps::All => st.eps.iter().map(|(id, _)| id).collect(),
            CntrEps::Bound(eps) => eps.to_vec(),
        },
    })
}

/// How often a thread standing aside looks whether the application still polls: also the
/// longest an arrival can wait, unwoken, after the application stopped polling without going to
/// sleep in a blocking wait.
const ASIDE_CHECK: Duration = Duration::from_millis(1);

/// How long a thread keeps polling before it sleeps: a blocking wait from its start (`block`),
/// the progress thread after a pass that served something. A peer's next request or answer is
/// usually microseconds away (a stream of gets, atomics or puts), and a sleeping thread costs
/// each a futex wake-up and a context switch: OpenSHMEM's default build, whose target serves
/// through this thread while its application sleeps in a blocking wait, took 2.1-2.8 us per
/// 8 B get and 1.2-1.9 us per fetching atomic with the thread back asleep after every pass,
/// 0.4 us with it polling (2 PEs, one CPU each). An idle process still costs no CPU once this
/// has passed. The price: beside an application that computes on the same CPU, the thread
/// polls through a stream of requests less than `SPIN` apart where it would have been woken for
/// each, so it takes a share of that CPU. FI_RSHM_PROGRESS_SPIN_US sets the progress thread's
/// (0: sleep after every pass). What else was tried: docs/perf/where-the-time-goes.md.
pub const SPIN: Duration = Duration::from_micros(50);

/// What a thread that polls and found nothing does before its next poll, `waited` after its
/// last progress: at first a pause, then a yield of the CPU.
///
/// The yield is for the peer it waits for, which may be waiting for this CPU. With two
/// processes on two CPUs, the scheduler sometimes placed both on one (it wakes a thread on its
/// waker's CPU), and a pause never lets the other run: each wait then spun its whole
/// `progress::SPIN` before it slept, and since neither stayed runnable long enough for the load
/// balancer to move one, an 8 B ping-pong in OpenSHMEM's default build (an atomic set, then a
/// wait on the target counter) took 130-140 us a round for hundreds of rounds in a row: in 7 of
/// 10 runs of 200,000 rounds, 87-1,016 rounds over 100 us, and 0.60 us a round on average. With
/// the yield, the other runs at once: rounds on a shared CPU take 10-20 us, until the balancer
/// moves one of the two, which stay runnable; at most 3 rounds over 100 us a run, and 0.43 us a
/// round on average. The yield costs a system call (0.4 us here), so it comes only after the
/// time in which a peer on another CPU answers. The endpoint's own yield every
/// `POLLS_PER_YIELD` passes (`state::ep`), for nodes with more polling processes than CPUs,
/// did not catch this: 1,024 passes of a wait take longer than its 50 us of polling.
///
/// One pause, not a burst: a pause takes 29 ns on this host's EPYC, and the 32 there were made
/// a microsecond between polls, half of which an answer waited on average (OpenSHMEM's default
/// build, whose quiet and waits block: 1.5 us per streaming 8 B put against 0.5 us with them
/// gone).
///
/// An application thread's yield also moves it to another CPU when it finds this one shared
/// (`idle::yield_or_move`): the balancer above ends such a stretch only after 10-200 ms. The
/// progress thread's yield does not move it: the thread it gives way to is often its own
/// application's, which a move would not help. Both stop yielding for a while after a yield
/// that a thread not of ours kept for long (`idle::yield_cpu`).
pub fn between_polls(waited: Duration, by: Poller) {
    if waited < YIELD_AFTER {
        std::hint::spin_loop();
    } else if by == Poller::Application {
        crate::state::ep::idle::yield_or_move();
    } else {
        crate::state::ep::idle::yield_cpu();
    }
}

/// Which thread polls (`between_polls`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Poller {
    /// An application thread in a blocking wait (`block::spin`).
    Application,
    /// The progress thread of an auto-progress domain.
    ProgressThread,
}

/// Longest sleep without a wake-up (a backstop; wake-ups are what normally end a sleep).
const IDLE: Duration = Duration::from_secs(1);

/// Longest single sleep of any thread (a blocking wait, the progress or the bell thread) while an
/// endpoint's work waits for room at a peer (`waits_for_room`).
pub const ROOM_SLICE: Duration = Duration::from_millis(1);

/// Whether work of one of endpoints `eps` waits for room at a peer: the engine's
/// (`smr_core::endpoint::Endpoint::waits_for_room`), or a target's replies that found no room
/// at their initiator (`RmaState::has_outgoing`: a pass leaves there only what a full ring or
/// pool refused). The peer wakes us when it makes room in a ring, but for one look that can miss
/// the request (`smr_core::wake::want_room`): a thread that sleeps with such work sleeps at most
/// `ROOM_SLICE`.
pub fn waits_for_room(st: &DomainState, mut eps: impl Iterator<Item = usize>) -> bool {
    eps.any(|id| {
        st.eps.get(id).is_some_and(|ep| ep.rma.has_outgoing() || ep.engine.as_ref().is_some_and(|e| e.waits_for_room()))
    })
}

/// Start the progress thread of `shared`.
fn start_auto(shared: &Arc<DomainShared>) -> std::io::Result<AutoThread> {
    DomainThread::start("rshm-progress", shared, Arc::clone(&shared.progress), run)
}

fn run(domain: Weak<DomainShared>, control: Arc<Control>) {
    let spin = crate::params::config().progress_spin.unwrap_or(SPIN);
    let mut last_work: Option<Instant> = None;
    while !control.thread.stopping() {
        if control.aside.load(Ordering::Relaxed) {
            stand_aside(&domain, &control);
            last_work = None;
            continue;
        }
        // Within `spin` of the last work: poll again, off the wake words (peers need not wake
        // a thread that polls), and sleep only after a pass that armed them found nothing.
        // Between polls it yields the CPU after a few idle microseconds (`between_polls`).
        let idle_for = last_work.map(|t| t.elapsed()).filter(|t| *t < spin);
        let polling = idle_for.is_some();
        // The thread holds the domain only while it works, so fi_close(domain) sees no extra
        // reference while the thread sleeps.
        let Some(shared) = domain.upgrade() else { return };
        let control_seq = control.thread.seq.load(Ordering::SeqCst);
        let (handles, events, sleep) = {
            let mut st = shared.lock();
            let handles = if polling { Vec::new() } else { waiters::arm(&st, st.eps.iter().map(|(id, _)| id)) };
            let events = all(&mut st);
            // Asked only before a sleep: a pass that served something goes round again at once.
            let short = events == 0 && !polling && waits_for_room(&st, st.eps.iter().map(|(id, _)| id));
            (handles, events, if short { ROOM_SLICE } else { IDLE })
        };
        drop(shared);
        if events > 0 {
            last_work = Some(Instant::now());
        } else if let Some(idle_for) = idle_for {
            between_polls(idle_for, Poller::ProgressThread);
        } else {
            waiters::sleep(&handles, (&control.thread.seq, control_seq), sleep);
        }
        waiters::disarm(&handles);
    }
}

/// Stay off the wake words while the application polls; return once a whole `ASIDE_CHECK`
/// passed without an application poll (then the caller arms the wake words and drives every
/// endpoint, which serves whatever arrived meanwhile without a wake-up), when a waiter went to
/// sleep, or when the domain closes. Meanwhile, every `ASIDE_CHECK`, drive the endpoints that
/// nobody drove since the last look: an application polling one endpoint's CQ does not serve
/// its other endpoints, which must not wait for it to stop.
fn stand_aside(domain: &Weak<DomainShared>, control: &Control) {
    let mut polls = control.app_polls.load(Ordering::Relaxed);
    let mut driven: HashMap<usize, u64> = HashMap::new();
    loop {
        let seq = control.thread.seq.load(Ordering::SeqCst);
        if control.thread.stopping() || !control.aside.load(Ordering::SeqCst) {
            return;
        }
        futex_wait_private(&control.thread.seq, seq, ASIDE_CHECK);
        let now = control.app_polls.load(Ordering::Relaxed);
        if now == polls {
            control.aside.store(false, Ordering::SeqCst);
            return;
        }
        polls = now;
        let Some(shared) = domain.upgrade() else { return };
        let mut st = shared.lock();
        let ids: Ids = st.eps.iter().map(|(id, _)| id).collect();
        for id in ids {
            if driven.get(&id) == Some(&st.eps[id].driven) {
                endpoint(&mut st, id);
            }
            driven.insert(id, st.eps[id].driven);
        }
        driven.retain(|id, _| st.eps.contains(*id));
    }
}

/// An endpoint was enabled or closed: an auto-progress domain starts or re-reads its thread,
/// and the bell thread (`waitfd`) lets go of the wake words it sleeps on.
pub fn endpoints_changed(shared: &Arc<DomainShared>) {
    if let Some(b) = shared.bell.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        b.poke();
    }
    if !shared.config.auto_progress {
        return;
    }
    let mut auto = shared.auto.lock().unwrap_or_else(|p| p.into_inner());
    match auto.as_ref() {
        Some(t) => t.poke(),
        None => match start_auto(shared) {
            Ok(t) => *auto = Some(t),
            Err(e) => crate::warn!(Domain, "cannot start the progress thread: {e}"),
        },
    }
}

/// Stop the auto-progress and bell threads (domain close).
pub fn stop_threads(shared: &DomainShared) {
    let thread = shared.auto.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(t) = thread {
        t.stop();
    }
    let bell = shared.bell.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(b) = bell {
        b.stop();
    }
}
