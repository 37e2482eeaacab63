//! Writes into a target that does not progress, the counterpart of `passive.rs`'s reads: where
//! CMA is allowed, rshm writes a registration the target published with one
//! `process_vm_writev` of the initiator's, and completes the write (delivery complete) in the
//! call. What must hold around it: the bytes are in the target's memory when the write
//! completes, at the right offsets and nowhere else; a write outside a registration, into a
//! read-only one or with a wrong key fails with the target untouched; every write into a
//! registration bound to a FI_REMOTE_WRITE counter is counted; a write after the target closed
//! the registration fails and leaves the memory alone. Rank 0 writes, rank 1 is the target.
//! Writes of 20 KiB and more, larger than rshm's one-trip size (16 KiB), and writes of 4 KiB+1
//! to 16 KiB, enough of them that rshm's chooser of writes sent alone picks the way through the
//! target for some (`smr_core::endpoint::lone`): a target that does not progress gets ours.

use super::passive::{cma_permitted, initiator_targets, must_fail, target_mrs};
use super::rma_util::{must, Peer, Spec, Target, BASIC, MSG, REMOTE_READ, REMOTE_WRITE, RMA, SCALABLE};
use super::{scn, Scenario};
use crate::harness::{pattern, FiCtx, Rank, TResult};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    let what = "fi_write of 4 KiB+1-300 KiB into a target that sleeps without progress: bytes in place at completion, \
                errors with the target untouched, counted writes, closed MR";
    vec![
        scn("rma/scalable/passive_write", 2, 60, run::<SCALABLE>, what),
        scn("rma/basic/passive_write", 2, 60, run::<BASIC>, what),
    ]
}

const TARGET: usize = 1;
const LEN: usize = 1 << 20;
/// How long the target sleeps without progress while the initiator writes.
const ASLEEP: Duration = Duration::from_millis(1500);
/// Writes into the sleeping target, by (offset, length): overlapping, so that the order counts.
const WRITES: [(usize, usize); 10] = [
    (0, 20_000),
    (1000, 65_536),
    (4096 * 3 + 7, 300_001),
    (LEN - 65_536, 65_536),
    (7, 4097),
    (LEN / 2 + 5, 8192),
    (LEN / 2 + 4000, 12_345),
    (70_000, 16_384),
    (LEN - 6000, 6000),
    (LEN / 3, 9999),
];
/// Length of the writes that must fail and of the counted ones.
const SMALL: usize = 65_536;

/// What a registration holds before anything is written (`round`), or what write `round` sends.
fn contents(round: u64) -> Vec<u8> {
    pattern(0x3417 + round, LEN)
}

/// Bytes of write `i` (each write has its own pattern, so a byte placed by the wrong write shows).
fn write_bytes(i: usize, off: usize, len: usize) -> Vec<u8> {
    contents(10 + i as u64)[off..off + len].to_vec()
}

/// The memory of the written registration after `WRITES`, applied in order.
fn after_writes() -> Vec<u8> {
    let mut m = contents(0);
    for (i, (off, len)) in WRITES.into_iter().enumerate() {
        m[off..off + len].copy_from_slice(&write_bytes(i, off, len));
    }
    m
}

fn run<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(MSG | RMA, M))?;
    p.exchange(r)?;
    if r.rank == TARGET {
        return target(&mut p, r);
    }
    let ([a, read_only, counted], wrong) = initiator_targets(&mut p, r, TARGET)?;

    r.pmi.step("writes while the target sleeps");
    p.barrier(r)?;
    let start = Instant::now();
    for (i, (off, len)) in WRITES.into_iter().enumerate() {
        let what = format!("fi_write {i} of {len} B at {off} into the sleeping target");
        let id = must(&what, p.write(&what, write_bytes(i, off, len), a.at(off), None)?)?;
        p.wait_ok(id)?;
    }
    let took = start.elapsed();
    if cma_permitted() {
        ensure!(
            took < ASLEEP,
            "the writes took {took:?}, as long as the target slept ({ASLEEP:?}): they waited for its progress"
        );
    } else {
        r.pmi.step("note: CMA is not permitted here, so the writes waited for the target (not checked)");
    }
    p.barrier(r)?;
    // The target compares its memory with `after_writes`.
    p.barrier(r)?;

    r.pmi.step("writes that must fail, then counted writes");
    for (what, t) in [
        ("fi_write of 64 KiB crossing the MR end", a.at(LEN - SMALL / 2)),
        ("fi_write of 64 KiB into a FI_REMOTE_READ-only MR", read_only),
        ("fi_write of 64 KiB with a wrong key", Target { key: wrong, ..a }),
    ] {
        write_fails(&mut p, t, what)?;
    }
    for k in 0..3 {
        let what = format!("counted fi_write {k}");
        let id = must(&what, p.write(&what, contents(20 + k)[..SMALL].to_vec(), counted, None)?)?;
        p.wait_ok(id)?;
    }
    p.barrier(r)?;

    r.pmi.step("a write after the target closed the MR");
    p.barrier(r)?;
    write_fails(&mut p, a.at(1000), "fi_write of 64 KiB into a closed MR")?;
    p.barrier(r)?;
    p.barrier(r)
}

fn target(p: &mut Peer, r: &mut Rank) -> TResult {
    let regs: Vec<usize> = (0..3).map(|_| p.alloc(LEN)).collect();
    p.region(regs[0]).write(0, &contents(0));
    p.region(regs[1]).write(0, &contents(1));
    let (ma, c) = target_mrs(p, r, &regs, LEN, (REMOTE_READ, REMOTE_WRITE), 0x7A0)?;

    // Asleep: no progress call of any kind until the initiator has had its chance.
    r.pmi.barrier()?;
    std::thread::sleep(ASLEEP);
    p.barrier(r)?;
    same(&p.region(regs[0]).read(0, LEN), &after_writes(), "the written MR after the writes completed")?;
    p.barrier(r)?;

    // Serving the failing and the counted writes.
    p.wait_cntr(c, 3, "the FI_REMOTE_WRITE counter of the bound MR")?;
    p.progress_for(Duration::from_millis(20))?;
    ensure!(p.cntr(c).read() == 3, "the FI_REMOTE_WRITE counter reads {}, expected 3", p.cntr(c).read());
    same(&p.region(regs[2]).read(0, SMALL), &contents(22)[..SMALL], "the counted MR")?;
    same(&p.region(regs[1]).read(0, LEN), &contents(1), "the read-only MR")?;
    same(&p.region(regs[0]).read(0, LEN), &after_writes(), "the written MR after the failed writes")?;
    p.barrier(r)?;

    ma.close().ctx("fi_close of the MR")?;
    p.barrier(r)?;
    p.barrier(r)?;
    same(&p.region(regs[0]).read(0, LEN), &after_writes(), "the written MR after its close")?;
    p.barrier(r)
}

/// Compare the target's memory with what it must hold.
pub fn same(got: &[u8], want: &[u8], what: &str) -> TResult {
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        bail!("{what}: byte {i} is {:#04x}, expected {:#04x}", got[i], want[i]);
    }
    Ok(())
}

/// A write that must end in an error.
fn write_fails(p: &mut Peer, t: Target, what: &str) -> TResult {
    let posted = p.write(what, contents(30)[..SMALL].to_vec(), t, None)?;
    must_fail(p, posted, what)
}
