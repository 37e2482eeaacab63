//! The service thread: applies the batches other PEs put into this PE's inboxes.
//!
//! It makes no OpenSHMEM call (so it needs no thread level from the application's library): it
//! reads its own symmetric memory, applies each record with local stores and atomics, writes
//! GET answers into the reply area and release-stores the per-source ack word that the source
//! reads with an OpenSHMEM atomic fetch. Targets thus progress with no call from their
//! application thread, and a source's flush cannot deadlock on a target that is busy
//! elsewhere (in a barrier, in computation).
//!
//! The thread exists while at least one communication queue exists in the process. When idle
//! it spins briefly, then yields, then sleeps in short steps (50 us), so an idle process costs
//! little CPU. The application thread also applies its queue's inbox itself, now and then
//! while pushing and whenever it waits (for a free slot, for acks): on a machine with fewer
//! cores than threads this saves a context switch per batch, and two PEs waiting on each other
//! progress even when neither service thread is scheduled. While the application thread does
//! so (its polls keep coming), the service thread only naps ([`APP_ACTIVE_NAP`]) instead of
//! spinning and yielding: it would only take CPU time from the threads that push and apply.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::inbox::{Layout, SLOTS};
use crate::mem;
use crate::wire;

/// What the service thread knows of one queue: where its block is, and what it applied.
pub struct Inbox {
    base: usize,
    layout: Layout,
    /// Batches applied per source (the next expected batch number).
    applied: Vec<u64>,
    reply: Vec<u8>,
    /// Polls by the application thread ([`try_poll`]), for the service thread to see it active.
    app_polls: u64,
}

impl Inbox {
    /// Applies every batch that has arrived; true if it applied any.
    fn poll(&mut self) -> bool {
        let mut did = false;
        for src in 0..self.layout.npes {
            loop {
                let next = self.applied[src];
                let slot = (next % SLOTS as u64) as usize;
                if mem::load_word(self.base + self.layout.seq(src, slot)) != next + 1 {
                    break;
                }
                self.apply_batch(src, slot);
                self.applied[src] = next + 1;
                mem::store_word(self.base + self.layout.ack(src), next + 1);
                did = true;
            }
        }
        did
    }

    // Not inlined: one call per batch, and a function of its own in profiles (the apply cost).
    #[inline(never)]
    fn apply_batch(&mut self, src: usize, slot: usize) {
        let cap = self.layout.slot_bytes / 8 - wire::HEADER_WORDS;
        let req = self.base + self.layout.req(src, slot);
        let Some((len, _)) = wire::batch_header(mem::read_words(req, wire::HEADER_WORDS)) else { return };
        let body = mem::read_words(req + wire::BATCH_HEADER, (len / 8).min(cap));
        let base = self.base;
        self.reply.clear();
        let mut at = 0;
        while at < body.len() {
            // One-element increments (the histogram's records) are one word each: applied here
            // without decoding. The block is 8-byte aligned (checked at creation), so their
            // targets are aligned.
            let w = body[at];
            match w & 0xffff {
                wire::INC8 => {
                    mem::inc_u64(base.wrapping_add(wire::compact_offset(w, 8) as usize));
                    at += 1;
                    continue;
                }
                wire::INC4 => {
                    mem::inc_u32(base.wrapping_add(wire::compact_offset(w, 4) as usize));
                    at += 1;
                    continue;
                }
                _ => {}
            }
            let Some((rec, next)) = wire::decode(body, at) else { break };
            let addr = (base as isize).wrapping_add(rec.offset as isize) as usize;
            let need = wire::reply_len(rec.op, rec.esize, rec.nelems);
            if self.reply.len() + need > self.layout.slot_bytes {
                break; // a source never builds this; a corrupt batch stops here
            }
            wire::apply(&rec, addr, &mut self.reply);
            at = next;
        }
        if !self.reply.is_empty() {
            mem::write_bytes(self.base + self.layout.reply(src, slot), &self.reply);
        }
    }
}

/// A queue's inbox, shared by the service thread and the queue.
pub type Shared = Arc<Mutex<Inbox>>;

struct Service {
    inboxes: Arc<Mutex<Vec<Shared>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

static SERVICE: Mutex<Option<Service>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The service thread's nap while the application thread polls by itself: the longest a batch
/// can wait for the service thread after the application thread stops polling.
pub const APP_ACTIVE_NAP: Duration = Duration::from_micros(200);

/// The application thread's poll: applies what has arrived, unless another thread is doing it;
/// true if it applied any.
pub fn try_poll(inbox: &Shared) -> bool {
    inbox
        .try_lock()
        .map(|mut ib| {
            ib.app_polls = ib.app_polls.wrapping_add(1);
            ib.poll()
        })
        .unwrap_or(false)
}

fn run(inboxes: Arc<Mutex<Vec<Shared>>>, stop: Arc<AtomicBool>) {
    let mut idle = 0u32;
    let mut seen = 0u64;
    while !stop.load(Ordering::Acquire) {
        let (mut did, mut busy, mut app) = (false, false, 0u64);
        for ib in lock(&inboxes).iter() {
            match ib.try_lock() {
                Ok(mut ib) => {
                    did |= ib.poll();
                    app = app.wrapping_add(ib.app_polls);
                }
                Err(TryLockError::WouldBlock) => busy = true, // the application thread polls it now
                Err(TryLockError::Poisoned(_)) => {}          // a panic left it: the queue is dead
            }
        }
        let active = busy || app != seen;
        seen = app;
        if active {
            idle = 0;
            std::thread::sleep(APP_ACTIVE_NAP);
        } else if did {
            idle = 0;
        } else {
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::hint::spin_loop();
            } else if idle < 256 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

/// Starts serving a queue's block (starting the thread if this is the first queue).
pub fn register(base: usize, layout: Layout) -> Shared {
    let inbox =
        Arc::new(Mutex::new(Inbox { base, layout, applied: vec![0; layout.npes], reply: Vec::new(), app_polls: 0 }));
    let mut svc = lock(&SERVICE);
    let s = svc.get_or_insert_with(|| {
        let inboxes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (i, s) = (inboxes.clone(), stop.clone());
        let thread = std::thread::Builder::new().name("shmem-queues".into()).spawn(move || run(i, s)).ok();
        Service { inboxes, stop, thread }
    });
    lock(&s.inboxes).push(inbox.clone());
    inbox
}

/// Stops serving this inbox; on return the thread no longer touches its block. The last queue
/// stops the thread.
pub fn unregister(inbox: &Shared) {
    let mut svc = lock(&SERVICE);
    let Some(s) = svc.as_mut() else { return };
    let empty = {
        let mut v = lock(&s.inboxes);
        v.retain(|ib| !Arc::ptr_eq(ib, inbox));
        v.is_empty()
    };
    if empty {
        s.stop.store(true, Ordering::Release);
        if let Some(t) = s.thread.take() {
            let _ = t.join();
        }
        *svc = None;
    }
}
