//! Operations with several remote ranges (fi_rma(3), fi_atomic(3): `rma_iov_count` up to the
//! endpoint's rma_iov_limit), each range in one of two registrations of the target:
//! - fi_writemsg of 2 to 4 ranges, 3 B to 300 KB (inline, inject, CMA and SAR sizes), some with
//!   remote CQ data: every byte where its range says and none outside, one FI_REMOTE_WRITE count
//!   and one remote CQ entry per operation;
//! - fi_readmsg of the same ranges into 2 local buffers: the bytes, one FI_REMOTE_READ count per
//!   operation;
//! - fi_atomicmsg and fi_fetch_atomicmsg FI_SUM uint64 over 2 element arrays in the two
//!   registrations: the old values and the sums;
//! - a write (FI_DELIVERY_COMPLETE) with one range under a key nobody registered: an error
//!   completion, and none of its ranges written (the C shm 1.17 completes it without error).
//!
//! Rank 1 is the target; ranks 0 and 2 initiate at once, each into its own half of both
//! registrations, so that the target takes each source's ranges for that source's operations
//! while the two interleave. "Not supported" where rma_iov_limit is below 2.

use super::passive_write::same;
use super::rma::chunks;
use super::rma_util::{
    must, payload, split, Peer, Spec, Target, ATOMIC, COMPLETION, DELIVERY_COMPLETE, MSG, REMOTE_CQ_DATA, REMOTE_READ,
    REMOTE_WRITE, RMA, RMA_EVENT, SCALABLE,
};
use super::{scn, seed, Scenario};
use crate::ensure;
use crate::fabric::{self, ffi};
use crate::harness::{pattern, Rank, TResult, TestErr};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::Duration;

pub fn scenarios() -> Vec<Scenario> {
    vec![scn(
        "rma/segments",
        3,
        60,
        segments,
        "fi_writemsg/fi_readmsg/fi_atomicmsg/fi_fetch_atomicmsg with 2-4 remote ranges in two registrations: bytes, \
         one remote count and one remote CQ entry per operation, a bad key refused with nothing written",
    )]
}

const TARGET: usize = 1;
const KEYS: [u64; 2] = [0x5E6A, 0x5E6B];
const BAD_KEY: u64 = 0x5E6F;
/// Each registration's size: a half for each initiator.
const REGION: usize = 1 << 20;
const INITIATORS: usize = 2;
/// Untouched bytes between ranges.
const GAP: usize = 64;

/// One write's remote ranges: (registration 0 or 1, offset, length).
struct Case {
    total: usize,
    /// Seed of its bytes.
    pattern: u64,
    ranges: Vec<(usize, usize, usize)>,
    /// Remote CQ data, if it carries any.
    data: Option<u64>,
}

/// Where everything goes: the writes (read back later), the refused write, the atomics' words.
struct Plan {
    cases: Vec<Case>,
    refused: Vec<(usize, usize, usize)>,
    /// Two element arrays of the atomics: (registration, offset, count of uint64).
    atomics: [(usize, usize, usize); 2],
}

/// The plan of initiator `i` (0 or 1): in its half of each registration, with its own data.
fn plan(i: usize) -> Plan {
    let half = i * REGION / INITIATORS;
    let mut next = [half + GAP, half + GAP];
    let mut place = |reg: usize, len: usize| {
        let off = next[reg] + len % 7;
        next[reg] = off + len + GAP;
        (reg, off, len)
    };
    let mut cases = Vec::new();
    for (k, &total) in [3usize, 40, 1000, 5000, 70_000, 300_000].iter().enumerate() {
        let n = 2 + k % 3;
        let lens = split(total, n);
        let ranges = lens.iter().enumerate().map(|(s, &l)| place((k + s) % 2, l)).collect();
        let data = (k % 2 == 1).then_some(0xDA7A_0000 + 0x100 * i as u64 + k as u64);
        cases.push(Case { total, ranges, data, pattern: seed(0x5E + i as u64, k as u64, total as u64) });
    }
    let refused = vec![place(0, 100), place(1, 100), place(0, 100)];
    let a0 = place(0, 8);
    let a1 = place(1, 24);
    Plan { cases, refused, atomics: [(a0.0, a0.1, 1), (a1.0, a1.1, 3)] }
}

fn background(reg: usize) -> Vec<u8> {
    pattern(0xB6B6 + reg as u64, REGION)
}

impl Case {
    fn bytes(&self) -> Vec<u8> {
        pattern(self.pattern, self.total)
    }
}

/// The uint64 values the atomics start from (and the target's memory holds at the start).
const ATOMIC_START: [u64; 4] = [100, 200, 300, 400];

fn segments(r: &mut Rank) -> TResult {
    let mut spec = Spec::new(MSG | RMA | ATOMIC | RMA_EVENT, SCALABLE);
    if r.rank == TARGET {
        spec.cntrs_before_enable = vec![REMOTE_WRITE, REMOTE_READ];
    }
    let mut p = Peer::open(r, &spec)?;
    p.exchange(r)?;
    let limit = p.tx_attr().rma_iov_limit;
    if limit < 2 {
        return Err(TestErr::Nos(fabric::ENODATA, format!("rma_iov_limit {limit}")));
    }
    if r.rank == TARGET {
        target(&mut p, r, &[plan(0), plan(1)])
    } else {
        initiator(&mut p, r, &plan(r.rank / 2))
    }
}

fn target(p: &mut Peer, r: &mut Rank, plans: &[Plan]) -> TResult {
    let mut want = [background(0), background(1)];
    let mut mrs = Vec::new();
    for (reg, &key) in KEYS.iter().enumerate() {
        let i = p.alloc(REGION);
        ensure!(i == reg, "regions out of order");
        let (_, mi) = p.reg(i, 0, REGION, REMOTE_READ | REMOTE_WRITE, key, 0)?;
        mrs.push(mi);
    }
    for plan in plans {
        for (k, (reg, at)) in atomic_words(plan).enumerate() {
            want[reg][at..at + 8].copy_from_slice(&ATOMIC_START[k].to_le_bytes());
        }
    }
    for (reg, w) in want.iter().enumerate() {
        p.region(reg).write(0, w);
    }
    p.share_mrs(r, &mrs)?;
    for c in plans.iter().flat_map(|p| &p.cases) {
        let data = c.bytes();
        let mut from = 0;
        for &(reg, off, len) in &c.ranges {
            want[reg][off..off + len].copy_from_slice(&data[from..from + len]);
            from += len;
        }
    }
    // Every write lands, and is counted once.
    let writes: u64 = plans.iter().map(|p| p.cases.len() as u64).sum();
    p.wait_cntr(0, writes, "FI_REMOTE_WRITE after the writes")?;
    p.barrier(r)?;
    for (reg, w) in want.iter().enumerate() {
        same(&p.region(reg).read(0, REGION), w, &format!("registration {reg} after the writes and the refused one"))?;
    }
    let mut sent: Vec<u64> = plans.iter().flat_map(|p| &p.cases).filter_map(|c| c.data).collect();
    let mut data: Vec<u64> = Vec::new();
    while data.len() < sent.len() {
        let e = p.wait_event("the writes' remote CQ data")?;
        ensure!(e.err == 0, "error entry at the target: {}", fabric::errname(-e.err));
        ensure!(e.flags & REMOTE_CQ_DATA != 0, "target CQ entry flags {:#x} lack FI_REMOTE_CQ_DATA", e.flags);
        data.push(e.data);
    }
    data.sort_unstable();
    sent.sort_unstable();
    ensure!(data == sent, "remote CQ data {data:x?}, expected one entry per write that carried some: {sent:x?}");
    // The reads and the atomics, served while we wait in the barrier.
    p.barrier(r)?;
    p.progress_for(Duration::from_millis(50))?;
    let (w, rd) = (p.cntr(0).read(), p.cntr(1).read());
    // Each initiator's base atomic counts as a remote write, its fetching one as a remote read.
    let n = plans.len() as u64;
    let reads = writes;
    ensure!(
        w == writes + n && rd == reads + n,
        "FI_REMOTE_WRITE {w}, FI_REMOTE_READ {rd}: expected {} and {} (one count per operation, whatever its ranges)",
        writes + n,
        reads + n
    );
    ensure!(p.events.is_empty(), "unexpected target CQ entries: {}", p.events.len());
    for (i, plan) in plans.iter().enumerate() {
        for (k, (reg, at)) in atomic_words(plan).enumerate() {
            let got = u64::from_le_bytes(p.region(reg).read(at, 8).try_into().expect("8 bytes"));
            let expect = ATOMIC_START[k] + 11 * (k as u64 + 1);
            ensure!(
                got == expect,
                "initiator {i}'s atomic element {k} holds {got}, expected {expect} (start + 1·(k+1) + 10·(k+1))"
            );
        }
    }
    p.barrier(r)
}

/// Where the atomics of `plan` land, element by element: (registration, offset).
fn atomic_words(plan: &Plan) -> impl Iterator<Item = (usize, usize)> + '_ {
    plan.atomics.iter().flat_map(|&(reg, off, count)| (0..count).map(move |e| (reg, off + 8 * e)))
}

fn initiator(p: &mut Peer, r: &mut Rank, plan: &Plan) -> TResult {
    let all = p.share_mrs(r, &[])?;
    let mrs = all[TARGET].clone();
    ensure!(mrs.len() == 2, "the target shared {} registrations, not 2", mrs.len());
    let dest = p.addrs[TARGET];
    let at = |reg: usize, off: usize| Target { dest, addr: mrs[reg].addr + off as u64, key: mrs[reg].key };
    let rma = |ranges: &[(usize, usize, usize)]| -> Vec<ffi::fi_rma_iov> {
        ranges
            .iter()
            .map(|&(reg, off, len)| ffi::fi_rma_iov { addr: at(reg, off).addr, len, key: mrs[reg].key })
            .collect()
    };
    for c in &plan.cases {
        let data = c.bytes();
        let parts = chunks(&data, &split(c.total, 3));
        let what = format!("fi_writemsg of {} B to {} ranges", c.total, c.ranges.len());
        let flags = COMPLETION | if c.data.is_some() { REMOTE_CQ_DATA } else { 0 };
        let id = must(&what, p.writemsg(&what, parts, dest, &rma(&c.ranges), flags, c.data.unwrap_or(0))?)?;
        p.wait_ok(id)?;
    }
    let mut bad = rma(&plan.refused);
    bad[1].key = BAD_KEY;
    // Delivery complete, so that the target's verdict reaches the completion (fi_cq(3)).
    let what = "fi_writemsg(FI_DELIVERY_COMPLETE) with a range under an unregistered key";
    match p.writemsg(what, vec![vec![0xEE; 300]], dest, &bad, COMPLETION | DELIVERY_COMPLETE, 0)? {
        Ok(id) => {
            let d = p.wait(id)?;
            ensure!(d.err != 0, "{what}: completed without error");
        }
        Err(code) => ensure!(code < 0, "{what}: returned {code}"),
    }
    p.barrier(r)?;
    for c in &plan.cases {
        let data = c.bytes();
        let lens = split(c.total, 2);
        let what = format!("fi_readmsg of {} B from {} ranges", c.total, c.ranges.len());
        let id = must(&what, p.readmsg(&what, &lens, dest, &rma(&c.ranges), 0)?)?;
        let d = p.wait_ok(id)?;
        let mut got = Vec::new();
        for (b, &l) in d.bufs.iter().zip(&lens) {
            got.extend_from_slice(payload(&what, b, l)?);
        }
        same(&got, &data, &what)?;
    }
    let iocs: Vec<ffi::fi_rma_ioc> = plan
        .atomics
        .iter()
        .map(|&(reg, off, count)| ffi::fi_rma_ioc { addr: at(reg, off).addr, count, key: mrs[reg].key })
        .collect();
    let adds: Vec<u64> = (1..=4).collect();
    let what = "fi_atomicmsg FI_SUM uint64 over 2 element arrays";
    let id = must(what, atomicmsg(p, what, &iocs, &adds, false)?)?;
    p.wait_ok(id)?;
    let what = "fi_fetch_atomicmsg FI_SUM uint64 over 2 element arrays";
    let tens: Vec<u64> = adds.iter().map(|a| 10 * a).collect();
    let id = must(what, atomicmsg(p, what, &iocs, &tens, true)?)?;
    let d = p.wait_ok(id)?;
    let old: Vec<u64> = d.bufs[1].chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
    let expect: Vec<u64> = ATOMIC_START.iter().zip(&adds).map(|(s, a)| s + a).collect();
    ensure!(old == expect, "{what}: old values {old:?}, expected {expect:?}");
    p.barrier(r)?;
    p.barrier(r)
}

/// `fi_atomicmsg` (or `fi_fetch_atomicmsg`) FI_SUM uint64 of `operand` over the element arrays
/// `iocs`, whose counts sum to its length. Buffers: the operand, and the fetched old values.
fn atomicmsg(
    p: &mut Peer,
    what: &str,
    iocs: &[ffi::fi_rma_ioc],
    operand: &[u64],
    fetch: bool,
) -> TResult<Result<u64, i32>> {
    let bytes: Vec<u8> = operand.iter().flat_map(|v| v.to_le_bytes()).collect();
    let n = operand.len();
    let dest = p.addrs[TARGET];
    p.post(what, vec![bytes, vec![0u8; 8 * n]], |ep, ctx, b| {
        let ioc = ffi::fi_ioc { addr: b[0].cast(), count: n };
        let mut desc = null_mut::<c_void>();
        let msg = ffi::fi_msg_atomic {
            msg_iov: &ioc,
            desc: &mut desc,
            iov_count: 1,
            addr: dest,
            rma_iov: iocs.as_ptr(),
            rma_iov_count: iocs.len(),
            datatype: ffi::FI_UINT64,
            op: ffi::FI_SUM,
            context: ctx,
            data: 0,
        };
        if !fetch {
            // SAFETY: the operand and the context belong to the op; the message lives through
            // the call.
            return unsafe { ep.atomicmsg(&msg, COMPLETION) };
        }
        let mut result = ffi::fi_ioc { addr: b[1].cast(), count: n };
        // SAFETY: the buffers and the context belong to the op; the message and the result ioc
        // live through the call.
        unsafe { ep.fetch_atomicmsg(&msg, &mut result, 1, COMPLETION) }
    })
}
