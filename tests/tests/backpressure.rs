//! Back-pressure: three processes each send 5000 small (inline and inject) messages into one
//! receiver that does not progress until every sender has been refused with `Again`. Then it
//! drains: every (sender, seq) must arrive exactly once, in per-sender order, intact.

use rshm_tests::*;

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

const SENDERS: u32 = 3;
/// Inline (1, INLINE) and inject (INLINE + 1, 4096) sizes; 4 x 1250 = 5000 messages per sender.
const SIZES: [usize; 4] = [1, INLINE, INLINE + 1, 4096];
const ROUNDS: u64 = 1250;

fn backpressure(tag: &str, receiver_args: &[&str]) {
    let mut sc = Scenario::new(PEER, tag);
    let recv = sc.name("r");
    let per_sender = ROUNDS * 4;
    let total = (per_sender * u64::from(SENDERS)).to_string();
    let mut args = vec!["node", "--name", &recv, "--expect", &total, "--check-order", "--wait-go"];
    args.extend(receiver_args);
    let r = sc.spawn("receiver", &args);
    let dl = deadline();
    sc.child(r).expect_line("READY", dl);

    let rounds = ROUNDS.to_string();
    let mut senders = Vec::new();
    for id in 1..=SENDERS {
        let name = sc.name(&format!("s{id}"));
        let id = id.to_string();
        let sizes = SIZES.map(|n| n.to_string()).join(",");
        let args = ["node", "--name", &name, "--id", &id, "--to", &recv, "--sizes", &sizes, "--count", &rounds];
        senders.push(sc.spawn(&name, &args));
    }
    // Every sender fills the receiver's queue (or inject pool) and is told to come back later.
    for &s in &senders {
        let line = sc.child(s).expect_line("AGAIN", dl);
        let sent = kv_u64(&parse_kv(&line), "sent");
        assert!(sent < per_sender, "{line}");
    }
    sc.child(r).say("GO");

    let line = sc.child(r).expect_line("RESULT", dl);
    println!("{line}");
    let kv = parse_kv(&line);
    let ctx = || format!("{line}\n{}", sc.transcripts());
    assert_eq!(kv_u64(&kv, "received"), per_sender * u64::from(SENDERS), "{}", ctx());
    assert_eq!(kv_u64(&kv, "dups"), 0, "{}", ctx());
    assert_eq!(kv_u64(&kv, "order_errors"), 0, "{}", ctx());
    assert_eq!(kv_u64(&kv, "bad"), 0, "{}", ctx());
    assert_eq!(kv_u64(&kv, "corrupt"), 0, "{}", ctx());
    let want: Vec<String> = (1..=SENDERS).map(|id| format!("{id}:{per_sender}")).collect();
    assert_eq!(kv["senders"], want.join(","), "{}", ctx());
    let bytes_per_sender = ROUNDS * SIZES.iter().sum::<usize>() as u64;
    assert_eq!(kv_u64(&kv, "bytes"), bytes_per_sender * u64::from(SENDERS));

    for &s in &senders {
        let line = sc.child(s).expect_line("RESULT", dl);
        println!("{line}");
        let kv = parse_kv(&line);
        assert_eq!(kv_u64(&kv, "sent"), per_sender, "{line}");
        assert_eq!(kv_u64(&kv, "send_errors"), 0, "{line}");
        assert!(kv_u64(&kv, "again") > 0, "{line}");
    }
    for i in std::iter::once(r).chain(senders) {
        sc.child(i).finish(dl);
    }
}

/// A 64-entry command queue: the queue is what fills.
#[test]
fn three_senders_5000_small_messages_into_a_64_entry_queue() {
    backpressure("bp64", &["--cmd-len", "64"]);
}

/// The default 1024-entry queue: the 128 inject buffers run out first, then the queue.
#[test]
fn three_senders_5000_small_messages_into_default_queues() {
    backpressure("bpdf", &[]);
}

/// A sender that stops progressing with the receiver's answers filling its response queue
/// holds back only its own answers: another sender's delivery-complete sends to the same
/// receiver still complete, while the first is stuck.
#[test]
fn a_sender_that_stops_reading_answers_holds_back_only_its_own() {
    // Answers of several sends share a response (`ok_run`): enough of them to fill 8 entries.
    const STUCK_SENDS: u32 = 400;
    let mut small = params(false);
    small.counts.resp_len = 8;
    let mut rx = Node::create(&unique_name("holrx"), params(false)).expect("receiver");
    let mut stuck = Node::create(&unique_name("holstuck"), small).expect("stuck sender");
    let mut other = Node::create(&unique_name("holother"), params(false)).expect("other sender");
    let to_rx = stuck.ep.add_peer(rx.ep.name()).expect("peer");
    let other_to_rx = other.ep.add_peer(rx.ep.name()).expect("peer");
    let dl = deadline();
    // Connected first (its acknowledgement read), then it stops progressing.
    let hello = pattern(1, 0, 8);
    stuck.send_retry(to_rx, header(1, 0, &hello), hello, true, dl).expect("send");
    let never_completed = |_: &Node, _: &Node| "the first send never completed".to_string();
    pump_pair_until(&mut rx, &mut stuck, dl, never_completed, |_, stuck| !stuck.h.sends_done.is_empty());
    for seq in 1..=STUCK_SENDS {
        let data = pattern(1, seq, 64);
        stuck.send_retry(to_rx, header(1, seq, &data), data, true, dl).expect("send");
    }
    rx.wait_until(dl, "the stuck sender's messages", |rx| rx.h.received.len() == 1 + STUCK_SENDS as usize);
    for seq in 0..5 {
        let data = pattern(2, seq, 64);
        let (_, cookie) = other.send_retry(other_to_rx, header(2, seq, &data), data, true, dl).expect("send");
        let behind =
            |_: &Node, _: &Node| format!("the other sender's send {seq} waits behind the stuck sender's answers");
        pump_pair_until(&mut rx, &mut other, dl, behind, |_, other| {
            other.h.sends_done.iter().any(|(c, _)| *c == cookie)
        });
    }
    assert!(other.h.sends_done.iter().all(|(_, r)| r.is_ok()));
    assert!(stuck.sends_in_flight() > 0, "the stuck sender's answers all fit: the test did not test");
    // Once it reads again, every answer of its own arrives.
    let in_flight = |_: &Node, stuck: &Node| format!("{} sends still in flight", stuck.sends_in_flight());
    pump_pair_until(&mut rx, &mut stuck, dl, in_flight, |_, stuck| stuck.sends_in_flight() == 0);
    assert!(stuck.h.sends_done.iter().all(|(_, r)| r.is_ok()));
}
