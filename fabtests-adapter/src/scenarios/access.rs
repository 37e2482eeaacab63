//! Access errors beyond `rma/*/err_*` (which cover RMA outside an MR, with a wrong key and
//! without the access flag): RMA and atomics naming an MR its owner closed with fi_close, and
//! atomics outside an MR, with a wrong key, or without the access flag. Each must fail at the
//! initiator (an error completion, or the call refused with -FI_E*), and the target's memory,
//! with a guard band around every MR, must be unchanged byte for byte. Rank 0 initiates, rank 1
//! is the target.

use super::rma_util::{
    try_refused, AKind, AccessOp, MrInfo, Peer, Refusal, Spec, Target, ATOMIC, BASIC, COMPLETION, DELIVERY_COMPLETE,
    MSG, REMOTE_READ, REMOTE_WRITE, RMA, SCALABLE,
};
use super::{scn, Scenario};
use crate::fabric::{self, ffi, Mr};
use crate::harness::{pattern, FiCtx, Rank, TResult};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "access/scalable/closed_mr",
            2,
            40,
            run::<SCALABLE, CLOSED>,
            "fi_writemsg/fi_atomicmsg (FI_DELIVERY_COMPLETE), fi_read, fetch/compare atomics naming an MR the target closed: errors, target memory unchanged",
        ),
        scn(
            "access/basic/closed_mr",
            2,
            40,
            run::<BASIC, CLOSED>,
            "fi_writemsg/fi_atomicmsg (FI_DELIVERY_COMPLETE), fi_read, fetch/compare atomics naming an MR the target closed: errors, target memory unchanged",
        ),
        scn(
            "access/scalable/close_during_write",
            2,
            40,
            close_during_write::<SCALABLE>,
            "the target closes its MR while a 32 MiB fi_writemsg (FI_DELIVERY_COMPLETE) into it arrives: no byte written after fi_close returns, the write fails",
        ),
        scn(
            "access/basic/close_during_write",
            2,
            40,
            close_during_write::<BASIC>,
            "the target closes its MR while a 32 MiB fi_writemsg (FI_DELIVERY_COMPLETE) into it arrives: no byte written after fi_close returns, the write fails",
        ),
        scn(
            "access/scalable/atomic_errors",
            2,
            40,
            run::<SCALABLE, ATOMICS>,
            "atomics (base ones with FI_DELIVERY_COMPLETE) outside an MR, with a wrong key, without FI_REMOTE_WRITE/READ: errors, memory unchanged",
        ),
        scn(
            "access/basic/atomic_errors",
            2,
            40,
            run::<BASIC, ATOMICS>,
            "atomics (base ones with FI_DELIVERY_COMPLETE) outside an MR, with a wrong key, without FI_REMOTE_WRITE/READ: errors, memory unchanged",
        ),
    ]
}

const TARGET: usize = 1;
const CLOSED: u8 = 0;
const ATOMICS: u8 = 1;
/// Each MR's length, and the guard band on either side of it.
const LEN: usize = 8192;
const PAD: usize = 4096;
const KEY: u64 = 0xACCE;

struct Case {
    what: &'static str,
    op: AccessOp,
    /// Which of the target's MRs (0: read/write, 1: read-only, 2: write-only).
    mr: usize,
    /// Offset from the MR's first byte (may be negative).
    off: i64,
    wrong_key: bool,
}

fn cases(class: u8) -> Vec<Case> {
    let c = |what, op, mr, off, wrong_key| Case { what, op, mr, off, wrong_key };
    let la = LEN as i64;
    if class == CLOSED {
        return vec![
            c("fi_writemsg(FI_DELIVERY_COMPLETE) of 8 B to a closed MR", AccessOp::Write(8), 0, 0, false),
            c("fi_writemsg(FI_DELIVERY_COMPLETE) of 4096 B to a closed MR", AccessOp::Write(4096), 0, 0, false),
            c("fi_writemsg(FI_DELIVERY_COMPLETE) of 8192 B to a closed MR", AccessOp::Write(8192), 0, 0, false),
            c("fi_read of 8 B from a closed MR", AccessOp::Read(8), 0, 0, false),
            c("fi_read of 8192 B from a closed MR", AccessOp::Read(8192), 0, 0, false),
            c(
                "fi_atomicmsg(FI_DELIVERY_COMPLETE) SUM on a closed MR",
                AccessOp::Atomic(AKind::Base, ffi::FI_SUM),
                0,
                0,
                false,
            ),
            c("fi_fetch_atomic SUM on a closed MR", AccessOp::Atomic(AKind::Fetch, ffi::FI_SUM), 0, 8, false),
            c("fi_compare_atomic CSWAP on a closed MR", AccessOp::Atomic(AKind::Compare, ffi::FI_CSWAP), 0, 16, false),
        ];
    }
    vec![
        c(
            "fi_atomicmsg(FI_DELIVERY_COMPLETE) SUM just past the MR end",
            AccessOp::Atomic(AKind::Base, ffi::FI_SUM),
            0,
            la,
            false,
        ),
        c(
            "fi_atomicmsg(FI_DELIVERY_COMPLETE) SUM 8 B before the MR",
            AccessOp::Atomic(AKind::Base, ffi::FI_SUM),
            0,
            -8,
            false,
        ),
        c(
            "fi_atomicmsg(FI_DELIVERY_COMPLETE) SUM crossing the MR end",
            AccessOp::Atomic(AKind::Base, ffi::FI_SUM),
            0,
            la - 4,
            false,
        ),
        c("fi_fetch_atomic SUM just past the MR end", AccessOp::Atomic(AKind::Fetch, ffi::FI_SUM), 0, la, false),
        c(
            "fi_compare_atomic CSWAP just past the MR end",
            AccessOp::Atomic(AKind::Compare, ffi::FI_CSWAP),
            0,
            la,
            false,
        ),
        c(
            "fi_atomicmsg(FI_DELIVERY_COMPLETE) SUM with a wrong key",
            AccessOp::Atomic(AKind::Base, ffi::FI_SUM),
            0,
            0,
            true,
        ),
        c("fi_fetch_atomic SUM with a wrong key", AccessOp::Atomic(AKind::Fetch, ffi::FI_SUM), 0, 0, true),
        c("fi_compare_atomic CSWAP with a wrong key", AccessOp::Atomic(AKind::Compare, ffi::FI_CSWAP), 0, 0, true),
        c(
            "fi_atomicmsg(FI_DELIVERY_COMPLETE) SUM on a FI_REMOTE_READ-only MR",
            AccessOp::Atomic(AKind::Base, ffi::FI_SUM),
            1,
            0,
            false,
        ),
        c("fi_fetch_atomic SUM on a FI_REMOTE_READ-only MR", AccessOp::Atomic(AKind::Fetch, ffi::FI_SUM), 1, 0, false),
        c("fi_fetch_atomic SUM on a FI_REMOTE_WRITE-only MR", AccessOp::Atomic(AKind::Fetch, ffi::FI_SUM), 2, 0, false),
        c(
            "fi_compare_atomic CSWAP on a FI_REMOTE_WRITE-only MR",
            AccessOp::Atomic(AKind::Compare, ffi::FI_CSWAP),
            2,
            0,
            false,
        ),
    ]
}

fn background(i: usize) -> Vec<u8> {
    pattern(0xACC0 + i as u64, LEN + 2 * PAD)
}

fn run<const M: u8, const CLASS: u8>(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(MSG | RMA | ATOMIC, M))?;
    p.exchange(r)?;
    let access = [REMOTE_READ | REMOTE_WRITE, REMOTE_READ, REMOTE_WRITE];
    let nmr = if CLASS == CLOSED { 1 } else { 3 };
    if r.rank == TARGET {
        let mut regs = Vec::new();
        let mut mrs = Vec::new();
        let mut infos = Vec::new();
        for (i, &acc) in access.iter().enumerate().take(nmr) {
            let reg = p.alloc(LEN + 2 * PAD);
            p.region(reg).write(0, &background(i));
            // SAFETY: the region outlives the MR: regions are freed when `p` drops, after the
            // MRs here are closed (below or at the end of this function).
            let base = unsafe { p.region(reg).ptr().add(PAD) };
            // SAFETY: as above.
            let mr = unsafe { Mr::reg(p.domain(), base, LEN, acc, 0, KEY + i as u64, 0) }.ctx("fi_mr_reg")?;
            let addr = if p.virt_addr() { base as u64 } else { 0 };
            infos.push(MrInfo { key: mr.key(), addr });
            regs.push(reg);
            mrs.push(mr);
        }
        p.share_mrs(r, &infos)?;
        if CLASS == CLOSED {
            for mr in mrs.drain(..) {
                mr.close().ctx("fi_close of the MR")?;
            }
        }
        r.pmi.step("MRs ready (closed, for closed_mr)");
        p.barrier(r)?;
        // The initiator's verdict comes once it tried every case.
        r.pmi.allgather_with("-", Some(&mut || p.progress().map(|_| ())))?;
        p.progress_for(Duration::from_millis(50))?;
        for (i, &reg) in regs.iter().enumerate() {
            let want = background(i);
            let got = p.region(reg).read(0, want.len());
            if let Some(off) = got.iter().zip(&want).position(|(a, b)| a != b) {
                bail!(
                    "target memory of MR {i} changed by the failed operations: byte {} {} the MR is {:#04x}, was {:#04x}",
                    off as i64 - PAD as i64,
                    "from the start of",
                    got[off],
                    want[off]
                );
            }
        }
        if let Some(e) = p.events.iter().find(|e| e.err == 0) {
            bail!("the target got a successful CQ entry (flags {:#x}) from a failed operation", e.flags);
        }
        drop(mrs);
        return p.barrier(r);
    }

    let all = p.share_mrs(r, &[])?;
    let mrs = all[TARGET].clone();
    ensure!(mrs.len() == nmr, "the target shared {} MRs", mrs.len());
    let mut wrong = 0xBAD0_0000_u64 ^ mrs[0].key;
    while mrs.iter().any(|m| m.key == wrong) {
        wrong = wrong.wrapping_add(0x1_0001);
    }
    p.barrier(r)?;
    p.timeout = Duration::from_secs(3);
    let mut bad = Vec::new();
    let mut codes = Vec::new();
    // A provider that stops answering fails the scenario quickly, not after every case's wait.
    let mut stuck = 0;
    for c in cases(CLASS) {
        if stuck >= 2 {
            bad.push(format!("{}: not tried (the endpoint is stuck)", c.what));
            continue;
        }
        r.pmi.step(c.what);
        let m = mrs[c.mr];
        let t = Target {
            dest: p.addrs[TARGET],
            addr: m.addr.wrapping_add(c.off as u64),
            key: if c.wrong_key { wrong } else { m.key },
        };
        match try_refused(&mut p, c.what, c.op, t, Duration::from_secs(3))? {
            Refusal::Refused(note) => codes.push(note),
            Refusal::Succeeded(m) => bad.push(m),
            Refusal::Stuck(m) => {
                bad.push(m);
                stuck += 1;
            }
        }
    }
    r.pmi.step(&format!("note: {}", codes.join("; ")));
    r.pmi.allgather_with("done", Some(&mut || p.progress().map(|_| ())))?;
    p.barrier(r)?;
    if !bad.is_empty() {
        bail!("{} of {} cases failed: {}", bad.len(), cases(CLASS).len(), bad.join("; "));
    }
    Ok(())
}

/// The MR of `close_during_write`, and what is around it before the write.
const ARRIVING: usize = 32 << 20;

fn close_background() -> Vec<u8> {
    pattern(0xC105E, ARRIVING + 2 * PAD)
}

/// The target closes its MR as soon as the first bytes of a 32 MiB write into it are placed
/// (a write that arrives over several steps: SAR segments, pushed to a target that polls, or
/// without CMA). After fi_close returns, no byte of the target's memory may change, and the
/// write, which did not land whole, must fail at the initiator (fi_mr(3): the MR's memory is
/// no longer the provider's to write).
fn close_during_write<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(MSG | RMA, M))?;
    p.exchange(r)?;
    let back = close_background();
    if r.rank == TARGET {
        let reg = p.alloc(back.len());
        p.region(reg).write(0, &back);
        // SAFETY: the region outlives the MR (closed below; regions are freed when `p` drops).
        let base = unsafe { p.region(reg).ptr().add(PAD) };
        // SAFETY: as above.
        let mr = unsafe { Mr::reg(p.domain(), base, ARRIVING, REMOTE_WRITE, 0, KEY, 0) }.ctx("fi_mr_reg")?;
        let addr = if p.virt_addr() { base as u64 } else { 0 };
        p.share_mrs(r, &[MrInfo { key: mr.key(), addr }])?;
        p.barrier(r)?;
        // Every byte the write places differs from the background: wait for the first one.
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.region(reg).read(PAD, 1)[0] == back[PAD] {
            ensure!(Instant::now() < deadline, "the write's first byte did not arrive within 10 s");
            p.progress()?;
        }
        mr.close().ctx("fi_close of the MR while a write into it arrives")?;
        let at_close = p.region(reg).read(0, back.len());
        let placed = at_close[PAD..PAD + ARRIVING].iter().zip(&back[PAD..]).filter(|(a, b)| a != b).count();
        r.pmi.step(&format!("note: {placed} of {ARRIVING} bytes placed when fi_close(mr) returned"));
        let shape = if placed == ARRIVING { "whole" } else { "partial" };
        r.pmi.allgather_with(shape, Some(&mut || p.progress().map(|_| ())))?;
        p.progress_for(Duration::from_millis(50))?;
        let now = p.region(reg).read(0, back.len());
        if let Some(off) = now.iter().zip(&at_close).position(|(a, b)| a != b) {
            bail!("byte {} from the start of the MR was written after fi_close(mr) returned", off as i64 - PAD as i64);
        }
        if let Some(e) = p.events.iter().find(|e| e.err == 0) {
            bail!("the target got a successful CQ entry (flags {:#x}) from the stopped write", e.flags);
        }
        return p.barrier(r);
    }

    let all = p.share_mrs(r, &[])?;
    let m = all[TARGET][0];
    p.barrier(r)?;
    let data: Vec<u8> = back[PAD..PAD + ARRIVING].iter().map(|b| !b).collect();
    // The target is polling by now: the write is pushed to it through SAR, segment by segment.
    std::thread::sleep(Duration::from_millis(20));
    let rma = [ffi::fi_rma_iov { addr: m.addr, len: ARRIVING, key: m.key }];
    let what = "fi_writemsg(FI_DELIVERY_COMPLETE) of 32 MiB into an MR closed as it arrives";
    let verdict = match p.writemsg(what, vec![data], p.addrs[TARGET], &rma, COMPLETION | DELIVERY_COMPLETE, 0)? {
        Ok(id) => match p.wait_for(id, Duration::from_secs(10))? {
            None => "no completion within 10 s".to_string(),
            Some(d) if d.err == 0 => "ok".to_string(),
            Some(d) => fabric::errname(d.err).to_string(),
        },
        Err(code) => format!("refused {}", fabric::errname(code)),
    };
    r.pmi.step(&format!("note: the write ended with {verdict}"));
    let shapes = r.pmi.allgather_with(&verdict, Some(&mut || p.progress().map(|_| ())))?;
    p.barrier(r)?;
    match (shapes[TARGET].as_str(), verdict.as_str()) {
        (_, "no completion within 10 s") => bail!("the write never completed"),
        ("partial", "ok") => bail!("the write completed successfully though its MR was closed before it all arrived"),
        ("whole", _) => r.pmi.step("note: the write landed whole before the close (one step: nothing to stop)"),
        _ => {}
    }
    Ok(())
}
