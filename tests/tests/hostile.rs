//! A hostile peer of the same user writes random bytes all over our region (header, ring control
//! words and slots, stamps, pools, peer table, counters) while another process streams messages
//! to us. What is asserted: we do not crash (this test process is the victim: a fault kills the
//! test), no progress call blocks (longest under 2 s), and messages kept arriving while the
//! attack went on. What is only reported: damaged payloads (scribbles that hit a message in
//! shared memory are delivered as written; nothing in the layout can tell) and whether the honest
//! sender still gets through afterwards. Today it does not: scribbles on the shared ring and pool
//! control words (the producers' claim counter, the free-stack heads) leave its sends answering
//! `Again`; repairing those from the owner's side is future work (docs/reliability.md).

use rshm_tests::*;
use std::time::{Duration, Instant};

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

fn attack(tag: &str, seed: &str) {
    let mut sc = Scenario::new(PEER, tag);
    let me = sc.name("r");
    let mut node = Node::create(&me, params(false)).unwrap();
    let s = sc.name("s");
    let args = [
        "node",
        "--name",
        &s,
        "--id",
        "1",
        "--to",
        &me,
        "--sizes",
        "100,3000,70000",
        "--count",
        "100000",
        "--max-secs",
        "60",
    ];
    let honest = sc.spawn("honest sender", &args);
    let dl = deadline();
    node.wait_until(dl, "the honest sender's first messages", |n| n.h.received.len() >= 10);

    let h = sc.spawn("scribbler", &["scribble", "--target", &me, "--count", "3000", "--seed", seed, "--gap-us", "200"]);
    let mut longest = Duration::ZERO;
    let before = node.h.received.len();
    let scribbled = sc.child(h).expect_line_while("SCRIBBLED", dl, || {
        let t = Instant::now();
        node.pump_or_wait(Duration::from_millis(1));
        longest = longest.max(t.elapsed());
    });
    let during = node.h.received.len() - before;
    // After the attack: still serving.
    let after_start = node.h.received.len();
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let t = Instant::now();
        node.pump_or_wait(Duration::from_millis(1));
        longest = longest.max(t.elapsed());
    }
    let after = node.h.received.len() - after_start;
    let bad = node.h.received.iter().filter(|m| m.result.is_err() || verify(&m.hdr, &m.bytes).is_err()).count();
    let stats = node.ep.stats().clone();
    println!(
        "{}: {during} messages during the attack, {after} in the 2 s after, {bad} of {} damaged; \
         corrupt commands {}, skipped slots {}; longest progress call {longest:?}",
        scribbled,
        node.h.received.len(),
        stats.corrupt_commands,
        stats.skipped_slots
    );
    assert!(longest < Duration::from_secs(2), "a progress call took {longest:?}");
    assert!(after > 0 || during > 0, "nothing received once the attack began: {stats:?}");
    let t = sc.child(honest).transcript();
    println!(
        "honest sender: {}",
        t.lines().filter(|l| !l.starts_with("READY")).take(6).collect::<Vec<_>>().join(" | ")
    );
}

#[test]
fn random_bytes_all_over_the_region_do_not_crash_or_wedge_the_owner() {
    attack("hs1", "1");
    attack("hs2", "2");
}
