//! Soak: four `rshm-storm` processes send to each other for a while, every message
//! delivery-complete, of sizes drawn at random across the inline, inject, CMA and SAR paths (two
//! of the four have CMA off, so pairs mix CMA and SAR), each checked on arrival (pattern,
//! checksum, per-sender sequence number). At the end: nothing lost (each receiver got exactly what
//! each sender saw acknowledged), corrupted, duplicated or out of order, no error at all, no
//! /dev/shm file left, and each process's private memory flat (RssAnon at the end against
//! RssAnon after its first second of traffic; the shared regions' pages are not counted).
//!
//! `soak_short` (10 s) runs with `cargo test`; the long version is
//! `RSHM_SOAK_SECS=600 cargo test --release -p rshm-tests --test soak -- --ignored --nocapture`.
//! Messaging only: RMA and atomics are exercised by the conformance suite, not here.

use rshm_tests::{kv_u64, parse_kv, Scenario};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const STORM: &str = env!("CARGO_BIN_EXE_rshm-storm");
/// Allowed RSS growth per process between its first second and the end.
const RSS_SLACK_KIB: u64 = 16 * 1024;

fn soak(secs: u64) {
    let mut sc = Scenario::new(STORM, "sk");
    let names: Vec<String> = (0..4).map(|i| sc.name(&format!("{i}"))).collect();
    let mut procs = Vec::new();
    for i in 0..4 {
        let peers: Vec<String> = (0..4).filter(|&j| j != i).map(|j| format!("{}:{}", j + 1, names[j])).collect();
        let id = (i + 1).to_string();
        let seed = (0x50a4 + i).to_string();
        let max = (secs + 120).to_string();
        let peers = peers.join(",");
        let mut args = vec![
            "--name",
            &names[i],
            "--id",
            &id,
            "--peers",
            &peers,
            "--sizes",
            "0,64,200,1032,1033,4000,4097,70000,300000",
            "--seed",
            &seed,
            "--max-secs",
            &max,
        ];
        if i % 2 == 1 {
            args.push("--sar");
        }
        procs.push(sc.spawn(&format!("p{i}"), &args));
    }
    let dl = Instant::now() + Duration::from_secs(30);
    for &p in &procs {
        sc.child(p).expect_line("READY", dl);
    }
    for &p in &procs {
        sc.child(p).say("GO");
    }
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    for &p in &procs {
        sc.child(p).say("STOP");
    }
    let dl = Instant::now() + Duration::from_secs(60);
    for &p in &procs {
        sc.child(p).expect_line("DRAINED", dl);
    }
    let mut results: HashMap<usize, HashMap<String, String>> = HashMap::new();
    for (i, &p) in procs.iter().enumerate() {
        sc.child(p).say("REPORT");
        results.insert(i, parse_kv(&sc.child(p).expect_line("RESULT", dl)));
    }
    for &p in &procs {
        let status = sc.child(p).wait_exit(dl);
        assert!(status.success(), "{status}\n{}", sc.transcripts());
    }
    let elapsed = started.elapsed();
    let ctx = || format!("{results:?}\n{}", sc.transcripts());
    let (mut messages, mut bytes) = (0u64, 0u64);
    for (i, r) in &results {
        let errors = (kv_u64(r, "bad"), kv_u64(r, "errs"), kv_u64(r, "corrupt"), kv_u64(r, "deads"));
        assert_eq!(errors, (0, 0, 0, 0), "p{i}: bad, errs, corrupt, deads: {}", ctx());
        for j in (0..4).filter(|j| j != i) {
            let from = j + 1;
            let count = r.get(&format!("recv.{from}")).map_or(0, |c| c.parse::<u64>().unwrap());
            let ok = kv_u64(&results[&j], &format!("ok.{}", i + 1));
            assert!(count > 0, "p{i} got nothing from p{j}: {}", ctx());
            assert_eq!(count, ok, "p{i} got {count} of the {ok} messages p{j} saw acknowledged: {}", ctx());
            for k in ["gaps", "order", "failed", "first"] {
                assert_eq!(kv_u64(r, &format!("{k}.{from}")), 0, "p{i} from p{j}: {k}: {}", ctx());
            }
            messages += count;
            bytes += kv_u64(r, &format!("bytes.{from}"));
        }
        let (warm, end) = (kv_u64(r, "rss_warm"), kv_u64(r, "rss_end"));
        println!("p{i}: RssAnon {warm} KiB after 1 s, {end} KiB at the end");
        assert!(warm > 0 && end < warm + RSS_SLACK_KIB, "p{i}: RSS grew from {warm} to {end} KiB: {}", ctx());
    }
    for name in &names {
        assert!(!std::path::Path::new("/dev/shm").join(name).exists(), "/dev/shm/{name} left behind");
    }
    println!(
        "soak: 4 processes for {elapsed:.0?}: {messages} messages ({bytes} bytes) checked, 0 lost, corrupted, \
         duplicated or out of order"
    );
}

#[test]
fn soak_short() {
    soak(10);
}

#[test]
#[ignore = "long: RSHM_SOAK_SECS=600 cargo test --release -p rshm-tests --test soak -- --ignored"]
fn soak_long() {
    soak(std::env::var("RSHM_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(600));
}
