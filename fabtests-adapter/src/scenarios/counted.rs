//! Remote writes and reads that the target counts, made while the target does not progress.
//! OpenSHMEM's default build binds every registration to its target counter
//! (`fi_mr_bind(mr, cntr, FI_REMOTE_WRITE)`) and waits on it in `fi_cntr_wait`; where CMA is
//! allowed, rshm then copies with the initiator's own `process_vm_writev`/`readv` and the target
//! counts the copy on its next progress pass, as it does for registrations no counter counts.
//! What must hold:
//! - `cntr/counted_copies_asleep`: writes of 2 KiB+1 to 1 MiB into a registration bound to a
//!   FI_REMOTE_WRITE counter, and reads of 3000 B to 1 MiB with a FI_REMOTE_READ counter bound
//!   to the endpoint after fi_enable (as SOS binds), complete while the target sleeps without
//!   progress; once it reads its counters they say exactly how many landed, and the bytes are
//!   the initiator's;
//! - `cntr/counted_copies_wake`, `progress/counted_copies_wake` (manual and auto progress): a
//!   target asleep in `fi_cntr_wait` is woken by each counted write, not by the end of its
//!   sleep's slice, and the counter reads exactly the writes made.
//!
//! Rank 0 writes and reads, rank 1 is the target.

use super::counters::cntr_wait;
use super::passive::cma_permitted;
use super::passive_write::same;
use super::rma_util::{must, payload, Peer, Spec, Target, BASIC, MSG, REMOTE_READ, REMOTE_WRITE, RMA};
use super::{scn, Scenario};
use crate::harness::{pattern, Rank, TResult};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "cntr/counted_copies_asleep",
            2,
            60,
            asleep,
            "fi_write 2 KiB+1-1 MiB into an MR bound to a FI_REMOTE_WRITE counter and fi_read 3000 B-1 MiB with an \
             endpoint FI_REMOTE_READ counter bound after fi_enable, while the target sleeps: complete, counted exactly",
        ),
        scn(
            "cntr/counted_copies_wake",
            2,
            60,
            wake::<false>,
            "a target asleep in fi_cntr_wait on its MR's counter wakes at each counted fi_write, manual progress",
        ),
        scn(
            "progress/counted_copies_wake",
            2,
            60,
            wake::<true>,
            "a target asleep in fi_cntr_wait on its MR's counter wakes at each counted fi_write, FI_PROGRESS_AUTO",
        ),
    ]
}

const TARGET: usize = 1;
const LEN: usize = 2 << 20;
/// How long the target sleeps without progress while the initiator writes and reads.
const ASLEEP: Duration = Duration::from_millis(1500);
/// Writes (offset, length) into the written registration, none within 2 KiB (those go through
/// the target's ring, and wait for it); the first two within an inject buffer, above rshm's
/// `LONE_WRITE_MIN`.
const WRITES: [(usize, usize); 8] = [
    (600_000, 2049),
    (610_000, 4096),
    (0, 4097),
    (5000, 8192),
    (20_000, 16_384),
    (40_000, 65_536),
    (200_000, 300_001),
    (LEN - (1 << 20), 1 << 20),
];
/// Reads (offset, length) of the read registration.
const READS: [(usize, usize); 3] = [(7, 3000), (10_000, 16_384), (LEN - (1 << 20), 1 << 20)];

/// The target's registrations: one written, bound to a FI_REMOTE_WRITE counter, one read, and
/// a FI_REMOTE_READ counter bound to the endpoint after fi_enable. Returns the written region
/// and the two counters.
fn counted_target(p: &mut Peer, r: &mut Rank) -> TResult<(usize, usize, usize)> {
    let (written, read) = (p.alloc(LEN), p.alloc(LEN));
    p.region(read).write(0, &pattern(0x5EAD, LEN));
    let (mw, iw) = p.reg(written, 0, LEN, REMOTE_WRITE, 0x3C0, 0)?;
    let (_, ir) = p.reg(read, 0, LEN, REMOTE_READ, 0x3C1, 0)?;
    let cw = p.new_cntr()?;
    p.bind_mr_cntr(mw, cw, REMOTE_WRITE)?;
    let cr = p.bind_cntr_after_enable(REMOTE_READ)?;
    p.share_mrs(r, &[iw, ir])?;
    Ok((written, cw, cr))
}

/// The initiator's view of `counted_target`: the written and the read registration.
fn counted_targets(p: &mut Peer, r: &mut Rank) -> TResult<(Target, Target)> {
    let all = p.share_mrs(r, &[])?;
    ensure!(all[TARGET].len() == 2, "the target shared {} MRs", all[TARGET].len());
    let mk = |i: usize| Target { dest: p.addrs[TARGET], addr: all[TARGET][i].addr, key: all[TARGET][i].key };
    Ok((mk(0), mk(1)))
}

/// Bytes of write `i`.
fn write_bytes(i: usize, len: usize) -> Vec<u8> {
    pattern(0xC0DE + i as u64, len)
}

fn asleep(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(MSG | RMA, BASIC))?;
    p.exchange(r)?;
    if r.rank == TARGET {
        let (written, cw, cr) = counted_target(&mut p, r)?;
        r.pmi.barrier()?;
        std::thread::sleep(ASLEEP);
        p.barrier(r)?;
        // Reading the counters drives progress: it takes the counts.
        p.wait_cntr(cw, WRITES.len() as u64, "the FI_REMOTE_WRITE counter of the written MR")?;
        p.wait_cntr(cr, READS.len() as u64, "the endpoint's FI_REMOTE_READ counter")?;
        p.progress_for(Duration::from_millis(20))?;
        let (w, rd) = (p.cntr(cw).read(), p.cntr(cr).read());
        ensure!(
            (w, rd) == (WRITES.len() as u64, READS.len() as u64),
            "the counters read {w} writes and {rd} reads, expected {} and {}",
            WRITES.len(),
            READS.len()
        );
        ensure!(p.cntr(cw).readerr() == 0 && p.cntr(cr).readerr() == 0, "a counter counted errors");
        for (i, (off, len)) in WRITES.into_iter().enumerate() {
            same(&p.region(written).read(off, len), &write_bytes(i, len), &format!("write {i} of {len} B at {off}"))?;
        }
        return p.barrier(r);
    }
    let (w, rd) = counted_targets(&mut p, r)?;
    r.pmi.barrier()?;
    let start = Instant::now();
    for (i, (off, len)) in WRITES.into_iter().enumerate() {
        let what = format!("fi_write {i} of {len} B at {off} into the sleeping target's counted MR");
        let id = must(&what, p.write(&what, write_bytes(i, len), w.at(off), None)?)?;
        p.wait_ok(id)?;
    }
    let whole = pattern(0x5EAD, LEN);
    for (off, len) in READS {
        let what = format!("fi_read of {len} B at {off} from the sleeping target (FI_REMOTE_READ counted)");
        let id = must(&what, p.read(&what, len, rd.at(off))?)?;
        let d = p.wait_ok(id)?;
        same(payload(&what, &d.bufs[0], len)?, &whole[off..off + len], &what)?;
    }
    let took = start.elapsed();
    if cma_permitted() {
        ensure!(
            took < ASLEEP,
            "the counted writes and reads took {took:?}, as long as the target slept ({ASLEEP:?}): they waited for \
             its progress"
        );
    } else {
        r.pmi.step("note: CMA is not permitted here, so the copies waited for the target (not checked)");
    }
    p.barrier(r)?;
    p.barrier(r)
}

/// Rounds of `wake`: a write, then the target's answer once its wait ended.
const ROUNDS: u64 = 12;
/// How long the initiator lets the target sleep before each write: past a blocking wait's
/// first polls, so that the write finds it asleep.
const LET_SLEEP: Duration = Duration::from_millis(5);
/// The most a round's answer may take, from the write's completion, in the median: rshm's
/// blocking waits look again every 100 ms without a wake-up, so a lost one costs 50-100 ms.
const WOKEN_WITHIN: Duration = Duration::from_millis(40);

fn wake<const AUTO: bool>(r: &mut Rank) -> TResult {
    let mut spec = Spec::new(MSG | RMA, BASIC);
    spec.auto_progress = AUTO && r.rank == TARGET;
    let mut p = Peer::open(r, &spec)?;
    p.exchange(r)?;
    if r.rank == TARGET {
        let (_, cw, _) = counted_target(&mut p, r)?;
        r.pmi.barrier()?;
        for k in 1..=ROUNDS {
            cntr_wait(&p, cw, k, p.timeout, &format!("counted write {k}"))?;
            let v = p.cntr(cw).read();
            ensure!(v == k, "after counted write {k} the counter reads {v}");
            let id = p.send(k.to_le_bytes().to_vec(), p.addrs[0])?;
            p.wait_ok(id)?;
        }
        return p.barrier(r);
    }
    let (w, _) = counted_targets(&mut p, r)?;
    r.pmi.barrier()?;
    let mut answers = Vec::new();
    for k in 1..=ROUNDS {
        let recv = p.recv(8)?;
        std::thread::sleep(LET_SLEEP);
        let len = 8192 + k as usize;
        let what = format!("counted fi_write {k} of {len} B into the target asleep in fi_cntr_wait");
        let id = must(&what, p.write(&what, write_bytes(k as usize, len), w.at(0), None)?)?;
        p.wait_ok(id)?;
        let written = Instant::now();
        let d = p.wait_ok(recv)?;
        answers.push(written.elapsed());
        ensure!(d.len == 8 && d.bufs[0].len() == 8, "the target's answer: {} bytes", d.len);
        let got = u64::from_le_bytes(d.bufs[0][..8].try_into().expect("8 bytes"));
        ensure!(got == k, "the target answered round {got} in round {k}");
    }
    answers.sort();
    let median = answers[answers.len() / 2];
    r.pmi.step(&format!("note: answers {:?} to {:?}, median {median:?}", answers[0], answers[answers.len() - 1]));
    if median > WOKEN_WITHIN {
        bail!(
            "the target's answers took {median:?} in the median after the write completed ({:?} to {:?}): its \
             fi_cntr_wait was not woken by the counted writes",
            answers[0],
            answers[answers.len() - 1]
        );
    }
    p.barrier(r)
}
