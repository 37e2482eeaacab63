//! How one-sided operations complete at the initiator: a reply's data delivered, an answer's
//! bytes taken, an answer (or a dead target) completing the operation, and operations that
//! completed within their call.

use super::*;

/// The initiator side of `on_recv_done`: a reply's data arrived for op `op_id`.
pub fn reply_delivered(
    rma: &mut RmaState,
    tx_ops: &mut Slab<TxOp>,
    op_id: u64,
    result: smr_core::Result<usize>,
    sinks: &mut Sinks,
) {
    let Some(p) = rma.pending.get_mut(op_id) else { return };
    p.got = Some(result);
    if p.answered {
        finish(rma, tx_ops, op_id, Ok(()), sinks);
    }
}

/// The initiator side of `on_send_answer`: the target answered the operation in tx slot `slot`
/// with its reply's bytes (small reads, fetching atomics; in parts when they span answer
/// buffers); `answered` follows.
pub fn answer_data(rma: &mut RmaState, tx_ops: &mut Slab<TxOp>, slot: usize, parts: &[&[u8]]) {
    // The length is the target's word: checked before a byte reaches the user's buffer.
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let op_id = match tx_ops.get_mut(slot).map(|op| &mut op.returns) {
        Some(Returns::Answer { addr, len, taken, got: got @ None }) => {
            let fits = total == *len as usize;
            if fits {
                // SAFETY: the application's result buffer of `len` bytes at `addr` (one range,
                // the whole result), which it leaves alone until the operation completes; the
                // parts add up to `len`.
                unsafe { copy_after(parts, *taken as usize, *addr as *mut u8) };
            }
            *got = Some(fits);
            return;
        }
        Some(&mut Returns::Reply(op_id)) => op_id,
        _ => return,
    };
    let Some(p) = rma.pending.get_mut(op_id) else { return };
    if let Some(dest) = p.dest.take() {
        p.got = Some(if total == p.want {
            // SAFETY: the application's result buffer, which it leaves alone until the operation
            // completes.
            Ok(unsafe { crate::iov::scatter_parts(&dest, parts) })
        } else {
            Err(EngineError::Corrupt("answer of the wrong length"))
        });
    }
}

/// The initiator side of `on_send_answer_part`: the first bytes of the answer to the operation
/// in tx slot `slot` are in (`parts`, from the answer's start), and the rest follows. Those not
/// copied out yet go to the caller's buffer now, while the target copies in the rest; the whole
/// answer (`answer_data`) then leaves only its tail to copy. A reply into several ranges
/// (`Returns::Reply`) waits for the whole answer.
pub fn answer_part(tx_ops: &mut Slab<TxOp>, slot: usize, parts: &[&[u8]]) {
    let Some(Returns::Answer { addr, len, taken, got: None }) = tx_ops.get_mut(slot).map(|op| &mut op.returns) else {
        return;
    };
    // The target's word again: a prefix longer than the result, or one we have, is ignored (the
    // whole answer's length is checked when it comes).
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if total <= *len as usize && total > *taken as usize {
        // SAFETY: as in `answer_data`: `total <= len` bytes of the caller's result buffer.
        unsafe { copy_after(parts, *taken as usize, *addr as *mut u8) };
        *taken = total as u32;
    }
}

/// Copy the bytes of `parts` after the first `skip` to the same places in `dst`.
///
/// # Safety
/// `dst` must be valid for writes of as many bytes as `parts` hold together.
unsafe fn copy_after(parts: &[&[u8]], mut skip: usize, dst: *mut u8) {
    let mut at = 0;
    for part in parts {
        let from = skip.min(part.len());
        skip -= from;
        // SAFETY: `at + part.len()` is at most the parts' total, which `dst` holds (the caller's
        // promise).
        unsafe { smr_core::copy::copy_bytes(part[from..].as_ptr(), dst.add(at + from), part.len() - from) };
        at += part.len();
    }
}

/// The initiator side of `on_send_done` for a one-sided operation in tx slot `slot`: its answer
/// arrived. Reads complete when their data has arrived too.
pub fn answered(
    rma: &mut RmaState,
    tx_ops: &mut Slab<TxOp>,
    slot: usize,
    result: smr_core::Result<()>,
    sinks: &mut Sinks,
) {
    rma.lone.answered(slot, result.is_ok());
    let op_id = match tx_ops.get(slot).map(|op| op.returns) {
        Some(Returns::Reply(op_id)) => op_id,
        other => {
            super::super::tx::send_finished(tx_ops, slot, result.and(answer_bytes(other)), sinks);
            return;
        }
    };
    match rma.pending.get_mut(op_id) {
        // The target wrote the bytes into our buffer before it answered.
        Some(p) if result.is_ok() && p.got.is_none() && p.write_back => {
            p.got = Some(Ok(p.want));
            finish(rma, tx_ops, op_id, Ok(()), sinks);
        }
        Some(p) if result.is_ok() && p.got.is_none() => p.answered = true,
        Some(_) => finish(rma, tx_ops, op_id, result, sinks),
        None => super::super::tx::send_finished(tx_ops, slot, result, sinks),
    }
}

/// Whether an operation that keeps no reply record got what it waits for with its answer:
/// nothing, or its bytes in full (`answer_data` checked their length).
fn answer_bytes(returns: Option<Returns>) -> smr_core::Result<()> {
    match returns {
        Some(Returns::Answer { got: Some(false), .. }) => Err(EngineError::Corrupt("answer of the wrong length")),
        Some(Returns::Answer { got: None, .. }) => Err(EngineError::Corrupt("answered without a reply")),
        _ => Ok(()),
    }
}

fn finish(rma: &mut RmaState, tx_ops: &mut Slab<TxOp>, op_id: u64, answer: smr_core::Result<()>, sinks: &mut Sinks) {
    let Some(p) = rma.pending.remove(op_id) else { return };
    let result = match (answer, p.got) {
        (Err(e), _) | (Ok(()), Some(Err(e))) => Err(e),
        (Ok(()), Some(Ok(n))) if n == p.want => Ok(()),
        (Ok(()), Some(Ok(_))) => Err(EngineError::Corrupt("reply of the wrong length")),
        (Ok(()), None) => Err(EngineError::Corrupt("answered without a reply")),
    };
    super::super::tx::send_finished(tx_ops, p.slot, result, sinks);
}

/// The initiator side of `on_send_done` for an untracked operation (`cookie`): its answer
/// arrived, or its target died.
pub fn untracked_done(rma: &mut RmaState, cookie: u64, result: smr_core::Result<()>, sinks: &mut Sinks) {
    rma.untracked = rma.untracked.saturating_sub(1);
    let class = if cookie & UNTRACKED_ATOMIC != 0 { ffi::FI_ATOMIC } else { ffi::FI_RMA };
    let entry = super::super::sinks::ctx_completion(0, (class | ffi::FI_WRITE) as u64);
    let event = match result {
        Ok(()) => CqEvent::Done(entry),
        Err(e) => CqEvent::Failed { entry, err: FiError::from(e).0, olen: 0 },
    };
    sinks.tx_done(event, false, super::super::sinks::TxKind::Write);
}

/// Report an operation that completed within its call, unless nothing would see it (an inject
/// with no counter).
pub(crate) fn done_at_once(sinks: &mut super::super::sinks::Sinks, ctx: usize, tx: &TxOp) {
    let kind = tx.kind();
    if tx.wanted() || sinks.b.tx_cntr(kind).is_some() {
        sinks.tx_done(CqEvent::Done(super::super::sinks::ctx_completion(ctx, tx.flags())), tx.wanted(), kind);
    }
}
