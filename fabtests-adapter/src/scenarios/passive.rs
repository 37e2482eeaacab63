//! Reads from a target that does not progress (fi_rma(3): a provider may serve RMA without the
//! target's involvement, as issue 7 asks of rshm where CMA is allowed), and what must still hold
//! around them: fresh data after the target rewrites its memory, errors for reads outside a
//! registration, from a write-only one or with a wrong key, every read counted on a registration
//! bound to a FI_REMOTE_READ counter, and an error, not stale bytes, after the target closes the
//! registration. Rank 0 reads, rank 1 is the target. Reads of 20 KiB and more, larger than
//! rshm's one-trip size (16 KiB), and reads of 2 KiB+1 to 16 KiB, enough of them that rshm's
//! chooser of reads sent alone picks the target's answer for some (`smr_core::endpoint::lone`):
//! a target that does not progress gets ours.

use super::rma_util::{
    must, payload, MrInfo, Peer, Spec, Target, BASIC, MSG, REMOTE_READ, REMOTE_WRITE, RMA, SCALABLE,
};
use super::{scn, Scenario};
use crate::fabric::Mr;
use crate::harness::{pattern, FiCtx, Rank, TResult};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "rma/scalable/passive_read",
            2,
            60,
            run::<SCALABLE>,
            "fi_read of 2 KiB+1-1 MiB from a target that sleeps without progress: data, fresh data after a rewrite, errors, counted reads, closed MR",
        ),
        scn(
            "rma/basic/passive_read",
            2,
            60,
            run::<BASIC>,
            "fi_read of 2 KiB+1-1 MiB from a target that sleeps without progress: data, fresh data after a rewrite, errors, counted reads, closed MR",
        ),
    ]
}

const TARGET: usize = 1;
const LEN: usize = 1 << 20;
/// How long the target sleeps without progress while the initiator reads.
const ASLEEP: Duration = Duration::from_millis(1500);
/// Reads from the sleeping target, by (offset, length).
const READS: [(usize, usize); 10] = [
    (0, 20_000),
    (1000, 65_536),
    (4096 * 3 + 7, 300_001),
    (0, LEN),
    (7, 2049),
    (5000, 4096),
    (70_000, 8192),
    (100, 12_345),
    (200_000, 16_384),
    (LEN - 3000, 3000),
];

fn contents(round: u64) -> Vec<u8> {
    pattern(0x9A55 + round, LEN)
}

fn run<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(MSG | RMA, M))?;
    p.exchange(r)?;
    if r.rank == TARGET {
        return target(&mut p, r);
    }
    let ([a, write_only, counted], wrong) = initiator_targets(&mut p, r, TARGET)?;

    r.pmi.step("reads while the target sleeps");
    p.barrier(r)?;
    let start = Instant::now();
    for (off, len) in READS {
        read_check(&mut p, a.at(off), len, &contents(0)[off..off + len], "from the sleeping target")?;
    }
    let took = start.elapsed();
    if cma_permitted() {
        ensure!(
            took < ASLEEP,
            "the reads took {took:?}, as long as the target slept ({ASLEEP:?}): they waited for its progress"
        );
    } else {
        r.pmi.step("note: CMA is not permitted here, so the reads waited for the target (not checked)");
    }
    p.barrier(r)?;

    r.pmi.step("reads after the target rewrote its memory");
    p.barrier(r)?;
    for (off, len) in READS {
        read_check(&mut p, a.at(off), len, &contents(1)[off..off + len], "after the target's rewrite")?;
    }

    r.pmi.step("reads that must fail");
    for (what, t, len) in [
        ("fi_read of 64 KiB crossing the MR end", a.at(LEN - 32_768), 65_536),
        ("fi_read of 64 KiB from a FI_REMOTE_WRITE-only MR", write_only, 65_536),
        ("fi_read of 64 KiB with a wrong key", Target { key: wrong, ..a }, 65_536),
    ] {
        read_fails(&mut p, t, len, what)?;
    }

    r.pmi.step("reads of an MR bound to a FI_REMOTE_READ counter");
    for k in 0..3 {
        read_check(&mut p, counted, 65_536, &contents(2)[..65_536], &format!("counted read {k}"))?;
    }
    p.barrier(r)?;

    r.pmi.step("a read after the target closed the MR");
    p.barrier(r)?;
    read_fails(&mut p, a.at(1000), 65_536, "fi_read of 64 KiB from a closed MR")?;
    p.barrier(r)
}

fn target(p: &mut Peer, r: &mut Rank) -> TResult {
    let regs: Vec<usize> = (0..3).map(|_| p.alloc(LEN)).collect();
    p.region(regs[0]).write(0, &contents(0));
    p.region(regs[2]).write(0, &contents(2));
    let (ma, c) = target_mrs(p, r, &regs, LEN, (REMOTE_WRITE, REMOTE_READ), 0x9A0)?;

    // Asleep: no progress call of any kind until the initiator has had its chance.
    r.pmi.barrier()?;
    std::thread::sleep(ASLEEP);
    p.barrier(r)?;

    p.region(regs[0]).write(0, &contents(1));
    p.barrier(r)?;
    // Serving the failing and the counted reads.
    p.wait_cntr(c, 3, "the FI_REMOTE_READ counter of the bound MR")?;
    p.progress_for(Duration::from_millis(20))?;
    ensure!(p.cntr(c).read() == 3, "the FI_REMOTE_READ counter reads {}, expected 3", p.cntr(c).read());
    p.barrier(r)?;

    ma.close().ctx("fi_close of the MR")?;
    p.barrier(r)?;
    p.barrier(r)
}

/// The target's three registrations of `len` bytes over `regs` (keys `key`, `key + 1`,
/// `key + 2`), shared with every rank: a readable and writable one it may close mid-scenario
/// (returned), one allowing `access.0` only, and one allowing `access.1` bound to a counter
/// for that access (returned: its index). Not supported if the provider refuses the binding.
pub fn target_mrs(
    p: &mut Peer,
    r: &mut Rank,
    regs: &[usize],
    len: usize,
    access: (u64, u64),
    key: u64,
) -> TResult<(Mr, usize)> {
    // Registered here, not through `p.reg`, so that it can be closed mid-scenario.
    let base = p.region(regs[0]).ptr();
    // SAFETY: the region outlives the MR: regions are freed when `p` drops, after the caller
    // closed this MR.
    let ma = unsafe { Mr::reg(p.domain(), base, len, REMOTE_READ | REMOTE_WRITE, 0, key, 0) }.ctx("fi_mr_reg")?;
    let ia = MrInfo { key: ma.key(), addr: if p.virt_addr() { base as u64 } else { 0 } };
    let (_, ib) = p.reg(regs[1], 0, len, access.0, key + 1, 0)?;
    let (mc, ic) = p.reg(regs[2], 0, len, access.1, key + 2, 0)?;
    let c = p.new_cntr()?;
    p.bind_mr_cntr(mc, c, access.1)?;
    if p.mr_rma_event() {
        crate::harness::fi_ok("fi_mr_enable", p.mr(mc).enable())?;
    }
    p.share_mrs(r, &[ia, ib, ic])?;
    Ok((ma, c))
}

/// The initiator's side of `target_mrs`: the three registrations of rank `target`, and a key
/// none of them has.
pub fn initiator_targets(p: &mut Peer, r: &mut Rank, target: usize) -> TResult<([Target; 3], u64)> {
    let all = p.share_mrs(r, &[])?;
    ensure!(all[target].len() == 3, "the target shared {} MRs", all[target].len());
    let mk = |i: usize| Target { dest: p.addrs[target], addr: all[target][i].addr, key: all[target][i].key };
    let mut wrong = 0xBAD0_0000_u64 ^ all[target][0].key;
    while all[target].iter().any(|m| m.key == wrong) {
        wrong = wrong.wrapping_add(0x1_0001);
    }
    Ok(([mk(0), mk(1), mk(2)], wrong))
}

/// Read `len` bytes at `t` and compare them with `want`.
fn read_check(p: &mut Peer, t: Target, len: usize, want: &[u8], when: &str) -> TResult {
    let what = format!("fi_read of {len} B {when}");
    let id = must(&what, p.read(&what, len, t)?)?;
    let d = p.wait_ok(id)?;
    let got = payload(&what, &d.bufs[0], len)?;
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        bail!("{what}: byte {i} is {:#04x}, the target holds {:#04x}", got[i], want[i]);
    }
    Ok(())
}

/// A read that must end in an error.
fn read_fails(p: &mut Peer, t: Target, len: usize, what: &str) -> TResult {
    let posted = p.read(what, len, t)?;
    must_fail(p, posted, what)
}

/// An operation that must end in an error: refused at the call (`posted` is the error), or
/// completed with an error.
pub fn must_fail(p: &mut Peer, posted: Result<u64, i32>, what: &str) -> TResult {
    let Ok(id) = posted else { return Ok(()) };
    match p.wait_for(id, Duration::from_secs(5))? {
        None => bail!("{what}: no completion within 5 s"),
        Some(d) if d.err == 0 => bail!("{what}: completed successfully"),
        Some(_) => Ok(()),
    }
}

/// Whether this host lets a process read another's memory (process_vm_readv: Yama, seccomp),
/// and neither rshm's test switch nor its FI_RSHM_CMA parameter forbids it: without CMA, a read
/// must wait for the target.
pub fn cma_permitted() -> bool {
    if std::env::var("RSHM_TEST_DENY_CMA").as_deref() == Ok("1") {
        return false;
    }
    // libfabric's boolean parameters: 0, no, false, off (any case) say no.
    if std::env::var("FI_RSHM_CMA").is_ok_and(|v| ["0", "no", "false", "off"].contains(&v.to_lowercase().as_str())) {
        return false;
    }
    if std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").is_ok_and(|v| v.trim() != "0") {
        return false;
    }
    let src = [7u8; 8];
    let mut dst = [0u8; 8];
    let local = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: src.as_ptr() as *mut _, iov_len: 8 };
    // SAFETY: both iovecs describe live 8-byte stack buffers of this process.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == 8 && dst == src
}
