//! Peers in different pid namespaces: containers that share one /dev/shm but not their pids
//! (`docker run --ipc=host` without `--pid=host`, the containers of one Kubernetes pod). A pid
//! means nothing across them, so neither side may judge the other by its pid, nor copy with
//! CMA, which names a process by its pid. They exchange every message size through shared
//! memory alone, and a peer of the other namespace that dies is noticed by the lock it held on
//! its region file, within the same bound as any other.
//!
//! The other process runs under `unshare --pid --fork --mount-proc` (root only: elsewhere these
//! tests print SKIPPED and pass without having tested anything; under CI=true they fail).
//! `kill.rs` kills one in the middle of copying a command into our ring.

use rshm_tests::*;
use std::time::Duration;

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

fn pump(node: &mut Node) {
    node.pump_or_wait(Duration::from_millis(1));
}

/// Every protocol's sizes (inline, inject, SAR, and those CMA would take) both ways between
/// this process and one in another pid namespace: every byte checked, nothing copied with CMA,
/// nothing tried with it and refused.
#[test]
fn every_size_crosses_pid_namespaces_without_cma() {
    if !namespaces_or_skip("every_size_crosses_pid_namespaces_without_cma") {
        return;
    }
    let sizes = [0usize, 8, 150, 1000, 2000, 5000, 70_000, 1 << 20];
    let count = 3u32;
    let messages = sizes.len() * count as usize;
    let mut sc = Scenario::new(PEER, "ns");
    let me = sc.name("r");
    let mut node = Node::create(&me, params(false)).unwrap();
    let other = sc.name("o");
    let sizes_arg = sizes.map(|s| s.to_string()).join(",");
    let (count_arg, expect_arg) = (count.to_string(), messages.to_string());
    let args = [
        "node",
        "--name",
        &other,
        "--id",
        "1",
        "--to",
        &me,
        "--sizes",
        &sizes_arg,
        "--count",
        &count_arg,
        "--expect",
        &expect_arg,
    ];
    let o = sc.spawn_placed("peer in its own pid namespace", true, &args);
    let dl = deadline();
    sc.child(o).expect_line_while("READY", dl, || pump(&mut node));
    let to_other = node.ep.add_peer(&other).unwrap();
    for (seq, &len) in sizes.iter().cycle().take(messages).enumerate() {
        let data = pattern(2, seq as u32, len);
        node.send_retry(to_other, header(2, seq as u32, &data), data, false, dl).unwrap();
    }
    node.wait_until(dl, "every message both ways", |n| n.h.received.len() == messages && n.sends_in_flight() == 0);
    for m in &node.h.received {
        assert_eq!(m.result, Ok(m.hdr.len as usize));
        verify(&m.hdr, &m.bytes).unwrap();
    }
    assert!(node.h.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", node.h.sends_done);
    let line = sc.child(o).expect_line_while("RESULT", dl, || pump(&mut node));
    let kv = parse_kv(&line);
    assert_eq!(kv_u64(&kv, "received"), messages as u64, "{line}");
    for key in ["bad", "dups", "send_errors", "corrupt", "fallbacks", "cma_reads"] {
        assert_eq!(kv_u64(&kv, key), 0, "{key}: {line}");
    }
    let stats = node.ep.stats();
    assert_eq!((stats.sent_cma, stats.cma_reads, stats.cma_writes, stats.cma_fallbacks), (0, 0, 0, 0), "{stats:?}");
    assert!(stats.sent_sar > 0, "the large messages went through SAR: {stats:?}");
    sc.child(o).finish(dl);
}
