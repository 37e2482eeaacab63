//! A flood of unexpected messages larger than every buffer: a sender posts 32 messages of
//! 1 MiB (bigger than the receiver's whole SAR pool) to a receiver that holds every one as
//! unexpected and delivers nothing for a while. The sender must be flow-controlled (its sends
//! stay pending or answer `Again`), nothing is dropped or hangs, and once the receiver delivers,
//! every message arrives whole and intact, matched in send order. By SAR and by CMA.

use rshm_tests::*;
use smr_core::endpoint::Params;
use smr_core::layout::Counts;
use std::time::{Duration, Instant};

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");
const COUNT: usize = 32;
const LEN: usize = 1 << 20;

fn flood(tag: &str, sar: bool) {
    let mut sc = Scenario::new(PEER, tag);
    let me = sc.name("r");
    let d = Params::default();
    // 4 SAR buffers of 16 KiB: 64 KiB of bounce space for 32 MiB of messages.
    let counts = Counts { sar_count: 4, sar_size: 16384, ..d.counts };
    let mut node = Node::create(&me, Params { cma: !sar, counts, ..d }).unwrap();
    node.h.hold = true;
    let s = sc.name("s");
    let (count, size) = (COUNT.to_string(), LEN.to_string());
    let mut args = vec!["node", "--name", &s, "--id", "1", "--to", &me, "--sizes", &size, "--count", &count];
    if sar {
        args.push("--sar");
    }
    let c = sc.spawn("sender", &args);
    // Hold everything that arrives for a second: no receive is posted.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        node.pump_or_wait(Duration::from_millis(1));
    }
    let held = node.h.held.len();
    println!("{} held after 1 s without receives; outstanding in the engine: {}", held, node.ep.outstanding());
    assert!(node.h.received.is_empty(), "delivered without a receive");
    // Deliver as the application would, oldest first, while progressing.
    let dl = deadline() + Duration::from_secs(40);
    while node.h.received.len() < COUNT {
        assert!(Instant::now() < dl, "only {} of {COUNT} delivered", node.h.received.len());
        node.deliver_held();
        node.pump_or_wait(Duration::from_millis(1));
    }
    // Matched in send order; completions may come in any order (comp_order FI_ORDER_NONE).
    let offered: Vec<(u32, u32)> = node.h.offered.iter().map(|m| split_tag(m.hdr.tag)).collect();
    assert_eq!(offered, (0..COUNT as u32).map(|i| (1, i)).collect::<Vec<_>>(), "matching order");
    let mut seqs: Vec<u32> = node.h.received.iter().map(|m| split_tag(m.hdr.tag).1).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..COUNT as u32).collect::<Vec<_>>(), "each message delivered once");
    for m in &node.h.received {
        assert_eq!(m.result, Ok(LEN));
        verify(&m.hdr, &m.bytes).unwrap();
    }
    let line = sc.child(c).expect_line_while("RESULT", dl, || {
        node.pump_or_wait(Duration::from_millis(1));
    });
    let kv = parse_kv(&line);
    assert_eq!((kv_u64(&kv, "sent"), kv_u64(&kv, "send_errors")), (COUNT as u64, 0), "{line}");
    sc.child(c).finish(dl);
    assert_eq!(node.ep.outstanding(), 0);
    assert_eq!(node.ep.held_count(), 0);
    let (free, total) = sar_buffers(&me);
    assert_eq!(free + node.ep.sar_held_back(), total, "SAR buffers not all returned");
}

#[test]
fn unexpected_flood_by_sar_is_flow_controlled() {
    flood("fls", true);
}

#[test]
fn unexpected_flood_by_cma_is_flow_controlled() {
    if !cma_or_skip("unexpected_flood_by_cma_is_flow_controlled") {
        return;
    }
    flood("flc", false);
}
