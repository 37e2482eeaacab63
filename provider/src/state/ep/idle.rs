//! Yielding the CPU while a caller waits: the pause a wait makes before it yields
//! (`YIELD_AFTER`, also taken by `progress::between_polls`), the yield of an endpoint's
//! polling caller after idle passes in a row (`IdleStreak`), the yield of an application
//! thread, which moves it to another CPU when it finds this one shared (`yield_or_move`), and
//! the rule every yield of ours follows: none for a while after one that lost the CPU for long
//! (`yield_cpu`, `HELD_AWAY`).

use smr_core::cpu_marks::CpuMarks;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a polling thread waits with a pause between polls before it yields its CPU between
/// them instead. An answer that comes while the peer runs on another CPU comes within a
/// microsecond or two (an 8 B put's round trip in OpenSHMEM's default build: 0.4 us).
pub const YIELD_AFTER: Duration = Duration::from_micros(4);

/// Passes over one endpoint in a row that found nothing to do, for an application that waits by
/// calling into the provider again and again (OpenSHMEM built for manual progress polls a counter
/// in `shmem_wait_until`): such a caller never blocks, so `progress::between_polls` never runs for
/// it. Every `IDLE_CHECK_EVERY` idle passes it looks at the clock, and once `YIELD_AFTER` passed
/// without work it yields the CPU there, for the same reason as `progress::between_polls`: the peer
/// it waits for may be waiting for this CPU. In that build's 8 B ping-pong (an atomic set, then a
/// wait), runs of 10,000 rounds in which the scheduler put both processes on one CPU had stretches
/// of rounds at 100-300 us, each side yielding only every `POLLS_PER_YIELD` passes (`state::ep`). A
/// yield at every idle pass past `YIELD_AFTER` made those rounds shorter still, but cost a wait of
/// any length a system call (0.4 us) per pass, which delays noticing what it waits for: 1 MiB
/// ping-pongs and 64 KiB writes 7-13% slower with the CPUs apart.
#[derive(Debug, Default)]
pub struct IdleStreak {
    passes: u32,
    since: Option<Instant>,
}

/// Idle passes between two looks at the clock (a look costs about 20 ns; an idle pass over an
/// endpoint about 30-50).
const IDLE_CHECK_EVERY: u32 = 64;

impl IdleStreak {
    /// A pass that found work ends the streak.
    #[inline]
    pub fn worked(&mut self) {
        if self.passes != 0 {
            *self = IdleStreak::default();
        }
    }

    /// A pass that found nothing.
    #[inline]
    pub fn idle(&mut self) {
        self.passes = self.passes.wrapping_add(1);
        if self.passes.is_multiple_of(IDLE_CHECK_EVERY) {
            self.look();
        }
    }

    #[cold]
    fn look(&mut self) {
        let now = Instant::now();
        match self.since {
            None => self.since = Some(now),
            Some(start) if now.duration_since(start) >= YIELD_AFTER => yield_or_move(),
            Some(_) => {}
        }
    }
}

/// A yield that took at least this long handed the CPU to another thread that ran meanwhile: the
/// system call alone takes well under a microsecond here, and a peer of ours that got the CPU
/// runs `YIELD_AFTER` before it yields back.
const GAVE_WAY: Duration = Duration::from_micros(3);

/// Yields in a row that gave way before the CPU counts as shared with a thread that stays
/// (a peer of ours, waiting as we do), not lent for a moment (a kernel thread, the launcher).
const SHARED_AFTER: u32 = 8;

/// At most one move (`yield_or_move`) per this long per process, so that a node with more
/// polling processes than CPUs, where every yield gives way, spends little on them.
const MOVE_EVERY: Duration = Duration::from_millis(2);

/// The sleep that stands in for a move where this thread's CPUs cannot be changed: the shortest
/// there is (the kernel's timer slack makes it about 50 us).
const SLEEP: Duration = Duration::from_micros(1);

/// Yield the CPU for an application thread that waits (polling through the provider, or in a
/// blocking call); once `SHARED_AFTER` yields in a row gave the CPU away (other threads ran
/// meanwhile, on the CPU this one shares with them), move this thread to another CPU it may
/// run on (`move_to_another_cpu`), at most every `MOVE_EVERY` per process. Where its CPUs
/// cannot be changed it sleeps once instead (`SLEEP`), which the scheduler often, not always,
/// ends on another CPU.
///
/// Why: two processes that wait for each other (an OpenSHMEM ping-pong) sometimes start out on
/// one CPU, both woken there by the launcher's last barrier, while the other CPU idles, and stay
/// there for 10-200 ms, handing each other the CPU at every yield (`perf sched`: both processes
/// on one CPU from the barrier's wake-up until the idle CPU pulled one). As we read the
/// scheduler, two threads that hand each other the CPU every few microseconds both look
/// recently run ("cache hot"), which it declines to move until its balancing has failed a few
/// times; a thread that sleeps was woken on the busy CPU as often as not (by the timer
/// interrupt of the thread running there). OpenSHMEM's first latency section (1,000 gets or
/// puts) then reads 4-14 us an operation instead of 0.25. Measured, first section alone, 2 PEs:
/// - build for manual progress, gets: 10 of 37 runs stalled with the plain yield, 0 of 37 with
///   the sleep, 0 of 20 with the move;
/// - default build (blocking waits), puts and gets: 9 of 40 runs stalled with the plain yield
///   and 3 of 30 with the sleep; 0 of 40 with the move. In its per-round ping-pong (200,000
///   rounds, 6 alternated runs) the move left the average where it was (1.08-1.10 us a round
///   against 1.08-1.26) and the rounds over 100 us at 1-4 a run; a move at the first yield that
///   gave way, before `SHARED_AFTER`, made those 7-15 (it moved threads onto their peer's CPU).
pub fn yield_or_move() {
    static GATE: MoveGate = MoveGate::new();
    static MOVABLE: OnceLock<bool> = OnceLock::new();
    static SHARED: SharedCpu = SharedCpu::new();
    let Some(took) = yield_cpu() else { return };
    if SHARED.after_yield(took) && *MOVABLE.get_or_init(|| allowed_cpus() > 1) && GATE.pass(Instant::now()) {
        SHARED.moved();
        if move_to_another_cpu().is_none() {
            std::thread::sleep(SLEEP);
        }
    }
}

/// A yield that kept the CPU away from us this long, with no thread of ours giving way on that
/// CPU meanwhile (`smr_core::cpu_marks`), gave it to a thread that does not give it back soon:
/// a process that is not ours, or one of ours computing. The scheduler gives such a thread a
/// whole time slice at each yield of ours (3-10 ms measured here, against 0.4 us for a yield
/// with nothing else to run). One busy process that was not ours, sharing a CPU with one side
/// of a tagged ping-pong, made an 8 B round 12-156 us one-way with a yield every
/// `POLLS_PER_YIELD` passes and after every idle `YIELD_AFTER`, against 0.9 us without yields
/// and 1.2-1.4 us for sm2, which never yields (docs/perf/where-the-time-goes.md).
///
/// Yields that are long because several processes of ours share the CPU, each running until it
/// yields (OpenSHMEM's tests at 8 PEs on 2 CPUs), find their CPU's mark changed, and go on: a
/// pause there made `set_lock` take 10.3 s instead of 0.8, and `lfinc` 4.5 s instead of 1.2.
const HELD_AWAY: Duration = Duration::from_millis(1);

/// How long our yields stop after one was `HELD_AWAY`: the first time, and at most. The span
/// doubles while the first yield after it is held away again, and a yield that gets the CPU back
/// sooner ends the rule. Against a thread that computes on without end, a yield every
/// `YIELD_PAUSE_MAX` costs one time slice in about 16; meanwhile the scheduler shares the CPU
/// between it and us as it shares it between any two busy threads.
const YIELD_PAUSE_FIRST: Duration = Duration::from_millis(2);
const YIELD_PAUSE_MAX: Duration = Duration::from_millis(32);

/// Yield the CPU, unless a recent yield was `HELD_AWAY` (then nothing): how long the yield
/// took, or None if it did not yield. Every yield of a thread that waits goes through here: an
/// application thread's (`yield_or_move`, the endpoint's every `POLLS_PER_YIELD` passes) and the
/// progress thread's.
pub fn yield_cpu() -> Option<Duration> {
    static PAUSE: YieldPause = YieldPause::new();
    let before = Instant::now();
    if PAUSE.holds(before) {
        return None;
    }
    let mark = Mark::before_yield();
    std::thread::yield_now();
    let now = Instant::now();
    let took = now.duration_since(before);
    if took >= HELD_AWAY && mark.is_some_and(|m| m.untouched()) {
        PAUSE.held_away(now);
    } else {
        PAUSE.back_in_time();
    }
    Some(took)
}

/// The token a yielding thread left in its CPU's word of `smr_core::cpu_marks`.
struct Mark {
    marks: &'static CpuMarks,
    cpu: usize,
    token: u64,
}

impl Mark {
    /// Mark this thread's CPU; None where the marks cannot be had (no file in /dev/shm, no CPU
    /// number): every long yield then counts as given to a thread of ours, as before the marks.
    fn before_yield() -> Option<Mark> {
        static MARKS: OnceLock<Option<CpuMarks>> = OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let marks = MARKS
            .get_or_init(|| {
                CpuMarks::open(crate::names::uid())
                    .inspect_err(|e| crate::info!(Core, "no CPU marks ({e}): long yields go on"))
                    .ok()
            })
            .as_ref()?;
        // SAFETY: no arguments; -1 on error.
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).ok()?;
        // Unique among the user's processes (pids fit in 22 bits) and this process's yields.
        let token = NEXT.fetch_add(1, Ordering::Relaxed) << 22 | u64::from(std::process::id() & 0x3F_FFFF);
        marks.mark(cpu, token);
        Some(Mark { marks, cpu, token })
    }

    /// Whether no thread of ours marked the CPU since.
    fn untouched(&self) -> bool {
        self.marks.still(self.cpu, self.token)
    }
}

/// When our yields may start again (`yield_cpu`), among all of a process's threads.
struct YieldPause {
    epoch: OnceLock<Instant>,
    /// Nanoseconds from `epoch` until which nobody yields (0: no pause).
    until: AtomicU64,
    /// The last pause's length in nanoseconds (0 once a yield came back in time).
    span: AtomicU64,
}

impl YieldPause {
    const fn new() -> Self {
        YieldPause { epoch: OnceLock::new(), until: AtomicU64::new(0), span: AtomicU64::new(0) }
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(*self.epoch.get_or_init(|| at)).as_nanos() as u64
    }

    /// Whether yields stop at `now`.
    fn holds(&self, now: Instant) -> bool {
        let until = self.until.load(Ordering::Relaxed);
        until != 0 && self.nanos(now) < until
    }

    /// A yield that ended at `now` was `HELD_AWAY`: a pause starts, twice the last one
    /// (`YIELD_PAUSE_FIRST` to `YIELD_PAUSE_MAX`).
    fn held_away(&self, now: Instant) {
        let (first, most) = (YIELD_PAUSE_FIRST.as_nanos() as u64, YIELD_PAUSE_MAX.as_nanos() as u64);
        let span = self.span.load(Ordering::Relaxed).saturating_mul(2).clamp(first, most);
        self.span.store(span, Ordering::Relaxed);
        self.until.store(self.nanos(now) + span, Ordering::Relaxed);
    }

    /// A yield came back in time, or went to a thread of ours: the next pause starts short.
    fn back_in_time(&self) {
        if self.span.load(Ordering::Relaxed) != 0 {
            self.span.store(0, Ordering::Relaxed);
        }
    }
}

/// Yields in a row that gave the CPU away (`GAVE_WAY`), among a process's waiting threads.
struct SharedCpu {
    in_a_row: AtomicU32,
}

impl SharedCpu {
    const fn new() -> Self {
        SharedCpu { in_a_row: AtomicU32::new(0) }
    }

    /// A yield took `took`: whether the CPU now counts as shared (`SHARED_AFTER` yields in a row
    /// gave it away). A yield that came straight back starts the count again.
    fn after_yield(&self, took: Duration) -> bool {
        if took < GAVE_WAY {
            self.in_a_row.store(0, Ordering::Relaxed);
            return false;
        }
        self.in_a_row.fetch_add(1, Ordering::Relaxed) + 1 >= SHARED_AFTER
    }

    /// The thread moved (or slept): the count starts again.
    fn moved(&self) {
        self.in_a_row.store(0, Ordering::Relaxed);
    }
}

/// Move this thread off the CPU it runs on, to another it is allowed on, and leave its allowed
/// set as it was: narrowed for a moment to the others, which moves it before the call returns,
/// then restored, which leaves it where it now runs. The CPU it moved to; None (nothing changed)
/// where the set cannot be read or set, or holds this CPU alone.
fn move_to_another_cpu() -> Option<usize> {
    let allowed = allowed_set()?;
    let here = this_cpu()?;
    let mut others = allowed;
    // SAFETY: CPU_ISSET, CPU_CLR and CPU_COUNT only read or write bits of the sets we own, and
    // `here` is checked against the set's size first.
    unsafe {
        if here >= 8 * size_of::<libc::cpu_set_t>() || !libc::CPU_ISSET(here, &allowed) {
            return None;
        }
        libc::CPU_CLR(here, &mut others);
        if libc::CPU_COUNT(&others) == 0 {
            return None;
        }
    }
    set_allowed(&others)?;
    // Read while `here` is still excluded: the CPU the move put us on.
    let there = this_cpu();
    if set_allowed(&allowed).is_none() {
        crate::warn!(Core, "could not restore this thread's CPU affinity after moving it off a shared CPU");
    }
    there
}

/// The CPUs this thread may run on.
fn allowed_set() -> Option<libc::cpu_set_t> {
    // SAFETY: all-zero bytes are an empty cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: fills the set we own, of the size given; 0 is this thread.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    (rc == 0).then_some(set)
}

/// Let this thread run on `set` only.
fn set_allowed(set: &libc::cpu_set_t) -> Option<()> {
    // SAFETY: reads the set we own, of the size given; 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set) };
    (rc == 0).then_some(())
}

/// The CPU this thread runs on.
fn this_cpu() -> Option<usize> {
    // SAFETY: no arguments; -1 on error.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// Lets one move through per `MOVE_EVERY`, among all the threads that ask.
struct MoveGate {
    epoch: OnceLock<Instant>,
    /// When the last move went through, in nanoseconds from `epoch` plus `MOVE_EVERY` (so
    /// that 0, the start, lets the first one through).
    last: AtomicU64,
}

impl MoveGate {
    const fn new() -> Self {
        MoveGate { epoch: OnceLock::new(), last: AtomicU64::new(0) }
    }

    /// Whether a move at `now` may go through (then it is the last).
    fn pass(&self, now: Instant) -> bool {
        let every = MOVE_EVERY.as_nanos() as u64;
        let epoch = *self.epoch.get_or_init(|| now);
        let at = now.saturating_duration_since(epoch).as_nanos() as u64 + every;
        let last = self.last.load(Ordering::Relaxed);
        at.saturating_sub(last) >= every
            && self.last.compare_exchange(last, at, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

/// How many CPUs this thread may run on (1 when that cannot be learnt: never move then).
fn allowed_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_move_gate_lets_one_move_through_per_period() {
        let gate = MoveGate::new();
        let t0 = Instant::now();
        assert!(gate.pass(t0), "the first move goes through");
        assert!(!gate.pass(t0 + MOVE_EVERY / 2), "a second one within the period does not");
        assert!(gate.pass(t0 + MOVE_EVERY), "one a period later does");
        assert!(!gate.pass(t0 + MOVE_EVERY + MOVE_EVERY / 4));
    }

    #[test]
    fn a_yield_held_away_pauses_the_yields_for_twice_as_long_each_time_up_to_the_most() {
        let pause = YieldPause::new();
        let t0 = Instant::now();
        assert!(!pause.holds(t0), "no pause at first");
        pause.held_away(t0);
        assert!(pause.holds(t0 + YIELD_PAUSE_FIRST / 2), "a first pause");
        assert!(!pause.holds(t0 + YIELD_PAUSE_FIRST), "that ends");
        let t1 = t0 + YIELD_PAUSE_FIRST;
        pause.held_away(t1);
        assert!(pause.holds(t1 + YIELD_PAUSE_FIRST * 3 / 2), "the next one is twice as long");
        let mut t = t1;
        for _ in 0..10 {
            t += YIELD_PAUSE_MAX;
            pause.held_away(t);
        }
        assert!(pause.holds(t + YIELD_PAUSE_MAX - Duration::from_micros(1)));
        assert!(!pause.holds(t + YIELD_PAUSE_MAX), "never longer than the most");
        pause.back_in_time();
        let t2 = t + YIELD_PAUSE_MAX;
        pause.held_away(t2);
        assert!(!pause.holds(t2 + YIELD_PAUSE_FIRST), "after a yield back in time, short again");
    }

    #[test]
    fn the_cpu_counts_as_shared_after_enough_yields_in_a_row_gave_it_away() {
        let shared = SharedCpu::new();
        let (gave_way, came_back) = (GAVE_WAY, GAVE_WAY / 3);
        for _ in 1..SHARED_AFTER {
            assert!(!shared.after_yield(gave_way), "fewer than SHARED_AFTER in a row");
        }
        assert!(!shared.after_yield(came_back), "a yield that came straight back");
        for _ in 1..SHARED_AFTER {
            assert!(!shared.after_yield(gave_way), "the count started again");
        }
        assert!(shared.after_yield(gave_way), "SHARED_AFTER in a row");
        shared.moved();
        assert!(!shared.after_yield(gave_way), "the count starts again after a move");
    }

    /// The CPUs allowed, as a list.
    fn allowed_cpus_list() -> Vec<usize> {
        let set = allowed_set().expect("sched_getaffinity");
        // SAFETY: CPU_ISSET reads a bit of the set we own; every index is inside it.
        (0..8 * size_of::<libc::cpu_set_t>()).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
    }

    #[test]
    fn a_move_lands_on_another_allowed_cpu_and_leaves_the_allowed_set_as_it_was() {
        let allowed = allowed_cpus_list();
        let here = this_cpu().expect("sched_getcpu");
        let moved = move_to_another_cpu();
        assert_eq!(allowed_cpus_list(), allowed, "the allowed set is restored");
        if allowed.len() < 2 {
            assert_eq!(moved, None, "nowhere to go with one CPU");
            return;
        }
        let there = moved.expect("moved");
        assert_ne!(there, here, "off the CPU it ran on");
        assert!(allowed.contains(&there), "onto one it may run on");
    }

    /// The set holding CPU `cpu` alone.
    fn only(cpu: usize) -> libc::cpu_set_t {
        // SAFETY: all-zero bytes are an empty cpu_set_t; CPU_SET writes a bit of it (`cpu` is a
        // CPU number the kernel gave, inside the set's size).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            set
        }
    }

    /// Whether this is the process in which test `name` of this module runs alone. The first
    /// call, in the test harness's process, runs the test again in a child process of its own
    /// and checks that it passed there: the harness's other tests run beside it, and their
    /// threads would take the CPU from its yields without marking it, and share the process's
    /// yield rule.
    fn alone(name: &str) -> bool {
        const ALONE: &str = "RSHM_YIELD_TEST_ALONE";
        if std::env::var_os(ALONE).is_some() {
            return true;
        }
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", &format!("state::ep::idle::tests::{name}"), "--nocapture", "--test-threads=1"])
            .env(ALONE, "1")
            .output()
            .expect("run the test alone");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && said.contains("1 passed"), "{name}, alone in a process:\n{said}");
        false
    }

    /// Yields of this thread beside `threads` threads bound to the same CPU that run
    /// `competitor` until told to stop, for up to 10 s or until `enough` says so: (yields,
    /// yields held away, whether one call found the yields paused).
    fn yields_beside(
        threads: usize,
        competitor: fn(&std::sync::atomic::AtomicBool),
        enough: impl Fn(u32, u32, bool) -> bool,
    ) -> (u32, u32, bool) {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let before = allowed_set().expect("sched_getaffinity");
        let cpu = this_cpu().expect("sched_getcpu");
        set_allowed(&only(cpu)).expect("bind to one CPU");
        let stop = Arc::new(AtomicBool::new(false));
        let others: Vec<_> = (0..threads)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    set_allowed(&only(cpu)).expect("bind the competing thread");
                    competitor(&stop);
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut yields, mut held_away, mut paused) = (0, 0, false);
        while Instant::now() < deadline && !enough(yields, held_away, paused) {
            match yield_cpu() {
                Some(took) => {
                    yields += 1;
                    held_away += u32::from(took >= HELD_AWAY);
                }
                None => paused = true,
            }
        }
        stop.store(true, Ordering::Relaxed);
        others.into_iter().for_each(|t| t.join().expect("competing thread"));
        set_allowed(&before).expect("restore");
        (yields, held_away, paused)
    }

    #[test]
    fn yields_to_a_busy_thread_that_leaves_no_mark_stop_for_a_while() {
        if !alone("yields_to_a_busy_thread_that_leaves_no_mark_stop_for_a_while") {
            return;
        }
        // A thread that computes without end: some yield of ours gives it a whole time slice
        // (milliseconds), and the yield after that must not happen.
        let busy = |stop: &std::sync::atomic::AtomicBool| {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        };
        let (yields, held_away, paused) = yields_beside(1, busy, |_, _, paused| paused);
        assert!(held_away > 0, "no yield was held away in {yields} beside a busy thread on the same CPU");
        assert!(paused, "{yields} yields, {held_away} held away, and none paused the next");
    }

    #[test]
    fn yields_held_away_by_a_thread_that_marks_the_cpu_go_on() {
        if !alone("yields_held_away_by_a_thread_that_marks_the_cpu_go_on") {
            return;
        }
        // Four threads "of ours" that run half a millisecond at a time and mark the CPU before
        // they yield, as polling rshm processes on one CPU do (OpenSHMEM at 8 PEs on 2 CPUs):
        // a yield of ours that waits for several of them is held away, but must not pause.
        let marking = |stop: &std::sync::atomic::AtomicBool| {
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                while start.elapsed() < Duration::from_micros(500) {
                    std::hint::spin_loop();
                }
                let _ = Mark::before_yield();
                std::thread::yield_now();
            }
        };
        let (yields, held_away, paused) = yields_beside(4, marking, |_, held_away, paused| paused || held_away >= 5);
        assert!(held_away >= 5, "only {held_away} of {yields} yields held away beside four threads running by turns");
        assert!(!paused, "a yield held away by a thread that marked the CPU paused the yields");
    }

    #[test]
    fn a_thread_bound_to_one_cpu_stays_there() {
        let here = this_cpu().expect("sched_getcpu");
        let one = only(here);
        let before = allowed_set().expect("sched_getaffinity");
        set_allowed(&one).expect("bind to one CPU");
        assert_eq!(move_to_another_cpu(), None);
        assert_eq!(this_cpu(), Some(here));
        set_allowed(&before).expect("restore");
    }
}
