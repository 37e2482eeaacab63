//! Which way a read or write sent alone goes when the target published the registration: the
//! ordinary way through the target (an answer into our buffer for a read; its SAR buffers or its
//! CMA pull for a write), or one `process_vm_readv`/`process_vm_writev` of ours, complete when
//! the call returns. Learnt from the operations themselves, one chooser for reads and one for
//! writes.
//!
//! "Alone": nothing else of the initiator's outstanding, nothing started since the application
//! last polled, and no FI_MORE, as an OpenSHMEM put or get followed by its wait, or a
//! ping-pong. Streams keep the ordinary way, where both CPUs copy at once (`rma.rs` in the
//! provider has the figures); an operation alone pays for the whole of that way's latency, two
//! copies and a round trip, against one system call. Neither wins on every host: on the Intel
//! host of 2026-12-01, in its slow state, a write of 8 KiB alone took 2.9-3.1 us through the
//! target's SAR buffers and 1.2-1.3 by our own CMA write, where the system call costs 1.5-2 us on
//! hosts before (docs/perf/protocols.md).
//!
//! Both ways are timed by the initiator, as latency (the operation is alone, so nothing else is
//! in the span): our CMA copy around its call, the ordinary way from the start to its answer,
//! which the provider reports once the answer came (`Via::Sar`). The read chooser of
//! `read_way.rs` compares copying time instead, which is what streams of reads pay.
//!
//! The ordinary way, timed in turn with CMA copies while a chooser learns, costs more than in a
//! row (its buffers and the target's caches cold): SOS puts of 8 KiB 3.9-7 us against 2.9-3.1,
//! of 256 KiB 61-132 us against 10-13. So the provider asks only where our copy wins by more
//! than that: reads up to its one-trip size (16 KiB), writes up to 64 KiB (`LONE_WRITE_MAX` in
//! the provider has the figures).

use super::measured::{Choice, Chooser, Via, TIMED_ONE_IN};
use super::Endpoint;

/// The two kinds of operation sent alone, each with a chooser of its own (their ways cost
/// differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lone {
    Read = 0,
    Write = 1,
}

impl Endpoint {
    /// How to make a `kind` of `len` bytes sent alone, on a registration the target published:
    /// `Via::Cma` for ours, `Via::Sar` for the ordinary way. None when measuring is off (the
    /// caller's fixed rule then: the ordinary way).
    pub fn choose_lone(&mut self, kind: Lone, len: usize) -> Option<Choice> {
        if !self.params.measure_protocol {
            return None;
        }
        self.lone_chooser(kind, len).choose(len as u64)
    }

    /// A `kind` of `len` bytes sent alone by `choice` took `ns`, start to completion.
    pub fn learn_lone(&mut self, kind: Lone, choice: Choice, len: usize, ns: u64) {
        self.lone_chooser(kind, len).learn(choice, len as u64, ns);
    }

    /// Whether the operations of `kind` and `len` bytes sent alone settled on our own CMA copy
    /// (`Chooser::settled_on`): what others of that kind may follow, untimed (writes to a target
    /// busy with its own operations). False before any was sent alone.
    pub fn lone_settled_on_cma(&self, kind: Lone, len: usize) -> bool {
        self.lone_choosers.as_ref().is_some_and(|c| c[chooser_of(kind, len)].settled_on(Via::Cma, len as u64))
    }

    /// The chooser of `kind` and `len`, made at the first operation alone.
    fn lone_chooser(&mut self, kind: Lone, len: usize) -> &mut Chooser {
        &mut self
            .lone_choosers
            .get_or_insert_with(|| Box::new(core::array::from_fn(|_| Chooser::sampling(TIMED_ONE_IN))))
            [chooser_of(kind, len)]
    }
}

/// Reads sent alone of up to this size have a chooser of their own: the target's answer costs
/// them about as much as a copy out of a buffer of ours (0.7-1.3 us here), where our CMA read
/// costs a system call whatever the size; larger ones share the smallest size class of the
/// chooser (to 8 KiB) with reads whose answer costs more. Learnt apart, each settles on its own
/// winner on a host where the two differ.
pub const SMALL_READ_TOP: usize = 2048;

/// Writes sent alone of up to this size (an inject buffer's) have a chooser of their own too:
/// the ordinary way takes them through one of the target's inject buffers, copied in and out
/// (SOS puts of 4 KiB, 1.1-1.2 us on the Intel host of 2026-12-06, slower than its 8 KiB ones by
/// our copy), where larger ones, in the same smallest size class, go through SAR.
pub const SMALL_WRITE_TOP: usize = 4096;

/// How many lone choosers an endpoint has (`chooser_of`).
pub const CHOOSERS: usize = 4;

/// Which of the endpoint's lone choosers decides a `kind` of `len` bytes.
fn chooser_of(kind: Lone, len: usize) -> usize {
    match kind {
        Lone::Read if len <= SMALL_READ_TOP => 2,
        Lone::Write if len <= SMALL_WRITE_TOP => 3,
        _ => kind as usize,
    }
}
