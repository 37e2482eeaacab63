//! Regression tests: minimal reproductions of engine bugs the multi-process tests found
//! (regions opened while being created, stale links to dead peers, stray buffer releases).

use rshm_tests::*;
use smr_core::cmd::{op, CmdEntry, MsgHeader, SarSeg};
use smr_core::endpoint::Params;
use smr_core::region::{Occupant, Region};
use smr_core::Error;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

/// Removes a /dev/shm file on drop.
struct ShmFile(String);

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(format!("/dev/shm/{}", self.0));
    }
}

/// A peer's region between `shm_open(O_CREAT|O_EXCL)` and the header being written is a peer
/// starting up (`region::inspect` itself says `Creating`), so a send to it must answer `Again`,
/// as it does before the file exists and while `ready` is unset. Instead `send` fails hard with
/// `Corrupt("region file is empty")` (before `ftruncate`) or `Corrupt("bad region magic")`
/// (after it): `Region::open` checks the magic before `ready`, and `link()` passes every error
/// other than `NoSuchPeer`/`Again` through. Processes started together hit this (the
/// all-to-all test did, about one run in four, before it was made to wait for every `READY`).
#[test]
fn send_to_a_peer_region_being_created_answers_again() {
    let name = unique_name("halfc");
    let path = format!("/dev/shm/{name}");
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path).unwrap();
    let _cleanup = ShmFile(name.clone());
    let mut node = Node::create(&unique_name("halfs"), params(false)).unwrap();
    let peer = node.ep.add_peer(&name).unwrap();
    let data = pattern(1, 0, 8);

    // Created, not yet sized.
    let empty = node.try_send(peer, header(1, 0, &data), data.clone(), false).map_err(|(e, _)| e);
    // Sized, header not yet written: the engine itself sees a region being created.
    file.set_len(1 << 20).unwrap();
    assert_eq!(smr_core::region::inspect(&name), Ok(Occupant::Creating));
    let zeroed = node.try_send(peer, header(1, 0, &data), data, false).map_err(|(e, _)| e);
    assert_eq!((empty, zeroed), (Err(Error::Again), Err(Error::Again)));
}

/// The creator's side of the same window: a young, still empty region file is a creation under
/// way (`HALF_CREATED_GRACE`), so a second `Endpoint::create` of that name must fail with
/// `AddrInUse`. Instead `region::inspect` fails with `Corrupt("region file is empty")` (from
/// `Mapping::open`), and `reclaim_if_stale` (region.rs) unlinks on `Err(Corrupt(_))`: the second
/// creator deletes the first one's file and both believe they own the name.
#[test]
fn creating_over_a_region_file_being_created_is_refused() {
    let name = unique_name("halfe");
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(format!("/dev/shm/{name}")).unwrap();
    let _cleanup = ShmFile(name.clone());
    let inspected = smr_core::region::inspect(&name);
    let created = Node::create(&name, params(false)).map(|_| ());
    assert_eq!((inspected, created), (Ok(Occupant::Creating), Err(Error::AddrInUse)));
}

/// After a peer process dies, a sender whose link to it is acknowledged and has no operation
/// pending (inline/inject sends without delivery-complete) never learns of it: `check_peers`
/// (endpoint/peers.rs, `if !waited.contains(&id) && link.acked { continue; }`) skips the link
/// and `link()` reuses it without checking the owner. The sends land in the dead region
/// ("done") until its queue or inject pool is full, then answer `Again` forever; a new process
/// that takes over the name is never mapped. (`kill.rs` has the `Again`-forever half as
/// `receiver_killed_during_inject_stream_fails_the_sender`.)
#[test]
fn sends_without_pending_operations_reach_a_restarted_peer() {
    let mut sc = Scenario::new(PEER, "bugre");
    let victim = sc.name("r");
    let r1 = sc.spawn("first", &["node", "--name", &victim, "--expect", "1"]);
    let dl = deadline();
    sc.child(r1).expect_line("READY", dl);
    let mut node = Node::create(&sc.name("s"), params(false)).unwrap();
    let peer = node.ep.add_peer(&victim).unwrap();
    let data = pattern(1, 0, 100);
    node.send_retry(peer, header(1, 0, &data), data, false, dl).unwrap();
    let line = sc.child(r1).expect_line_while("RESULT", dl, || {
        node.pump_or_wait(Duration::from_millis(1));
    });
    let kv = parse_kv(&line);
    assert_eq!((kv_u64(&kv, "received"), kv_u64(&kv, "bad"), kv["senders"].as_str()), (1, 0, "1:1"), "{line}");
    sc.child(r1).kill();

    // The sends below complete at once whether they land in the dead region or the new one, so
    // more than one may reach the second process before it reports: it takes one or more.
    let r2 = sc.spawn("second", &["node", "--name", &victim, "--expect", "1", "--at-least"]);
    sc.child(r2).expect_line("READY", dl);
    let mut seq = 1;
    let mut last = Instant::now();
    let line = sc.child(r2).expect_line_while("RESULT", Instant::now() + Duration::from_secs(5), || {
        if last.elapsed() >= Duration::from_millis(10) {
            last = Instant::now();
            let data = pattern(1, seq, 100);
            if node.try_send(peer, header(1, seq, &data), data, false).is_ok() {
                seq += 1;
            }
        }
        node.pump_or_wait(Duration::from_millis(1));
    });
    // Every message it got is one of ours, intact (the peer verifies pattern and checksum).
    let kv = parse_kv(&line);
    let got = kv_u64(&kv, "received");
    assert!((1..u64::from(seq)).contains(&got), "{got} received of {} sent after the restart: {line}", seq - 1);
    assert_eq!(kv_u64(&kv, "bytes"), 100 * got, "{line}");
    for key in ["bad", "dups", "corrupt", "send_errors"] {
        assert_eq!(kv_u64(&kv, key), 0, "{key}: {line}");
    }
    assert_eq!(kv["senders"], format!("1:{got}"), "{line}");
    sc.child(r2).finish(dl);
}

/// One bogus command from a process that never connected, naming a pool buffer.
fn stranger_command(target: &str, entry: &CmdEntry) {
    let region = Region::open(target).unwrap();
    region.cmd_ring().push(entry).unwrap();
}

/// Pump two in-process nodes until `b` has received `n` messages.
fn exchange(a: &mut Node, b: &mut Node, n: usize) {
    let dl = deadline();
    while b.h.received.len() < n || a.sends_in_flight() > 0 {
        assert!(Instant::now() < dl, "timed out");
        a.pump();
        b.pump();
    }
}

/// A SAR segment for a reassembly that does not exist still has its buffer pushed back onto the
/// receiver's free stack (endpoint/recv.rs `on_segment`, the `sar_rx.get_mut(..) else` branch).
/// Buffer 0 is already free, so the stack's top links to itself and every later pop hands out
/// buffer 0: all segments of a real message then share it and the data is garbage. The same
/// holds for MSG commands from an unconnected source (`handle_command` -> `release_buffers`).
#[test]
fn a_strangers_sar_segment_does_not_corrupt_later_sar_messages() {
    let mut a = Node::create(&unique_name("dfsa"), params(true)).unwrap();
    let mut b = Node::create(&unique_name("dfsb"), params(true)).unwrap();
    let mut e = CmdEntry::message(5, 1, &MsgHeader { len: 10, ..Default::default() }, false);
    e.op = op::SAR_SEG;
    e.set_sar(SarSeg { buf: 0, len: 10, offset: 0, seq: 1 });
    stranger_command(b.ep.name(), &e);
    b.pump();
    assert_eq!(b.ep.stats().corrupt_commands, 1);

    let peer = a.ep.add_peer(b.ep.name()).unwrap();
    let data = pattern(1, 0, 1 << 20);
    a.send_retry(peer, header(1, 0, &data), data, false, deadline()).unwrap();
    exchange(&mut a, &mut b, 1);
    let r = &b.h.received[0];
    assert_eq!(r.result, Ok(1 << 20));
    verify(&r.hdr, &r.bytes).unwrap();
}

/// The inject analogue: an INJECT message from an unconnected source has its buffer freed by
/// `release_buffers` (endpoint/recv.rs `handle_command`), although the buffer was never taken.
/// Two real inject messages sent back to back then share a buffer and the first is overwritten.
#[test]
fn a_strangers_inject_message_does_not_corrupt_later_inject_messages() {
    let mut a = Node::create(&unique_name("dfia"), params(false)).unwrap();
    let mut b = Node::create(&unique_name("dfib"), params(false)).unwrap();
    let mut e = CmdEntry::message(5, 1, &MsgHeader { len: 1000, ..Default::default() }, false);
    e.set_inject(0);
    stranger_command(b.ep.name(), &e);
    b.pump();
    assert_eq!(b.ep.stats().corrupt_commands, 1);

    let peer = a.ep.add_peer(b.ep.name()).unwrap();
    for seq in 0..2 {
        let data = pattern(1, seq, 1000);
        a.send_retry(peer, header(1, seq, &data), data, false, deadline()).unwrap();
    }
    exchange(&mut a, &mut b, 2);
    for r in &b.h.received {
        assert_eq!(r.result, Ok(1000));
        verify(&r.hdr, &r.bytes).unwrap();
    }
}

/// A sender that sends a few inline messages and exits at once, closing its endpoint
/// (`close`) or not (`abandon`), before the receiver has looked at its queue. The messages are
/// complete in the receiver's own command queue (inline data rides in the entry), so the
/// receiver, draining only once the sender is gone, must deliver every one intact: a receiver
/// that first tries to map the sender back and drops whatever it cannot connect loses them
/// (an MPI rank's last message before `MPI_Finalize` and exit).
fn last_inline_messages_of_a_sender_that_exits_at_once(tag: &str, how: &str) {
    let mut sc = Scenario::new(PEER, tag);
    let me = sc.name("r");
    let mut node = Node::create(&me, params(false)).unwrap();
    let s = sc.name("s");
    let sizes = [0usize, 1, 100, smr_core::cmd::INLINE_MAX];
    let list = sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let args = ["node", "--name", &s, "--id", "1", "--to", &me, "--sizes", &list, "--exit-when-sent", how];
    let c = sc.spawn("sender", &args);
    let dl = deadline();
    // Not one progress call until the sender has exited.
    let line = sc.child(c).expect_line("RESULT", dl);
    assert_eq!(kv_u64(&parse_kv(&line), "sent"), sizes.len() as u64, "{line}");
    let status = sc.child(c).wait_exit(dl);
    assert!(status.success(), "the sender exited with {status}\n{}", sc.transcripts());
    assert!(node.h.offered.is_empty());

    // Everything is in our queue already: draining it takes no time.
    let drained_by = Instant::now() + Duration::from_secs(5);
    while node.h.received.len() < sizes.len() {
        assert!(
            Instant::now() < drained_by,
            "{} of {} messages from the departed sender arrived; {:?}",
            node.h.received.len(),
            sizes.len(),
            node.ep.stats()
        );
        node.pump_or_wait(Duration::from_millis(1));
    }
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        node.pump_or_wait(Duration::from_millis(1));
    }
    let got: Vec<(u32, u32, u64)> = node
        .h
        .received
        .iter()
        .map(|m| {
            let (sender, seq) = split_tag(m.hdr.tag);
            (sender, seq, m.hdr.len)
        })
        .collect();
    let want: Vec<(u32, u32, u64)> = sizes.iter().enumerate().map(|(i, &len)| (1, i as u32, len as u64)).collect();
    assert_eq!(got, want, "messages in order, each once");
    for m in &node.h.received {
        assert_eq!(m.result, Ok(m.hdr.len as usize));
        verify(&m.hdr, &m.bytes).unwrap();
    }
    assert_eq!(node.ep.stats().corrupt_commands, 0, "{:?}", node.ep.stats());
    assert_eq!(node.ep.outstanding(), 0);
}

/// The receiver meets the sender only after its region is closed and unlinked: `accept`
/// (endpoint/peers.rs) cannot open the sender's region, and the queued inline messages, complete
/// in our memory, must still be delivered (they were dropped as corrupt before).
#[test]
fn last_inline_messages_of_a_sender_that_closes_and_exits_are_delivered() {
    last_inline_messages_of_a_sender_that_exits_at_once("lastc", "close");
}

#[test]
fn last_inline_messages_of_a_sender_that_exits_without_closing_are_delivered() {
    last_inline_messages_of_a_sender_that_exits_at_once("lasta", "abandon");
}

/// A sender that sends and exits without closing, before the receiver has read anything of it,
/// and a second sender that comes for the same (only) entry of the receiver's peer table. The
/// second took the entry as soon as the first was dead (`claim_slot`), before the receiver had
/// read the first one's CONNECT; the receiver then found the entry naming another sender, took
/// the first for one it never met, and dropped its messages, inline and inject alike, although
/// they were whole in its memory, and no error said so (`unit/process_churn` lost a message
/// that way). Now the second waits (`Again`) until the receiver has handled every command of the
/// first and freed its entry.
#[test]
fn messages_of_a_dead_sender_survive_a_successor_in_its_entry() {
    let mut sc = Scenario::new(PEER, "succ");
    let me = sc.name("r");
    let counts = smr_core::layout::Counts { max_peers: 1, ..Params::default().counts };
    let mut node = Node::create(&me, Params { counts, ..params(false) }).unwrap();
    let sizes = [100usize, 3000];
    let list = sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let dl = deadline();
    let sender = |sc: &mut Scenario, id: &str| {
        let s = sc.name(&format!("s{id}"));
        let args = ["node", "--name", &s, "--id", id, "--to", &me, "--sizes", &list, "--exit-when-sent", "abandon"];
        sc.spawn(&format!("sender {id}"), &args)
    };
    let first = sender(&mut sc, "1");
    let line = sc.child(first).expect_line("RESULT", dl);
    assert_eq!(kv_u64(&parse_kv(&line), "sent"), sizes.len() as u64, "{line}");
    assert!(sc.child(first).wait_exit(dl).success(), "{}", sc.transcripts());
    // The second sender tries for the entry while we still have not progressed.
    let second = sender(&mut sc, "2");
    sc.child(second).expect_line("READY", dl);
    std::thread::sleep(Duration::from_millis(300));
    let line = sc.child(second).expect_line_while("RESULT", dl, || {
        node.pump_or_wait(Duration::from_millis(1));
    });
    assert_eq!(kv_u64(&parse_kv(&line), "sent"), sizes.len() as u64, "{line}");
    while node.h.received.len() < 2 * sizes.len() && Instant::now() < dl {
        node.pump_or_wait(Duration::from_millis(1));
    }
    let mut got: Vec<(u32, u32)> = node.h.received.iter().map(|m| split_tag(m.hdr.tag)).collect();
    got.sort_unstable();
    assert_eq!(got, [(1, 0), (1, 1), (2, 0), (2, 1)], "each sender's messages, once; {:?}", node.ep.stats());
    for m in &node.h.received {
        verify(&m.hdr, &m.bytes).unwrap();
    }
    assert_eq!(node.ep.stats().corrupt_commands, 0, "{:?}", node.ep.stats());
}
