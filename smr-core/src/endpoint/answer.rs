//! Answers placed in buffers the sender reserved: a request/answer pair (an RMA read) in one
//! round trip, whatever the answer's size up to `ANSWER_BUFS_MAX` pool buffers.
//!
//! An answer of up to `ANSWER_DATA_MAX` bytes rides in the response entry (`answer_with`).
//! For a larger one the sender reserves, before it sends the request, buffers of its *own*
//! region's pools (`reserve_answer_buf`: an inject buffer up to `INJECT_SIZE`, one SAR buffer
//! up to the SAR size, and up to `ANSWER_BUFS_MAX` SAR buffers above, each taken from the
//! pool on its own, so in no particular order), and names them in the request
//! (`AnswerBuf::wire` and `AnswerBuf::more`, in the provider's payload).
//! The receiver copies the answer straight into those buffers, in order, through the mapping of
//! the sender's region it holds already (no connection back, no ring entry of its own), and
//! answers `Status::Placed` with the length: one command and one response entry in all, where a
//! reply message would take a command each way plus the response.
//!
//! Why several buffers and not a pushed reply: a read of 48-128 KiB that `fi_rma_bw` makes
//! while its target reads it too moved 7.9-15.7 GB/s answered into buffers of that size, against
//! 4.5-6.8 for the C shm and for our own CMA read (docs/perf/where-the-time-goes.md): the
//! source, the buffers and the destination all stay in cache. Above that they do not, and the
//! answered way lost.
//!
//! Why the sender's buffers and not the receiver's: the sender then takes the bytes out
//! of its own memory and frees the buffers locally, with no free-list push into a peer's region
//! and nothing to trust from the receiver but a length, which it clamps to the buffers and the
//! provider checks against what it asked for. The buffers belong to the pending send from the
//! request on: the engine frees them however the send ends (answered, refused, failed to go out,
//! receiver dead), so no path leaks one.
//!
//! The receiver trusts nothing in the names: each index is checked against the sender's
//! geometry (the receiver's private copy, validated when it mapped the sender), the answer's
//! length against the buffers' total size, and each copy goes through a bounds-checked pointer
//! of that mapping. A bad name refuses the request (`EINVAL`) with nothing written.

use super::measured::Choice;
use super::{AnswerTo, Endpoint, PeerId, SendOpts, SendStatus, SrcId};
use crate::cmd::{MsgHeader, RespEntry, Status};
use crate::error::{Error, Result};
use crate::iov::LocalIov;
use crate::layout::{Geometry, INJECT_SIZE};
use crate::region::Region;

/// Most buffers one answer spans: four SAR buffers, 128 KiB with the default geometry.
pub const ANSWER_BUFS_MAX: usize = 4;

/// An answer of this many bytes or more is placed in pieces of `PART_BYTES`, each announced to
/// the sender as it is in (`resp::PART`): the sender copies a piece out while the next is copied
/// in, where it would otherwise wait for the whole answer before its own copy began. SOS gets
/// of 32-128 KiB took 1.4-1.5 / 2.2-2.4 / 3.6-3.9 us so, against 1.6-1.8 / 2.8-2.9 / 4.8-5.3
/// answered whole. Pieces of 2 KiB cost more than they overlapped (an announcement costs both
/// sides some 40 ns), and 12-16 KiB ones measured no better than 8 KiB then
/// (docs/perf/one-sided.md, "Forty-first session"). Since a piece goes in by `rep movsb`
/// (`copy::copy_to_shared`), 16 KiB pieces measured ahead of 8 KiB ones: gets of 64-128 KiB
/// 3-10% faster, of 32 KiB alike (docs/perf/one-sided.md, "Forty-fourth session").
pub const PARTS_FROM: u64 = 2 * PART_BYTES;
/// The bytes of one piece (the last may be shorter).
pub const PART_BYTES: u64 = 16 << 10;

/// The wire name's bit that says "SAR pool" (otherwise: inject pool); the rest, but for
/// `TIMED` and `MORE`, is the (first) buffer's index.
const SAR_POOL: u32 = 1 << 31;
/// The wire name's bit that asks the receiver to time its copy into the buffers and report it
/// (`AnswerBuf::timed`, `read_way.rs`); no pool has this many buffers (`layout::MAX_BUFFERS`).
const TIMED: u32 = 1 << 30;
/// The wire name's bits that count the SAR buffers named after it (`AnswerBuf::more`).
const MORE_SHIFT: u32 = 28;
const MORE: u32 = 3 << MORE_SHIFT;
const INDEX: u32 = !(SAR_POOL | TIMED | MORE);

/// Buffers of the sender's own region, reserved for one answer (`Endpoint::reserve_answer_buf`):
/// the first named by `wire`, the SAR buffers after it (none for most answers) by `more`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerBuf {
    name: u32,
    /// Indices of the further SAR buffers, as many as the name's `MORE` bits say.
    more: [u16; ANSWER_BUFS_MAX - 1],
}

/// Where an answer's buffers lie in a region: (offset, size) of each, in the answer's order.
#[derive(Debug, Clone, Copy)]
pub struct Spans {
    parts: [(u64, u64); ANSWER_BUFS_MAX],
    n: usize,
}

impl Spans {
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.parts[..self.n].iter().copied()
    }

    /// Bytes the buffers hold together.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.iter().map(|(_, size)| size).sum()
    }

    /// (offset, bytes) in each buffer that `len` bytes of an answer fill, in order: the first
    /// buffer always (an empty answer is one empty part), the others while bytes are left.
    #[inline]
    fn cut(&self, len: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut left = len;
        self.parts[..self.n].iter().enumerate().map_while(move |(i, &(off, size))| {
            let n = left.min(size);
            left -= n;
            (n > 0 || i == 0).then_some((off, n))
        })
    }
}

/// Up to `ANSWER_BUFS_MAX` items on the stack: a fixed array and how many are in use (a
/// `SmallVec` cost the usual one-buffer read about 90 instructions on each side).
#[derive(Clone, Copy)]
struct Few<T> {
    items: [T; ANSWER_BUFS_MAX],
    n: usize,
}

impl<T: Copy> Few<T> {
    #[inline]
    fn new(empty: T) -> Self {
        Few { items: [empty; ANSWER_BUFS_MAX], n: 0 }
    }

    /// Add `item`: the callers add one per span, at most `ANSWER_BUFS_MAX`.
    #[inline]
    fn push(&mut self, item: T) {
        self.items[self.n] = item;
        self.n += 1;
    }

    #[inline]
    fn as_slice(&self) -> &[T] {
        &self.items[..self.n]
    }
}

/// The bytes of an answer placed in buffers (`Endpoint::placed_answer`): its parts, in order.
pub struct AnswerParts<'a>(Few<&'a [u8]>);

impl<'a> AnswerParts<'a> {
    #[inline]
    pub fn as_slice(&self) -> &[&'a [u8]] {
        self.0.as_slice()
    }
}

impl AnswerBuf {
    #[inline]
    fn one(name: u32) -> AnswerBuf {
        AnswerBuf { name, more: [0; ANSWER_BUFS_MAX - 1] }
    }

    /// How the request names the first buffer (and how many follow) to the receiver.
    #[inline]
    pub fn wire(self) -> u32 {
        self.name
    }

    /// How the request names the SAR buffers after the first (`layout::MAX_BUFFERS` keeps an
    /// index within 16 bits); empty for an answer of one buffer.
    #[inline]
    pub fn more(&self) -> &[u16] {
        &self.more[..((self.name & MORE) >> MORE_SHIFT) as usize]
    }

    /// The name that also asks the receiver for its copy's time (`read_way.rs`): for the wire
    /// only, the buffers are the same.
    pub fn timed(self) -> AnswerBuf {
        AnswerBuf { name: self.name | TIMED, ..self }
    }

    /// The names read from a request: untrusted until `place` checks them. None when the
    /// further buffers are not as many as `name` says.
    #[inline]
    pub fn from_wire(name: u32, more: &[u16]) -> Option<AnswerBuf> {
        let mut buf = AnswerBuf::one(name);
        if more.len() != buf.more().len() {
            return None;
        }
        // A loop, not `copy_from_slice`: that calls `memcpy` for the usual none.
        for (at, &index) in buf.more.iter_mut().zip(more) {
            *at = index;
        }
        Some(buf)
    }

    /// Offset and size of each buffer in a region of geometry `geo`, if every name is in range:
    /// a pure function of peer-written names (fuzz target `answer_buf_name`). Only SAR buffers
    /// are named after the first.
    #[inline]
    pub fn spans(&self, geo: &Geometry) -> Result<Spans> {
        let mut spans = Spans { parts: [(0, 0); ANSWER_BUFS_MAX], n: 1 };
        spans.parts[0] = self.first(geo)?;
        if self.name & SAR_POOL == 0 && !self.more().is_empty() {
            return Err(Error::Corrupt("an answer spanning inject buffers"));
        }
        for &more in self.more() {
            spans.parts[spans.n] = (geo.sar_offset(u32::from(more))?, geo.counts.sar_size);
            spans.n += 1;
        }
        Ok(spans)
    }

    /// Offset and size of the first buffer in a region of geometry `geo`, if its name is in
    /// range.
    #[inline]
    fn first(&self, geo: &Geometry) -> Result<(u64, u64)> {
        let index = self.name & INDEX;
        if self.name & SAR_POOL != 0 {
            Ok((geo.sar_offset(index)?, geo.counts.sar_size))
        } else {
            Ok((geo.inject_offset(index)?, INJECT_SIZE))
        }
    }

    /// Copy the answer `data` into the buffers in `region` (the sender's), in order: names,
    /// length and bounds are all checked before a byte is written. With a `piece` size (not
    /// `usize::MAX`), the answer is copied that many bytes at a time, and `placed` hears how many
    /// bytes are in after each piece but the last, so that the sender can copy them out while
    /// the rest comes.
    fn place(&self, region: &Region, data: &LocalIov, piece: usize, mut placed: impl FnMut(u64)) -> Result<()> {
        let len = data.len() as u64;
        if self.more().is_empty() && piece == usize::MAX {
            // One buffer, the usual answer (every read up to one SAR buffer): without `Spans`,
            // which cost such a read about 75 instructions here and 80 in `placed_answer`
            // (callgrind, 64-byte reads).
            let (off, size) = self.first(region.geometry())?;
            if len > size {
                return Err(Error::Corrupt("answer longer than the buffers named for it"));
            }
            let p = region.mapping().bytes_ptr(off, len)?;
            // SAFETY: as below, for the one buffer.
            unsafe { data.read_to_raw(0, p, len as usize) };
            return Ok(());
        }
        let spans = self.spans(region.geometry())?;
        if len > spans.capacity() {
            return Err(Error::Corrupt("answer longer than the buffers named for it"));
        }
        let mut dst = Few::new((std::ptr::null_mut(), 0));
        for (off, n) in spans.cut(len) {
            dst.push((region.mapping().bytes_ptr(off, n)?, n as usize));
        }
        let mut at = 0;
        for &(p, n) in dst.as_slice() {
            let mut done = 0;
            while done < n {
                // Up to the next piece's boundary in the answer, within this buffer.
                let k = (n - done).min(piece - at % piece);
                // SAFETY: `p + done .. p + done + k` lies inside `p..p+n`, which lies inside our
                // mapping of the sender's region (checked above); shared memory that a
                // misbehaving sender may write meanwhile, which can only garble its own answer.
                let copied = unsafe { data.read_to_raw(at, p.add(done), k) };
                debug_assert_eq!(copied, k, "the answer's bytes are `len` long");
                (at, done) = (at + k, done + k);
                if at % piece == 0 && (at as u64) < len {
                    placed(at as u64);
                }
            }
        }
        Ok(())
    }

    /// The index of each buffer in its pool, to give back.
    fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.name & INDEX).chain(self.more().iter().map(|&i| u32::from(i)))
    }
}

impl Endpoint {
    /// Reserve buffers of our own region for an answer of `len` bytes: an inject buffer if it
    /// fits one, else as many SAR buffers as it fills (up to `ANSWER_BUFS_MAX`). `Again` when the
    /// pool has too few free (the caller may use another protocol), `Invalid` when no buffers
    /// are that large. Hand them to `send_bytes_answered`.
    pub fn reserve_answer_buf(&mut self, len: usize) -> Result<AnswerBuf> {
        if len as u64 <= INJECT_SIZE {
            self.region.map_inject_pool()?;
            let stack = self.region.inject_stack();
            let index = stack.pop().ok().or_else(|| self.inject_cold.take(&stack)).ok_or(Error::Again)?;
            return Ok(AnswerBuf::one(index));
        }
        if len > self.answer_buf_max() {
            return Err(Error::Invalid("answer larger than the pool buffers one answer may span"));
        }
        self.region.map_sar_pool()?;
        let wanted = len.div_ceil(self.region.geometry().counts.sar_size as usize);
        let stack = self.region.sar_stack();
        let taken: smallvec::SmallVec<[u32; ANSWER_BUFS_MAX]> =
            std::iter::from_fn(|| stack.pop().ok().or_else(|| self.sar_cold.take(&stack))).take(wanted).collect();
        if taken.len() < wanted {
            // Too few free: what was taken goes back (cold, as an answer's buffers would).
            taken.iter().for_each(|&index| self.give_back_sar(index));
            return Err(Error::Again);
        }
        let mut buf = AnswerBuf::one(SAR_POOL | taken[0] | ((wanted as u32 - 1) << MORE_SHIFT));
        for (more, &index) in buf.more.iter_mut().zip(&taken[1..]) {
            // Below `layout::MAX_BUFFERS` (2^16): an index of the pool's own.
            *more = index as u16;
        }
        Ok(buf)
    }

    /// The largest answer `reserve_answer_buf` can find buffers for: `ANSWER_BUFS_MAX` SAR
    /// buffers (fewer in a smaller pool).
    pub fn answer_buf_max(&self) -> usize {
        let counts = &self.region.geometry().counts;
        (counts.sar_size * counts.sar_count.min(ANSWER_BUFS_MAX as u64)) as usize
    }

    /// `send_bytes` of a request whose answer goes into `buf` (named in the request's bytes by
    /// the caller). The send must be acknowledged (`opts.delivery_complete`): its answer
    /// completes it. From here on the engine owns `buf`: it hands the answer's bytes to
    /// `Handler::on_send_answer` and frees the buffer when the send ends, however it ends; if
    /// this returns an error, the buffer is already free again. `timed`: a read of that many
    /// bytes chosen answered (`choose_read`), whose request names `buf.timed()`: its answer is
    /// timed and learnt (`read_way.rs`).
    pub fn send_bytes_answered(
        &mut self,
        peer: PeerId,
        hdr: MsgHeader,
        bytes: &[u8],
        opts: SendOpts,
        buf: AnswerBuf,
        timed: Option<(Choice, usize)>,
    ) -> Result<SendStatus> {
        if !opts.delivery_complete {
            self.release_answer_buf(Some(buf));
            return Err(Error::Invalid("a request with an answer buffer must be acknowledged"));
        }
        // The id the send takes, by the express path or the general one.
        let msg_id = self.next_msg_id;
        let sent = self.send_small_bytes(peer, hdr, bytes, opts, Some(buf));
        match (&sent, timed) {
            (Err(_), _) => self.release_answer_buf(Some(buf)),
            (Ok(_), Some(read)) => self.time_answer(msg_id, read),
            (Ok(_), None) => {}
        }
        sent
    }

    /// Answer a request with `data` placed in the answer buffer its sender named (`buf`, from
    /// the request: untrusted, checked here). Called from progress for `Disposition::AnswerInto`
    /// or later for a request taken with `Disposition::Later`. A bad name or an answer longer than
    /// the buffer refuses the request (`EINVAL`) without writing anything; a sender that has gone
    /// is not answered (`AnswerTo`).
    pub fn answer_into(&mut self, to: AnswerTo, buf: AnswerBuf, data: &LocalIov) {
        if self.still_sends(to) {
            self.place_answer(to.src, to.msg_id, buf, data);
        }
    }

    /// `answer_into` for the sender now at `src`.
    pub(super) fn place_answer(&mut self, src: SrcId, msg_id: u64, buf: AnswerBuf, data: &LocalIov) {
        let Some(peer) = self.inp.get(&src) else { return };
        let len = data.len();
        // Buffers their sender reserved are backed already: the reserve here finds their pages
        // (a sender naming one it never reserved may get ENOSPC, and a refusal).
        let pool_ready =
            if buf.name & SAR_POOL != 0 { peer.region.map_sar_pool() } else { peer.region.map_inject_pool() };
        // A sender choosing between answers and its own CMA reads asks for the copy's time
        // (`read_way.rs`).
        let started = (buf.name & TIMED != 0).then(std::time::Instant::now);
        // A long answer is placed in pieces, each announced as it is in, to a sender that waits
        // for this answer alone. Not while more requests wait behind this one: their sender
        // (fi_rma_bw's window of reads) has other answers to take meanwhile, and each
        // announcement would only cost both sides a ring entry. Nor while responses to this
        // sender wait for room in its ring. The announcement is a hint: the answer below names every
        // byte. No wake-up either: a sender asleep is woken by the answer, and a wake-up's full
        // barrier would wait for the piece's stores to drain before the next piece's copy.
        // Shorter answers (most reads) look at neither ring.
        let in_pieces = len as u64 >= PARTS_FROM && !self.resp_backlog.holds(src) && !self.commands_behind();
        let piece = if in_pieces { PART_BYTES as usize } else { usize::MAX };
        let placed = pool_ready.and_then(|()| {
            buf.place(&peer.region, data, piece, |n| {
                let _ = self.resp_ring_of(src, peer).push(&RespEntry::part(msg_id, n));
            })
        });
        match placed {
            Ok(()) => {
                self.stats.answers_placed += 1;
                let ns = started.map_or(0, |t| t.elapsed().as_nanos() as u64);
                // Into the slot, its first line only: no entry built and copied (`send_answer`).
                self.send_resp_with(src, |e| {
                    e.set_done(msg_id, Status::Placed, len as u64);
                    e.set_time(ns);
                });
            }
            Err(_) => {
                self.stats.corrupt_commands += 1;
                self.send_resp(src, RespEntry::done(msg_id, Status::Refused, libc::EINVAL as u64));
            }
        }
    }

    /// Answer buffers reserved by sends still waiting for their answers (tests: none may leak).
    pub fn answer_bufs_held(&self) -> usize {
        self.pending.values().filter(|s| s.answer.is_some()).count()
            + self.acked.values().filter(|s| s.answer.is_some()).count()
    }

    /// The bytes of an answer placed in `buf` (a `value` the receiver wrote: clamped to the
    /// buffers), for the handler: a part per buffer in use.
    ///
    /// The slices are of our own region: the buffers are ours (reserved until the send ends),
    /// and the receiver wrote them before it published the answer, which we popped (Acquire). A
    /// misbehaving receiver can still write them while the handler copies them out, which
    /// garbles only the bytes of its own answer.
    pub(super) fn placed_answer(&self, buf: AnswerBuf, value: u64) -> AnswerParts<'_> {
        let none = AnswerParts(Few::new(&[]));
        if buf.more().is_empty() {
            // One buffer, the usual answer (`AnswerBuf::place` says why apart).
            let Ok((off, size)) = buf.first(self.region.geometry()) else { return none };
            let mut parts = Few::new(&[][..]);
            let n = value.min(size);
            let Ok(p) = self.region.mapping().bytes_ptr(off, n) else { return none };
            // SAFETY: as below, for the one buffer.
            parts.push(unsafe { std::slice::from_raw_parts(p, n as usize) });
            return AnswerParts(parts);
        }
        let Ok(spans) = buf.spans(self.region.geometry()) else { return none };
        let mut parts = Few::new(&[][..]);
        for (off, n) in spans.cut(value.min(spans.capacity())) {
            let Ok(p) = self.region.mapping().bytes_ptr(off, n) else { return none };
            // SAFETY: `n` bytes inside our own mapping (checked), which lives as long as `self`;
            // any byte value is a valid `u8` (see above for concurrent writes).
            parts.push(unsafe { std::slice::from_raw_parts(p, n as usize) });
        }
        AnswerParts(parts)
    }

    /// A send that held answer buffers ended: back to the pool they came from, cold
    /// (`cold.rs`: the peer that answers next writes into them).
    #[inline]
    pub(super) fn release_answer_buf(&mut self, buf: Option<AnswerBuf>) {
        let Some(buf) = buf else { return };
        if buf.name & SAR_POOL != 0 {
            buf.indices().for_each(|index| self.give_back_sar(index));
        } else {
            self.inject_cold.give_back(&self.region.inject_stack(), buf.name & INDEX);
        }
    }
}
