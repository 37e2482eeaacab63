//! Answers placed in a buffer the sender reserved: a request/answer pair (an RMA read) in one
//! round trip, whatever the answer's size up to a pool buffer.
//!
//! An answer of up to `ANSWER_DATA_MAX` bytes rides in the response entry (`answer_with`).
//! For a larger one the sender reserves, before it sends the request, one buffer of its *own*
//! region's pools (`reserve_answer_buf`: an inject buffer up to `INJECT_SIZE`, a SAR buffer up
//! to the SAR size), and names it in the request (`AnswerBuf::wire`, in the provider's payload).
//! The receiver copies the answer straight into that buffer, through the mapping of the
//! sender's region it holds already (no connection back, no ring entry of its own), and answers
//! `Status::Placed` with the length: one command and one response entry in all, where a reply
//! message would take a command each way plus the response.
//!
//! Why the sender's buffer and not one of the receiver's: the sender then takes the bytes out
//! of its own memory and frees the buffer locally, with no free-list push into a peer's region
//! and nothing to trust from the receiver but a length, which it clamps to the buffer and the
//! provider checks against what it asked for. The buffer belongs to the pending send from the
//! request on: the engine frees it however the send ends (answered, refused, failed to go out,
//! receiver dead), so no path leaks one.
//!
//! The receiver trusts nothing in the name: the index is checked against the sender's geometry
//! (the receiver's private copy, validated when it mapped the sender), the answer's length
//! against the buffer's size, and the copy goes through a bounds-checked pointer of that
//! mapping. A bad name refuses the request (`EINVAL`) with nothing written.

use super::measured::Choice;
use super::{Endpoint, PeerId, SendOpts, SendStatus, SrcId};
use crate::cmd::{MsgHeader, RespEntry, Status};
use crate::error::{Error, Result};
use crate::iov::LocalIov;
use crate::layout::{Geometry, INJECT_SIZE};
use crate::region::Region;

/// The wire name's bit that says "SAR pool" (otherwise: inject pool); the rest, but for
/// `TIMED`, is the index.
const SAR_POOL: u32 = 1 << 31;
/// The wire name's bit that asks the receiver to time its copy into the buffer and report it
/// (`AnswerBuf::timed`, `read_way.rs`); no pool has this many buffers (`layout::MAX_BUFFERS`).
const TIMED: u32 = 1 << 30;

/// A buffer of the sender's own region, reserved for one answer (`Endpoint::reserve_answer_buf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerBuf(u32);

impl AnswerBuf {
    /// How the request names it to the receiver.
    pub fn wire(self) -> u32 {
        self.0
    }

    /// The name that also asks the receiver for its copy's time (`read_way.rs`): for the wire
    /// only, the buffer is the same.
    pub fn timed(self) -> AnswerBuf {
        AnswerBuf(self.0 | TIMED)
    }

    /// A name read from a request: untrusted until `place` checks it.
    pub fn from_wire(v: u32) -> AnswerBuf {
        AnswerBuf(v)
    }

    /// Offset and size of the buffer in a region of geometry `geo`, if the name is in range: a
    /// pure function of a peer-written name (fuzz target `answer_buf_name`).
    pub fn span(self, geo: &Geometry) -> Result<(u64, u64)> {
        let index = self.0 & !(SAR_POOL | TIMED);
        if self.0 & SAR_POOL != 0 {
            Ok((geo.sar_offset(index)?, geo.counts.sar_size))
        } else {
            Ok((geo.inject_offset(index)?, INJECT_SIZE))
        }
    }

    /// Where `len` bytes of an answer go in `region` (the sender's): checked name, length and
    /// bounds.
    fn place(self, region: &Region, len: usize) -> Result<*mut u8> {
        let (off, size) = self.span(region.geometry())?;
        if len as u64 > size {
            return Err(Error::Corrupt("answer longer than the buffer named for it"));
        }
        region.mapping().bytes_ptr(off, len as u64)
    }
}

impl Endpoint {
    /// Reserve a buffer of our own region for an answer of `len` bytes: an inject buffer if it
    /// fits one, else a SAR buffer. `Again` when that pool is empty (the caller may use another
    /// protocol), `Invalid` when no buffer is that large. Hand it to `send_bytes_answered`.
    pub fn reserve_answer_buf(&mut self, len: usize) -> Result<AnswerBuf> {
        let counts = &self.region.geometry().counts;
        let (stack, tag) = if len as u64 <= INJECT_SIZE {
            self.region.map_inject_pool()?;
            (self.region.inject_stack(), 0)
        } else if len as u64 <= counts.sar_size {
            self.region.map_sar_pool()?;
            (self.region.sar_stack(), SAR_POOL)
        } else {
            return Err(Error::Invalid("answer larger than any pool buffer"));
        };
        let index = match stack.pop() {
            Ok(index) => index,
            Err(_) if tag == SAR_POOL => self.sar_cold.take(&stack).ok_or(Error::Again)?,
            Err(_) => return Err(Error::Again),
        };
        Ok(AnswerBuf(index | tag))
    }

    /// The largest answer `reserve_answer_buf` can find a buffer for: one SAR buffer.
    pub fn answer_buf_max(&self) -> usize {
        self.region.geometry().counts.sar_size as usize
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
    /// is not answered.
    pub fn answer_into(&mut self, src: SrcId, msg_id: u64, buf: u32, data: &LocalIov) {
        let Some(peer) = self.inp.get(&src) else { return };
        let len = data.len();
        // A buffer its sender reserved is backed already: the reserve here finds its pages (a
        // sender naming one it never reserved may get ENOSPC, and a refusal).
        let pool_ready = if buf & SAR_POOL != 0 { peer.region.map_sar_pool() } else { peer.region.map_inject_pool() };
        // A sender choosing between answers and its own CMA reads asks for the copy's time
        // (`read_way.rs`).
        let started = (buf & TIMED != 0).then(std::time::Instant::now);
        let placed = pool_ready.and_then(|()| AnswerBuf::from_wire(buf).place(&peer.region, len)).map(|dst| {
            // SAFETY: `dst..dst+len` lies inside our mapping of the sender's region (checked by
            // `place`); shared memory that a misbehaving sender may write meanwhile, which can
            // only garble its own answer.
            unsafe { data.read_to_raw(0, dst, len) }
        });
        let entry = match placed {
            Ok(_) => {
                self.stats.answers_placed += 1;
                let ns = started.map_or(0, |t| t.elapsed().as_nanos() as u64);
                RespEntry::done_timed(msg_id, Status::Placed, len as u64, ns)
            }
            Err(_) => {
                self.stats.corrupt_commands += 1;
                RespEntry::done(msg_id, Status::Refused, libc::EINVAL as u64)
            }
        };
        self.send_resp(src, entry);
    }

    /// Answer buffers reserved by sends still waiting for their answers (tests: none may leak).
    pub fn answer_bufs_held(&self) -> usize {
        self.pending.values().filter(|s| s.answer.is_some()).count()
            + self.acked.values().filter(|s| s.answer.is_some()).count()
    }

    /// The bytes of an answer placed in `buf` (a `value` the receiver wrote: clamped to the
    /// buffer), for the handler.
    ///
    /// The slice is of our own region: the buffer is ours (reserved until the send ends), and
    /// the receiver wrote it before it published the answer, which we popped (Acquire). A
    /// misbehaving receiver can still write it while the handler copies it out, which garbles
    /// only the bytes of its own answer.
    pub(super) fn placed_answer(&self, buf: AnswerBuf, value: u64) -> &[u8] {
        let Ok((off, size)) = buf.span(self.region.geometry()) else { return &[] };
        let len = value.min(size);
        match self.region.mapping().bytes_ptr(off, len) {
            // SAFETY: `len` bytes inside our own mapping (checked), which lives as long as
            // `self`; any byte value is a valid `u8` (see above for concurrent writes).
            Ok(p) => unsafe { std::slice::from_raw_parts(p, len as usize) },
            Err(_) => &[],
        }
    }

    /// A send that held an answer buffer ended: back to the pool it came from (a SAR buffer
    /// cold, `cold.rs`: the peer that answers next writes into it).
    pub(super) fn release_answer_buf(&mut self, buf: Option<AnswerBuf>) {
        let Some(AnswerBuf(name)) = buf else { return };
        let index = name & !SAR_POOL;
        if name & SAR_POOL != 0 {
            self.sar_cold.give_back(&self.region.sar_stack(), index);
        } else {
            let _ = self.region.inject_stack().push(index);
        }
    }
}
