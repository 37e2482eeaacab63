//! Completion levels and the inject flag: every combination of the fi_inject calls, the
//! FI_INJECT flag, FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE and FI_DELIVERY_COMPLETE, with and
//! without FI_SELECTIVE_COMPLETION, completes as fi_msg(3)/fi_cq(3)/fi_cntr(3) say:
//! - the inject calls never write a CQ entry (not even on a non-selective CQ); counters count them;
//! - the FI_INJECT flag only frees the buffer at once: the send still completes as usual;
//! - with FI_SELECTIVE_COMPLETION only sends flagged FI_COMPLETION write an entry;
//! - every send bumps the send counter exactly once; nothing else reaches the CQ.
//!
//! The sender overwrites a buffer right after any call that carries FI_INJECT; the receiver checks
//! every byte. (`fi_msg_inject -A inject` of upstream fabtests hung on rshm: FI_INJECT in the
//! endpoint's op_flags suppressed the completions that the test waits for.)

use super::{check_recv, check_send, scn, seed, setup, Scenario};
use crate::fabric::{self, ffi};
use crate::harness::{check_pattern, pattern, NodeCfg, Rank, Rx, TResult, TestErr, Tx};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "pair/completion_flags",
            2,
            60,
            completion_flags,
            "inject calls, FI_INJECT, *_COMPLETE x selective completion: CQ entries and counters as specified",
        ),
        scn(
            "pair/fi_more",
            2,
            40,
            fi_more,
            "fi_sendmsg with FI_MORE then one without: every message arrives, in order, and completes",
        ),
        scn(
            "pair/inject_op_flags",
            2,
            40,
            inject_op_flags,
            "FI_INJECT in the endpoint's op_flags (fi_msg_inject -A inject): sends complete, buffers reusable",
        ),
    ]
}

const INJECT: u64 = ffi::FI_INJECT as u64;
const COMPLETION: u64 = ffi::FI_COMPLETION as u64;

/// How one send is issued.
#[derive(Clone, Copy, Debug)]
enum How {
    /// fi_tinject.
    InjectCall,
    /// fi_tsendmsg with these flags.
    SendMsg(u64),
}

struct Case {
    how: How,
    size: usize,
}

fn cases(inject_size: usize) -> Vec<Case> {
    let levels = [ffi::FI_INJECT_COMPLETE as u64, ffi::FI_TRANSMIT_COMPLETE as u64, ffi::FI_DELIVERY_COMPLETE as u64];
    let small = [1usize, 300, inject_size];
    let mut v = Vec::new();
    for &size in &small {
        v.push(Case { how: How::InjectCall, size });
        for extra in [0, COMPLETION] {
            v.push(Case { how: How::SendMsg(INJECT | extra), size });
            for &level in &levels {
                v.push(Case { how: How::SendMsg(INJECT | level | extra), size });
            }
        }
    }
    for size in [1usize, 300, 70000] {
        for extra in [0, COMPLETION] {
            v.push(Case { how: How::SendMsg(extra), size });
            for &level in &levels {
                v.push(Case { how: How::SendMsg(level | extra), size });
            }
        }
    }
    v
}

/// Does `how` write a CQ entry on a CQ bound with (or without) FI_SELECTIVE_COMPLETION?
fn writes_entry(how: How, selective: bool) -> bool {
    match how {
        How::InjectCall => false,
        How::SendMsg(flags) => !selective || flags & COMPLETION != 0,
    }
}

fn inject_size(node: &crate::harness::Node) -> TResult<usize> {
    match node.info.get().tx_attr().map_or(0, |t| t.inject_size) {
        0 => Err(TestErr::Nos(fabric::EOPNOTSUPP, "inject_size is 0".into())),
        n => Ok(n),
    }
}

fn completion_flags(r: &mut Rank) -> TResult {
    for selective in [false, true] {
        r.pmi.step(&format!("selective completion: {selective}"));
        let cfg = NodeCfg { selective, counters: true, separate_cqs: true, ..Default::default() };
        let (mut node, addrs) = setup(r, &cfg)?;
        let peer = addrs[1 - r.rank];
        let all = cases(inject_size(&node)?);
        let salt = selective as u64;
        if r.rank == 1 {
            let ids: Vec<u64> = all
                .iter()
                .enumerate()
                .map(|(k, c)| node.recv(c.size, peer, &Rx::tagged(k as u64, 0)))
                .collect::<TResult<_>>()?;
            r.pmi.barrier_with(&mut node.progressor())?;
            for (k, (c, id)) in all.iter().zip(ids).enumerate() {
                let what = format!("case {k} ({:?}, {} B, selective {selective})", c.how, c.size);
                let got = node.wait_op(id)?;
                check_recv(&got, &what, c.size, true)?;
                check_pattern(&what, seed(k as u64, salt, 7), &got.payload, c.size)?;
            }
        } else {
            r.pmi.barrier_with(&mut node.progressor())?;
            let mut expect = Vec::new();
            let mut silent = Vec::new();
            for (k, c) in all.iter().enumerate() {
                let data = pattern(seed(k as u64, salt, 7), c.size);
                let what = format!("case {k} ({:?}, {} B, selective {selective})", c.how, c.size);
                match c.how {
                    How::InjectCall => {
                        let mut buf = data;
                        node.inject(&buf, peer, Some(k as u64), None)?;
                        buf.fill(0xEE);
                    }
                    How::SendMsg(flags) => {
                        let id = node.send(
                            &data,
                            peer,
                            &Tx { tag: Some(k as u64), flags: Some(flags), iov: 1, data: None },
                        )?;
                        if flags & INJECT != 0 {
                            node.scribble(id, 0xEE);
                        }
                        if writes_entry(c.how, selective) {
                            expect.push((id, what));
                        } else {
                            silent.push((id, what));
                        }
                    }
                }
            }
            // Every send counts once on the send counter, with or without a CQ entry.
            wait_counter(&mut node, all.len() as u64)?;
            for (id, what) in &expect {
                check_send(&node.wait_op(*id)?, what)?;
            }
            node.progress_for(Duration::from_millis(50))?;
            let left = node.take_completions();
            if let Some(c) = left.first() {
                let which = silent.iter().find(|(id, _)| Some(*id) == c.op).map_or("an unknown op", |(_, w)| w);
                bail!("{} completion(s) nobody asked for; the first for {which} (flags {:#x})", left.len(), c.flags);
            }
            let cntr = node.tx_cntr.as_ref().expect("counters opened");
            ensure!(cntr.read() == all.len() as u64, "send counter {} != {} sends", cntr.read(), all.len());
            ensure!(cntr.readerr() == 0, "send counter errors {}", cntr.readerr());
        }
        super::finish(r, &mut node)?;
    }
    Ok(())
}

/// Progress until the send counter reaches `want` (a deadline turns a hang into a failure).
fn wait_counter(node: &mut crate::harness::Node, want: u64) -> TResult {
    let deadline = Instant::now() + node.timeout;
    loop {
        let now = node.tx_cntr.as_ref().expect("counters opened").read();
        ensure!(now <= want, "send counter {now} passed the {want} sends issued");
        if now == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("send counter stuck at {now} of {want}");
        }
        if node.progress()? == 0 {
            std::thread::yield_now();
        }
    }
}

fn inject_op_flags(r: &mut Rank) -> TResult {
    let cfg = NodeCfg { tx_op_flags: INJECT, counters: true, ..Default::default() };
    let (mut node, addrs) = setup(r, &cfg)?;
    let peer = addrs[1 - r.rank];
    let isz = inject_size(&node)?;
    let sizes = [0usize, 1, 208, 209, isz];
    r.pmi.barrier_with(&mut node.progressor())?;
    // Ping-pong, as fi_msg_inject does: each side waits for its send's completion.
    for (k, &size) in sizes.iter().enumerate() {
        let what = format!("fi_tsend of {size} B with FI_INJECT in op_flags");
        let rid = node.recv(size, peer, &Rx::tagged(k as u64, 0))?;
        if r.rank == 0 {
            let sid = node.send(&pattern(seed(k as u64, 0, 9), size), peer, &Tx::tagged(k as u64))?;
            node.scribble(sid, 0xEE);
            check_send(&node.wait_op(sid)?, &what)?;
        }
        let c = node.wait_op(rid)?;
        check_recv(&c, &what, size, true)?;
        check_pattern(&what, seed(k as u64, (r.rank == 1) as u64 ^ 1, 9), &c.payload, size)?;
        if r.rank == 1 {
            let sid = node.send(&pattern(seed(k as u64, 1, 9), size), peer, &Tx::tagged(k as u64))?;
            node.scribble(sid, 0xEE);
            check_send(&node.wait_op(sid)?, &what)?;
        }
    }
    wait_counter(&mut node, sizes.len() as u64)?;
    super::finish(r, &mut node)
}

/// FI_MORE says more sends follow at once; a provider may hold such sends until the first call
/// without it (rshm batches them into the peer's ring together). Held or not, every message must
/// arrive, in the order sent (untagged receives complete in posting order, so receive k must hold
/// message k), and every send must complete and count once. A large message in the middle
/// must not overtake the small ones held before it.
fn fi_more(r: &mut Rank) -> TResult {
    const MORE: u64 = ffi::FI_MORE as u64;
    let cfg = NodeCfg { counters: true, ..Default::default() };
    let (mut node, addrs) = setup(r, &cfg)?;
    let peer = addrs[1 - r.rank];
    let isz = inject_size(&node)?;
    let sizes = [1usize, 8, 300, isz, 0, 70000, 8, 8, 8, 16, isz, 1];
    if r.rank == 1 {
        let ids: Vec<u64> = sizes.iter().map(|&n| node.recv(n, peer, &Rx::default())).collect::<TResult<_>>()?;
        r.pmi.barrier_with(&mut node.progressor())?;
        for (k, (&size, id)) in sizes.iter().zip(ids).enumerate() {
            let what = format!("message {k} of {size} B (FI_MORE on all but the last)");
            let got = node.wait_op(id)?;
            check_recv(&got, &what, size, false)?;
            check_pattern(&what, seed(k as u64, 0, 11), &got.payload, size)?;
        }
    } else {
        r.pmi.barrier_with(&mut node.progressor())?;
        let last = sizes.len() - 1;
        let ids: Vec<u64> = sizes
            .iter()
            .enumerate()
            .map(|(k, &size)| {
                let flags = if k == last { 0 } else { MORE };
                let tx = Tx { tag: None, flags: Some(flags), iov: 1, data: None };
                node.send(&pattern(seed(k as u64, 0, 11), size), peer, &tx)
            })
            .collect::<TResult<_>>()?;
        for (k, id) in ids.into_iter().enumerate() {
            check_send(&node.wait_op(id)?, &format!("send {k} (FI_MORE on all but the last)"))?;
        }
        wait_counter(&mut node, sizes.len() as u64)?;
    }
    super::finish(r, &mut node)
}
