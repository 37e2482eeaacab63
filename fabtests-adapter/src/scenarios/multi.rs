//! n-process scenarios: all-to-all exchange and a ring, 4 and 8 processes.

use super::{check_recv, scn, seed, setup, Scenario};
use crate::harness::{check_pattern, pattern, NodeCfg, Rank, Rx, TResult, Tx};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn("multi/alltoall_4", 4, 60, alltoall, "4 processes: every rank sends to every other, sizes 64 B..1 MiB"),
        scn("multi/alltoall_8", 8, 90, alltoall, "8 processes on 2 cores: all-to-all, sizes 64 B..256 KiB"),
        scn("multi/ring_4", 4, 60, ring, "4 processes: token ring, small and 64 KiB tokens"),
        scn("multi/ring_8", 8, 90, ring, "8 processes: token ring"),
    ]
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
