//! Senders met while the receiver is out of descriptors (`parked`), in one process:
//! `opens_short` fails every open of a sender's region as EMFILE does.

use super::*;
use crate::layout::{Counts, SLOT_READY};
use crate::liveness::ProcessIdentity;
use crate::sync::Ordering::Relaxed;
use std::time::Duration;

/// A parked sender that dies while its commands wait keeps its entry of our table until we give
/// it up and play its commands: the entry is not freed as a dead stranger's (`unmet`), where a
/// new sender could take it and have the dead one's waiting messages taken for its own. Given up
/// at the timeout, the dead sender's inline messages are delivered, in order, as its own; then
/// its entry passes on, and the next sender is met afresh.
#[test]
fn a_parked_sender_that_dies_keeps_its_entry_until_given_up() {
    let d = Params::default();
    let timeout = Duration::from_millis(400);
    let params = Params {
        counts: Counts { max_peers: 1, ..d.counts },
        liveness_interval: Duration::from_millis(1),
        parked_timeout: timeout,
        ..d
    };
    let mut b = Endpoint::create(&name("parkdieb"), params).unwrap();
    b.opens_short = true;
    let mut hb = Collect::default();
    let mut a = Endpoint::create(&name("parkdiea"), Params::default()).unwrap();
    let to_b = a.add_peer(b.name()).unwrap();
    let hdr = |tag| MsgHeader { app: 0, tag, data: 0, aux: 0, len: 8 };
    for tag in 1..=3 {
        a.send_bytes(to_b, hdr(tag), &pattern(8, tag as u8), SendOpts::default()).unwrap();
    }
    let parked_at = std::time::Instant::now();
    for _ in 0..16 {
        b.progress(&mut hb);
    }
    assert_eq!(b.parked.len(), 1, "a was not parked");
    assert!(hb.offered.is_empty(), "a message of a parked sender arrived");
    // a dies (as the entry says: a test cannot kill an endpoint of its own process).
    let src = a.link(to_b).unwrap().slot as usize;
    let region = Arc::clone(&b.region);
    let entry = &region.peer_slots()[src];
    let me = ProcessIdentity::current().unwrap();
    let dead = ProcessIdentity { pid: crate::liveness::dead_pid(), ..me };
    entry.state.store(super::entry::slot_word(SLOT_READY, dead), Relaxed);

    // Until the timeout, b ticks, and c keeps asking for the one entry of b's table.
    let mut c = Endpoint::create(&name("parkdiec"), Params::default()).unwrap();
    let c_to_b = c.add_peer(b.name()).unwrap();
    while parked_at.elapsed() < timeout * 3 / 4 {
        b.progress(&mut hb);
        assert_eq!(
            c.send_bytes(c_to_b, hdr(9), &pattern(8, 9), SendOpts::default()),
            Err(Error::Again),
            "c took the entry of a parked sender"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!((entry.state.load(Relaxed) & 3, entry.incarnation.load(Relaxed)), (SLOT_READY, a.region.incarnation()));
    assert_eq!(b.stats().unmet_dead_senders, 0, "a parked sender's entry taken for a dead stranger's");
    assert!(hb.offered.is_empty(), "a message of a parked sender arrived");

    let dl = deadline();
    while hb.received.len() < 3 {
        assert!(std::time::Instant::now() < dl, "a's messages never delivered once given up");
        b.progress(&mut hb);
        std::thread::sleep(Duration::from_millis(1));
    }
    b.opens_short = false;
    let want: Vec<_> = (1..=3).map(|tag| (src as SrcId, tag, pattern(8, tag as u8))).collect();
    assert_eq!(arrived(&hb), want, "a's messages, in order, from a's entry");
    let dl = deadline();
    while c.send_bytes(c_to_b, hdr(9), &pattern(8, 9), SendOpts::default()) == Err(Error::Again) {
        assert!(std::time::Instant::now() < dl, "a's entry never passed on: {:?}", b.stats());
        b.progress(&mut hb);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut hc = Collect::default();
    pump_until((&mut c, &mut hc), (&mut b, &mut hb), "c's message", |_, hb| hb.received.len() == 4);
    assert_eq!(arrived(&hb)[3], (src as SrcId, 9, pattern(8, 9)));
    assert_eq!(hb.offered[3].src_gen, c.region.incarnation(), "c's message as c's");
}

/// What `h` was offered and delivered: (source, tag, bytes) in order.
fn arrived(h: &Collect) -> Vec<(SrcId, u64, Vec<u8>)> {
    let delivered = h.received.iter().map(|(hdr, r, bytes)| (hdr.tag, r.clone().map(|n| bytes[..n].to_vec())));
    h.offered.iter().zip(delivered).map(|(m, (tag, bytes))| (m.src, tag, bytes.expect("delivered"))).collect()
}

/// What parked senders set aside is bounded (`PARKED_COMMANDS_MAX`, 4,096 commands): a sender
/// is still parked with that many, given up at the next (long before its timeout), and then
/// its messages are all delivered, in order.
#[test]
fn a_parked_sender_is_given_up_past_the_command_bound_and_not_before() {
    const BOUND: usize = 4096;
    let params = Params { parked_timeout: Duration::from_secs(3600), ..Params::default() };
    let mut b = Endpoint::create(&name("parkboundb"), params).unwrap();
    b.opens_short = true;
    let mut hb = Collect::default();
    let mut a = Endpoint::create(&name("parkbounda"), Params::default()).unwrap();
    let to_b = a.add_peer(b.name()).unwrap();
    let set_aside = |b: &Endpoint| b.parked.iter().map(|p| p.commands.len()).sum::<usize>();
    let dl = deadline();
    let send = |a: &mut Endpoint, b: &mut Endpoint, hb: &mut Collect, seq: u64| {
        let hdr = MsgHeader { app: 0, tag: seq, data: 0, aux: 0, len: 64 };
        while a.send_bytes(to_b, hdr, &pattern(64, seq as u8), SendOpts::default()) == Err(Error::Again) {
            assert!(std::time::Instant::now() < dl, "message {seq} still refused");
            b.progress(hb);
        }
    };
    // Its CONNECT and BOUND - 1 messages.
    for seq in 0..BOUND as u64 - 1 {
        send(&mut a, &mut b, &mut hb, seq);
    }
    while set_aside(&b) < BOUND {
        assert!(std::time::Instant::now() < dl, "{} commands set aside", set_aside(&b));
        b.progress(&mut hb);
    }
    assert_eq!((b.parked.len(), set_aside(&b), hb.received.len()), (1, BOUND, 0), "parked at the bound");
    send(&mut a, &mut b, &mut hb, BOUND as u64 - 1);
    while hb.received.len() < BOUND {
        assert!(std::time::Instant::now() < dl, "{} delivered", hb.received.len());
        b.progress(&mut hb);
    }
    assert!(b.parked.is_empty(), "still parked past the bound");
    let want: Vec<_> = (0..BOUND as u64).map(|seq| (seq, pattern(64, seq as u8))).collect();
    let got: Vec<_> = arrived(&hb).into_iter().map(|(_, tag, bytes)| (tag, bytes)).collect();
    assert!(got == want, "the messages, in order");
}
