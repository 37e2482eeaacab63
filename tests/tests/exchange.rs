//! Messages of every size class between processes, in CMA mode and in SAR-only mode:
//! ping-pong between two processes, three senders into one receiver, and four-way all-to-all.

use rshm_tests::*;
use std::collections::HashMap;

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

fn mode_args(sar: bool) -> Vec<&'static str> {
    if sar {
        vec!["--sar"]
    } else {
        vec![]
    }
}

/// How many of `sizes` travel by CMA (or SAR).
fn large(sizes: &[usize]) -> u64 {
    sizes.iter().filter(|&&len| len > INJECT_MAX).count() as u64
}

/// The test process sends each size to an echo process and compares what comes back. In CMA
/// mode (`sar == false`) every large message and its echo must have been copied with CMA.
fn ping_pong(test: &str, tag: &str, sar: bool) {
    if !sar && !cma_or_skip(test) {
        return;
    }
    let mut sc = Scenario::new(PEER, tag);
    let echo_name = sc.name("e");
    let my_name = sc.name("c");
    let mut args = vec!["node", "--name", &echo_name, "--echo"];
    args.extend(mode_args(sar));
    let echo = sc.spawn("echo", &args);
    let ready = parse_kv(&sc.child(echo).expect_line("READY", deadline()));
    let mut node = Node::create(&my_name, params(sar)).expect("create client endpoint");
    let cma = !sar;
    assert_eq!(node.ep.cma_enabled(), cma);
    assert_eq!(kv_u64(&ready, "cma"), u64::from(cma));
    let peer = node.ep.add_peer(&echo_name).unwrap();

    for (seq, &len) in SIZES_ALL.iter().enumerate() {
        let seq = seq as u32;
        let data = pattern(0, seq, len);
        let hdr = header(0, seq, &data);
        let dl = deadline();
        node.send_retry(peer, hdr, data.clone(), false, dl)
            .unwrap_or_else(|e| panic!("send of {len} bytes: {e}\n{}", sc.transcripts()));
        node.wait_until(dl, &format!("the echo of {len} bytes"), |n| {
            !n.h.received.is_empty() && n.sends_in_flight() == 0
        });
        assert_eq!(node.h.received.len(), 1, "one echo per message");
        let back = node.h.received.pop().unwrap();
        assert_eq!(back.hdr.app, 1, "the echo marks its replies");
        assert_eq!(back.hdr.tag, hdr.tag);
        assert_eq!(back.hdr.len, len as u64);
        assert_eq!(back.hdr.data, hdr.data, "checksum carried back");
        assert_eq!(back.result, Ok(len), "echo of {len} bytes");
        assert_eq!(checksum(&back.bytes), hdr.data, "checksum of the echo of {len} bytes");
        assert!(back.bytes == data, "echo of {len} bytes differs from what was sent");
        verify(&back.hdr, &back.bytes).unwrap();
    }
    for (cookie, result) in &node.h.sends_done {
        assert_eq!(*result, Ok(()), "send {cookie}");
    }
    let large = large(SIZES_ALL);
    let stats = node.ep.stats();
    assert_eq!(stats.corrupt_commands, 0, "{stats:?}");
    assert_eq!(stats.cma_fallbacks, 0, "{stats:?}");
    assert_eq!(stats.cma_reads, if cma { large } else { 0 }, "echoes copied with CMA: {stats:?}");

    sc.child(echo).close_stdin();
    let result = parse_kv(&sc.child(echo).expect_line("RESULT", deadline()));
    let n = SIZES_ALL.len() as u64;
    assert_eq!(kv_u64(&result, "received"), n, "{result:?}");
    assert_eq!(kv_u64(&result, "echoed"), n, "{result:?}");
    assert_eq!(kv_u64(&result, "bad"), 0, "{result:?}");
    assert_eq!(kv_u64(&result, "bytes"), SIZES_ALL.iter().sum::<usize>() as u64);
    assert_eq!(kv_u64(&result, "corrupt"), 0, "{result:?}");
    assert_eq!(kv_u64(&result, "fallbacks"), 0, "CMA was refused: {result:?}");
    assert_eq!(kv_u64(&result, "cma_reads"), if cma { large } else { 0 }, "{result:?}");
    sc.child(echo).finish(deadline());
}

#[test]
fn ping_pong_every_size_cma() {
    ping_pong("ping_pong_every_size_cma", "ppc", false);
}

#[test]
fn ping_pong_every_size_sar() {
    ping_pong("ping_pong_every_size_sar", "pps", true);
}

fn join(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

const BIG: usize = 16 << 20;

/// Expected per-receiver outcome: message count and byte total, by sender id, and how many
/// messages are large (CMA or SAR).
#[derive(Default)]
struct Expect {
    messages: u64,
    bytes: u64,
    large: u64,
    senders: HashMap<u32, u64>,
}

impl Expect {
    fn add(&mut self, sender: u32, len: usize) {
        self.messages += 1;
        self.bytes += len as u64;
        self.large += u64::from(len > INJECT_MAX);
        *self.senders.entry(sender).or_default() += 1;
    }

    fn senders(&self) -> String {
        let mut v: Vec<_> = self.senders.iter().collect();
        v.sort();
        v.iter().map(|(s, n)| format!("{s}:{n}")).collect::<Vec<_>>().join(",")
    }
}

/// Check a node's RESULT line against what it should have sent and received. In CMA mode every
/// large message it received must have been copied with CMA, in SAR mode none.
fn check_result(label: &str, line: &str, sent: u64, expect: &Expect, sar: bool) {
    let kv = parse_kv(line);
    assert_eq!(kv_u64(&kv, "sent"), sent, "{label}: {line}");
    assert_eq!(kv_u64(&kv, "send_errors"), 0, "{label}: {line}");
    assert_eq!(kv_u64(&kv, "received"), expect.messages, "{label}: {line}");
    assert_eq!(kv_u64(&kv, "bytes"), expect.bytes, "{label}: {line}");
    assert_eq!(kv_u64(&kv, "bad"), 0, "{label}: {line}");
    assert_eq!(kv_u64(&kv, "dups"), 0, "{label}: {line}");
    assert_eq!(kv_u64(&kv, "corrupt"), 0, "{label}: {line}");
    assert_eq!(kv_u64(&kv, "fallbacks"), 0, "{label}: {line}");
    assert_eq!(kv_u64(&kv, "cma"), u64::from(!sar), "{label}: {line}");
    assert_eq!(kv_u64(&kv, "cma_reads"), if sar { 0 } else { expect.large }, "{label}: {line}");
    let senders = kv.get("senders").map(String::as_str).unwrap_or("");
    assert_eq!(senders, expect.senders(), "{label}: {line}");
}

/// Run `nodes` (name, id, extra args), then check every RESULT and a clean exit. Every node
/// has created its endpoint before any starts sending (see `engine_bugs.rs` for why).
fn run_nodes(sc: &mut Scenario, nodes: &[(String, u32, Vec<String>)], sent: &[u64], expect: &[Expect], sar: bool) {
    let mut idx = Vec::new();
    for (name, id, extra) in nodes {
        let id = id.to_string();
        let mut args: Vec<&str> = vec!["node", "--name", name, "--id", &id, "--wait-go"];
        args.extend(extra.iter().map(String::as_str));
        idx.push(sc.spawn(name, &args));
    }
    let dl = deadline();
    for &i in &idx {
        sc.child(i).expect_line("READY", dl);
    }
    for &i in &idx {
        sc.child(i).say("GO");
    }
    for (k, &i) in idx.iter().enumerate() {
        let line = sc.child(i).expect_line("RESULT", dl);
        let label = sc.child(i).transcript();
        check_result(&label, &line, sent[k], &expect[k], sar);
    }
    for &i in &idx {
        sc.child(i).finish(dl);
    }
}

/// Three senders, each sending every size up to 1 MiB (one of them also 16 MiB), into one.
fn three_to_one(test: &str, tag: &str, sar: bool) {
    if !sar && !cma_or_skip(test) {
        return;
    }
    let mut sc = Scenario::new(PEER, tag);
    let recv = sc.name("r");
    let mode: Vec<String> = mode_args(sar).into_iter().map(String::from).collect();
    let mut expect = Expect::default();
    let mut nodes = Vec::new();
    let mut sent = Vec::new();
    for id in 1..=3u32 {
        let name = sc.name(&format!("s{id}"));
        let mut args = vec!["--to".into(), recv.clone(), "--sizes".into(), join(SIZES_UP_TO_1M)];
        for &len in SIZES_UP_TO_1M {
            expect.add(id, len);
        }
        if id == 1 {
            args.extend(["--also".into(), format!("{recv}:{BIG}")]);
            expect.add(id, BIG);
        }
        sent.push(SIZES_UP_TO_1M.len() as u64 + u64::from(id == 1));
        args.extend(mode.clone());
        nodes.push((name, id, args));
    }
    let mut args = vec!["--expect".into(), expect.messages.to_string()];
    args.extend(mode.clone());
    nodes.insert(0, (recv, 0, args));
    sent.insert(0, 0);
    let mut expects = vec![expect];
    expects.extend((1..=3).map(|_| Expect::default()));
    run_nodes(&mut sc, &nodes, &sent, &expects, sar);
}

#[test]
fn three_senders_into_one_cma() {
    three_to_one("three_senders_into_one_cma", "31c", false);
}

#[test]
fn three_senders_into_one_sar() {
    three_to_one("three_senders_into_one_sar", "31s", true);
}

/// Four processes, each sending every size up to 1 MiB to the other three (node 0 also sends
/// 16 MiB to node 1); receivers hold messages as unexpected and deliver them afterwards.
fn all_to_all(test: &str, tag: &str, sar: bool) {
    if !sar && !cma_or_skip(test) {
        return;
    }
    let mut sc = Scenario::new(PEER, tag);
    let names: Vec<String> = (0..4).map(|i| sc.name(&format!("n{i}"))).collect();
    let mut expects: Vec<Expect> = (0..4).map(|_| Expect::default()).collect();
    let mut sent = vec![0u64; 4];
    let mut nodes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let others: Vec<String> = names.iter().filter(|n| *n != name).cloned().collect();
        for j in (0..4).filter(|&j| j != i) {
            for &len in SIZES_UP_TO_1M {
                expects[j].add(i as u32, len);
                sent[i] += 1;
            }
        }
        let mut args = vec!["--to".into(), others.join(","), "--sizes".into(), join(SIZES_UP_TO_1M)];
        if i == 0 {
            args.extend(["--also".into(), format!("{}:{BIG}", names[1])]);
            expects[1].add(0, BIG);
            sent[0] += 1;
        }
        args.push("--hold".into());
        args.extend(mode_args(sar).into_iter().map(String::from));
        nodes.push((name.clone(), i as u32, args));
    }
    for (node, e) in nodes.iter_mut().zip(&expects) {
        node.2.extend(["--expect".into(), e.messages.to_string()]);
    }
    run_nodes(&mut sc, &nodes, &sent, &expects, sar);
}

#[test]
fn all_to_all_four_processes_cma() {
    all_to_all("all_to_all_four_processes_cma", "a2ac", false);
}

#[test]
fn all_to_all_four_processes_sar() {
    all_to_all("all_to_all_four_processes_sar", "a2as", true);
}
