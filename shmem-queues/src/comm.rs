//! Communication queues: put, get, atomic add and atomic increment aggregated per target PE.
//!
//! Each push appends a record (wire.rs) to the buffer for its target PE. A full buffer is
//! shipped as one batch: one non-blocking put into the target's inbox slot; at the next ship
//! (or when waiting, progressing, flushing), one `shmem_quiet` completes every such put and an
//! atomic set of each slot's sequence word publishes them. The put thus overlaps the filling of
//! the next batch instead of blocking the pushing thread; the buffer it reads from is kept
//! aside (`Peer::sent`) until that quiet. The target's service thread (service.rs) applies the
//! batch and stores an ack; the source reads the ack with one atomic fetch, then fetches the GET
//! answers of that batch with one get and scatters them. Four slots per (source, target) pair
//! (inbox::SLOTS) keep batches being applied while the next ones fill, and let one ack fetch
//! (a round trip through the target's OpenSHMEM progress) free several slots at once.
//!
//! Target addresses travel as offsets from the queue's block, which is at the same offset of
//! every PE's symmetric heap. Global and static symmetric variables live in the main program's
//! image instead, which the loader may place differently on each PE: for those, the offset is
//! computed from the target's image base, which every PE publishes in its block at creation.
//!
//! Operations to the pushing PE itself are applied at once (they are complete when the push
//! returns). Puts and gets of more than a quarter of a slot bypass aggregation: they are issued
//! at once as `_nbi` operations and completed by `shmem_quiet` in the flush.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::{self, QueueAttr, QueueConfig, EFULL, EINTERNAL, EINVAL, ENOMEM, ENOTSUP, OK};
use crate::config::{OP_ATOMIC_ADD, OP_ATOMIC_INC, OP_GET, OP_PUT};
use crate::inbox::{Layout, SLOTS};
use crate::{mem, service, sys, wire};

/// How many progress calls between two polls of the targets' acks (an ack poll is a remote
/// atomic fetch per target with batches in flight), and about how many pushes between two polls
/// of this PE's inbox by the pushing thread.
const POLL_EVERY: u32 = 64;

struct Flight {
    seq: u64,
    ops: u64,
    reply: usize,
    gets: Vec<(usize, usize)>,
}

struct Peer {
    /// The batch being filled (wire.rs).
    batch: wire::Batch,
    /// The batch last shipped: the source of a non-blocking put until the next quiet.
    sent: wire::Batch,
    ops: u64,
    reply: usize,
    gets: Vec<(usize, usize)>,
    since: Option<Instant>,
    inflight: VecDeque<Flight>,
    next_seq: u64,
    /// This PE's main-program base minus its block's address (see `CommQueue::image`).
    image_delta: i64,
}

impl Peer {
    fn new(slot_bytes: usize, image_delta: i64) -> Self {
        Peer {
            batch: wire::Batch::new(slot_bytes),
            sent: wire::Batch::new(slot_bytes),
            ops: 0,
            reply: 0,
            gets: Vec::new(),
            since: None,
            inflight: VecDeque::new(),
            next_seq: 0,
            image_delta,
        }
    }
    fn pending(&self) -> bool {
        !self.batch.is_empty()
    }
    /// Whether `bytes` more of records and `reply` more of answers fit the batch.
    fn fits(&self, bytes: usize, reply: usize, slot_bytes: usize) -> bool {
        self.batch.fits(bytes) && self.reply + reply <= slot_bytes
    }
}

/// The target address `remote` (an address of this PE's copy of a symmetric object) as an
/// offset from a PE's block: `image` is the main program's range here, `delta` that PE's
/// image base minus its block's address, `base` this PE's block.
#[inline]
fn offset(image: (usize, usize), base: usize, delta: i64, remote: usize) -> i64 {
    if (image.0..image.1).contains(&remote) {
        ((remote - image.0) as i64).wrapping_add(delta)
    } else {
        remote.wrapping_sub(base) as i64
    }
}

/// What [`CommQueue::push_inc`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inc {
    /// Queued, or applied at once (to this PE).
    Done,
    /// Queued, and it is time to poll: call [`CommQueue::every_poll`].
    DonePoll,
    /// Not taken: the general path ([`CommQueue::push`]) must push it.
    General,
}

/// One push, as the C call gave it (addresses as integers).
#[derive(Clone, Copy, Debug)]
pub struct Push {
    pub dest: usize,
    pub src: usize,
    pub esize: usize,
    pub nelems: usize,
    pub pe: i32,
    pub op: u64,
}

pub struct CommQueue {
    pub id: u64,
    base: usize,
    layout: Layout,
    me: usize,
    max_elems: u64,
    timeout: Option<Duration>,
    peers: Vec<Peer>,
    outstanding: u64,
    /// Batches put (non-blocking) and not yet published: (target PE, slot, sequence value).
    unflagged: Vec<(usize, usize, u64)>,
    direct: u64,
    calls: u32,
    inbox: service::Shared,
    /// The main program's mapped range here (per PE its base minus its block's address is in
    /// `Peer::image_delta`).
    image: (usize, usize),
    /// The PE whose operations are applied at once: this one (`me`), or none (`usize::MAX`:
    /// tests drive the inbox path on one PE, see [`CommQueue::set_local_shortcut`]).
    shortcut_pe: usize,
}

impl CommQueue {
    /// Collective over all PEs: allocates the symmetric block and starts serving it.
    pub fn create(id: u64, cfg: &QueueConfig) -> Result<Self, i32> {
        if cfg.qtype != config::QUEUE_COMM {
            return Err(EINVAL);
        }
        config::is_shared(cfg)?;
        let npes = usize::try_from(sys::n_pes()).map_err(|_| EINVAL)?;
        let me = usize::try_from(sys::my_pe()).map_err(|_| EINVAL)?;
        let layout = Layout::new(npes, Layout::slot_bytes_from_env(npes));
        let base = sys::malloc(layout.total());
        if base.is_null() {
            return Err(ENOMEM);
        }
        let base = base as usize;
        if base % 8 != 0 {
            // Never seen (shmem_malloc aligns for any type); batches are read as words.
            // SAFETY: the block just came from sys::malloc (collective: every PE frees it).
            unsafe { sys::free(base as *mut u8) };
            return Err(EINTERNAL);
        }
        // The block is zeroed before anyone can ship into it: zero ours, then a barrier.
        for src in 0..npes {
            mem::store_word(base + layout.ack(src), 0);
            for slot in 0..SLOTS {
                mem::store_word(base + layout.seq(src, slot), 0);
            }
        }
        let image = crate::image::main_program().unwrap_or((0, 0));
        mem::store_word(base + layout.info(), (image.0 as i64).wrapping_sub(base as i64) as u64);
        let inbox = service::register(base, layout);
        sys::barrier_all();
        let peers = (0..npes)
            .map(|pe| {
                // SAFETY: the info word of every PE's block, published before the barrier.
                let delta = unsafe { sys::fetch_u64((base + layout.info()) as *const u64, pe as i32) };
                Peer::new(layout.slot_bytes, delta as i64)
            })
            .collect();
        Ok(CommQueue {
            id,
            base,
            layout,
            me,
            max_elems: config::max_elems(cfg),
            timeout: config::timeout(cfg),
            peers,
            outstanding: 0,
            unflagged: Vec::new(),
            direct: 0,
            calls: 0,
            inbox,
            image,
            shortcut_pe: me,
        })
    }

    /// Collective: flushes, waits for every PE to have flushed, stops serving, frees the block.
    pub fn destroy(mut self) -> i32 {
        let rc = self.flush();
        sys::barrier_all();
        service::unregister(&self.inbox);
        // SAFETY: the block came from sys::malloc in create; the service thread no longer
        // reads it (unregister returned) and every PE has flushed (the barrier).
        unsafe { sys::free(self.base as *mut u8) };
        rc
    }

    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    pub fn attr(&self) -> QueueAttr {
        QueueAttr {
            queue_id: self.id,
            outstanding_elems: self.outstanding,
            available_elems: self.max_elems.saturating_sub(self.outstanding),
        }
    }

    fn validate(&self, p: &Push) -> Result<usize, i32> {
        let pe = usize::try_from(p.pe).ok().filter(|&pe| pe < self.layout.npes).ok_or(EINVAL)?;
        if !matches!(p.esize, 1 | 2 | 4 | 8) || p.op > OP_ATOMIC_INC {
            return Err(if p.op > OP_ATOMIC_INC { ENOTSUP } else { EINVAL });
        }
        let remote = if p.op == OP_GET { p.src } else { p.dest };
        let local = if p.op == OP_GET { p.dest } else { p.src };
        if remote == 0 || (local == 0 && p.op != OP_ATOMIC_INC) || p.esize.checked_mul(p.nelems).is_none() {
            return Err(EINVAL);
        }
        if (p.op == OP_ATOMIC_ADD || p.op == OP_ATOMIC_INC) && (p.esize < 4 || remote % p.esize != 0) {
            return Err(if p.esize < 4 { ENOTSUP } else { EINVAL });
        }
        Ok(pe)
    }

    /// Whether operations to this PE are applied at once (the default) or queued like the
    /// others (tests drive the inbox path on one PE).
    pub fn set_local_shortcut(&mut self, on: bool) {
        self.shortcut_pe = if on { self.me } else { usize::MAX };
    }

    pub fn push(&mut self, p: Push) -> i32 {
        if p.op == OP_ATOMIC_INC && p.nelems == 1 {
            let fast = match p.esize {
                8 => self.push_inc::<8>(p.dest, p.pe),
                4 => self.push_inc::<4>(p.dest, p.pe),
                _ => Inc::General,
            };
            match fast {
                Inc::Done => return OK,
                Inc::DonePoll => {
                    self.every_poll();
                    return OK;
                }
                Inc::General => {}
            }
        }
        self.push_any(p)
    }

    /// The one-element increment of an `ESIZE`-byte integer (8 or 4: the histogram's
    /// operation) without the general path's dispatch: one word appended to the target's
    /// batch, or one local atomic for this PE. [`Inc::General`] when the general path must take
    /// it: an argument it rejects, a limit reached, a full batch (it ships), an offset with no
    /// compact form, the first push of a batch with a flush timeout (it starts the clock).
    ///
    /// Nothing here can panic (no indexing, no allocation, no clock): the C entry point calls it
    /// outside its panic guard.
    #[inline(always)]
    pub fn push_inc<const ESIZE: usize>(&mut self, dest: usize, pe: i32) -> Inc {
        // A negative PE becomes a huge one, rejected with the out-of-range ones below.
        let pe = pe as u32 as usize;
        if dest == 0 || dest % ESIZE != 0 || self.outstanding >= self.max_elems {
            return Inc::General;
        }
        if pe == self.shortcut_pe {
            if ESIZE == 8 {
                mem::inc_u64(dest);
            } else {
                mem::inc_u32(dest);
            }
            return Inc::Done;
        }
        // Global and static variables (the program image) take the general path's translation.
        if dest.wrapping_sub(self.image.0) < self.image.1 - self.image.0 {
            return Inc::General;
        }
        let (base, timed) = (self.base, self.timeout.is_some());
        let Some(peer) = self.peers.get_mut(pe) else { return Inc::General };
        // dest and the block are aligned (checked above and at creation): so is the offset.
        let idx = (dest.wrapping_sub(base) as i64) >> ESIZE.trailing_zeros();
        let Some(word) = wire::inc_word(ESIZE, idx) else { return Inc::General };
        if (timed && peer.since.is_none()) || !peer.batch.push_word(word) {
            return Inc::General;
        }
        peer.ops += 1;
        self.outstanding += 1;
        if self.outstanding % u64::from(POLL_EVERY) == 0 {
            Inc::DonePoll
        } else {
            Inc::Done
        }
    }

    /// After a queued push: about every POLL_EVERY pushes (when the count of outstanding
    /// operations, which the push just raised, is a multiple of it) serves this PE's inbox and
    /// ships expired batches.
    fn tick(&mut self) {
        if self.outstanding % u64::from(POLL_EVERY) == 0 {
            self.every_poll();
        }
    }

    /// Serves this PE's inbox and ships expired batches (every POLL_EVERY pushes).
    #[inline(never)]
    pub fn every_poll(&mut self) {
        service::try_poll(&self.inbox);
        if self.timeout.is_some() {
            self.ship_expired();
        }
    }

    /// Any push (the general path).
    #[inline(never)]
    fn push_any(&mut self, p: Push) -> i32 {
        let pe = match self.validate(&p) {
            Ok(pe) => pe,
            Err(e) => return e,
        };
        if p.nelems == 0 {
            return OK;
        }
        if self.outstanding >= self.max_elems {
            return EFULL;
        }
        let bytes = p.esize * p.nelems;
        if pe == self.shortcut_pe {
            self.apply_local(&p, bytes);
            return OK;
        }
        if (p.op == OP_PUT || p.op == OP_GET) && bytes > self.layout.slot_bytes / 4 {
            self.direct_op(&p, bytes);
            return OK;
        }
        let offset = self.offset(if p.op == OP_GET { p.src } else { p.dest }, pe);
        match (p.nelems, wire::compact_index(p.op, p.esize, offset)) {
            (1, Some(idx)) => self.enqueue_compact(pe, &p, idx),
            _ => self.enqueue(pe, &p),
        }
        self.outstanding += 1;
        self.tick();
        OK
    }

    /// The target address `remote` (an address of this PE's copy of a symmetric object) as an
    /// offset from `pe`'s block.
    fn offset(&self, remote: usize, pe: usize) -> i64 {
        offset(self.image, self.base, self.peers[pe].image_delta, remote)
    }

    /// The one-element atomic or get: one word (two for ADD) of batch.
    fn enqueue_compact(&mut self, pe: usize, p: &Push, idx: i64) {
        let len = wire::compact_words(p.op) * 8;
        let reply = wire::reply_len(p.op, p.esize, 1);
        if !self.peers[pe].fits(len, reply, self.layout.slot_bytes) {
            self.ship(pe);
        }
        let value = if p.op == OP_ATOMIC_ADD {
            let b = mem::read_bytes(p.src, p.esize);
            if p.esize == 8 {
                u64::from_ne_bytes(b.try_into().unwrap_or_default())
            } else {
                u64::from(u32::from_ne_bytes(b.try_into().unwrap_or_default()))
            }
        } else {
            0
        };
        let peer = &mut self.peers[pe];
        peer.batch.push_compact(p.op, p.esize, idx, value);
        if p.op == OP_GET {
            peer.reply += reply;
            peer.gets.push((p.dest, p.esize));
        }
        peer.ops += 1;
        if self.timeout.is_some() && peer.since.is_none() {
            peer.since = Some(Instant::now());
        }
    }

    fn apply_local(&mut self, p: &Push, bytes: usize) {
        let payload = if p.op == OP_PUT || p.op == OP_ATOMIC_ADD { mem::read_bytes(p.src, bytes) } else { &[] };
        let remote = if p.op == OP_GET { p.src } else { p.dest };
        let rec = wire::Record { op: p.op, esize: p.esize, nelems: p.nelems, offset: 0, payload };
        let mut reply = Vec::new();
        wire::apply(&rec, remote, &mut reply);
        if p.op == OP_GET {
            wire::scatter(&reply, &[(p.dest, bytes)]);
        }
    }

    fn direct_op(&mut self, p: &Push, bytes: usize) {
        // SAFETY: dest (put) / src (get) are symmetric addresses of `bytes` bytes and the local
        // side stays valid until the flush: the queue's push contract, as for shmem_*_nbi.
        unsafe {
            if p.op == OP_PUT {
                sys::put_nbi(p.dest as *mut u8, p.src as *const u8, bytes, p.pe);
            } else {
                sys::get_nbi(p.dest as *mut u8, p.src as *const u8, bytes, p.pe);
            }
        }
        self.direct += 1;
        self.outstanding += 1;
    }

    /// The most elements of one record that fit an empty batch.
    fn chunk_elems(&self, op: u64, esize: usize) -> usize {
        let room = self.layout.slot_bytes - wire::BATCH_HEADER - wire::RECORD_HEADER;
        match op {
            OP_PUT | OP_ATOMIC_ADD => room / esize,
            OP_GET => self.layout.slot_bytes / esize,
            _ => usize::MAX >> 16,
        }
    }

    fn enqueue(&mut self, pe: usize, p: &Push) {
        let remote = if p.op == OP_GET { p.src } else { p.dest };
        let chunk = self.chunk_elems(p.op, p.esize);
        let mut done = 0;
        while done < p.nelems {
            let n = chunk.min(p.nelems - done);
            let rec_len = wire::RECORD_HEADER + wire::payload_len(p.op, p.esize, n);
            let reply = wire::reply_len(p.op, p.esize, n);
            if !self.peers[pe].fits(rec_len, reply, self.layout.slot_bytes) {
                self.ship(pe);
            }
            let at = done * p.esize;
            let offset = self.offset(remote + at, pe);
            let payload =
                if p.op == OP_PUT || p.op == OP_ATOMIC_ADD { mem::read_bytes(p.src + at, n * p.esize) } else { &[] };
            let peer = &mut self.peers[pe];
            peer.batch.push_record(p.op, p.esize, n, offset, payload);
            if p.op == OP_GET {
                peer.reply += reply;
                peer.gets.push((p.dest + at, n * p.esize));
            }
            done += n;
        }
        let peer = &mut self.peers[pe];
        peer.ops += 1;
        if self.timeout.is_some() && peer.since.is_none() {
            peer.since = Some(Instant::now());
        }
    }

    /// Ships the buffer for `pe` as one batch, first waiting for a free slot.
    fn ship(&mut self, pe: usize) {
        if !self.peers[pe].pending() {
            return;
        }
        let mut spins = 0u32;
        while self.peers[pe].inflight.len() >= SLOTS {
            self.reap(pe);
            if self.peers[pe].inflight.len() >= SLOTS {
                self.wait(&mut spins);
            }
        }
        // Publish the batches shipped before (to any PE): their puts are complete after this,
        // so their buffers are free again.
        self.publish();
        let me = self.me;
        let peer = &mut self.peers[pe];
        let seq = peer.next_seq;
        let slot = (seq % SLOTS as u64) as usize;
        std::mem::swap(&mut peer.batch, &mut peer.sent);
        let batch = mem::as_bytes(peer.sent.finish(peer.reply));
        // SAFETY: the request slot is inside the target's copy of the symmetric block (same
        // layout on every PE); the batch is at most slot_bytes; its buffer (`sent`) is left
        // untouched until the quiet in `publish`.
        unsafe {
            sys::put_nbi((self.base + self.layout.req(me, slot)) as *mut u8, batch.as_ptr(), batch.len(), pe as i32)
        };
        self.unflagged.push((pe, slot, seq + 1));
        peer.inflight.push_back(Flight {
            seq: seq + 1,
            ops: peer.ops,
            reply: peer.reply,
            gets: std::mem::take(&mut peer.gets),
        });
        peer.next_seq += 1;
        peer.ops = 0;
        peer.reply = 0;
        peer.since = None;
        peer.batch.clear();
    }

    /// Completes the puts of the batches shipped so far (one quiet) and publishes them: an
    /// atomic set of each one's sequence word, which the target's service thread watches.
    fn publish(&mut self) {
        if self.unflagged.is_empty() {
            return;
        }
        sys::quiet();
        let me = self.me;
        for (pe, slot, seq) in self.unflagged.drain(..) {
            // SAFETY: the sequence word of that slot inside the target's symmetric block.
            unsafe { sys::set_u64((self.base + self.layout.seq(me, slot)) as *mut u64, seq, pe as i32) };
        }
    }

    /// Collects the acks of `pe` and completes the batches it has applied.
    fn reap(&mut self, pe: usize) {
        if self.peers[pe].inflight.is_empty() {
            return;
        }
        self.publish(); // an unpublished batch would never be acked
        if pe == self.me {
            service::try_poll(&self.inbox);
        }
        // SAFETY: the ack word for this PE inside the target's symmetric block.
        let acked = unsafe { sys::fetch_u64((self.base + self.layout.ack(self.me)) as *const u64, pe as i32) };
        let mut reply = Vec::new();
        while let Some(f) = self.peers[pe].inflight.front() {
            if f.seq > acked {
                break;
            }
            let f = self.peers[pe].inflight.pop_front().expect("front exists");
            if f.reply > 0 {
                let slot = ((f.seq - 1) % SLOTS as u64) as usize;
                reply.resize(f.reply, 0);
                // SAFETY: the reply area of that slot on the target, f.reply <= slot_bytes.
                unsafe { sys::get(&mut reply, (self.base + self.layout.reply(self.me, slot)) as *const u8, pe as i32) };
                wire::scatter(&reply, &f.gets);
            }
            self.outstanding -= f.ops;
        }
    }

    fn ship_expired(&mut self) {
        let Some(t) = self.timeout else { return };
        for pe in 0..self.peers.len() {
            if self.peers[pe].since.is_some_and(|s| s.elapsed() >= t) {
                self.ship(pe);
            }
        }
        self.publish();
    }

    fn complete_direct(&mut self) {
        if self.direct > 0 {
            sys::quiet();
            self.outstanding -= self.direct;
            self.direct = 0;
        }
    }

    /// Some progress; returns the number of outstanding operations.
    pub fn progress(&mut self) -> u64 {
        self.calls = self.calls.wrapping_add(1);
        if self.calls % POLL_EVERY == 0 {
            self.ship_expired();
            for pe in 0..self.peers.len() {
                self.reap(pe);
            }
            self.complete_direct();
        }
        self.outstanding
    }

    /// Ships everything and waits until every operation pushed so far is complete.
    pub fn flush(&mut self) -> i32 {
        for pe in 0..self.peers.len() {
            self.ship(pe);
        }
        for pe in 0..self.peers.len() {
            let mut spins = 0u32;
            while !self.peers[pe].inflight.is_empty() {
                self.reap(pe);
                if !self.peers[pe].inflight.is_empty() {
                    self.wait(&mut spins);
                }
            }
        }
        self.complete_direct();
        OK
    }
}

impl CommQueue {
    /// One step of waiting for a target: serve our own inbox (the target may be waiting for
    /// us), then spin a little, then yield.
    fn wait(&self, spins: &mut u32) {
        if service::try_poll(&self.inbox) {
            return;
        }
        *spins = spins.saturating_add(1);
        if *spins < 16 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
