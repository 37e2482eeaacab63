//! Yielding the CPU while a caller waits: the pause a wait makes before it yields
//! (`YIELD_AFTER`, also taken by `progress::between_polls`), and the yield of an endpoint's
//! polling caller after idle passes in a row (`IdleStreak`).

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
            Some(start) if now.duration_since(start) >= YIELD_AFTER => std::thread::yield_now(),
            Some(_) => {}
        }
    }
}
