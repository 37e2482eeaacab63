//! A blocking wait on a CQ or counter that several endpoints share (fi_cq(3), fi_cntr(3): one
//! CQ or counter may be bound to many endpoints): an arrival at any of them ends the wait.
//!
//! `progress/wait_two_endpoints`: rank 0 opens two more endpoints, B then C, both bound to one
//! CQ and one receive counter (FI_WAIT_UNSPEC, manual progress). Rank 1 sends to C only, a few
//! milliseconds after rank 0 has gone to sleep, and rank 0 waits in `fi_cntr_wait` and
//! `fi_cq_sread` by turns; its reply from its first endpoint starts the next round. rshm used to
//! sleep on the first bound endpoint's wake word only (B's, which nobody wakes), so every round
//! took the wait's 100 ms slice: the bound on the whole run below is 20 times what the rounds need
//! and half what the old behaviour took.

use super::{finish, scn, setup, Scenario};
use crate::fabric::{self, ffi, Cntr, Cq, Ep};
use crate::harness::{check_pattern, fi_ok, pattern, FiCtx, Rank, Rx, TResult, TestErr, Tx};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![scn(
        "progress/wait_two_endpoints",
        2,
        40,
        wait_two_endpoints,
        "fi_cntr_wait and fi_cq_sread on a CQ and counter bound to two endpoints wake for an arrival at the second",
    )]
}

const LEN: usize = 64;
const ROUNDS: u64 = 20;
/// How long rank 1 waits before each message, so that rank 0 is asleep when it arrives.
const LATE: Duration = Duration::from_millis(5);

fn wait_two_endpoints(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &Default::default())?;
    let peer = addrs[1 - r.rank];
    if r.rank == 1 {
        let name = r.pmi.wait_key_with("second", &mut node.progressor())?;
        let name = crate::pmi::unhex(&name).ok_or_else(|| TestErr::Fail("bad name of rank 0's endpoint C".into()))?;
        let dest = node.insert(&name)?;
        r.pmi.barrier_with(&mut node.progressor())?;
        for round in 0..ROUNDS {
            std::thread::sleep(LATE);
            let id = node.send(&pattern(round, LEN), dest, &Tx::default())?;
            node.wait_ok(id, &format!("round {round}: send to endpoint C"))?;
            let reply = node.recv(LEN, peer, &Rx::default())?;
            let c = node.wait_ok(reply, &format!("round {round}: rank 0's reply"))?;
            check_pattern("rank 0's reply", round + 1000, &c.payload, LEN)?;
        }
        return finish(r, &mut node);
    }

    let mut cq_attr =
        ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_DATA, wait_obj: ffi::FI_WAIT_UNSPEC, ..Default::default() };
    let cq = Cq::open(node.domain(), &mut cq_attr).ctx("fi_cq_open (shared, FI_WAIT_UNSPEC)")?;
    let mut cntr_attr =
        ffi::fi_cntr_attr { events: ffi::FI_CNTR_EVENTS_COMP, wait_obj: ffi::FI_WAIT_UNSPEC, ..Default::default() };
    let cntr = Cntr::open(node.domain(), &mut cntr_attr).ctx("fi_cntr_open (shared, FI_WAIT_UNSPEC)")?;
    let open = |which: &str| -> TResult<Ep> {
        let ep = Ep::open(node.domain(), &node.info).ctx(&format!("fi_endpoint ({which})"))?;
        fi_ok(&format!("fi_ep_bind(av) ({which})"), ep.bind(node.av().fid(), 0))?;
        fi_ok(&format!("fi_ep_bind(cq) ({which})"), ep.bind(cq.fid(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64))?;
        fi_ok(&format!("fi_ep_bind(cntr, FI_RECV) ({which})"), ep.bind(cntr.fid(), ffi::FI_RECV as u64))?;
        fi_ok(&format!("fi_enable ({which})"), ep.enable())?;
        Ok(ep)
    };
    // B is bound first: the endpoint a waiter that looks at one endpoint only would sleep on.
    let b = open("endpoint B")?;
    let c = open("endpoint C")?;
    r.pmi.set("second", &crate::pmi::hex(&c.getname().ctx("fi_getname (endpoint C)")?));
    r.pmi.barrier_with(&mut node.progressor())?;

    let t0 = Instant::now();
    let mut buf = vec![0u8; LEN];
    let mut ctx = Box::new(ffi::fi_context2::default());
    for round in 0..ROUNDS {
        let what = format!("round {round}");
        buf.fill(0);
        let ctx_ptr = ctx.as_mut() as *mut ffi::fi_context2 as *mut std::ffi::c_void;
        // SAFETY: `buf` and `ctx` outlive the receive: it completes (and is read) in this round.
        let ret = unsafe { c.recv(buf.as_mut_ptr(), LEN, std::ptr::null_mut(), ffi::FI_ADDR_UNSPEC, ctx_ptr) };
        fi_ok(&format!("{what}: fi_recv on endpoint C"), ret as i64)?;
        let mut entry = [ffi::fi_cq_data_entry::default()];
        if round % 2 == 0 {
            r.pmi.step(&format!("{what}: fi_cntr_wait"));
            fi_ok(&format!("{what}: fi_cntr_wait(shared counter, {})", round + 1), cntr.wait(round + 1, 10_000))?;
            let deadline = Instant::now() + Duration::from_secs(5);
            while cq.read(&mut entry) == -(ffi::FI_EAGAIN as isize) {
                ensure!(Instant::now() < deadline, "{what}: the counter moved but the CQ has no entry");
            }
        } else {
            r.pmi.step(&format!("{what}: fi_cq_sread"));
            let n = cq.sread(&mut entry, 10_000);
            ensure!(n == 1, "{what}: fi_cq_sread on the shared CQ returned {}", fabric::errname(n as i32));
        }
        ensure!(entry[0].op_context == ctx_ptr, "{what}: the completion is not the receive's on endpoint C");
        ensure!(entry[0].len == LEN, "{what}: received {} bytes, not {LEN}", entry[0].len);
        check_pattern(&what, round, &buf, LEN)?;
        let reply = node.send(&pattern(round + 1000, LEN), peer, &Tx::default())?;
        node.wait_ok(reply, &format!("{what}: reply"))?;
    }
    let took = t0.elapsed();
    ensure!(cntr.read() == ROUNDS, "the shared counter reads {}, not {ROUNDS}", cntr.read());
    if took > Duration::from_secs(1) {
        bail!("{ROUNDS} rounds took {took:?}: a wait slept through arrivals at endpoint C");
    }
    r.pmi.step(&format!("note: {ROUNDS} rounds in {took:?}"));
    drop((b, c));
    finish(r, &mut node)
}
