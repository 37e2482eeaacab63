//! FI_PROGRESS_AUTO for one-sided operations (fi_domain(3) data_progress): a passive target
//! opened with domain_attr->data_progress = FI_PROGRESS_AUTO (n/s if getinfo refuses it) makes
//! no libfabric call while a peer puts, gets and atomically adds, and everything still completes:
//! - `progress/cntr_wait`: the target sleeps in one fi_cntr_wait on its MR-bound counter;
//! - `progress/sleeping_target`: the target just sleeps (std::thread::sleep); the initiator's
//!   operations must all complete meanwhile, and the target finds the data in place afterwards
//!   without calling libfabric; once it has served everything, its process uses under a tenth
//!   of a CPU while it sleeps on (a progress thread must sleep too, not poll).
//! - `progress/polled_then_sleeping`: the same, after the target polled its CQ in a tight loop
//!   for a while (a provider's progress thread may stand aside while the application polls; it
//!   must come back when the polling stops without a blocking call).
//! - `progress/other_endpoint`: the target polls the CQ of one endpoint without pause while the
//!   peer puts, gets and adds through a second endpoint of the same domain, which the target's
//!   application never drives: the provider must serve it all the same.
//!
//! The initiator uses the provider's default progress model.

use super::counters::{check_writes, cntr_wait, fill_reads, ranges, run_op, words, Op};
use super::rma_util::{Peer, Spec, Target, ATOMIC, BASIC, MSG, REMOTE_READ, REMOTE_WRITE, RMA, RMA_EVENT};
use super::{scn, Scenario};
use crate::harness::{cpu_time, fi_ok, Rank, TResult, TestErr};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "progress/cntr_wait",
            2,
            40,
            cntr_wait_target,
            "FI_PROGRESS_AUTO target asleep in fi_cntr_wait on its MR counter while the peer gets, adds and puts",
        ),
        scn(
            "progress/sleeping_target",
            2,
            40,
            |r| sleeping_target(r, Duration::ZERO),
            "FI_PROGRESS_AUTO target in std::thread::sleep: the peer's puts, gets and atomics complete meanwhile",
        ),
        scn(
            "progress/polled_then_sleeping",
            2,
            40,
            |r| sleeping_target(r, Duration::from_millis(300)),
            "FI_PROGRESS_AUTO target polls fi_cq_read for 300 ms, then sleeps: the peer's operations complete meanwhile",
        ),
        scn(
            "progress/other_endpoint",
            2,
            60,
            other_endpoint,
            "FI_PROGRESS_AUTO target polls one endpoint's CQ without pause; the peer's RMA and atomics to its second endpoint complete",
        ),
    ]
}

const TARGET: usize = 1;
const REGION: usize = 4 << 20;
const DATA: usize = 4096;

fn auto_spec(caps: u64) -> Spec {
    let mut s = Spec::new(caps, BASIC);
    s.auto_progress = true;
    s
}

fn cntr_wait_target(r: &mut Rank) -> TResult {
    // Gets first: they must complete while the target sits in fi_cntr_wait for the rest.
    let ops = [
        Op::Read(8),
        Op::Read(1 << 20),
        Op::AtomicSum(3),
        Op::AtomicSum(4),
        Op::AtomicSum(5),
        Op::Write(8),
        Op::Write(4097),
        Op::Write(1 << 20),
    ];
    let at = ranges(&ops, DATA);
    let counted = ops.iter().filter(|o| o.is_write()).count() as u64;
    let w = words(&ops);
    if r.rank == TARGET {
        let mut p = Peer::open(r, &auto_spec(MSG | RMA | ATOMIC | RMA_EVENT))?;
        p.exchange(r)?;
        let c = p.new_cntr()?;
        let reg = p.alloc(REGION);
        fill_reads(&p, reg, &ops, &at);
        let flags = if p.mr_rma_event() { RMA_EVENT } else { 0 };
        let (m, info) = p.reg(reg, 0, REGION, REMOTE_READ | REMOTE_WRITE, 0xA0, flags)?;
        p.bind_mr_cntr(m, c, REMOTE_WRITE)?;
        if p.mr_rma_event() {
            fi_ok("fi_mr_enable", p.mr(m).enable())?;
        }
        p.share_mrs(r, &[info])?;
        r.pmi.barrier()?;
        // One blocking call for the whole exchange.
        cntr_wait(&p, c, counted, p.timeout, "the peer's atomics and puts (MR counter)")?;
        check_writes(&p, reg, &ops, &at, w[ops.len()], "target memory when fi_cntr_wait returned")?;
        return r.pmi.barrier();
    }
    let mut p = Peer::open(r, &Spec::new(MSG | RMA | ATOMIC, BASIC))?;
    p.exchange(r)?;
    let all = p.share_mrs(r, &[])?;
    let m = *all[TARGET].first().ok_or_else(|| TestErr::Fail("the target shared no MR".into()))?;
    let t = Target { dest: p.addrs[TARGET], addr: m.addr, key: m.key };
    r.pmi.barrier()?;
    // Past the blocking wait's first polls: the target sleeps in it, its progress thread serving
    // (a provider may then have the thread push large reads).
    std::thread::sleep(Duration::from_millis(20));
    for (k, &op) in ops.iter().enumerate() {
        r.pmi.step(&format!("{op:?} while the target is in fi_cntr_wait"));
        run_op(&mut p, k, op, at[k], t, w[k])?;
    }
    r.pmi.barrier_with(&mut || p.progress().map(|_| ()))
}

/// How long an auto-progress target that has served everything sleeps while its CPU time is
/// counted (`sleeping_target`).
const IDLE_WINDOW: Duration = Duration::from_millis(300);

/// The target first polls its CQ for `polling` (none: it sleeps at once), then sleeps. Once the
/// peer's operations are done, the process must cost (nearly) no CPU while it goes on sleeping.
fn sleeping_target(r: &mut Rank, polling: Duration) -> TResult {
    let ops = [
        Op::Write(8),
        Op::Write(1 << 20),
        Op::Writemsg(4097),
        Op::Read(8),
        Op::Read(1 << 20),
        Op::FetchSum(1),
        Op::FetchSum(1),
        Op::AtomicSum(10),
        Op::FetchSum(1),
    ];
    let at = ranges(&ops, DATA);
    let w = words(&ops);
    let sleep = Duration::from_secs(2);
    if r.rank == TARGET {
        let mut p = Peer::open(r, &auto_spec(MSG | RMA | ATOMIC))?;
        p.exchange(r)?;
        let reg = p.alloc(REGION);
        fill_reads(&p, reg, &ops, &at);
        let (_, info) = p.reg(reg, 0, REGION, REMOTE_READ | REMOTE_WRITE, 0xA1, 0)?;
        p.share_mrs(r, &[info])?;
        r.pmi.barrier()?;
        let end = Instant::now() + polling;
        while Instant::now() < end {
            p.progress()?;
        }
        r.pmi.set("asleep", "1");
        std::thread::sleep(sleep);
        // Still no libfabric call: did the initiator finish while we slept?
        let done = r.pmi.get_with("done", None)?;
        ensure!(
            done.is_some(),
            "the peer's puts, gets and atomics did not all complete during the target's {sleep:?} sleep \
             (FI_PROGRESS_AUTO: the provider progresses without application calls, fi_domain(3))"
        );
        // The data is in place without a libfabric call either.
        let deadline = Instant::now() + p.timeout;
        loop {
            match check_writes(&p, reg, &ops, &at, w[ops.len()], "target memory after sleeping") {
                Ok(()) => break,
                Err(TestErr::Fail(m)) if Instant::now() > deadline => bail!("{m}"),
                Err(TestErr::Fail(_)) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => return Err(e),
            }
        }
        // Served, and nothing more comes: the provider's threads must go to sleep too.
        let (wall, cpu) = (Instant::now(), cpu_time());
        std::thread::sleep(IDLE_WINDOW);
        let (idle, spent) = (wall.elapsed(), cpu_time() - cpu);
        ensure!(
            spent < idle / 10,
            "the process used {spent:?} of CPU in {idle:?} with nothing to serve and no libfabric call: \
             a progress thread polls instead of sleeping"
        );
        return r.pmi.barrier();
    }
    let mut p = Peer::open(r, &Spec::new(MSG | RMA | ATOMIC, BASIC))?;
    p.exchange(r)?;
    let all = p.share_mrs(r, &[])?;
    let m = *all[TARGET].first().ok_or_else(|| TestErr::Fail("the target shared no MR".into()))?;
    let t = Target { dest: p.addrs[TARGET], addr: m.addr, key: m.key };
    r.pmi.barrier()?;
    r.pmi.wait_key_with("asleep", &mut || p.progress().map(|_| ()))?;
    let t0 = Instant::now();
    for (k, &op) in ops.iter().enumerate() {
        r.pmi.step(&format!("{op:?} while the target sleeps"));
        run_op(&mut p, k, op, at[k], t, w[k])?;
    }
    r.pmi.set("done", "1");
    r.pmi.step(&format!("note: all operations completed {:?} after the target fell asleep", t0.elapsed()));
    r.pmi.barrier_with(&mut || p.progress().map(|_| ()))
}

fn other_endpoint(r: &mut Rank) -> TResult {
    let ops = [Op::Write(8), Op::Read(8), Op::FetchSum(1), Op::Write(4097), Op::Read(1 << 20), Op::AtomicSum(7)];
    let at = ranges(&ops, DATA);
    let w = words(&ops);
    if r.rank == TARGET {
        let mut p = Peer::open(r, &auto_spec(MSG | RMA | ATOMIC))?;
        p.exchange(r)?;
        let second = p.open_second_ep()?;
        r.pmi.set("second", &crate::pmi::hex(&second));
        let reg = p.alloc(REGION);
        fill_reads(&p, reg, &ops, &at);
        let (_, info) = p.reg(reg, 0, REGION, REMOTE_READ | REMOTE_WRITE, 0xA2, 0)?;
        p.share_mrs(r, &[info])?;
        r.pmi.barrier()?;
        // Poll the first endpoint's CQ, and nothing else, until the peer is done (also while
        // asking whether it is: no pause in the polling for a progress thread to fill).
        let deadline = Instant::now() + p.timeout * 2;
        loop {
            for _ in 0..1024 {
                p.progress()?;
            }
            if r.pmi.get_with("done", Some(&mut || p.progress().map(|_| ())))?.is_some() {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "the peer's operations through our second endpoint did not complete while we polled the first"
            );
        }
        check_writes(&p, reg, &ops, &at, w[ops.len()], "target memory after the peer's operations")?;
        return r.pmi.barrier();
    }
    let mut p = Peer::open(r, &Spec::new(MSG | RMA | ATOMIC, BASIC))?;
    p.exchange(r)?;
    let second = r.pmi.wait_key_with("second", &mut || Ok(()))?;
    let name = crate::pmi::unhex(&second).ok_or_else(|| TestErr::Fail("bad second endpoint name".into()))?;
    let dest = p.insert_addr(&name)?;
    let all = p.share_mrs(r, &[])?;
    let m = *all[TARGET].first().ok_or_else(|| TestErr::Fail("the target shared no MR".into()))?;
    let t = Target { dest, addr: m.addr, key: m.key };
    r.pmi.barrier()?;
    let t0 = Instant::now();
    for (k, &op) in ops.iter().enumerate() {
        r.pmi.step(&format!("{op:?} to the target's second endpoint while it polls the first"));
        run_op(&mut p, k, op, at[k], t, w[k])?;
    }
    r.pmi.step(&format!("note: all operations completed in {:?}", t0.elapsed()));
    r.pmi.set("done", "1");
    r.pmi.barrier_with(&mut || p.progress().map(|_| ()))
}
