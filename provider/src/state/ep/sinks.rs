//! Where an endpoint's completions go: the CQs and counters it is bound to (`Bindings`), borrowed
//! from the domain state while it reports (`Sinks`), and the provider's bits in a message's
//! `app` byte.

use crate::state::cntr::CntrState;
use crate::state::cq::{Completion, CqEvent, CqState, Reader};
use rshm_ffi as ffi;
use slab::Slab;

/// The provider's bits in the engine's opaque `app` byte.
pub const APP_TAGGED: u8 = 1;
pub const APP_DATA: u8 = 2;

/// Where an endpoint's completions go.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bindings {
    pub tx_cq: Option<usize>,
    pub tx_selective: bool,
    pub rx_cq: Option<usize>,
    pub rx_selective: bool,
    pub send_cntr: Option<usize>,
    pub recv_cntr: Option<usize>,
    /// FI_WRITE / FI_READ: this endpoint's RMA writes (and atomics) / reads (and fetches).
    pub write_cntr: Option<usize>,
    pub read_cntr: Option<usize>,
    /// FI_REMOTE_WRITE / FI_REMOTE_READ: peers' writes and atomics into / reads from us.
    pub remote_write_cntr: Option<usize>,
    pub remote_read_cntr: Option<usize>,
}

impl Bindings {
    /// The counter a transmit operation of `kind` counts on.
    pub fn tx_cntr(&self, kind: TxKind) -> Option<usize> {
        match kind {
            TxKind::Send => self.send_cntr,
            TxKind::Write => self.write_cntr,
            TxKind::Read => self.read_cntr,
        }
    }
}

/// Everything bound to an endpoint, so closing it unbinds all of it.
#[derive(Debug, Default)]
pub struct Bound {
    pub cqs: Vec<usize>,
    pub cntrs: Vec<usize>,
}

/// CQs and counters an endpoint reports into, borrowed from the domain state.
pub struct Sinks<'a> {
    pub cqs: &'a mut Slab<CqState>,
    pub cntrs: &'a mut Slab<CntrState>,
    pub b: &'a Bindings,
    /// The array of the fi_cq_read driving this pass, if any (`Reader`).
    pub reader: Option<&'a mut Reader>,
}

impl<'a> Sinks<'a> {
    /// Sinks outside a CQ read's pass: every completion is queued.
    pub fn new(cqs: &'a mut Slab<CqState>, cntrs: &'a mut Slab<CntrState>, b: &'a Bindings) -> Sinks<'a> {
        Sinks { cqs, cntrs, b, reader: None }
    }

    // Forced inline: the event is built in the caller and would otherwise be copied on each of
    // the two calls down to the queue.
    #[inline(always)]
    fn report(&mut self, cq: Option<usize>, cntr: Option<usize>, event: CqEvent, wanted: bool) {
        if crate::core_api::debug_enabled() {
            log_completion(event, wanted, cq, cntr);
        }
        let failed = matches!(event, CqEvent::Failed { .. });
        if let Some(c) = cntr.and_then(|id| self.cntrs.get_mut(id)) {
            c.count(failed);
        }
        if failed || wanted {
            if let Some(id) = cq {
                self.complete_on(id, event);
            }
        }
    }

    /// Queue `event` on CQ `id`, or, for a success that nothing queued precedes, hand it to
    /// the reader of that CQ while its array has room.
    #[inline(always)]
    fn complete_on(&mut self, id: usize, event: CqEvent) {
        let Some(q) = self.cqs.get_mut(id) else { return };
        if let (Some(r), CqEvent::Done(c)) = (self.reader.as_deref_mut(), &event) {
            if r.cq == id && r.put(q, c) {
                return;
            }
        }
        q.push(event);
    }

    /// A transmit operation finished; `wanted` is false for injects and unselected selective
    /// completions.
    #[inline(always)]
    pub fn tx_done(&mut self, event: CqEvent, wanted: bool, kind: TxKind) {
        self.report(self.b.tx_cq, self.b.tx_cntr(kind), event, wanted);
    }

    /// A peer's write or atomic (`write`) or read landed: the endpoint's remote counter and the
    /// registration's own counter (`fi_mr_bind`) count it.
    pub fn remote_done(&mut self, mr_cntr: Option<usize>, write: bool) {
        let ep_cntr = if write { self.b.remote_write_cntr } else { self.b.remote_read_cntr };
        crate::state::cntr::count_remote(self.cntrs, ep_cntr, mr_cntr, 1);
    }

    /// A remote write with CQ data: an entry on the receive CQ.
    pub fn remote_cq(&mut self, event: CqEvent) {
        if let Some(id) = self.b.rx_cq {
            self.complete_on(id, event);
        }
    }

    #[inline(always)]
    pub fn recv_done(&mut self, event: CqEvent, wanted: bool) {
        let (cq, cntr) = (self.b.rx_cq, self.b.recv_cntr);
        self.report(cq, cntr, event, wanted);
    }
}

/// The debug line of a completion, out of line and given copies: a `debug!` in `report` took
/// references to the event, which kept the compiler from holding it in registers (it was
/// stored to the stack and read back on every message, logging on or off).
#[cold]
#[inline(never)]
fn log_completion(event: CqEvent, wanted: bool, cq: Option<usize>, cntr: Option<usize>) {
    crate::debug!(EpData, "completion {event:?} wanted {wanted} cq {cq:?} cntr {cntr:?}");
}

/// Which counter a transmit operation bumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxKind {
    Send,
    Write,
    Read,
}

/// A completion entry with just a context and flags.
pub fn ctx_completion(ctx: usize, flags: u64) -> Completion {
    Completion { op_context: ctx, flags, src: ffi::FI_ADDR_NOTAVAIL, ..Completion::default() }
}
