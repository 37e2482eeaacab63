//! n-process scenarios: all-to-all exchange and a ring, 4 and 8 processes; a stuck sender
//! beside a busy one, 3 processes.

use super::{check_recv, scn, seed, setup, Scenario};
use crate::fabric::ffi;
use crate::harness::{check_pattern, pattern, NodeCfg, Rank, Rx, TResult, Tx};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn("multi/alltoall_4", 4, 60, alltoall, "4 processes: every rank sends to every other, sizes 64 B..1 MiB"),
        scn("multi/alltoall_8", 8, 90, alltoall, "8 processes on 2 cores: all-to-all, sizes 64 B..256 KiB"),
        scn("multi/ring_4", 4, 60, ring, "4 processes: token ring, small and 64 KiB tokens"),
        scn("multi/ring_8", 8, 90, ring, "8 processes: token ring"),
        scn(
            "multi/stuck_sender_3",
            3,
            60,
            stuck_sender,
            "3 processes: a sender that stops reading its completions holds back only its own; another's delivery-complete round trips to the same receiver complete meanwhile",
        ),
    ]
}

/// Tags of the stuck sender's messages and of the round trips (low bits: the index).
const STUCK_TAG: u64 = 1 << 40;
const ROUND_TAG: u64 = 2 << 40;
const STUCK_SENDS: u64 = 100;
const ROUNDS: u64 = 20;

/// Bytes of the stuck sender's messages: above the inject size, and (rshm: FI_RSHM_CMA_MIN
/// here) carried by CMA, which the receiver copies, and answers, only when a receive matches.
const STUCK_LEN: usize = 8192;

/// Rank 1 sends 100 delivery-complete messages to rank 0 that arrive unexpected, then stops
/// progressing: it waits in the second barrier, which does not progress its endpoint. Rank 0 receives them one by one, each
/// answered on its own as it is copied, so that its answers to rank 1 outgrow rank 1's response
/// queue (rshm: FI_RSHM_QUEUE_LEN=16 here), then serves 20 delivery-complete round trips of rank
/// 2. The second barrier needs rank 2 past its round trips, so a provider that held its answers
/// to rank 2 behind those waiting for rank 1 hangs here until the deadline. Then rank 1 reads
/// again: each of its 100 sends completes once. Where CMA is not allowed (FI_RSHM_CMA=0, or
/// the host forbids it) the messages go through SAR, whose segments need rank 1's progress to
/// arrive: rank 1 does not stop then, and the scenario only checks data and completions.
fn stuck_sender(r: &mut Rank) -> TResult {
    if r.prov == "rshm" {
        // Before the provider reads its parameters (at the first endpoint).
        std::env::set_var("FI_RSHM_QUEUE_LEN", "16");
        std::env::set_var("FI_RSHM_CMA_MIN", "4097");
    }
    // Manual progress: no provider thread reads rank 1's completions while it is stuck.
    let cfg = NodeCfg { progress: ffi::FI_PROGRESS_MANUAL, ..NodeCfg::default() };
    let (mut node, addrs) = setup(r, &cfg)?;
    let delivered = |tag: u64| Tx { tag: Some(tag), flags: Some(ffi::FI_DELIVERY_COMPLETE as u64), ..Tx::default() };
    r.pmi.barrier_with(&mut node.progressor())?;
    match r.rank {
        1 => {
            let mut sends = Vec::new();
            for i in 0..STUCK_SENDS {
                sends.push(node.send(&pattern(seed(i, 1, 0), STUCK_LEN), addrs[0], &delivered(STUCK_TAG | i))?);
            }
            r.pmi.barrier_with(&mut node.progressor())?;
            if super::passive::cma_permitted() {
                r.pmi.step("stuck: not progressing");
                r.pmi.barrier()?;
            } else {
                // Through SAR the messages need our progress to arrive: no stuck phase.
                r.pmi.barrier_with(&mut node.progressor())?;
            }
            r.pmi.step("reading again");
            for id in sends {
                node.wait_ok(id, "a delivery-complete send of the stuck sender")?;
            }
        }
        0 => {
            r.pmi.barrier_with(&mut node.progressor())?;
            for i in 0..STUCK_SENDS {
                let id = node.recv(STUCK_LEN, addrs[1], &Rx::tagged(STUCK_TAG | i, 0))?;
                let what = format!("message {i} of the stuck sender");
                let c = node.wait_op(id)?;
                check_recv(&c, &what, STUCK_LEN, true)?;
                check_pattern(&what, seed(i, 1, 0), &c.payload, STUCK_LEN)?;
            }
            r.pmi.step("round trips with rank 2");
            for i in 0..ROUNDS {
                let id = node.recv(64, addrs[2], &Rx::tagged(ROUND_TAG | i, 0))?;
                let what = format!("round trip {i} from rank 2");
                let c = node.wait_op(id)?;
                check_recv(&c, &what, 64, true)?;
                check_pattern(&what, seed(i, 2, 0), &c.payload, 64)?;
                let back = node.send(&pattern(seed(i, 0, 2), 64), addrs[2], &delivered(ROUND_TAG | i))?;
                node.wait_ok(back, "a round trip's answer to rank 2")?;
            }
            r.pmi.barrier_with(&mut node.progressor())?;
        }
        _ => {
            r.pmi.barrier_with(&mut node.progressor())?;
            for i in 0..ROUNDS {
                let id = node.recv(64, addrs[0], &Rx::tagged(ROUND_TAG | i, 0))?;
                let sent = node.send(&pattern(seed(i, 2, 0), 64), addrs[0], &delivered(ROUND_TAG | i))?;
                node.wait_ok(sent, "a delivery-complete send to the stuck sender's receiver")?;
                let what = format!("round trip {i} back from rank 0");
                let c = node.wait_op(id)?;
                check_recv(&c, &what, 64, true)?;
                check_pattern(&what, seed(i, 0, 2), &c.payload, 64)?;
            }
            r.pmi.barrier_with(&mut node.progressor())?;
        }
    }
    super::finish(r, &mut node)
}

fn alltoall(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &NodeCfg::default())?;
    let n = r.nprocs;
    let sizes: &[usize] = if n <= 4 { &[64, 4097, 65536, 1 << 20] } else { &[64, 4097, 65536, 256 << 10] };
    r.pmi.barrier_with(&mut node.progressor())?;
    for (si, &size) in sizes.iter().enumerate() {
        r.pmi.step(&format!("all-to-all size {size}"));
        for round in 0..2u64 {
            let mut rids = Vec::new();
            for src in (0..n).filter(|&s| s != r.rank) {
                let tag = ((si as u64) << 32) | ((round) << 16) | src as u64;
                rids.push((src, node.recv(size, addrs[src], &Rx::tagged(tag, 0))?));
            }
            let mut sids = Vec::new();
            for k in 1..n {
                let dst = (r.rank + k) % n;
                let tag = ((si as u64) << 32) | (round << 16) | r.rank as u64;
                let s = seed(size as u64 + round, r.rank as u64, dst as u64);
                sids.push(node.send(&pattern(s, size), addrs[dst], &Tx::tagged(tag))?);
            }
            for (src, id) in rids {
                let what = format!("size {size} round {round} from rank {src}");
                let c = node.wait_op(id)?;
                check_recv(&c, &what, size, true)?;
                check_pattern(&what, seed(size as u64 + round, src as u64, r.rank as u64), &c.payload, size)?;
            }
            for id in sids {
                node.wait_ok(id, "all-to-all send")?;
            }
        }
    }
    super::finish(r, &mut node)
}

fn ring(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &NodeCfg::default())?;
    let n = r.nprocs;
    let (left, right) = ((r.rank + n - 1) % n, (r.rank + 1) % n);
    r.pmi.barrier_with(&mut node.progressor())?;
    for (size, rounds) in [(8usize, 30u64), (65536, 5)] {
        r.pmi.step(&format!("ring size {size}"));
        for round in 0..rounds {
            let tag = round | ((size as u64) << 20);
            let rid = node.recv(size, addrs[left], &Rx::tagged(tag, 0))?;
            if r.rank == 0 {
                let sid =
                    node.send(&pattern(seed(round, right as u64, size as u64), size), addrs[right], &Tx::tagged(tag))?;
                node.wait_ok(sid, "ring send")?;
                let c = node.wait_op(rid)?;
                let what = format!("ring round {round} size {size} back at rank 0");
                check_recv(&c, &what, size, true)?;
                check_pattern(&what, seed(round, n as u64, size as u64), &c.payload, size)?;
            } else {
                let c = node.wait_op(rid)?;
                let what = format!("ring round {round} size {size} at rank {}", r.rank);
                check_recv(&c, &what, size, true)?;
                check_pattern(&what, seed(round, r.rank as u64, size as u64), &c.payload, size)?;
                let hop = if right == 0 { n } else { right };
                let sid =
                    node.send(&pattern(seed(round, hop as u64, size as u64), size), addrs[right], &Tx::tagged(tag))?;
                node.wait_ok(sid, "ring send")?;
            }
        }
    }
    super::finish(r, &mut node)
}
