//! What a sender's liveness check (`check_peers`) makes of a receiver that will answer nothing
//! more: its process died, or it dropped us (freed our entry of its table, which may then hold
//! another sender). The sends it answered complete; those it never answered fail with
//! `PeerDead`.

use super::*;
use crate::sync::Ordering;

/// After `a`'s liveness check: send 2 failed, send 1 kept its answer, and the receiver's link is
/// gone (a later send looks for the receiver's name afresh).
fn assert_unanswered_failed(a: &Endpoint, to_b: PeerId, ha: &Collect, why: &str) {
    assert_eq!(ha.sends_done, vec![(1, Ok(())), (2, Err(Error::PeerDead))], "{why}");
    assert!(a.out[to_b as usize].link.is_none(), "{why}: the link kept");
}

/// The receiver's process died, its region left open and whole (it had no time to close it).
#[test]
fn a_receiver_whose_process_died_fails_the_sends_it_never_answered() {
    let (mut a, _b, to_b, mut ha, _hb) = one_answered_one_not("rxdied");
    a.check_peers(&mut ha);
    assert_eq!(ha.sends_done.len(), 1, "a live receiver's pending send failed");
    let link = a.out[to_b as usize].link.as_mut().unwrap();
    assert!(link.region.intact() && !link.region.closed());
    link.owner = dead_watch(&link.owner);
    a.check_peers(&mut ha);
    assert_unanswered_failed(&a, to_b, &ha, "the receiver's process died");
}

/// The receiver forgot us (as it does a sender it gives up) and freed our entry once past our
/// commands; its process lives and its region is open. The entry then free, or held by another
/// sender.
#[test]
fn a_receiver_that_freed_our_entry_fails_the_sends_it_never_answered() {
    for successor in [false, true] {
        let tag = if successor { "rxdropsucc" } else { "rxdrop" };
        let (mut a, mut b, to_b, mut ha, mut hb) = one_answered_one_not(tag);
        let src = a.link(to_b).unwrap().slot;
        b.forget_in_peer(src as SrcId, &mut hb);
        b.decide_due();
        let entry = &b.region.peer_slots()[src as usize];
        assert_eq!(entry.state.load(Ordering::Acquire) & 3, crate::layout::SLOT_FREE, "the entry not freed");
        let _holder = successor.then(|| take_entry(&mut b, src, &format!("{tag}c"), Params::default()));
        a.check_peers(&mut ha);
        assert_unanswered_failed(&a, to_b, &ha, &format!("our entry freed (then taken: {successor})"));
    }
}

/// A receiver that died when nothing waited on it but a send had gone to it since the last
/// check (one that completed when queued): its link is dropped too, so that the next send
/// looks for the name afresh rather than queue into the dead receiver's ring, to be lost.
#[test]
fn a_receiver_sent_to_since_the_last_check_is_watched_though_nothing_waits() {
    let (mut a, _b, to_b, mut ha, _) = answered_once("rxdiedused", Params::default());
    a.check_peers(&mut ha);
    assert_eq!(a.send_bytes(to_b, hdr(2), &pattern(8, 2), SendOpts::default()), Ok(SendStatus::Done));
    let link = a.out[to_b as usize].link.as_mut().unwrap();
    link.owner = dead_watch(&link.owner);
    a.check_peers(&mut ha);
    assert!(a.out[to_b as usize].link.is_none(), "a dead receiver's link kept");
    assert_eq!(ha.sends_done, vec![(1, Ok(()))]);
}

/// A sender whose receiver's ring is full looks at the receiver's owner at most once a
/// liveness interval: once the receiver died, a send that finds the ring full an interval
/// after the last look fails with `PeerDead` (no liveness tick of the sender's needed), not
/// "again" for ever.
#[test]
fn a_full_ring_of_a_receiver_that_died_fails_the_send_after_the_liveness_interval() {
    let interval = std::time::Duration::from_millis(30);
    let d = Params::default();
    let params = Params { liveness_interval: interval, counts: crate::layout::Counts { cmd_len: 16, ..d.counts }, ..d };
    let (mut a, _b, to_b) = pair("rxdiedfull", params);
    let mut sent = 0;
    let full = loop {
        match a.send_bytes(to_b, hdr(sent), &pattern(8, 1), SendOpts::default()) {
            Ok(SendStatus::Done) => sent += 1,
            other => break other,
        }
        assert!(sent <= 64, "a ring of 16 took {sent} messages");
    };
    assert_eq!(full, Err(Error::Again), "the ring full, its receiver alive");
    let link = a.out[to_b as usize].link.as_mut().unwrap();
    link.owner = dead_watch(&link.owner);
    std::thread::sleep(2 * interval);
    let failed = a.send_bytes(to_b, hdr(99), &pattern(8, 1), SendOpts::default());
    assert_eq!(failed, Err(Error::PeerDead));
    assert!(a.out[to_b as usize].link.is_none());
}
