//! Which way a write sent alone goes when the target published the registration: the ordinary
//! way through the target (its SAR buffers, or its CMA pull), or one `process_vm_writev` of
//! ours into the registration, complete when the call returns. Learnt from the writes
//! themselves.
//!
//! "Alone": nothing else of the initiator's outstanding, and no FI_MORE, as an OpenSHMEM put
//! followed by `shmem_quiet`, or fi_rma_pingpong. A stream of writes keeps the ordinary way,
//! where both CPUs copy at once (`rma.rs` in the provider has the figures); a write alone pays
//! for the whole of that way's latency, two copies and a round trip, against one system call.
//! Neither wins on every host: on the Intel host of 2026-12-01, in its slow state, a write of
//! 8 KiB alone took 2.9-3.1 us through the target's SAR buffers and 1.2-1.3 by our own CMA
//! write, where the system call costs 1.5-2 us on hosts before (docs/perf/protocols.md).
//!
//! Both ways are timed by the initiator, as latency (the write is alone, so nothing else is in
//! the span): our CMA write around its call (`learn_lone_write`), the ordinary way from the
//! start to its answer, which the provider reports here once its answer came (`Via::Sar`).

use super::measured::Choice;
use super::Endpoint;

impl Endpoint {
    /// How to make a write of `len` bytes sent alone, to a registration the target published:
    /// `Via::Cma` for ours, `Via::Sar` for the ordinary way. None when measuring is off (the
    /// caller's fixed rule then: the ordinary way).
    pub fn choose_lone_write(&mut self, len: usize) -> Option<Choice> {
        if !self.params.measure_protocol {
            return None;
        }
        self.write_chooser.choose(len as u64)
    }

    /// A write of `len` bytes sent alone by `choice` took `ns`, start to completion.
    pub fn learn_lone_write(&mut self, choice: Choice, len: usize, ns: u64) {
        self.write_chooser.learn(choice, len as u64, ns);
    }

    /// Tests: timed lone writes of `len` bytes so far, (ordinary, CMA).
    #[cfg(test)]
    pub fn lone_write_answers(&self, len: usize) -> (u32, u32) {
        self.write_chooser.answers(len as u64)
    }
}
