//! The domain's own threads (the FI_PROGRESS_AUTO thread of `progress`, the FI_WAIT_FD bell of
//! `waitfd`): how each is poked and stopped, and what the application tells the progress
//! thread. What the threads do lives with them; these are the handles the state keeps.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How a thread of the domain (the FI_PROGRESS_AUTO thread here, the FI_WAIT_FD bell of
/// `waitfd`) is made to look again and told to stop: a private futex word it sleeps on besides
/// the endpoints' wake words, bumped by `poke`, and a flag.
#[derive(Default)]
pub struct ThreadControl {
    pub seq: AtomicU32,
    pub stop: AtomicBool,
}

impl ThreadControl {
    pub fn poke(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        futex_wake_private(&self.seq);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// A thread that needs nothing else (the bell of `waitfd`).
impl AsRef<ThreadControl> for ThreadControl {
    fn as_ref(&self) -> &ThreadControl {
        self
    }
}

/// What a thread of the domain runs on, told before the thread starts: from then on the
/// application's own serialization of its calls no longer excludes everyone inside
/// (`DomainShared::lock_serialized`).
pub trait ThreadHost: Send + Sync + 'static {
    fn thread_starts(&self);
}

/// A thread of the domain, holding it only weakly (so that fi_close(domain) sees no extra
/// reference while it sleeps), stopped and joined by `stop`. `start` takes the domain as any
/// `Arc<T>` of a `ThreadHost`: this module sits below the state it runs on.
pub struct DomainThread<C: AsRef<ThreadControl> + Send + Sync + 'static> {
    control: Arc<C>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl<C: AsRef<ThreadControl> + Send + Sync + 'static> DomainThread<C> {
    pub fn start<T: ThreadHost>(
        name: &str,
        shared: &Arc<T>,
        control: Arc<C>,
        run: fn(Weak<T>, Arc<C>),
    ) -> std::io::Result<Self> {
        shared.thread_starts();
        let weak = Arc::downgrade(shared);
        let c = Arc::clone(&control);
        let handle = std::thread::Builder::new().name(name.into()).spawn(move || run(weak, c))?;
        Ok(DomainThread { control, handle: Some(handle) })
    }

    /// Something it watches changed: look again.
    pub fn poke(&self) {
        (*self.control).as_ref().poke();
    }

    /// Stop the thread and wait for it (not from the thread itself).
    pub fn stop(mut self) {
        let control = (*self.control).as_ref();
        control.stop.store(true, Ordering::SeqCst);
        control.poke();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The progress thread of an FI_PROGRESS_AUTO domain.
pub type AutoThread = DomainThread<Control>;

/// What the thread sleeps on besides the endpoints: its `ThreadControl`, poked when an endpoint
/// was enabled or closed, a waiter went to sleep, or the domain is closing; and what tells it
/// that the application polls.
#[derive(Default)]
pub struct Control {
    pub thread: ThreadControl,
    /// Application threads drive progress: the thread stands aside.
    pub aside: AtomicBool,
    /// Application progress calls, counted loosely (a lost increment between racing threads
    /// does not matter: any change means "still polling").
    pub app_polls: AtomicU64,
}

impl AsRef<ThreadControl> for Control {
    fn as_ref(&self) -> &ThreadControl {
        &self.thread
    }
}

impl Control {
    /// An application thread drives progress (every CQ or counter read, every spin of a wait).
    /// Two loads and a store on a line of this process: no atomic read-modify-write, no syscall.
    #[inline]
    pub fn app_polls(&self) {
        self.app_polls.store(self.app_polls.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        if !self.aside.load(Ordering::Relaxed) {
            self.aside.store(true, Ordering::Relaxed);
        }
    }

    /// An application thread is about to sleep until the thread completes something for it:
    /// the thread must be back on the wake words first.
    pub fn app_sleeps(&self) {
        if self.aside.swap(false, Ordering::SeqCst) {
            self.thread.poke();
        }
    }
}

/// The domain's thread that turns peers' wake-ups of armed objects into eventfd writes
/// (`waitfd`).
pub type Bell = DomainThread<ThreadControl>;

pub(crate) fn futex_wait_private(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: FUTEX_WAIT_PRIVATE on a live, aligned u32 of this process with a timespec we own;
    // the kernel only compares and sleeps.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, expected, &ts)
    };
}

pub(crate) fn futex_wake_private(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE_PRIVATE on a live, aligned u32 of this process; wakes every sleeper.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX) };
}
