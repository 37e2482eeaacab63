//! Completion counters for one-sided operations (fi_endpoint(3) bind flags, fi_mr(3)
//! fi_mr_bind, fi_cntr(3)):
//! - FI_WRITE / FI_READ at the initiator: one increment per RMA write or base atomic
//!   (including fi_inject_write, fi_inject_writedata, fi_inject_atomic) and per RMA read, fetch
//!   or compare atomic; bound before fi_enable, and after it as SOS does;
//! - FI_REMOTE_WRITE / FI_REMOTE_READ bound to the target endpoint (FI_RMA_EVENT), waited for
//!   with fi_cntr_wait; the data is visible when the counter says it landed;
//! - a counter bound to one MR with fi_mr_bind(FI_REMOTE_WRITE) (as SOS does: counter opened,
//!   MR registered and bound after fi_enable) counts the writes and atomics into that MR only.
//!
//! fi_cntr_readerr stays 0 everywhere but in `poll_loops`, which polls it for a refused write.

use super::rma_util::{
    self as u, must, payload, split, AKind, EpExt, Peer, Spec, Target, ATOMIC, BASIC, MSG, READ, REMOTE_READ,
    REMOTE_WRITE, RMA, RMA_EVENT, WRITE,
};
use super::{scn, seed, Scenario};
use crate::fabric::{self, ffi};
use crate::harness::{check_pattern, pattern, watchdog, Rank, TResult, TestErr};
use crate::{bail, ensure};
use std::time::Duration;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "cntr/initiator",
            2,
            40,
            initiator::<false>,
            "FI_WRITE/FI_READ counters bound before fi_enable: one increment per op, inject forms included",
        ),
        scn(
            "cntr/initiator_bound_after_enable",
            2,
            40,
            initiator::<true>,
            "FI_WRITE/FI_READ counters bound after fi_enable (as SOS does): one increment per op",
        ),
        scn(
            "cntr/target_ep",
            2,
            40,
            target_ep,
            "FI_REMOTE_WRITE/FI_REMOTE_READ counters on the target endpoint, fi_cntr_wait, data visible at the count",
        ),
        scn(
            "cntr/mr_bind",
            2,
            40,
            mr_bind::<false>,
            "fi_mr_bind(mr, cntr, FI_REMOTE_WRITE) after fi_enable: counts writes/atomics into that MR only, fi_cntr_wait",
        ),
        scn(
            "cntr/mr_bind_rma_event",
            2,
            40,
            mr_bind::<true>,
            "cntr/mr_bind with FI_MR_RMA_EVENT in the hints (SOS's ENABLE_MR_RMA_EVENT): FI_RMA_EVENT MRs, fi_mr_enable",
        ),
        scn(
            "cntr/poll_loops",
            2,
            40,
            poll_loops,
            "fi_cntr_readerr alone and fi_cq_read of count 0 alone drive progress; SOS's wait loop (read, readerr, probe) sees every count",
        ),
    ]
}

const TARGET: usize = 1;
/// Target region: a u64 word for atomics at 0, data ranges from `DATA`.
const REGION: usize = 4 << 20;
const DATA: usize = 4096;

/// One operation of the sequences below.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    Write(usize),
    Writev(usize),
    Writemsg(usize),
    Writedata(usize),
    InjectWrite(usize),
    InjectWritedata(usize),
    AtomicSum(u64),
    InjectAtomicSum(u64),
    Read(usize),
    Readv(usize),
    Readmsg(usize),
    FetchSum(u64),
    Cswap(u64, u64),
}

impl Op {
    /// Counted by FI_WRITE (else FI_READ) at the initiator; FI_REMOTE_WRITE (else
    /// FI_REMOTE_READ) at the target.
    pub(super) fn is_write(self) -> bool {
        !matches!(self, Op::Read(_) | Op::Readv(_) | Op::Readmsg(_) | Op::FetchSum(_) | Op::Cswap(..))
    }

    fn len(self) -> usize {
        match self {
            Op::Write(l)
            | Op::Writev(l)
            | Op::Writemsg(l)
            | Op::Writedata(l)
            | Op::InjectWrite(l)
            | Op::InjectWritedata(l)
            | Op::Read(l)
            | Op::Readv(l)
            | Op::Readmsg(l) => l,
            _ => 0,
        }
    }

    fn is_atomic(self) -> bool {
        matches!(self, Op::AtomicSum(_) | Op::InjectAtomicSum(_) | Op::FetchSum(_) | Op::Cswap(..))
    }
}

/// Data ranges of a sequence in the target region: (offset, len) per op (atomics: the word).
pub(super) fn ranges(ops: &[Op], base: usize) -> Vec<(usize, usize)> {
    let mut off = base;
    ops.iter()
        .map(|&op| {
            if op.is_atomic() {
                (0, 8)
            } else {
                let r = (off + 3, op.len());
                off += op.len() + 64;
                r
            }
        })
        .collect()
}

pub(super) fn data(k: usize, len: usize) -> Vec<u8> {
    pattern(seed(0xC7, k as u64, len as u64), len)
}

/// Issue op `k` of a sequence to `t` (the MR's first byte at `t.addr`) and wait for its
/// completion (inject forms: none). Reads and fetches are checked against `expect_word`
/// (the atomic word before the op) and the data of write `k_src` for a read of that range.
pub(super) fn run_op(p: &mut Peer, k: usize, op: Op, at: (usize, usize), t: Target, word_before: u64) -> TResult {
    let (off, len) = at;
    let name = format!("{op:?}");
    let tt = t.at(off);
    let id = match op {
        Op::Write(_) => Some(must(&name, p.write(&name, data(k, len), tt, None)?)?),
        Op::Writedata(_) => Some(must(&name, p.write(&name, data(k, len), tt, Some(0xC0DA + k as u64))?)?),
        Op::Writev(_) => {
            let d = data(k, len);
            let mut parts = Vec::new();
            let mut o = 0;
            for l in split(len, 3) {
                parts.push(d[o..o + l].to_vec());
                o += l;
            }
            Some(must(&name, p.writev(&name, parts, tt)?)?)
        }
        Op::Writemsg(_) => {
            let rma = [ffi::fi_rma_iov { addr: tt.addr, len, key: t.key }];
            Some(must(&name, p.writemsg(&name, vec![data(k, len)], t.dest, &rma, 0, 0)?)?)
        }
        Op::InjectWrite(_) => {
            let d = data(k, len);
            let ret = p.inject(&name, |ep| ep.inject_write(&d, t.dest, tt.addr, t.key))?;
            ensure!(ret == 0, "{name} returned {}", fabric::errname(ret as i32));
            None
        }
        Op::InjectWritedata(_) => {
            let d = data(k, len);
            let ret = p.inject(&name, |ep| ep.inject_writedata(&d, 0xC0DA + k as u64, t.dest, tt.addr, t.key))?;
            ensure!(ret == 0, "{name} returned {}", fabric::errname(ret as i32));
            None
        }
        Op::InjectAtomicSum(v) => {
            let b = v.to_ne_bytes();
            let ret = p.inject(&name, |ep| ep.inject_atomic(&b, 1, &tt, ffi::FI_UINT64, ffi::FI_SUM))?;
            ensure!(ret == 0, "{name} returned {}", fabric::errname(ret as i32));
            None
        }
        Op::AtomicSum(v) | Op::FetchSum(v) => {
            let kind = if matches!(op, Op::FetchSum(_)) { AKind::Fetch } else { AKind::Base };
            let res = p.atomic(&name, kind, ffi::FI_UINT64, ffi::FI_SUM, 1, v.to_ne_bytes().to_vec(), vec![], tt)?;
            Some(must(&name, res)?)
        }
        Op::Cswap(cmp, swap) => {
            let res = p.atomic(
                &name,
                AKind::Compare,
                ffi::FI_UINT64,
                ffi::FI_CSWAP,
                1,
                swap.to_ne_bytes().to_vec(),
                cmp.to_ne_bytes().to_vec(),
                tt,
            )?;
            Some(must(&name, res)?)
        }
        Op::Read(_) => Some(must(&name, p.read(&name, len, tt)?)?),
        Op::Readv(_) => Some(must(&name, p.readv(&name, &split(len, 3), tt)?)?),
        Op::Readmsg(_) => {
            let rma = [ffi::fi_rma_iov { addr: tt.addr, len, key: t.key }];
            Some(must(&name, p.readmsg(&name, &split(len, 2), t.dest, &rma, 0)?)?)
        }
    };
    let Some(id) = id else { return Ok(()) };
    let d = p.wait_ok(id)?;
    match op {
        Op::FetchSum(_) | Op::Cswap(..) => {
            let v = u64::from_ne_bytes(payload(&name, &d.bufs[2], 8)?.try_into().expect("8 bytes"));
            ensure!(v == word_before, "{name}: fetched {v}, the word held {word_before}");
        }
        Op::Read(_) | Op::Readv(_) | Op::Readmsg(_) => {
            let mut got = Vec::new();
            for b in &d.bufs {
                got.extend_from_slice(payload(&name, b, b.len() - 2 * u::CANARY)?);
            }
            // Reads read the background the target wrote (pattern seed = offset).
            check_pattern(&name, off as u64, &got, len)?;
        }
        _ => {}
    }
    Ok(())
}

/// The atomic word after each op of a sequence (and before the first: 0).
pub(super) fn words(ops: &[Op]) -> Vec<u64> {
    let mut w = 0u64;
    let mut v = vec![w];
    for &op in ops {
        w = match op {
            Op::AtomicSum(x) | Op::InjectAtomicSum(x) | Op::FetchSum(x) => w.wrapping_add(x),
            Op::Cswap(c, s) if c == w => s,
            _ => w,
        };
        v.push(w);
    }
    v
}

/// Target memory a sequence leaves: the background of every read range (`pattern(offset)`),
/// the data of every write range, the atomic word.
pub(super) fn fill_reads(p: &Peer, reg: usize, ops: &[Op], at: &[(usize, usize)]) {
    for (&op, &(o, l)) in ops.iter().zip(at) {
        if !op.is_write() && !op.is_atomic() {
            p.region(reg).write(o, &pattern(o as u64, l));
        }
    }
}

/// Check, now and without progress, that every write of `ops` (indices `range`) is in memory.
pub(super) fn check_writes(p: &Peer, reg: usize, ops: &[Op], at: &[(usize, usize)], word: u64, what: &str) -> TResult {
    for (k, (&op, &(o, l))) in ops.iter().zip(at).enumerate() {
        if op.is_write() && !op.is_atomic() {
            let got = p.region(reg).read(o, l);
            check_pattern(&format!("{what}: {op:?}"), seed(0xC7, k as u64, l as u64), &got, l)?;
        }
    }
    let w = u64::from_ne_bytes(p.region(reg).read(0, 8).try_into().expect("8 bytes"));
    ensure!(w == word, "{what}: the atomic word is {w}, want {word}");
    Ok(())
}

/// `fi_cntr_wait(cntr, want, timeout)` under a watchdog; fails unless it returns 0.
pub(super) fn cntr_wait(p: &Peer, i: usize, want: u64, timeout: Duration, what: &str) -> TResult {
    let ms = timeout.as_millis() as i32;
    let wd = watchdog(timeout + Duration::from_secs(5), &format!("fi_cntr_wait({want}, {ms} ms): {what}"));
    let ret = p.cntr(i).wait(want, ms);
    drop(wd);
    if ret != 0 {
        bail!(
            "fi_cntr_wait({want}, {ms} ms) for {what} returned {} with the counter at {} (readerr {})",
            fabric::errname(ret),
            p.cntr(i).read(),
            p.cntr(i).readerr()
        );
    }
    Ok(())
}

fn open_pair(r: &mut Rank, spec: &Spec) -> TResult<Peer> {
    let mut p = Peer::open(r, spec)?;
    p.exchange(r)?;
    Ok(p)
}

/// The target of the initiator-side scenarios: a region with the read ranges filled.
fn plain_target(p: &mut Peer, r: &mut Rank, ops: &[Op], at: &[(usize, usize)]) -> TResult<usize> {
    let reg = p.alloc(REGION);
    fill_reads(p, reg, ops, at);
    let (_, mi) = p.reg(reg, 0, REGION, REMOTE_READ | REMOTE_WRITE, 0xC0, 0)?;
    p.share_mrs(r, &[mi])?;
    Ok(reg)
}

fn remote(p: &mut Peer, r: &mut Rank) -> TResult<Target> {
    let all = p.share_mrs(r, &[])?;
    let m = *all[TARGET].first().ok_or_else(|| TestErr::Fail("the target shared no MR".into()))?;
    Ok(Target { dest: p.addrs[TARGET], addr: m.addr, key: m.key })
}

fn initiator<const AFTER: bool>(r: &mut Rank) -> TResult {
    let ops = [
        Op::Write(8),
        Op::Write(65536),
        Op::Writev(4097),
        Op::Writemsg(1024),
        Op::Writedata(8),
        Op::InjectWrite(8),
        // Each alone (after the counter's wait): within an inject buffer, above rshm's
        // `LONE_WRITE_MIN`, where its chooser tries the initiator's own CMA copy first.
        Op::InjectWrite(3000),
        Op::InjectWrite(4096),
        Op::InjectWritedata(8),
        Op::AtomicSum(5),
        Op::InjectAtomicSum(6),
        Op::Read(8),
        Op::Read(65536),
        Op::Readv(4097),
        Op::Readmsg(1024),
        Op::FetchSum(7),
        Op::Cswap(18, 100),
    ];
    let at = ranges(&ops, DATA);
    let mut spec = Spec::new(MSG | RMA | ATOMIC, BASIC);
    if r.rank == TARGET {
        let mut p = open_pair(r, &spec)?;
        let reg = plain_target(&mut p, r, &ops, &at)?;
        // The initiator's counters reached every operation before this barrier.
        p.barrier(r)?;
        let word = *words(&ops).last().expect("one word per op and the first");
        return check_writes(&p, reg, &ops, &at, word, "target memory after every operation");
    }
    if !AFTER {
        spec.cntrs_before_enable = vec![WRITE, READ];
    }
    let mut p = open_pair(r, &spec)?;
    let (wc, rc) = if AFTER { (p.bind_cntr_after_enable(WRITE)?, p.bind_cntr_after_enable(READ)?) } else { (0, 1) };
    let t = remote(&mut p, r)?;
    let w = words(&ops);
    let (mut nw, mut nr) = (0u64, 0u64);
    for (k, &op) in ops.iter().enumerate() {
        r.pmi.step(&format!("{op:?}"));
        run_op(&mut p, k, op, at[k], t, w[k])?;
        let (c, other, n, n_other, name) =
            if op.is_write() { (wc, rc, &mut nw, nr, "FI_WRITE") } else { (rc, wc, &mut nr, nw, "FI_READ") };
        *n += 1;
        p.wait_cntr(c, *n, &format!("{name} counter after {op:?}"))?;
        let o = p.cntr(other).read();
        ensure!(o <= n_other, "{op:?} incremented the other counter ({o}, expected {n_other})");
    }
    p.progress_for(Duration::from_millis(50))?;
    let (gw, gr) = (p.cntr(wc).read(), p.cntr(rc).read());
    ensure!(gw == nw && gr == nr, "counters FI_WRITE {gw} / FI_READ {gr}, expected {nw} / {nr} (one per op)");
    let (ew, er) = (p.cntr(wc).readerr(), p.cntr(rc).readerr());
    ensure!(ew == 0 && er == 0, "fi_cntr_readerr: FI_WRITE {ew}, FI_READ {er} (no op failed)");
    p.barrier(r)
}

fn target_ep(r: &mut Rank) -> TResult {
    let ops = [
        Op::Write(8),
        Op::Write(1 << 20),
        Op::Writev(4097),
        Op::Writemsg(1024),
        Op::Writedata(8),
        Op::InjectWrite(8),
        Op::InjectWritedata(8),
        Op::AtomicSum(5),
        Op::Read(8),
        Op::Read(1 << 20),
        Op::Readv(4097),
        Op::FetchSum(7),
        Op::Cswap(12, 100),
    ];
    let at = ranges(&ops, DATA);
    let nw = ops.iter().filter(|o| o.is_write()).count() as u64;
    let nr = ops.len() as u64 - nw;
    let w = words(&ops);
    if r.rank == TARGET {
        let mut spec = Spec::new(MSG | RMA | ATOMIC | RMA_EVENT, BASIC);
        spec.cntrs_before_enable = vec![REMOTE_WRITE, REMOTE_READ];
        let mut p = open_pair(r, &spec)?;
        let reg = plain_target(&mut p, r, &ops, &at)?;
        p.barrier(r)?;
        let limit = p.timeout;
        cntr_wait(&p, 0, nw, limit, "the remote writes (FI_REMOTE_WRITE counter)")?;
        // fi_cq(3)/fi_atomic(3): what a target counter counted is visible.
        check_writes(&p, reg, &ops, &at, w[nw as usize], "target memory when FI_REMOTE_WRITE reached its count")?;
        r.pmi.set("counted", "1");
        cntr_wait(&p, 1, nr, limit, "the remote reads (FI_REMOTE_READ counter)").map_err(|e| match e {
            TestErr::Fail(m) => TestErr::Fail(format!("{m}; FI_REMOTE_WRITE counter at {} of {nw}", p.cntr(0).read())),
            e => e,
        })?;
        p.barrier(r)?;
        p.progress_for(Duration::from_millis(50))?;
        let (gw, gr) = (p.cntr(0).read(), p.cntr(1).read());
        ensure!(
            gw == nw && gr == nr,
            "FI_REMOTE_WRITE {gw}, FI_REMOTE_READ {gr}; expected {nw} (RMA writes and base atomics) and {nr} \
             (RMA reads, fetch and compare atomics), fi_endpoint(3)"
        );
        let (ew, er) = (p.cntr(0).readerr(), p.cntr(1).readerr());
        ensure!(ew == 0 && er == 0, "fi_cntr_readerr: FI_REMOTE_WRITE {ew}, FI_REMOTE_READ {er}");
        return p.barrier(r);
    }
    let mut p = open_pair(r, &Spec::new(MSG | RMA | ATOMIC, BASIC))?;
    let t = remote(&mut p, r)?;
    p.barrier(r)?;
    for (k, &op) in ops.iter().enumerate() {
        if !op.is_write() && k > 0 && ops[k - 1].is_write() {
            // Reads once the target has checked the writes (a fetch would change the word).
            r.pmi.wait_key_with("counted", &mut || p.progress().map(|_| ()))?;
        }
        r.pmi.step(&format!("{op:?}"));
        run_op(&mut p, k, op, at[k], t, w[k])?;
    }
    p.barrier(r)?;
    p.barrier(r)
}

fn mr_bind<const RMA_EV: bool>(r: &mut Rank) -> TResult {
    // Into MR 2 (not bound): must not count.
    let other = [Op::Write(8), Op::InjectWrite(8), Op::AtomicSum(1)];
    let ops = [
        Op::Write(8),
        Op::Write(1 << 20),
        Op::Writev(4097),
        Op::Writemsg(1024),
        Op::Writedata(8),
        Op::InjectWrite(8),
        Op::InjectWritedata(8),
        Op::AtomicSum(5),
        Op::InjectAtomicSum(6),
        Op::Read(8),
    ];
    let at = ranges(&ops, DATA);
    let at2 = ranges(&other, DATA);
    let counted = ops.iter().filter(|o| o.is_write()).count() as u64;
    let w = words(&ops);
    let w2 = words(&other);
    if r.rank == TARGET {
        let mut spec = Spec::new(MSG | RMA | ATOMIC | RMA_EVENT, BASIC);
        if RMA_EV {
            spec.mr_mode |= ffi::FI_MR_RMA_EVENT as i32;
        }
        let mut p = open_pair(r, &spec)?;
        r.pmi.step(&format!("note: getinfo mr_mode {:#x}", p.mr_mode));
        // SOS: counter opened, then the MR registered and bound after fi_enable.
        let c = p.new_cntr()?;
        let reg = p.alloc(REGION);
        fill_reads(&p, reg, &ops, &at);
        // fi_mr(3) FI_MR_RMA_EVENT: MRs that count RMA events are registered with FI_RMA_EVENT,
        // bound, then enabled.
        let flags = if p.mr_rma_event() { RMA_EVENT } else { 0 };
        let (m1, i1) = p.reg(reg, 0, REGION, REMOTE_READ | REMOTE_WRITE, 0xC1, flags)?;
        let reg2 = p.alloc(REGION);
        let (_, i2) = p.reg(reg2, 0, REGION, REMOTE_READ | REMOTE_WRITE, 0xC2, 0)?;
        p.bind_mr_cntr(m1, c, REMOTE_WRITE)?;
        if p.mr_rma_event() {
            crate::harness::fi_ok("fi_mr_enable", p.mr(m1).enable())?;
        }
        p.share_mrs(r, &[i1, i2])?;
        p.barrier(r)?;
        cntr_wait(&p, c, counted, p.timeout, "writes and atomics into the bound MR")?;
        check_writes(&p, reg, &ops, &at, w[counted as usize], "bound MR when its counter reached its count")?;
        p.barrier(r)?;
        p.progress_for(Duration::from_millis(50))?;
        let got = p.cntr(c).read();
        ensure!(
            got == counted,
            "the MR's counter reads {got}, expected {counted} (writes and atomics into that MR only, not into \
             another MR, not reads)"
        );
        check_writes(&p, reg2, &other, &at2, w2[other.len()], "the unbound MR")?;
        ensure!(p.cntr(c).readerr() == 0, "fi_cntr_readerr {}", p.cntr(c).readerr());
        return p.barrier(r);
    }
    let mut p = open_pair(r, &Spec::new(MSG | RMA | ATOMIC, BASIC))?;
    let all = p.share_mrs(r, &[])?;
    ensure!(all[TARGET].len() == 2, "the target shared {} MRs", all[TARGET].len());
    let mk = |i: usize| Target { dest: p.addrs[TARGET], addr: all[TARGET][i].addr, key: all[TARGET][i].key };
    let (t1, t2) = (mk(0), mk(1));
    p.barrier(r)?;
    for (k, &op) in other.iter().enumerate() {
        run_op(&mut p, k, op, at2[k], t2, w2[k])?;
    }
    for (k, &op) in ops.iter().enumerate() {
        r.pmi.step(&format!("{op:?}"));
        run_op(&mut p, k, op, at[k], t1, w[k])?;
    }
    p.barrier(r)?;
    p.barrier(r)
}

/// The poll loops a manual-progress application may run, each of which must drive progress:
/// - the target serves the initiator's writes with progress probes alone (fi_cq_read of count
///   0, which can return nothing: SOS's `shmem_transport_probe`);
/// - the initiator polls only fi_cntr_readerr for a write the target refuses (a wrong key): the
///   error must arrive, so readerr drives progress on its own (rshm skips that pass only right
///   after a fi_cntr_read of the same counter, SOS's pair);
/// - then it waits for writes as SOS's quiet does, with fi_cntr_read, fi_cntr_readerr and a
///   probe on every turn (rshm drives progress once a turn there): every write counts, and the
///   error count stays where the refusal left it.
fn poll_loops(r: &mut Rank) -> TResult {
    const WRITES: u64 = 50;
    let mut spec = Spec::new(MSG | RMA, BASIC);
    if r.rank == TARGET {
        let mut p = open_pair(r, &spec)?;
        let reg = p.alloc(REGION);
        let (_, mi) = p.reg(reg, 0, REGION, REMOTE_READ | REMOTE_WRITE, 0xC0, 0)?;
        p.share_mrs(r, &[mi])?;
        r.pmi.allgather_with(
            "done",
            Some(&mut || {
                p.probe();
                Ok(())
            }),
        )?;
        let got = p.region(reg).read(0, 8);
        ensure!(got == WRITES.to_le_bytes(), "the last write left {got:?}, expected {WRITES} (little-endian)");
        return p.barrier(r);
    }
    spec.cntrs_before_enable = vec![WRITE];
    let mut p = open_pair(r, &spec)?;
    let t = remote(&mut p, r)?;
    let wrong = Target { key: t.key ^ 0xBAD0_0000, ..t };
    let rma = [ffi::fi_rma_iov { addr: wrong.addr, len: 8, key: wrong.key }];
    // Delivery complete: only a completion that waits for the target can carry its refusal.
    let refused = p.writemsg("write to a wrong key", vec![vec![1; 8]], wrong.dest, &rma, u::DELIVERY_COMPLETE, 0)?;
    must("fi_writemsg to a wrong key", refused)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while p.cntr(0).readerr() == 0 {
        ensure!(std::time::Instant::now() < deadline, "no error within 10 s of polling fi_cntr_readerr alone");
    }
    ensure!(p.cntr(0).read() == 0, "the refused write counted as a success");
    // An inject write and an inject atomic refused the same way. rshm waits for their answers
    // by default (delivery complete), keeping no transmit record for them (the cookie says what
    // they were): each refusal must reach the error count, and nothing count as a success. The
    // C providers complete injects when queued and never see the refusal.
    let refused_injects: u64 = if r.prov == "rshm" { 2 } else { 0 };
    let ret =
        p.inject("fi_inject_write to a wrong key", |ep| ep.inject_write(&[2; 8], wrong.dest, wrong.addr, wrong.key))?;
    ensure!(ret == 0, "fi_inject_write to a wrong key returned {}", fabric::errname(ret as i32));
    let one = 1u64.to_ne_bytes();
    let ret = p.inject("fi_inject_atomic to a wrong key", |ep| {
        ep.inject_atomic(&one, 1, &wrong, ffi::FI_UINT64, ffi::FI_SUM)
    })?;
    ensure!(ret == 0, "fi_inject_atomic to a wrong key returned {}", fabric::errname(ret as i32));
    let errors_now = 1 + refused_injects;
    while p.cntr(0).readerr() < errors_now {
        ensure!(
            std::time::Instant::now() < deadline,
            "fi_cntr_readerr {} within 10 s of two refused injects (want {errors_now})",
            p.cntr(0).readerr()
        );
    }
    ensure!(p.cntr(0).read() == 0, "a refused inject counted as a success");
    for k in 1..=WRITES {
        must("fi_write", p.write("write", k.to_le_bytes().to_vec(), t, None)?)?;
        loop {
            let (done, errors) = (p.cntr(0).read(), p.cntr(0).readerr());
            p.probe();
            ensure!(errors == errors_now, "fi_cntr_readerr {errors} after write {k} ({errors_now} refused)");
            if done == k {
                break;
            }
            ensure!(done < k, "FI_WRITE counter {done} after {k} writes");
            ensure!(std::time::Instant::now() < deadline, "write {k} not counted within 10 s (counter {done})");
        }
    }
    r.pmi.allgather_with("done", Some(&mut || p.progress().map(|_| ())))?;
    p.barrier(r)
}
