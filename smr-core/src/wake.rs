//! Sleeping on a futex in shared memory, and waking a sleeper in another process.
//!
//! A waiter arms the word, re-checks its queues, and sleeps only if they are still empty; a
//! producer pays for the wake syscall only when a waiter is armed. SeqCst fences on both sides
//! order "publish entry, then read armed" against "arm, then read queues", so no wake-up is lost.

use crate::layout::WakeWord;
use crate::sync::{fence, Ordering};
use std::time::Duration;

/// A full StoreLoad barrier. On x86-64 a locked add to the stack is one (it is what Linux's
/// smp_mb() uses) and costs a fraction of an `mfence`; elsewhere a SeqCst fence.
#[inline(always)]
fn full_barrier() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: ORs zero into the word at the stack pointer with a lock prefix: no value changes,
    // no memory outside our own stack is touched.
    unsafe {
        core::arch::asm!("lock or dword ptr [rsp], 0", options(nostack))
    };
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
}

/// Producer side: call after publishing an entry into the owner's region.
pub fn notify(word: &WakeWord) {
    full_barrier();
    if word.armed.load(Ordering::Relaxed) != 0 {
        word.seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(&word.seq);
    }
}

/// Who asks for room (`want_room`): a sender, by its entry in the owner's peer table, shares a
/// bit with the entries equal to it modulo `ROOM_SENDER_BITS`; every peer that answers the
/// owner (into its response ring) shares the top bit.
pub const ROOM_SENDER_BITS: u32 = 31;
pub const ROOM_RESPONDERS: u32 = 1 << ROOM_SENDER_BITS;
/// Every sender's bit (`want_room`'s word for "all our senders").
pub const ROOM_ALL_SENDERS: u32 = ROOM_RESPONDERS - 1;

/// The `want_room` bit of the sender at entry `slot` of the owner's peer table.
pub fn room_sender_bit(slot: u32) -> u32 {
    1 << (slot % ROOM_SENDER_BITS)
}

/// Producer side: a ring of `word`'s region had no room for an entry of ours; `who` is our bit
/// (`room_sender_bit`, or `ROOM_RESPONDERS`). Its owner, which looks at the word on every poll
/// (`room_wanted`), wakes the peers whose bits are set once it has taken entries, so that a
/// producer asleep with work that waits for that room (a blocking wait, a progress thread) goes
/// on as soon as there is room, not when its sleep's short slice ends. The bits keep the
/// owner's wake-ups to the peers that may have asked: waking all of them at every full ring
/// would cost an owner under an incast a system call per sleeping peer per pass.
///
/// No barrier: a producer that retries and sleeps arms its own word first (`arm`'s fence), and
/// the owner looks again at every poll until it clears the word. What can still be lost is the
/// owner's last look before it stops polling for a long time, crossing our store; the short
/// slice of a sleep with such work (`Endpoint::waits_for_room`) remains the backstop for that.
pub fn want_room(word: &WakeWord, who: u32) {
    // Written once, not at every full push: the line is read by every producer's `notify`.
    if word.room_wanted.load(Ordering::Relaxed) & who == 0 {
        word.room_wanted.fetch_or(who, Ordering::Relaxed);
    }
}

/// Owner side: whether a peer asked for room since the owner last took the requests.
#[inline(always)]
pub fn room_wanted(word: &WakeWord) -> bool {
    word.room_wanted.load(Ordering::Relaxed) != 0
}

/// Owner side: take the peers' requests for room (their bits; 0 if none).
pub fn take_room_wanted(word: &WakeWord) -> u32 {
    if room_wanted(word) {
        word.room_wanted.swap(0, Ordering::Relaxed)
    } else {
        0
    }
}

/// Owner side, in three steps (see `endpoint::WaitHandle`): arm, returning the sequence to
/// sleep on.
pub fn arm(word: &WakeWord) -> u32 {
    let seq = word.seq.load(Ordering::SeqCst);
    word.armed.fetch_add(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    seq
}

/// Sleep until the sequence moves past `seq` or `timeout` passes.
pub fn sleep(word: &WakeWord, seq: u32, timeout: Option<Duration>) {
    futex_wait(&word.seq, seq, timeout);
}

pub fn disarm(word: &WakeWord) {
    word.armed.fetch_sub(1, Ordering::SeqCst);
}

/// Owner side: sleep until notified or `timeout` passes, unless `ready()` is already true.
pub fn wait(word: &WakeWord, timeout: Option<Duration>, ready: impl Fn() -> bool) {
    let seq = arm(word);
    if !ready() {
        sleep(word, seq, timeout);
    }
    disarm(word);
}

/// One word to wait on with `sleep_any`: a wake word's sequence (shared) or a private word.
pub struct WaitOn<'a> {
    pub word: &'a crate::sync::AtomicU32,
    pub expected: u32,
    /// The word lives in this process's private memory.
    pub private: bool,
}

/// Sleep until any of `words` moves off its expected value or `timeout` passes (futex_waitv,
/// Linux 5.16; false if the kernel lacks it or more than 128 words are given, and the caller
/// then sleeps another way).
pub fn sleep_any(words: &[WaitOn<'_>], timeout: Duration) -> bool {
    #[repr(C)]
    struct FutexWaitv {
        val: u64,
        uaddr: u64,
        flags: u32,
        reserved: u32,
    }
    const FUTEX_32: u32 = 2;
    const FUTEX_PRIVATE: u32 = 128;
    if words.is_empty() || words.len() > 128 {
        return false;
    }
    let list: Vec<FutexWaitv> = words
        .iter()
        .map(|w| FutexWaitv {
            val: u64::from(w.expected),
            uaddr: w.word.as_ptr() as u64,
            flags: FUTEX_32 | if w.private { FUTEX_PRIVATE } else { 0 },
            reserved: 0,
        })
        .collect();
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let nanos = now.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
    let deadline = libc::timespec {
        tv_sec: now.tv_sec + timeout.as_secs() as libc::time_t + (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as _,
    };
    // SAFETY: `list` holds `words.len()` entries describing live, aligned u32 words (the
    // caller's borrows keep them alive for the call); the kernel only compares and sleeps.
    let rc = unsafe {
        libc::syscall(libc::SYS_futex_waitv, list.as_ptr(), list.len() as u32, 0u32, &deadline, libc::CLOCK_MONOTONIC)
    };
    !(rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
}

fn futex_wait(word: &crate::sync::AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as _ });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT on a live, aligned u32 in a shared mapping (not PRIVATE: other processes
    // wake it); the kernel only compares and sleeps.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, ts_ptr) };
}

fn futex_wake(word: &crate::sync::AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live, aligned u32; wakes every sleeper.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::pod::CachePadded;
    use crate::sync::{AtomicBool, AtomicU32};
    use std::time::Instant;

    fn word() -> WakeWord {
        WakeWord { seq: CachePadded(AtomicU32::new(0)), armed: AtomicU32::new(0), room_wanted: AtomicU32::new(0) }
    }

    /// Far longer than any wake-up takes: a wait that reaches it was never woken.
    const NEVER: Duration = Duration::from_secs(60);

    /// A producer's notify moves the sequence (and makes the system call) only while a waiter is
    /// armed.
    #[test]
    fn notify_wakes_only_an_armed_waiter() {
        let w = word();
        notify(&w);
        assert_eq!(w.seq.load(Ordering::Relaxed), 0, "nobody armed");
        let seq = arm(&w);
        assert_eq!((seq, w.armed.load(Ordering::Relaxed)), (0, 1));
        notify(&w);
        assert_eq!(w.seq.load(Ordering::Relaxed), 1);
        disarm(&w);
        assert_eq!(w.armed.load(Ordering::Relaxed), 0);
        // Asleep on a sequence already moved on: back at once.
        let t = Instant::now();
        sleep(&w, seq, Some(NEVER));
        assert!(t.elapsed() < NEVER / 2);
    }

    /// `wait` sleeps until a producer notifies (not before: it returns only after the
    /// producer's work is there), returns at once when its work is already there, and leaves
    /// the word disarmed either way.
    #[test]
    fn wait_sleeps_until_notified_and_not_when_work_waits() {
        let w = word();
        let work = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Until the waiter is armed, a notify would wake nobody (bounded: a waiter that
                // never sleeps must fail the test, not hang it).
                let t = Instant::now();
                while w.armed.load(Ordering::SeqCst) == 0 && t.elapsed() < NEVER / 2 {
                    std::thread::yield_now();
                }
                std::thread::sleep(Duration::from_millis(20));
                work.store(true, Ordering::SeqCst);
                notify(&w);
            });
            let t = Instant::now();
            wait(&w, Some(NEVER), || work.load(Ordering::SeqCst));
            assert!(work.load(Ordering::SeqCst), "woke before the producer's work was there");
            assert!(t.elapsed() < NEVER / 2, "slept through the notify");
        });
        assert_eq!(w.armed.load(Ordering::Relaxed), 0);
        let t = Instant::now();
        wait(&w, Some(NEVER), || true);
        assert!(t.elapsed() < NEVER / 2, "slept with its work there");
        assert_eq!(w.armed.load(Ordering::Relaxed), 0);
    }

    /// futex_waitv over several words, shared and private: back as soon as one of them moves
    /// (or was off its expected value already), else at its timeout, neither before nor far
    /// after; more words than the kernel takes are refused for the caller to sleep another way.
    #[test]
    fn sleep_any_wakes_for_any_word_or_at_its_timeout() {
        let (a, b) = (AtomicU32::new(5), AtomicU32::new(7));
        let on = |b_expected: u32| {
            [WaitOn { word: &a, expected: 5, private: false }, WaitOn { word: &b, expected: b_expected, private: true }]
        };
        assert!(sleep_any(&on(8), NEVER), "futex_waitv (Linux 5.16) on a word already moved");
        let timeout = Duration::from_millis(30);
        for _ in 0..3 {
            let t = Instant::now();
            assert!(sleep_any(&on(7), timeout));
            let slept = t.elapsed();
            assert!(slept >= timeout && slept < NEVER / 2, "slept {slept:?} for a timeout of {timeout:?}");
        }
        // A timeout whose nanoseconds carry a second into the deadline's seconds (unless the
        // clock reads exactly a whole second): still slept in full.
        let carried = Duration::from_nanos(999_999_999);
        let t = Instant::now();
        assert!(sleep_any(&on(7), carried));
        assert!(t.elapsed() >= carried, "slept {:?} for a timeout of {carried:?}", t.elapsed());
        let moved = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                moved.store(true, Ordering::SeqCst);
                b.store(8, Ordering::SeqCst);
                futex_wake_private(&b);
            });
            let t = Instant::now();
            assert!(sleep_any(&on(7), NEVER));
            assert!(moved.load(Ordering::SeqCst) && t.elapsed() < NEVER / 2);
        });
        let many: Vec<AtomicU32> = (0..129).map(AtomicU32::new).collect();
        let waits =
            |n: usize| many[..n].iter().map(|w| WaitOn { word: w, expected: 0, private: false }).collect::<Vec<_>>();
        assert!(!sleep_any(&waits(129), NEVER), "129 words");
        assert!(sleep_any(&waits(128), NEVER), "128 words, one of them moved");
        assert!(!sleep_any(&[], NEVER), "no word");
    }

    fn futex_wake_private(word: &AtomicU32) {
        // SAFETY: FUTEX_WAKE_PRIVATE on a live, aligned u32 of this process.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX) };
    }

    /// A sender's bit in `room_wanted` is its entry modulo 31, never the responders' bit; the
    /// owner sees requests until it takes them, and takes them all at once.
    #[test]
    fn requests_for_room_are_seen_until_taken() {
        assert_eq!(
            [room_sender_bit(0), room_sender_bit(30), room_sender_bit(31), room_sender_bit(33)],
            [1, 1 << 30, 1, 4]
        );
        let w = word();
        assert!(!room_wanted(&w));
        assert_eq!(take_room_wanted(&w), 0);
        want_room(&w, room_sender_bit(2));
        want_room(&w, ROOM_RESPONDERS);
        want_room(&w, room_sender_bit(2));
        assert!(room_wanted(&w));
        assert_eq!(take_room_wanted(&w), ROOM_RESPONDERS | 4);
        assert!(!room_wanted(&w));
    }
}
