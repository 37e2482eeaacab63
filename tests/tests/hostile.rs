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

/// One progress call (waiting up to 1 ms for work), its time kept in `longest` if longer.
fn pump_timed(node: &mut Node, longest: &mut Duration) {
    let t = Instant::now();
    node.pump_or_wait(Duration::from_millis(1));
    *longest = (*longest).max(t.elapsed());
}

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
    let scribbled = sc.child(h).expect_line_while("SCRIBBLED", dl, || pump_timed(&mut node, &mut longest));
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
        pump_timed(&mut node, &mut longest);
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
fn a_scribbled_peer_table_does_not_crash_or_wedge_the_owner() {
    attack("hp1", "6", "300", Some("peers"), false);
    attack("hp2", "7", "300", Some("peers"), true);
}

#[test]
fn scribbled_control_words_are_repaired_by_the_owner() {
    attack("hc1", "3", "300", Some("control"), false);
    attack("hc2", "4", "300", Some("control"), true);
}

/// A hostile peer aims at our table of published registrations while another process writes
/// and reads one of them with CMA on its own, as rshm's one-sided operations do
/// (`smr_core::published`): random bytes over the table, and every fourth burst a forgery of
/// the entry, whole but for its seal, that points at other memory of ours (`bait`). Asserted: no
/// peer copy lands outside the registration (the bait and the guards around the registration
/// are as they were), every read came back as written, the attack was felt (the peer had copies
/// refused, we put entries back), and once it stopped the peer's copies went through again, 100
/// more, the registration holding its last write.
#[test]
fn a_scribbled_registration_table_never_moves_a_peer_copy() {
    use smr_core::published::{REMOTE_READ, REMOTE_WRITE};
    if !cma_or_skip("a_scribbled_registration_table_never_moves_a_peer_copy") {
        return;
    }
    const LEN: usize = 8192;
    const KEY: u64 = 21;
    const GUARD: u8 = 0x6A;
    const BAIT: u8 = 0xB8;
    let mut sc = Scenario::new(PEER, "hm");
    let me = sc.name("r");
    let mut node = Node::create(&me, params(false)).unwrap();
    // guard | registration | guard, and the bait elsewhere in our memory.
    let mut mem = vec![GUARD; 3 * LEN];
    let bait = vec![BAIT; LEN];
    let registration = mem[LEN..].as_mut_ptr() as u64;
    node.ep.publish_mr(KEY, registration, LEN as u64, REMOTE_READ | REMOTE_WRITE).expect("published");

    let (writer, key, len) = (sc.name("w"), KEY.to_string(), LEN.to_string());
    let peer = sc.spawn(
        "peer copying",
        &["rma", "--name", &writer, "--target", &me, "--key", &key, "--len", &len, "--after", "100", "--gap-us", "50"],
    );
    let dl = deadline();
    let mut longest = Duration::ZERO;
    let mut pump = || pump_timed(&mut node, &mut longest);
    sc.child(peer).expect_line_while("FIRST", dl, &mut pump);
    let bait_at = (bait.as_ptr() as u64).to_string();
    let scribbler = sc.spawn(
        "scribbler",
        &[
            "scribble",
            "--target",
            &me,
            "--aim",
            "mr",
            "--count",
            "400",
            "--seed",
            "5",
            "--gap-us",
            "1000",
            "--forge-key",
            &key,
            "--forge-base",
            &bait_at,
            "--forge-len",
            &len,
        ],
    );
    let scribbled = sc.child(scribbler).expect_line_while("SCRIBBLED", dl, &mut pump);
    sc.child(peer).say("GO");
    let result = sc.child(peer).expect_line_while("RESULT", deadline(), &mut pump);
    let kv = parse_kv(&result);
    // The peer's copies are done: what they wrote is in our memory (the kernel wrote it).
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    let repaired = node.ep.stats().repaired_registrations;
    println!("{scribbled}; peer: {result}; entries put back: {repaired}; longest progress call {longest:?}");
    assert!(bait.iter().all(|&b| b == BAIT), "a peer's copy landed in the bait a forged entry named");
    assert!(
        mem[..LEN].iter().chain(&mem[2 * LEN..]).all(|&b| b == GUARD),
        "a peer's copy landed beside the registration"
    );
    assert_eq!(kv_u64(&kv, "wrong"), 0, "reads came back other than written: {result}");
    let last = kv_u64(&kv, "last") as u32;
    assert!(mem[LEN..2 * LEN] == rma_pattern(last, LEN)[..], "the registration does not hold the peer's last write");
    assert!(kv_u64(&kv, "refused") > 0, "the attack never refused a copy: {result}");
    assert!(kv_u64(&parse_kv(&scribbled), "forged") > 0, "no forgery written: {scribbled}");
    assert!(repaired > 0, "no entry was put back");
    assert!(longest < Duration::from_secs(2), "a progress call took {longest:?}");
    sc.child(peer).finish(deadline());
}
