//! A hostile peer of the same user writes random bytes over our region while another process
//! streams messages to us: all over it (header, ring control words and slots, stamps, pools,
//! peer table, counters), or aimed at the shared control words only (the claim counters of both
//! rings, the heads and links of both free stacks). What is asserted: we do not crash (this test
//! process is the victim: a fault kills the test), no progress call blocks (longest under 2 s),
//! messages kept arriving while the attack went on, and once the scribbler stopped the honest
//! sender gets through again: 100 more messages of every size arrive intact (pattern and
//! checksum), which needs the owner to put back the control words the scribbler broke
//! (`Endpoint::check_stalls`: `Consumer::repair_tail`, `FreeStack::repair`). What is only
//! reported: damaged payloads (scribbles that hit a message in shared memory are delivered as
//! written; nothing in the layout can tell).

use rshm_tests::*;
use std::time::{Duration, Instant};

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

/// Intact messages the honest sender must get through after the attack.
const AFTER: usize = 100;
const SIZES: [usize; 3] = [100, 3000, 70000];

fn intact(m: &Received) -> bool {
    m.result.is_ok() && verify(&m.hdr, &m.bytes).is_ok()
}

/// One attack: `aim` `None` scribbles anywhere, `Some("control")` only on control words; `sar`
/// makes the honest sender's large messages go through our SAR pool instead of CMA.
fn attack(tag: &str, seed: &str, count: &str, aim: Option<&str>, sar: bool) {
    let mut sc = Scenario::new(PEER, tag);
    let me = sc.name("r");
    let mut node = Node::create(&me, params(false)).unwrap();
    let s = sc.name("s");
    let sizes = SIZES.map(|n| n.to_string()).join(",");
    let mut args = vec![
        "node",
        "--name",
        &s,
        "--id",
        "1",
        "--to",
        &me,
        "--sizes",
        &sizes,
        "--count",
        "100000",
        "--max-secs",
        "60",
    ];
    if sar {
        args.push("--sar");
    }
    sc.spawn("honest sender", &args);
    let dl = deadline();
    node.wait_until(dl, "the honest sender's first messages", |n| n.h.received.len() >= 10);

    let mut scribble = vec!["scribble", "--target", &me, "--count", count, "--seed", seed, "--gap-us", "200"];
    if let Some(aim) = aim {
        scribble.extend(["--aim", aim]);
    }
    let h = sc.spawn("scribbler", &scribble);
    let mut longest = Duration::ZERO;
    let before = node.h.received.len();
    let scribbled = sc.child(h).expect_line_while("SCRIBBLED", dl, || {
        let t = Instant::now();
        node.pump_or_wait(Duration::from_millis(1));
        longest = longest.max(t.elapsed());
    });
    let during = node.h.received.len() - before;

    // After the attack: the honest sender gets through again, every size, intact. The deadline
    // only keeps a wedged run from hanging the suite; nothing is timed.
    let after_start = node.h.received.len();
    let intact_after = |n: &Node| n.h.received[after_start..].iter().filter(|m| intact(m)).count();
    let dl = deadline();
    let stats_then = node.ep.stats().clone();
    while intact_after(&node) < AFTER {
        assert!(
            Instant::now() < dl,
            "{scribbled}: the honest sender got {} intact messages through in the {:?} after the attack, \
             not {AFTER}: {stats_then:?} / {:?}\n{}",
            intact_after(&node),
            DEADLINE,
            node.ep.stats(),
            sc.transcripts()
        );
        let t = Instant::now();
        node.pump_or_wait(Duration::from_millis(1));
        longest = longest.max(t.elapsed());
    }
    let after: Vec<&Received> = node.h.received[after_start..].iter().collect();
    for size in SIZES {
        assert!(
            after.iter().any(|m| intact(m) && m.bytes.len() == size),
            "no intact {size}-byte message after the attack"
        );
    }
    let damaged_after = after.iter().filter(|m| !intact(m)).count();
    let bad = node.h.received.iter().filter(|m| !intact(m)).count();
    let stats = node.ep.stats().clone();
    println!(
        "{tag} ({}, {}): {}: {during} messages during the attack, then {} to get {AFTER} intact ({damaged_after} \
         damaged); {bad} of {} damaged in all; corrupt commands {}, skipped slots {}, repaired words {}; \
         longest progress call {longest:?}",
        aim.unwrap_or("anywhere"),
        if sar { "SAR" } else { "CMA" },
        scribbled,
        after.len(),
        node.h.received.len(),
        stats.corrupt_commands,
        stats.skipped_slots,
        stats.repaired_words
    );
    assert!(longest < Duration::from_secs(2), "a progress call took {longest:?}");
    assert!(during > 0 || !after.is_empty(), "nothing received once the attack began: {stats:?}");
}

#[test]
fn random_bytes_all_over_the_region_do_not_crash_or_wedge_the_owner() {
    attack("hs1", "1", "3000", None, false);
    attack("hs2", "2", "3000", None, false);
}

#[test]
fn scribbled_control_words_are_repaired_by_the_owner() {
    attack("hc1", "3", "300", Some("control"), false);
    attack("hc2", "4", "300", Some("control"), true);
}
