//! The domain's state: every object's state behind one lock.
//!
//! All mutable state of a domain's endpoints, CQs, counters, AVs and MRs lives in one
//! `DomainState` behind one mutex. That makes FI_THREAD_SAFE hold by construction and lets an
//! endpoint's progress write straight into the CQs and counters it is bound to. The common
//! FI_THREAD_DOMAIN user with manual progress serializes its calls itself, and no thread of ours
//! runs beside it: its calls take no mutex, only an owner mark (`DomainShared::lock_serialized`).
//! The objects' entry points lock it (`DomainShared::lock`); the domain object (`domain`) opens
//! them.

pub mod av;
pub mod cntr;
pub mod cq;
pub mod ep;
pub mod mapped;
pub mod mr;
pub mod threads;
pub mod wait_fd;
pub mod waiters;

use crate::error::FiResult;
use crate::object;
use av::AvState;
use cntr::CntrState;
use cq::CqState;
use ep::EpState;
use mr::MrTable;
use parking_lot::MutexGuard;
use rshm_ffi as ffi;
use slab::Slab;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Domain-wide settings fixed at open.
#[derive(Debug, Clone)]
pub struct DomainConfig {
    pub api_version: u32,
    pub threading: ffi::fi_threading,
    pub av_type: ffi::fi_av_type,
    /// FI_PROGRESS_AUTO: a provider thread serves peers while the application is away.
    pub auto_progress: bool,
}

#[derive(Default)]
pub struct DomainState {
    pub eps: Slab<EpState>,
    pub cqs: Slab<CqState>,
    pub cntrs: Slab<CntrState>,
    pub avs: Slab<AvState>,
    pub mrs: MrTable,
    /// Numbers endpoint names within this process.
    pub next_ep_index: u32,
    /// Where a poll loop over a counter stands, for the passes it may skip (`cntr::Call`).
    /// Every counter call sets or clears it, and a progress probe (fi_cq_read of count 0) takes
    /// it. So a skipped pass follows a real pass of the same endpoints by a call or two, and
    /// never another skipped one. (A read of entries leaves it: it drives its own CQ's
    /// endpoints; `cq::probe`.)
    pub poll_turn: Option<PollTurn>,
    /// Events progress handled, counted (wrapping): a blocking wait keeps polling while this
    /// moves (`block::spin`).
    pub events: u64,
    /// Application threads asleep in a blocking wait of an auto-progress domain
    /// (`progress::app_asleep`).
    pub apps_asleep: u32,
}

/// The last counter call: a fi_cntr_read of `cntr` that drove its endpoints, followed (`paired`)
/// by a fi_cntr_readerr of the same counter that took that read's pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollTurn {
    pub cntr: usize,
    pub paired: bool,
}

pub struct DomainShared {
    /// parking_lot's lock, not std's: no poisoning to check on every lock and unlock (a panic
    /// inside the provider is caught at the boundary, and std's poisoned lock was taken anyway),
    /// which saved 10-17 instructions per libfabric call (plain build: fi_tinject 382 -> 372,
    /// fi_trecv 205 -> 193, an 8 B arrival's fi_cq_read 840 -> 823).
    state: parking_lot::Mutex<DomainState>,
    /// The thread holding `state` (`pthread_self`), 0 while nobody does: set after locking,
    /// cleared before unlocking (`Locked`).
    owner: AtomicUsize,
    /// The application serializes every call on the domain and no thread of ours runs: the lock
    /// is the application's, and `lock` takes none of its own (`lock_serialized`).
    serialized: AtomicBool,
    pub config: DomainConfig,
    /// The FI_PROGRESS_AUTO thread, started when the first endpoint is enabled.
    pub auto: Mutex<Option<threads::AutoThread>>,
    /// What the application tells that thread (it polls, it sleeps) and how it is poked.
    pub progress: Arc<threads::Control>,
    /// The thread that rings FI_WAIT_FD descriptors (`waitfd`), started by the first
    /// `fi_trywait` that arms one.
    pub bell: Mutex<Option<threads::Bell>>,
}

impl DomainShared {
    pub fn new(state: DomainState, config: DomainConfig) -> DomainShared {
        DomainShared {
            state: parking_lot::Mutex::new(state),
            owner: AtomicUsize::new(0),
            serialized: AtomicBool::new(config.threading == ffi::FI_THREAD_DOMAIN && !config.auto_progress),
            config,
            auto: Mutex::new(None),
            progress: Arc::default(),
            bell: Mutex::new(None),
        }
    }

    /// An application thread drives progress itself: the auto-progress thread may stand aside.
    #[inline]
    pub fn app_polls(&self) {
        if self.config.auto_progress {
            self.progress.app_polls();
        }
    }

    /// Lock the domain (a panic while it was locked left it unlocked: no poisoning).
    ///
    /// A call made from a signal handler that interrupted this same thread inside the provider
    /// would wait forever for the lock the interrupted code holds. That happens: libraries
    /// libfabric loads (libinfinipath, under its psm provider) install handlers that call
    /// `exit()` on SIGTERM, and the application's `atexit` handler (OpenSHMEM's finalize) then
    /// calls into the provider, so a PE told to stop hung instead. Such a call ends the process
    /// (`reentered`) instead: what the interrupted code was doing cannot be finished or undone
    /// from the handler, and the process was on its way out.
    pub fn lock(&self) -> Locked<'_> {
        if self.serialized.load(Ordering::Relaxed) {
            return self.lock_serialized();
        }
        let guard = match self.state.try_lock() {
            Some(guard) => guard,
            None => {
                // Only this thread stores its own id, and it clears it before it unlocks: seeing
                // it here means this thread holds the lock, below us on its stack.
                if self.owner.load(Ordering::Relaxed) == this_thread() {
                    reentered();
                }
                self.state.lock()
            }
        };
        self.locked_by_me(guard)
    }

    fn locked_by_me<'a>(&'a self, guard: MutexGuard<'a, DomainState>) -> Locked<'a> {
        self.owner.store(this_thread(), Ordering::Relaxed);
        Locked { guard: ManuallyDrop::new(guard), owner: &self.owner, serialized: false }
    }

    /// `lock` of an FI_THREAD_DOMAIN domain with no thread of ours: the application promised to
    /// serialize every call on the domain's objects (fi_domain(3)), so the mutex is not taken.
    /// Its two locked instructions per call, each waiting for the stores before it (a ring
    /// slot's, whose line the receiver is reading) to drain, were 13-25% of an 8 B to 4 KiB
    /// ping-pong (docs/perf/where-the-time-goes.md); libfabric's own providers take no lock for
    /// such a domain either. The owner mark stays, as plain stores, for the signal-handler
    /// re-entry `lock` catches.
    #[inline]
    fn lock_serialized(&self) -> Locked<'_> {
        let me = this_thread();
        let holder = self.owner.load(Ordering::Acquire);
        if holder != 0 {
            self.wait_serialized(holder, me);
        }
        self.owner.store(me, Ordering::Relaxed);
        // SAFETY: this thread holds the domain logically: the application serializes its calls
        // on the domain (FI_THREAD_DOMAIN), no thread of the provider's own runs (`thread_starts`
        // ends this mode before one starts), and nobody else holds it (the owner mark is 0).
        let guard = unsafe { self.state.make_guard_unchecked() };
        Locked { guard: ManuallyDrop::new(guard), owner: &self.owner, serialized: true }
    }

    /// The owner mark of a serialized domain was set when `me` came to lock it: re-entered from
    /// a signal handler (ends the process, as `lock` does), or the application broke its
    /// FI_THREAD_DOMAIN promise and another thread is inside. That is the application's error,
    /// which a mark of plain stores cannot always see; when it does, wait for the other call
    /// rather than run beside it.
    #[cold]
    fn wait_serialized(&self, holder: usize, me: usize) {
        if holder == me {
            reentered();
        }
        crate::warn!(
            Domain,
            "two threads called into an FI_THREAD_DOMAIN domain at once (the application must serialize them): one waits"
        );
        while self.owner.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
    }

    /// Whether `lock` leaves the mutex alone (`lock_serialized`).
    pub fn serialized(&self) -> bool {
        self.serialized.load(Ordering::Relaxed)
    }
}

/// Before a thread of the provider's own starts on this domain (`threads::DomainThread::start`:
/// the FI_WAIT_FD bell, the only one a serialized domain may start): from now on `lock` takes
/// the mutex. Called by the application's thread holding no `Locked` (one it held would not
/// exclude the new thread); the new thread sees the change through its spawn.
impl threads::ThreadHost for DomainShared {
    fn thread_starts(&self) {
        if self.serialized.load(Ordering::Relaxed) {
            debug_assert_eq!(self.owner.load(Ordering::Relaxed), 0, "a thread started with the domain locked");
            self.serialized.store(false, Ordering::Relaxed);
        }
    }
}

/// The domain's state, locked by this thread (`DomainShared::lock`).
pub struct Locked<'a> {
    /// Dropped by `Drop`, after the owner mark is cleared.
    guard: ManuallyDrop<MutexGuard<'a, DomainState>>,
    owner: &'a AtomicUsize,
    /// Taken by `lock_serialized`: the mutex itself was never locked.
    serialized: bool,
}

impl Deref for Locked<'_> {
    type Target = DomainState;
    fn deref(&self) -> &DomainState {
        &self.guard
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut DomainState {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.owner.store(0, Ordering::Release);
        if !self.serialized {
            // SAFETY: dropped once, here, after the owner mark is cleared: another thread may take the lock from this point on.
            unsafe { ManuallyDrop::drop(&mut self.guard) }
        }
    }
}

/// This thread's id, never 0: on x86_64 the thread pointer, whose first word the TLS ABI
/// makes point to itself (one load, where `pthread_self` is a call through the PLT on every
/// lock); elsewhere `pthread_self`.
#[inline]
fn this_thread() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let tp: usize;
        // SAFETY: reads the word at %fs:0, which the x86_64 TLS ABI defines (the thread
        // control block's pointer to itself) in every thread of a Linux process.
        unsafe { std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags)) };
        tp
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe {
        libc::pthread_self() as usize
    }
}

/// A provider call re-entered the domain lock from a signal handler on the thread that holds
/// it (`DomainShared::lock`): say so and end the process, with calls safe in a signal handler
/// only (the interrupted code may hold the allocator's lock too).
#[cold]
fn reentered() -> ! {
    const WHY: &[u8] = b"rshm: a libfabric call from a signal handler found the domain locked by the code it \
        interrupted (it would wait forever); the process exits\n";
    // SAFETY: write(2) and _exit(2) are async-signal-safe; WHY is a static buffer of its length.
    unsafe {
        libc::write(2, WHY.as_ptr().cast(), WHY.len());
        libc::_exit(1)
    }
}

#[repr(C)]
pub struct Domain {
    pub fid: ffi::fid_domain,
    /// The fabric it was opened on (an `object::Parent`, which counts its domains).
    pub fabric: *mut object::Parent<ffi::fid_fabric>,
    pub shared: Arc<DomainShared>,
}

/// Look up the domain behind a `fid_domain`.
///
/// # Safety
/// `domain` must be NULL or a live domain of ours.
pub unsafe fn get<'a>(domain: *mut ffi::fid_domain) -> FiResult<&'a Domain> {
    // SAFETY: per the contract.
    unsafe { object::get::<Domain>(domain.cast(), ffi::FI_CLASS_DOMAIN) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    fn shared() -> DomainShared {
        shared_with(ffi::FI_THREAD_SAFE, false)
    }

    fn shared_with(threading: ffi::fi_threading, auto_progress: bool) -> DomainShared {
        let config = DomainConfig { api_version: 0, threading, av_type: ffi::FI_AV_TABLE, auto_progress };
        DomainShared::new(DomainState::default(), config)
    }

    /// An FI_THREAD_DOMAIN domain with manual progress is the application's to serialize: `lock`
    /// leaves the mutex alone but keeps the owner mark. Any other domain takes the mutex.
    #[test]
    fn only_a_serialized_domain_leaves_the_mutex_alone() {
        let serialized = shared_with(ffi::FI_THREAD_DOMAIN, false);
        {
            let _held = serialized.lock();
            assert!(!serialized.state.is_locked());
            assert_eq!(serialized.owner.load(Ordering::Relaxed), this_thread());
        }
        assert_eq!(serialized.owner.load(Ordering::Relaxed), 0);
        for (threading, auto) in [
            (ffi::FI_THREAD_SAFE, false),
            (ffi::FI_THREAD_COMPLETION, false),
            (ffi::FI_THREAD_ENDPOINT, false),
            (ffi::FI_THREAD_DOMAIN, true),
        ] {
            let shared = shared_with(threading, auto);
            let _held = shared.lock();
            assert!(shared.state.is_locked(), "threading {threading}, auto progress {auto}");
        }
    }

    /// Before a thread of the provider's own starts on a serialized domain (`thread_starts`), `lock`
    /// takes the mutex again, so that thread and the application's exclude each other.
    #[test]
    fn a_serialized_domain_takes_the_mutex_once_a_thread_of_its_own_starts() {
        let shared = Arc::new(shared_with(ffi::FI_THREAD_DOMAIN, false));
        threads::ThreadHost::thread_starts(&*shared);
        let held = shared.lock();
        assert!(shared.state.is_locked());
        drop(held);
        waits_for_the_holder(&shared, "the provider's thread took the lock while we held it");
    }

    /// An application that breaks FI_THREAD_DOMAIN's promise (a second thread calls in while
    /// one is inside) and is seen doing it: the second call waits for the first.
    #[test]
    fn a_second_thread_in_a_serialized_domain_waits_for_the_first() {
        let shared = Arc::new(shared_with(ffi::FI_THREAD_DOMAIN, false));
        waits_for_the_holder(&shared, "the second thread ran beside the first");
    }

    /// Hold `shared`'s lock while another thread asks for it: that thread must wait (`why` says
    /// what it means if it did not), then get it; the owner mark follows the lock.
    fn waits_for_the_holder(shared: &Arc<DomainShared>, why: &str) {
        let held = shared.lock();
        let other = {
            let shared = Arc::clone(shared);
            std::thread::spawn(move || shared.lock().next_ep_index += 1)
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(shared.owner.load(Ordering::Relaxed), this_thread());
        assert_eq!(held.next_ep_index, 0, "{why}");
        drop(held);
        other.join().unwrap();
        assert_eq!(shared.lock().next_ep_index, 1);
        assert_eq!(shared.owner.load(Ordering::Relaxed), 0);
    }

    static REENTERED: OnceLock<DomainShared> = OnceLock::new();

    extern "C" fn lock_from_handler(_signal: libc::c_int) {
        let _locked = REENTERED.get().expect("set before the signal").lock();
    }

    /// In the child: hold the lock, and take it again from a signal handler on the same thread.
    fn reenter_from_a_signal_handler(threading: ffi::fi_threading) -> ! {
        let shared = REENTERED.get_or_init(|| shared_with(threading, false));
        // SAFETY: a zeroed sigaction with a plain handler is valid; the handler is ours.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = lock_from_handler as *const () as usize;
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut());
        }
        let _locked = shared.lock();
        // SAFETY: raising a signal whose handler we installed.
        unsafe { libc::raise(libc::SIGUSR1) };
        unreachable!("the handler's lock returned");
    }

    /// A provider call from a signal handler that interrupted the lock's holder (libinfinipath's
    /// SIGTERM handler calling exit(), OpenSHMEM's atexit finalize calling in) ends the process
    /// with a message, where it used to wait forever; in a serialized domain too, whose lock is
    /// only the owner mark. Run in a child process (this test binary again), which must exit
    /// with status 1 well before the deadline.
    #[test]
    fn a_call_reentering_the_lock_from_a_signal_handler_exits_instead_of_hanging() {
        for threading in [ffi::FI_THREAD_SAFE, ffi::FI_THREAD_DOMAIN] {
            reenter_in_a_child(threading);
        }
    }

    fn reenter_in_a_child(threading: ffi::fi_threading) {
        const CHILD: &str = "RSHM_TEST_REENTER_CHILD";
        if let Some(t) = std::env::var_os(CHILD) {
            reenter_from_a_signal_handler(t.to_str().and_then(|t| t.parse().ok()).expect("a threading level"));
        }
        let name = "state::tests::a_call_reentering_the_lock_from_a_signal_handler_exits_instead_of_hanging";
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(CHILD, threading.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("the re-entered lock waited forever");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
        assert_eq!(status.code(), Some(1), "stderr: {stderr}");
        assert!(stderr.contains("found the domain locked by the code it interrupted"), "stderr: {stderr}");
    }

    /// Another thread holding the lock is waited for, not taken for a re-entry; the owner mark
    /// follows the lock.
    #[test]
    fn another_threads_lock_is_waited_for() {
        waits_for_the_holder(&Arc::new(shared()), "the other thread took the lock while we held it");
    }
}
