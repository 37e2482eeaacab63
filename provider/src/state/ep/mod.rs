//! One endpoint's state behind the domain lock (`EpState`): its engine endpoint, peers,
//! receives, transmit records and one-sided operations, and one progress pass over it
//! (`EpState::drive`), which the progress module runs for whoever polls.

pub mod idle;
pub mod published;
pub mod read_req;
pub mod replies;
pub mod rma;
pub mod rx;
pub mod sinks;
pub mod tx;

use crate::error::{FiError, FiResult};
use crate::state::av::AvState;
use crate::state::cntr::CntrState;
use crate::state::cq::{CqState, Reader};
use crate::state::mr::MrTable;
use rma::RmaState;
use rshm_ffi as ffi;
use rx::RxState;
use sinks::{Bindings, Bound, Sinks};
use slab::Slab;
use smr_core::endpoint::{Endpoint, PeerId, WaitHandle};
use tx::TxOp;

pub struct EpState {
    pub engine: Option<Endpoint>,
    pub name: String,
    pub caps: u64,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub av: Option<usize>,
    pub bindings: Bindings,
    pub bound: Bound,
    /// fi_addr -> engine peer, filled on first send (fi_addrs are dense AV indices).
    pub peers: Vec<Option<PeerId>>,
    /// Sender (engine source id) -> its name and fi_addr, for FI_SOURCE and directed receives.
    pub src_addrs: Vec<Option<rx::SourceAddr>>,
    pub rx: RxState,
    pub tx_ops: Slab<TxOp>,
    pub rma: RmaState,
    pub tx_size: usize,
    pub rx_size: usize,
    /// Progress passes over this endpoint, by anyone: an auto-progress thread standing aside
    /// while the application polls still drives the endpoints whose count did not move.
    pub driven: u64,
    /// Passes that found nothing, in a row (`idle::IdleStreak`).
    pub idle: idle::IdleStreak,
    /// The registrations this endpoint published in its engine's MR table
    /// (`crate::ep::published::sync`), and where peers' copies of them count.
    pub published: published::Publications,
}

impl EpState {
    /// The engine peer of fi_addr `dest`: one load once known (inline on every send path).
    #[inline(always)]
    pub fn peer_for(&mut self, avs: &Slab<AvState>, dest: u64) -> FiResult<PeerId> {
        match self.peers.get(dest as usize) {
            Some(&Some(p)) => Ok(p),
            _ => self.peer_first_use(avs, dest),
        }
    }

    /// `peer_for` of an fi_addr not used yet: look its name up in the AV and add the peer.
    #[cold]
    fn peer_first_use(&mut self, avs: &Slab<AvState>, dest: u64) -> FiResult<PeerId> {
        let ep = self;
        let av = ep.av.and_then(|a| avs.get(a)).ok_or(FiError::NOAV)?;
        let name = av.name(dest).ok_or_else(|| {
            crate::warn!(EpData, "send to fi_addr {dest}, which is not in the AV");
            FiError::ADDRNOTAVAIL
        })?;
        let engine = ep.engine.as_mut().ok_or(FiError::NOTCONN)?;
        let peer = engine.add_peer(name).map_err(FiError::from)?;
        let at = dest as usize;
        if ep.peers.len() <= at {
            ep.peers.resize(at + 1, None);
        }
        ep.peers[at] = Some(peer);
        Ok(peer)
    }

    /// Transmit operations started and not yet complete: those with a record in `tx_ops`, and
    /// acknowledged ones that keep none (`rma::COOKIE_UNTRACKED`).
    #[inline(always)]
    pub fn tx_outstanding(&self) -> usize {
        self.tx_ops.len() + self.rma.untracked
    }

    pub fn directed(&self) -> bool {
        self.caps & ffi::FI_DIRECTED_RECV != 0
    }

    /// Drive this endpoint once; returns how many events it handled.
    /// Completions for the CQ that `reader` reads go into its array while they can.
    pub fn drive(
        &mut self,
        cqs: &mut Slab<CqState>,
        cntrs: &mut Slab<CntrState>,
        reader: Option<&mut Reader>,
        avs: &Slab<AvState>,
        mrs: &MrTable,
    ) -> usize {
        let ep = self;
        ep.driven = ep.driven.wrapping_add(1);
        let directed = ep.directed();
        let idle = ep.tx_outstanding() == 0;
        let Some(engine) = ep.engine.as_mut() else { return 0 };
        let issued = ep.rma.issued_since_last_poll();
        // Peers' CMA copies of our registrations that counters count, made without us: events of
        // the pass, so that a progress thread that took some polls on rather than sleeping at
        // once (the next copy's wake-up would cost its writer a system call).
        let counted = ep.published.take_counts(engine, cntrs);
        // Peers see that we progress (they may ask us for reads we answer at once), and whether
        // with nothing of ours outstanding or started for a while (they may hand us copying):
        // `Endpoint::peer_progresses`, `Endpoint::peer_is_free`.
        engine.note_poll(ep.rma.poll_is_free(idle && !issued));
        if ep.driven.is_multiple_of(POLLS_PER_YIELD) {
            idle::yield_cpu();
        }
        // An application that started something since the last pass does not wait for a peer,
        // even if nothing arrived: an operation complete within its call (an atomic with
        // FI_TRANSMIT_COMPLETE, a write copied by CMA) is polled for at once.
        let posted = issued || engine.sent_since_poll();
        if !engine.has_work() && !ep.rma.has_outgoing() {
            if posted || counted > 0 {
                ep.idle.worked();
            } else {
                ep.idle.idle();
            }
            return counted; // the idle poll: no handler to build
        }
        ep.idle.worked();
        let av = ep.av.and_then(|a| avs.get(a));
        let mut handler = rx::Handler {
            rx: &mut ep.rx,
            tx_ops: &mut ep.tx_ops,
            target: rma::Target { rma: &mut ep.rma, mrs },
            sinks: Sinks { cqs, cntrs, b: &ep.bindings, reader },
            av,
            src_addrs: &mut ep.src_addrs,
            directed,
        };
        let events = engine.progress(&mut handler);
        if ep.rma.has_outgoing() {
            rma::flush(&mut ep.rma, engine, mrs);
        }
        events + counted
    }

    /// Something to sleep on for this endpoint, once enabled.
    pub fn wait_handle(&self) -> Option<WaitHandle> {
        self.engine.as_ref().map(|e| e.wait_handle())
    }

    /// A registration over `iov` was closed: read replies still going out of its memory through
    /// SAR take a copy of what they have not sent yet (`rma::detach_replies`), and writes still
    /// arriving into it stop (`rma::refuse_writes_into`).
    pub fn registration_closed(&mut self, iov: &[(usize, usize)]) {
        let Some(engine) = self.engine.as_mut() else { return };
        let n = rma::detach_replies(&mut self.rma, engine, iov);
        if n > 0 {
            crate::info!(Mr, "fi_close(mr): {n} read replies in flight took a copy of its memory");
        }
        let n = rma::refuse_writes_into(&mut self.rma, engine, iov);
        if n > 0 {
            crate::info!(Mr, "fi_close(mr): {n} writes still arriving into it fail at their initiators");
        }
    }

    /// The AV bound to it changed: forget cached peers, and give held messages from senders
    /// it did not know the fi_addr they have now.
    pub fn av_changed(&mut self, av: &AvState) {
        self.peers.clear();
        self.src_addrs.clear();
        self.rx.resolve_senders(av);
    }
}

/// Progress passes over an endpoint between two yields of the CPU (`sched_yield`). A process
/// that spins waiting on a peer then hands its CPU to a runnable process now and then: on a node
/// with more polling processes than CPUs (SOS's tests at 4 PEs on 2 CPUs), the peer it waits for
/// may be the one waiting for that CPU, and without the yield it runs only when the scheduler's
/// time slice (milliseconds) ends: SOS `lfinc` at 4 PEs took from 1 s to beyond 5 minutes.
/// Every pass, not only idle ones, counts: a process waiting for its own answer keeps serving
/// its other peers' requests, so its passes are rarely idle (yielding after 1,024 idle passes in
/// a row fired 16 times in a whole `lfinc` run). With a CPU per process nothing else is runnable
/// and the call returns at once: one system call per 1,024 passes, which costs a tagged 8 B
/// ping-pong about 0.01 us one-way here (0.36 us). Fewer yields leave an oversubscribed node
/// slower in proportion (`lfinc` at 4 PEs: 1.2-2.2 s every 1,024 passes, 5.6 s every 2,048,
/// 10.6 s every 4,096). A blocking wait also yields between its polls once a few microseconds
/// passed without progress (`progress::between_polls`): it knows it waits, where a pass does not.
/// A caller that waits by polling yields once every 64 idle passes in a row after those
/// microseconds too (`idle::IdleStreak`): idle passes in a row are the sign it waits. None of
/// these yields happen for a while after one that a process not of ours kept for long
/// (`idle::yield_cpu`): that process would take a whole time slice at each.
const POLLS_PER_YIELD: u64 = 1024;
