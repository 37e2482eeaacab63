//! The target of one-sided operations: what arrives from peers (writes, read requests,
//! atomics) is checked against the registrations (`MrTable::resolve`), applied or answered, and
//! counted. Served in the step that pops the command where its payload is here in full
//! (`Target::on_payload`: every atomic, every small write and read request), otherwise once
//! its data has been delivered (`Target::on_message`, `Target::on_delivered`). See the parent
//! module for the protocols and the completion levels.

use super::segments::MrCntrs;
use super::*;

/// The target side of `on_message` for one-sided kinds.
pub struct Target<'a> {
    pub rma: &'a mut RmaState,
    pub mrs: &'a MrTable,
}

impl Target<'_> {
    pub fn on_message(&mut self, msg: &Incoming) -> Disposition {
        let hdr = msg.hdr;
        if kind_of(hdr.app) != KIND_READ_RESP {
            self.rma.served += 1;
        }
        match kind_of(hdr.app) {
            KIND_WRITE => {
                match self.remote_of(msg).and_then(|r| r.resolve(self.mrs, hdr.len, ffi::FI_REMOTE_WRITE as u64)) {
                    Ok((ranges, cntrs)) => {
                        // SAFETY: registered memory the application exposed for remote writes; it
                        // may not release it while the registration exists, and a close stops a
                        // write still arriving before it returns (`refuse_writes_into`).
                        let dest = unsafe { crate::iov::lend(ranges.clone()) };
                        let op =
                            TargetOp::Write { mr_cntr: cntrs.write, data: cq_data(&hdr), len: hdr.len, mem: ranges };
                        let ctx = self.rma.target.insert(op);
                        Disposition::Deliver { dest, ctx: CTX_TARGET | ctx as u64 }
                    }
                    Err(errno) => refuse(msg, errno),
                }
            }
            KIND_READ_REQ if ReadReq::plausible_len(hdr.len) => match self.remote_of(msg) {
                Ok(remote) => {
                    let op = TargetOp::ReadReq { to: msg.answer_to(), remote };
                    let ctx = self.rma.target.insert(op);
                    Disposition::Later {
                        dest: LocalIov::owned(vec![0; hdr.len as usize]),
                        ctx: CTX_TARGET | ctx as u64,
                    }
                }
                Err(errno) => refuse(msg, errno),
            },
            KIND_ATOMIC => match atomic_desc(&hdr)
                .and_then(|desc| Ok((desc, self.remote_of(msg)?)))
                .and_then(|(desc, remote)| Ok((desc, self.atomic_target(msg, desc, &remote)?)))
            {
                Ok((desc, (target, mr_cntr, reply))) => {
                    let ctx =
                        CTX_TARGET | self.rma.target.insert(TargetOp::Atomic { desc, target, mr_cntr, reply }) as u64;
                    let dest = LocalIov::owned(vec![0; hdr.len as usize]);
                    if reply.is_some() {
                        Disposition::Later { dest, ctx }
                    } else {
                        Disposition::Deliver { dest, ctx }
                    }
                }
                Err(errno) => refuse(msg, errno),
            },
            // SAFETY: the application's result buffer of a pending read, which it leaves alone
            // until the read completes.
            KIND_READ_RESP => match self.rma.pending.get_mut(hdr.tag).and_then(|p| unsafe { p.lend_dest() }) {
                Some(dest) => Disposition::Deliver { dest, ctx: CTX_REPLY | hdr.tag },
                None => Disposition::Discard,
            },
            _ => refuse(msg, ffi::FI_EINVAL),
        }
    }

    /// `on_message` for a one-sided operation whose payload is here in full (inline or in an
    /// inject buffer): served at once, with no buffer to lend and no delivery to come back from.
    /// None: the caller offers it as usual.
    pub fn on_payload(&mut self, msg: &Incoming, payload: &[u8], sinks: &mut Sinks) -> Option<Disposition> {
        let hdr = msg.hdr;
        if hdr.app & APP_SEGMENTED != 0 || kind_of(hdr.app) == KIND_SEGMENTS {
            return self.on_segmented_payload(msg, payload, sinks);
        }
        // The header's words, known here to name one range: the paths below fold its checks away.
        self.serve_payload(msg, &Remote::one_range(hdr.tag, hdr.aux), payload, sinks)
    }

    /// `on_payload` for a list of remote ranges, or an operation that takes one (`segments.rs`).
    #[cold]
    fn on_segmented_payload(&mut self, msg: &Incoming, payload: &[u8], sinks: &mut Sinks) -> Option<Disposition> {
        if kind_of(msg.hdr.app) == KIND_SEGMENTS {
            return Some(self.keep_segments(msg, payload));
        }
        if !served_here(&msg.hdr) {
            return None;
        }
        match self.remote_of(msg) {
            Ok(remote) => self.serve_payload(msg, &remote, payload, sinks),
            Err(errno) => Some(refuse(msg, errno)),
        }
    }

    /// `on_payload` for an operation landing at `remote`.
    #[inline(always)]
    fn serve_payload(
        &mut self,
        msg: &Incoming,
        remote: &Remote,
        payload: &[u8],
        sinks: &mut Sinks,
    ) -> Option<Disposition> {
        let hdr = msg.hdr;
        let kind = kind_of(hdr.app);
        if !served_here(&hdr) {
            return None;
        }
        self.rma.served += 1;
        let taken = |answer_later| Disposition::Taken { answer_later };
        Some(match kind {
            KIND_WRITE => match self.apply_write(&hdr, remote, payload, sinks) {
                Ok(()) => taken(false),
                Err(errno) => refuse(msg, errno),
            },
            // Answered in this same step where the bytes fit the answer or the buffer the
            // request named (the engine copies them now: FI_ORDER_WAR).
            KIND_READ_REQ => match self.serve_read(msg.answer_to(), remote, payload, sinks) {
                ReadAnswer::Into(buf, data) => Disposition::AnswerInto { buf, data },
                ReadAnswer::With(data) => self.answer_now(msg, data),
                ReadAnswer::Queued => taken(true),
            },
            _ => {
                let desc = match atomic_desc(&hdr) {
                    Ok(desc) => desc,
                    Err(errno) => return Some(refuse(msg, errno)),
                };
                if let Some(done) = self.atomic_in_place(msg, desc, remote, payload, sinks) {
                    return Some(done);
                }
                match self.atomic_target(msg, desc, remote) {
                    Ok((target, mr_cntr, reply)) => {
                        if let Some(done) = self.atomic_at_once(msg, desc, &target, mr_cntr, payload, sinks) {
                            return Some(done);
                        }
                        match self.serve_atomic(desc, &target, mr_cntr, reply, Some(payload), sinks) {
                            Some(Outgoing::AnswerData { data, .. }) => self.answer_now(msg, data),
                            Some(out) => {
                                self.rma.outbox.push_back(out);
                                taken(true)
                            }
                            None => taken(false),
                        }
                    }
                    Err(errno) => refuse(msg, errno),
                }
            }
        })
    }

    /// The usual atomic, served in a few instructions: old values (if it returns any) that fit
    /// an answer sent in this step. Applied to a copy on the stack (`apply_atomic`, as
    /// `serve_atomic` does), counted, and answered in the step's `Disposition`; None, with
    /// nothing touched, for any other (`serve_atomic` takes it).
    #[inline(always)]
    fn atomic_at_once(
        &mut self,
        msg: &Incoming,
        desc: Desc,
        target: &Ranges,
        mr_cntr: Option<usize>,
        payload: &[u8],
        sinks: &mut Sinks,
    ) -> Option<Disposition> {
        let n = desc.bytes();
        let fetching = desc.kind != Kind::Write;
        if n > ANSWER_DATA_MAX || (fetching && !self.rma.outbox.is_empty()) {
            return None;
        }
        let mut value = [0u8; ANSWER_DATA_MAX];
        let mut applied = Err(ffi::FI_EINVAL);
        let old = AnswerData::new(if fetching { n } else { 0 }, |old| {
            applied = apply_atomic(desc, target, payload, &mut value[..n], old)
        })?;
        if let Err(errno) = applied {
            return Some(refuse(msg, errno));
        }
        sinks.remote_done(mr_cntr, !fetching);
        Some(if fetching { Disposition::AnswerWith(old) } else { Disposition::Taken { answer_later: false } })
    }

    /// The atomic OpenSHMEM and MPI send nearly always, served in place: one 4- or 8-byte
    /// integer under an operation computed on a machine word (`apply::word`), in a registration
    /// of one range, with no op id and (if it fetches) no earlier answer waiting. Read, computed
    /// and written back on the target memory itself, without the range list, the copies around
    /// `apply` and its checks (a target's fetching add: 587 -> 328 instructions per arrival,
    /// with the review after it). A refusal by the registrations is answered here; None, with
    /// nothing touched, for any other atomic, which the general path takes.
    #[inline(always)]
    fn atomic_in_place(
        &mut self,
        msg: &Incoming,
        desc: Desc,
        remote: &Remote,
        payload: &[u8],
        sinks: &mut Sinks,
    ) -> Option<Disposition> {
        let (key, addr) = remote.one()?;
        let width = desc.bytes();
        if desc.count != 1 || !matches!(width, 4 | 8) || desc.with_op_id {
            return None;
        }
        let fetching = desc.kind != Kind::Write;
        if fetching && !self.rma.outbox.is_empty() {
            return None;
        }
        let (at, mr) = match self.mrs.resolve_in_one_range(key, addr, width as u64, desc.access()) {
            Ok(one) => one?,
            Err(errno) => return Some(refuse(msg, errno)),
        };
        let (operand, compare) = operands(desc, payload).ok()?;
        // SAFETY: registered memory the application exposed for this access, `width` bytes at
        // `at` (range checked by `resolve_in_one_range`); only this path and `apply_atomic`,
        // under the domain lock, change it on behalf of peers. Elements may be unaligned.
        let old = unsafe {
            if width == 4 {
                u64::from((at as *const u32).read_unaligned())
            } else {
                (at as *const u64).read_unaligned()
            }
        };
        let new = apply::word(desc.op, desc.datatype, width, old, apply::word_of(operand), apply::word_of(compare))?;
        if desc.op != ffi::FI_ATOMIC_READ {
            // SAFETY: as above.
            unsafe {
                if width == 4 {
                    (at as *mut u32).write_unaligned(new as u32)
                } else {
                    (at as *mut u64).write_unaligned(new)
                }
            }
        }
        // The endpoint's counters follow fi_endpoint(3), as in `serve_atomic`.
        sinks.remote_done(desc.mr_cntr(MrCntrs::of(mr)), !fetching);
        if !fetching {
            return Some(Disposition::Taken { answer_later: false });
        }
        AnswerData::new(width, |b| apply::store_word(old, b)).map(Disposition::AnswerWith)
    }

    /// A peer's write whose bytes are all here: into the registration it names, counted.
    /// Nothing is touched when it is refused (`errno`).
    #[inline(always)]
    fn apply_write(&mut self, hdr: &MsgHeader, remote: &Remote, payload: &[u8], sinks: &mut Sinks) -> Result<(), u32> {
        let access = ffi::FI_REMOTE_WRITE as u64;
        let one = match remote.one() {
            Some((key, addr)) => self.mrs.resolve_in_one_range(key, addr, hdr.len, access)?,
            None => None,
        };
        // The usual write, into a registration of one range: one copy, no range list.
        let mr_cntr = if let Some((at, mr)) = one {
            let n = payload.len().min(hdr.len as usize);
            // SAFETY: registered memory the application exposed for remote writes, `hdr.len >= n`
            // bytes at `at` (range checked by `resolve_in_one_range`); it may not release it
            // while the registration exists.
            unsafe { smr_core::copy::copy_bytes(payload.as_ptr(), at as *mut u8, n) };
            mr.write_cntr
        } else {
            let (ranges, cntrs) = remote.resolve(self.mrs, hdr.len, access)?;
            // SAFETY: registered memory the application exposed for remote writes, every range
            // checked by `resolve`; it may not release it while the registration exists.
            unsafe { crate::iov::scatter(&ranges, payload) };
            cntrs.write
        };
        written(sinks, mr_cntr, cq_data(hdr), hdr.len);
        Ok(())
    }

    /// Answer `msg` with `data` in the step that took it (`Disposition::AnswerWith`), unless
    /// earlier answers still wait their turn in the outbox: then after them.
    fn answer_now(&mut self, msg: &Incoming, data: AnswerData) -> Disposition {
        if self.rma.outbox.is_empty() {
            return Disposition::AnswerWith(data);
        }
        self.rma.outbox.push_back(Outgoing::AnswerData { to: msg.answer_to(), data });
        Disposition::Taken { answer_later: true }
    }

    /// What atomic `desc` (`atomic_desc`) touches, checked: the memory, the counter of the
    /// registration, and whom to answer with the old values (fetching kinds).
    #[allow(clippy::type_complexity)]
    // Forced inline (two callers): its results were returned through memory.
    #[inline(always)]
    fn atomic_target(
        &self,
        msg: &Incoming,
        desc: Desc,
        remote: &Remote,
    ) -> Result<(Ranges, Option<usize>, Option<AnswerTo>), u32> {
        let (target, cntrs) = remote.resolve(self.mrs, desc.bytes() as u64, desc.access())?;
        let reply = (desc.kind != Kind::Write).then(|| msg.answer_to());
        Ok((target, desc.mr_cntr(cntrs), reply))
    }

    /// A target operation's data arrived (`ctx` without CTX_TARGET).
    pub fn on_delivered(&mut self, ctx: usize, result: smr_core::Result<usize>, dest: LocalIov, sinks: &mut Sinks) {
        let Some(op) = self.rma.target.try_remove(ctx) else { return };
        let ok = result.is_ok();
        match op {
            TargetOp::Write { mr_cntr, data, len, .. } => {
                if ok {
                    written(sinks, mr_cntr, data, len);
                }
            }
            TargetOp::ReadReq { to, remote } => {
                let bytes = dest.into_owned().unwrap_or_default();
                match self.serve_read(to, &remote, &bytes, sinks) {
                    ReadAnswer::Into(buf, mem) => {
                        // A snapshot now (FI_ORDER_WAR), placed once progress returns.
                        let mut data = vec![0; mem.len()];
                        mem.read_at(0, &mut data);
                        self.rma.outbox.push_back(Outgoing::AnswerInto { to, buf, data });
                    }
                    ReadAnswer::With(data) => self.rma.outbox.push_back(Outgoing::AnswerData { to, data }),
                    ReadAnswer::Queued => {}
                }
            }
            TargetOp::Atomic { desc, target, mr_cntr, reply } => {
                let bytes = dest.into_owned().unwrap_or_default();
                if let Some(out) = self.serve_atomic(desc, &target, mr_cntr, reply, ok.then_some(&bytes[..]), sinks) {
                    self.rma.outbox.push_back(out);
                }
            }
        }
    }

    /// A read request's payload (op id, length, and the initiator's answer buffer if it named
    /// one) is here: answer or reply with the bytes, or refuse. The answers the caller can give
    /// at once are returned: the bytes (up to `ANSWER_DATA_MAX`), or the answer buffer the
    /// request named and the target memory to copy into it; the rest go to the outbox.
    #[inline(always)]
    fn serve_read(&mut self, to: AnswerTo, remote: &Remote, payload: &[u8], sinks: &mut Sinks) -> ReadAnswer {
        let Some(ReadReq { op_id, len, by }) = ReadReq::decode(payload) else {
            self.answer(to, Err(ffi::FI_EINVAL));
            return ReadAnswer::Queued;
        };
        if let (true, Some((key, addr))) = (len as usize <= ANSWER_DATA_MAX, remote.one()) {
            // The usual small read, from a registration of one range: one copy into the answer.
            let one = match self.mrs.resolve_in_one_range(key, addr, len, ffi::FI_REMOTE_READ as u64) {
                Ok(one) => one,
                Err(errno) => {
                    self.answer(to, Err(errno));
                    return ReadAnswer::Queued;
                }
            };
            if let Some((at, mr)) = one {
                // SAFETY: registered memory the application exposed for remote reads, `len`
                // bytes at `at` (range checked by `resolve_in_one_range`).
                let copied =
                    |b: &mut [u8]| unsafe { smr_core::copy::copy_bytes(at as *const u8, b.as_mut_ptr(), b.len()) };
                if let Some(data) = AnswerData::new(len as usize, copied) {
                    sinks.remote_done(mr.read_cntr, false);
                    return ReadAnswer::With(data);
                }
            }
        }
        match remote.resolve(self.mrs, len, ffi::FI_REMOTE_READ as u64) {
            Ok((ranges, cntrs)) => {
                sinks.remote_done(cntrs.read, false);
                // Straight from the ranges (no iov built): a small read's whole cost is here.
                // SAFETY: registered memory the application exposed for remote reads.
                let gathered = |b: &mut [u8]| _ = unsafe { crate::iov::gather(&ranges, b) };
                if let Some(data) = AnswerData::new(len as usize, gathered) {
                    return ReadAnswer::With(data);
                }
                let data = match by {
                    // SAFETY: as above.
                    ReturnBy::AnswerBuf(buf) => return ReadAnswer::Into(buf, unsafe { crate::iov::lend(ranges) }),
                    ReturnBy::WriteBack(back) => {
                        // Once progress returns (the engine makes the copy); the registration is
                        // looked up again then, in case it closes before.
                        let req = WriteBack { to, op_id, at: remote.clone(), len, remote: back };
                        self.rma.outbox.push_back(Outgoing::WriteBack(req));
                        return ReadAnswer::Queued;
                    }
                    ReturnBy::Reply | ReturnBy::Pushed if (len as usize) <= READ_SNAPSHOT_MAX => {
                        let mut copy = vec![0; len as usize];
                        gathered(&mut copy);
                        ReplyData::Copy(copy)
                    }
                    ReturnBy::Reply | ReturnBy::Pushed => ReplyData::Memory(ranges),
                };
                let pull = by != ReturnBy::Pushed;
                self.rma.outbox.push_back(Outgoing::Reply { to, op_id, data, pull });
                ReadAnswer::Queued
            }
            Err(errno) => {
                self.answer(to, Err(errno));
                ReadAnswer::Queued
            }
        }
    }

    /// Apply an atomic whose operands are here (`payload`; None: they failed to arrive), and
    /// count it. Returns its answer, if its initiator waits for one.
    fn serve_atomic(
        &mut self,
        desc: Desc,
        target: &Ranges,
        mr_cntr: Option<usize>,
        reply: Option<AnswerTo>,
        payload: Option<&[u8]>,
        sinks: &mut Sinks,
    ) -> Option<Outgoing> {
        // A working copy of the target's values, on the stack for the usual small atomic; the
        // old values go straight into the answer when they fit one (the usual fetch).
        let n = desc.bytes();
        let (mut value_stack, mut value_heap) = ([0u8; ATOMIC_STACK], Vec::new());
        let value = scratch(n, &mut value_stack, &mut value_heap);
        let mut apply_into = |old: &mut [u8]| match payload {
            Some(bytes) => apply_atomic(desc, target, bytes, value, old),
            None => Err(ffi::FI_EIO),
        };
        let old_len = if desc.kind == Kind::Write { 0 } else { n };
        let mut applied = Err(ffi::FI_EIO);
        let mut old_heap = Vec::new();
        let answer = AnswerData::new(old_len, |old| applied = apply_into(old));
        if answer.is_none() {
            old_heap.resize(old_len, 0);
            applied = apply_into(&mut old_heap);
        }
        if applied.is_ok() {
            // The endpoint's counters follow fi_endpoint(3): a base atomic is a remote write, a
            // fetching or compare atomic a remote read. The registration's follow fi_mr(3): any
            // atomic that may modify it is a write (`mr_cntr`).
            sinks.remote_done(mr_cntr, desc.kind == Kind::Write);
        }
        let to = reply?;
        Some(match (applied, answer) {
            (Err(errno), _) => Outgoing::Answer { to, result: Err(errno) },
            (Ok(()), Some(data)) => Outgoing::AnswerData { to, data },
            (Ok(()), None) => {
                let op_id = payload.filter(|_| desc.with_op_id).and_then(|b| u64_at(b, 0)).unwrap_or(0);
                Outgoing::Reply { to, op_id, data: ReplyData::Copy(old_heap), pull: true }
            }
        })
    }

    /// Where operation `msg` lands: the header's key and address, or the list its source sent
    /// before it (`APP_SEGMENTED`), taken once. Refused (FI_EINVAL) when no list came.
    #[inline(always)]
    fn remote_of(&mut self, msg: &Incoming) -> Result<Remote, u32> {
        if msg.hdr.app & APP_SEGMENTED == 0 {
            return Ok(Remote::one_range(msg.hdr.tag, msg.hdr.aux));
        }
        self.rma.segments.remove(&msg.src).map(Remote::list).ok_or(ffi::FI_EINVAL)
    }

    /// A `KIND_SEGMENTS` command: keep its list for the source's next operation, in place of any
    /// left over. A malformed one is refused, and leaves none, so that the operation after it is
    /// refused too.
    #[cold]
    fn keep_segments(&mut self, msg: &Incoming, payload: &[u8]) -> Disposition {
        match segments::Segments::decode(payload).filter(|_| payload.len() as u64 == msg.hdr.len) {
            Some(list) => {
                self.rma.segments.insert(msg.src, Box::new(list));
                Disposition::Taken { answer_later: false }
            }
            None => {
                self.rma.segments.remove(&msg.src);
                refuse(msg, ffi::FI_EINVAL)
            }
        }
    }

    fn answer(&mut self, to: AnswerTo, result: Result<(), u32>) {
        self.rma.outbox.push_back(Outgoing::Answer { to, result });
    }
}

/// Whether a one-sided command whose payload is here in full is served in that step
/// (`Target::on_payload`): every write and atomic, and a read request of a plausible length.
#[inline(always)]
fn served_here(hdr: &MsgHeader) -> bool {
    let kind = kind_of(hdr.app);
    matches!(kind, KIND_WRITE | KIND_ATOMIC) || (kind == KIND_READ_REQ && ReadReq::plausible_len(hdr.len))
}

/// The operation an atomic's header names, decoded and checked against its payload's length.
#[inline(always)]
fn atomic_desc(hdr: &MsgHeader) -> Result<Desc, u32> {
    Desc::unpack(hdr.data).filter(|d| d.payload() as u64 == hdr.len).ok_or(ffi::FI_EINVAL)
}

/// Refuse a peer's operation (bad key, range, access or request). One its initiator completed
/// when it queued it (`Incoming::acked` false: FI_TRANSMIT_COMPLETE or FI_INJECT_COMPLETE)
/// reaches no completion there: say why here.
fn refuse(msg: &Incoming, errno: u32) -> Disposition {
    if !msg.acked {
        let h = msg.hdr;
        crate::warn!(
            EpData,
            "refused a one-sided operation (kind {}, key {:#x}, addr {:#x}, {} B) from source {}: {}; target memory \
             untouched; its initiator asked for transmit or inject completion and is not told",
            kind_of(h.app),
            h.tag,
            h.aux,
            h.len,
            msg.src,
            crate::core_api::errname(errno)
        );
    }
    Disposition::Refuse(errno)
}

/// A write's remote CQ data, if it carries any.
fn cq_data(hdr: &MsgHeader) -> Option<u64> {
    (hdr.app & crate::state::ep::sinks::APP_DATA != 0).then_some(hdr.data)
}

/// A peer's write landed: the remote counters count it, and its CQ data makes an entry.
fn written(sinks: &mut Sinks, mr_cntr: Option<usize>, data: Option<u64>, len: u64) {
    sinks.remote_done(mr_cntr, true);
    if let Some(data) = data {
        let flags = (ffi::FI_RMA | ffi::FI_REMOTE_WRITE) as u64 | ffi::FI_REMOTE_CQ_DATA as u64;
        let entry = crate::state::cq::Completion {
            flags,
            len: len as usize,
            data,
            ..crate::state::ep::sinks::ctx_completion(0, 0)
        };
        sinks.remote_cq(CqEvent::Done(entry));
    }
}

/// Target bytes of an atomic that `serve_atomic` works on in stack buffers (the heap beyond).
const ATOMIC_STACK: usize = 64;

/// A zeroed working buffer of `n` bytes: in `stack` when it fits, else in `heap`.
fn scratch<'a>(n: usize, stack: &'a mut [u8; ATOMIC_STACK], heap: &'a mut Vec<u8>) -> &'a mut [u8] {
    if n <= ATOMIC_STACK {
        &mut stack[..n]
    } else {
        heap.resize(n, 0);
        heap
    }
}

/// Apply an atomic to the target memory, with `value` (`desc.bytes()` long) as the working
/// copy; the old values go to `old` (empty for a base atomic).
fn apply_atomic(desc: Desc, target: &Ranges, payload: &[u8], value: &mut [u8], old: &mut [u8]) -> Result<(), u32> {
    let n = desc.bytes();
    let (operand, compare) = operands(desc, payload)?;
    // SAFETY: registered memory the application exposed for remote atomics (range checked by
    // `resolve`: `n` bytes); only this path and `Target::atomic_in_place`, under the domain
    // lock, change it on behalf of peers.
    let got = unsafe { crate::iov::gather(target, value) };
    if got != n || value.len() != n {
        return Err(ffi::FI_EINVAL);
    }
    apply::apply(desc.kind, desc.op, desc.datatype, value, operand, compare, old).map_err(|_| ffi::FI_EINVAL)?;
    if desc.op != ffi::FI_ATOMIC_READ {
        // SAFETY: as above; the same `n` bytes.
        unsafe { crate::iov::scatter(target, value) };
    }
    Ok(())
}

/// An atomic's operands and compare values in its payload (after the op id, if it carries
/// one), checked against what `desc` says they hold.
#[inline(always)]
pub(crate) fn operands(desc: Desc, payload: &[u8]) -> Result<(&[u8], &[u8]), u32> {
    let n = desc.bytes();
    let at = desc.id_bytes();
    let operands = if desc.op == ffi::FI_ATOMIC_READ { 0 } else { n };
    let operand = payload.get(at..at + operands).ok_or(ffi::FI_EINVAL)?;
    let compare = if desc.kind == Kind::Compare {
        payload.get(at + operands..at + operands + n).ok_or(ffi::FI_EINVAL)?
    } else {
        &[]
    };
    Ok((operand, compare))
}
