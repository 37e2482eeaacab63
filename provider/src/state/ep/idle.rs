//! Yielding the CPU while a caller waits: the pause a wait makes before it yields
//! (`YIELD_AFTER`, also taken by `progress::between_polls`), the yield of an endpoint's
//! polling caller after idle passes in a row (`IdleStreak`), which sleeps once in a while when
//! it finds the CPU shared (`yield_or_nap`).

use std::sync::atomic::{AtomicU64, Ordering};
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
            Some(start) if now.duration_since(start) >= YIELD_AFTER => yield_or_nap(),
            Some(_) => {}
        }
    }
}

/// A yield that took at least this long handed the CPU to another thread that ran meanwhile: the
/// system call alone takes well under a microsecond here, and a peer of ours that got the CPU
/// runs `YIELD_AFTER` before it yields back.
const GAVE_WAY: Duration = Duration::from_micros(3);

/// At most one sleep (`yield_or_nap`) per this long per process, so that a node with more
/// polling processes than CPUs, where every yield gives way, spends at most a few percent asleep.
const SLEEP_EVERY: Duration = Duration::from_millis(2);

/// The sleep itself: the shortest there is (the kernel's timer slack makes it about 50 us).
const SLEEP: Duration = Duration::from_micros(1);

/// Yield the CPU for a caller that waits by polling and never sleeps in the provider; if the
/// yield gave the CPU away (another thread ran meanwhile, on the CPU this one shares with it),
/// sleep once instead (`SLEEP`), at most every `SLEEP_EVERY` per process and only where another
/// CPU is allowed.
///
/// Why: two processes that poll each other (an OpenSHMEM ping-pong in its build for manual
/// progress) sometimes start out on one CPU, both woken there by the launcher's last barrier,
/// while the other CPU idles, and stay there for 8-20 ms: OpenSHMEM's first latency section
/// (1,000 gets) read 8-20 us a get instead of 0.3 in 4 of 12 runs (`perf sched`: both processes
/// on one CPU from the barrier's wake-up until the idle CPU pulled one). The C shm's processes,
/// which never yield, were not caught so in 12 runs. As we read the scheduler, two threads that
/// hand each other the CPU every few microseconds both look recently run ("cache hot"), which it
/// declines to move until its balancing has failed a few times. A thread that sleeps is placed on
/// an idle CPU when it wakes: one sleep of ours ends the stretch (0 of 15 runs caught, against 5
/// of 15 with the plain yield). Blocking waits and the progress thread keep the plain yield
/// (`progress::between_polls`): there the same sleep, or ending the poll for a sleep until woken,
/// cost OpenSHMEM's default build 3-5% a round and did not end its stretches on one CPU any
/// more often (10 alternated runs of 200,000 rounds: caught in 1 against 2).
pub fn yield_or_nap() {
    static GATE: SleepGate = SleepGate::new();
    static MOVABLE: OnceLock<bool> = OnceLock::new();
    let before = Instant::now();
    std::thread::yield_now();
    let now = Instant::now();
    if now.duration_since(before) >= GAVE_WAY && *MOVABLE.get_or_init(|| allowed_cpus() > 1) && GATE.pass(now) {
        std::thread::sleep(SLEEP);
    }
}

/// Lets one sleep through per `SLEEP_EVERY`, among all the threads that ask.
struct SleepGate {
    epoch: OnceLock<Instant>,
    /// When the last sleep went through, in nanoseconds from `epoch` plus `SLEEP_EVERY` (so
    /// that 0, the start, lets the first one through).
    last: AtomicU64,
}

impl SleepGate {
    const fn new() -> Self {
        SleepGate { epoch: OnceLock::new(), last: AtomicU64::new(0) }
    }

    /// Whether a sleep at `now` may go through (then it is the last).
    fn pass(&self, now: Instant) -> bool {
        let every = SLEEP_EVERY.as_nanos() as u64;
        let epoch = *self.epoch.get_or_init(|| now);
        let at = now.saturating_duration_since(epoch).as_nanos() as u64 + every;
        let last = self.last.load(Ordering::Relaxed);
        at.saturating_sub(last) >= every
            && self.last.compare_exchange(last, at, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

/// How many CPUs this thread may run on (1 when that cannot be learnt: never sleep then).
fn allowed_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sleep_gate_lets_one_sleep_through_per_period() {
        let gate = SleepGate::new();
        let t0 = Instant::now();
        assert!(gate.pass(t0), "the first sleep goes through");
        assert!(!gate.pass(t0 + SLEEP_EVERY / 2), "a second one within the period does not");
        assert!(gate.pass(t0 + SLEEP_EVERY), "one a period later does");
        assert!(!gate.pass(t0 + SLEEP_EVERY + SLEEP_EVERY / 4));
    }
}
