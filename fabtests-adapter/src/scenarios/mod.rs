//! The scenarios, modelled on fabtests' coverage. Each is a function run by every rank of its
//! process group; ranks talk out of band through `Rank::pmi`.

mod access;
mod all_memory;
mod atomic;
mod churn;
mod completion;
mod counted;
mod counters;
mod errors;
mod kill;
mod lone;
mod multi;
mod pair;
mod passive;
mod passive_write;
mod progress;
mod rma;
mod rma_util;
mod segments;
mod shared_wait;
pub use churn::child_main as churn_child_main;
mod unit;
mod wait_fd;

use crate::harness::{Completion, Node, NodeCfg, Rank, TResult, Tx};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub struct Scenario {
    pub name: &'static str,
    /// Processes (ranks) it runs on.
    pub nprocs: usize,
    /// Deadline for the whole scenario (the coordinator kills it after that).
    pub timeout: Duration,
    pub run: fn(&mut Rank) -> TResult,
    pub about: &'static str,
}

pub(crate) const fn scn(
    name: &'static str,
    nprocs: usize,
    secs: u64,
    run: fn(&mut Rank) -> TResult,
    about: &'static str,
) -> Scenario {
    Scenario { name, nprocs, timeout: Duration::from_secs(secs), run, about }
}

pub fn all() -> Vec<Scenario> {
    let mut v = Vec::new();
    v.extend(unit::scenarios());
    v.extend(churn::scenarios());
    v.extend(pair::scenarios());
    v.extend(completion::scenarios());
    v.extend(multi::scenarios());
    v.extend(errors::scenarios());
    v.extend(rma::scenarios());
    v.extend(segments::scenarios());
    v.extend(passive::scenarios());
    v.extend(passive_write::scenarios());
    v.extend(lone::scenarios());
    v.extend(atomic::scenarios());
    v.extend(access::scenarios());
    v.extend(all_memory::scenarios());
    v.extend(counters::scenarios());
    v.extend(counted::scenarios());
    v.extend(progress::scenarios());
    v.extend(wait_fd::scenarios());
    v.extend(shared_wait::scenarios());
    v.extend(kill::scenarios());
    v
}

pub fn find(name: &str) -> Option<Scenario> {
    all().into_iter().find(|s| s.name == name)
}

/// rshm's largest inline payload (smr_core::cmd::INLINE_MAX; this crate tests through
/// libfabric only, so the number is written here).
pub const INLINE_MAX: usize = 1032;

/// Message sizes of the ping-pong tests: around the inline, inject and CMA/SAR boundaries.
pub const SIZES: &[usize] = &[0, 1, 200, INLINE_MAX, INLINE_MAX + 1, 4096, 4097, 65536, 1 << 20, 16 << 20];

/// Seed for the data of one message.
pub fn seed(a: u64, b: u64, c: u64) -> u64 {
    a.wrapping_mul(0x1_0000_0001).wrapping_add(b.wrapping_mul(0x9E37)).wrapping_add(c << 40)
}

/// Open a node and exchange addresses with every rank; returns the node and fi_addrs by rank.
pub fn setup(r: &mut Rank, cfg: &NodeCfg) -> TResult<(Node, Vec<u64>)> {
    // A rank whose open fails exits at once; the coordinator then aborts the others' exchange.
    let mut node = Node::open(&r.prov, cfg, r.timeout)?;
    r.pmi.step("exchange addresses");
    let addrs = node.exchange(r)?;
    Ok((node, addrs))
}

/// The closing barrier of a multi-process scenario (keeps the node progressing meanwhile), then
/// the check that nothing is left: every completion read was taken by the scenario, and the CQs
/// are empty (a stray or duplicate completion fails the scenario).
pub fn finish(r: &mut Rank, node: &mut Node) -> TResult {
    r.pmi.barrier_with(&mut node.progressor())?;
    node.check_drained()
}

/// Wait for op `id` on `a` while also progressing `b` (two endpoints in one process).
pub fn wait2(a: &mut Node, b: &mut Node, id: u64) -> TResult<Completion> {
    let deadline = Instant::now() + a.timeout;
    loop {
        if let Some(c) = a.poll_op(id)? {
            return Ok(c);
        }
        b.progress()?;
        if Instant::now() > deadline {
            bail!("timeout ({:?}) waiting for op {id}", a.timeout);
        }
        std::thread::yield_now();
    }
}

/// Send from `a` while also progressing `b` (two endpoints in one process: the first send to a
/// peer may need the peer's progress, e.g. for a connection handshake).
pub fn send2(a: &mut Node, b: &mut Node, payload: &[u8], dest: u64, tx: &Tx) -> TResult<u64> {
    a.send_with(payload, dest, tx, &mut b.progressor())
}

/// Check a receive completion's basic fields.
pub fn check_recv(c: &Completion, what: &str, len: usize, tagged: bool) -> TResult {
    c.ok(what)?;
    use crate::fabric::ffi;
    ensure!(c.flags & ffi::FI_RECV as u64 != 0, "{what}: completion flags {:#x} lack FI_RECV", c.flags);
    let kind = if tagged { ffi::FI_TAGGED as u64 } else { ffi::FI_MSG as u64 };
    ensure!(
        c.flags & kind != 0,
        "{what}: completion flags {:#x} lack {}",
        c.flags,
        if tagged { "FI_TAGGED" } else { "FI_MSG" }
    );
    ensure!(c.len == len, "{what}: completion len {} != {len}", c.len);
    Ok(())
}

/// Check a send completion's basic fields.
pub fn check_send(c: &Completion, what: &str) -> TResult {
    c.ok(what)?;
    use crate::fabric::ffi;
    ensure!(c.flags & ffi::FI_SEND as u64 != 0, "{what}: send completion flags {:#x} lack FI_SEND", c.flags);
    Ok(())
}
