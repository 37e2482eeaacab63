//! How a sender links to a receiver by its name (`link_slow`), and how the receiver meets it
//! (`accept`): a name with no region, a region whose owner died, a receiver without CMA, a
//! connection request sent again, and an entry of the receiver's table that another sender
//! left.

use super::*;

/// What `ep` sending message 1 (8 bytes, unacknowledged) to `to` gives once it no longer says
/// "again", up to the tests' deadline (`what` if it never does).
fn send_while_again(ep: &mut Endpoint, to: PeerId, what: &str) -> Result<SendStatus> {
    let dl = deadline();
    loop {
        match ep.send_bytes(to, hdr(1), &pattern(8, 1), SendOpts::default()) {
            Err(Error::Again) => assert!(std::time::Instant::now() < dl, "{what}"),
            other => return other,
        }
    }
}

/// Send message `tag` (8 bytes, unacknowledged) from `ep` to `to` until it is in the ring,
/// progressing `ep` between tries as an application does.
fn send_until_done((ep, h): (&mut Endpoint, &mut Collect), to: PeerId, tag: u64, what: &str) {
    let dl = deadline();
    loop {
        match ep.send_bytes(to, hdr(tag), &pattern(8, tag as u8), SendOpts::default()) {
            Ok(SendStatus::Done) => return,
            other => assert!(std::time::Instant::now() < dl, "{what}: {other:?}"),
        }
        ep.progress(h);
    }
}

/// Set in the child of `a_region_whose_owner_died_fails_sends_after_the_dead_owner_timeout`: the
/// name of the endpoint it creates before it exits without closing it.
const ORPHAN_CHILD: &str = "RSHM_TEST_ORPHAN_REGION";

/// The child: create an endpoint and exit at once, leaving its region behind, whole and open
/// (no destructor runs, as when a process is killed).
#[test]
fn child_leaving_its_region() {
    let Ok(name) = std::env::var(ORPHAN_CHILD) else { return };
    let ep = Endpoint::create(&name, Params::default()).unwrap();
    std::mem::forget(ep);
    // SAFETY: ends this process at once; nothing of it is used after.
    unsafe { libc::_exit(0) }
}

/// A region left by an owner that died: sends to its name answer "again" for a while (a
/// successor may take the name) and then fail with `PeerDead`, never linking to the dead
/// owner's region (where nothing would answer them).
#[test]
fn a_region_whose_owner_died_fails_sends_after_the_dead_owner_timeout() {
    let orphan = name("orphanregion");
    let mut child =
        crate::test_child::rerun("endpoint::tests::linking::child_leaving_its_region", ORPHAN_CHILD, &orphan);
    assert!(child.status().unwrap().success());
    let params = Params {
        absent_peer_timeout: std::time::Duration::from_secs(60),
        dead_owner_timeout: std::time::Duration::from_millis(100),
        ..Params::default()
    };
    let mut a = Endpoint::create(&name("orphansender"), params).unwrap();
    let to = a.add_peer(&orphan).unwrap();
    let failed = send_while_again(&mut a, to, "a send to a dead owner's name never failed");
    let _ = std::fs::remove_file(format!("/dev/shm/{orphan}"));
    assert_eq!(failed, Err(Error::PeerDead));
    assert!(a.out[to as usize].link.is_none(), "linked to a dead owner's region");
}

/// A name no endpoint holds: sends answer "again" (a peer still starting) until
/// `absent_peer_timeout`, and `NoSuchPeer` after.
#[test]
fn a_name_nobody_holds_is_no_such_peer_after_the_absent_timeout() {
    let params = Params { absent_peer_timeout: std::time::Duration::from_millis(50), ..Params::default() };
    let mut a = Endpoint::create(&name("absentsender"), params).unwrap();
    let to = a.add_peer(&name("absentnobody")).unwrap();
    let start = std::time::Instant::now();
    let failed = send_while_again(&mut a, to, "a send to nobody never failed");
    assert_eq!(failed, Err(Error::NoSuchPeer));
    assert!(start.elapsed() >= std::time::Duration::from_millis(35), "failed before the absent timeout");
}

/// A receiver whose region says CMA is off is sent to through SAR, though its sender could
/// use CMA: a large message arrives whole, read by no CMA copy.
#[test]
fn a_receiver_without_cma_is_sent_to_through_sar() {
    if !cma_or_skip("linknocma") {
        return;
    }
    let mut a = Endpoint::create(&name("linknocmaa"), Params { cma_min: 0, ..Params::default() }).unwrap();
    let mut b = Endpoint::create(&name("linknocmab"), Params { cma: false, ..Params::default() }).unwrap();
    let to_b = a.add_peer(b.name()).unwrap();
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let len = 100_000;
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
    assert_eq!(a.send(to_b, hdr, LocalIov::owned(pattern(len, 3)), acked(1)), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the message", |ha, _| !ha.sends_done.is_empty());
    assert!(!a.cma_with(to_b), "CMA with a receiver whose region says it is off");
    assert_eq!(hb.received, vec![(hdr, Ok(len), pattern(len, 3))]);
    assert_eq!((a.stats().sent_cma, b.stats().cma_reads), (0, 0));
}

/// A sender that asks again to connect before its first request's answer (`connect_retry`
/// passed) is answered again: the repeat is not taken for a scribble of another sender's, and
/// its messages arrive.
#[test]
fn a_connection_request_sent_again_is_answered_again() {
    let params = Params { connect_retry: std::time::Duration::ZERO, ..Params::default() };
    let (mut a, mut b, to_b) = pair("connectagain", params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    for tag in 1..=3 {
        assert_eq!(a.send_bytes(to_b, hdr(tag), &pattern(8, tag as u8), acked(tag)), Ok(SendStatus::Pending));
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the answers", |ha, _| ha.sends_done.len() == 3);
    assert_eq!(ha.sends_done, vec![(1, Ok(())), (2, Ok(())), (3, Ok(()))]);
    assert_eq!(hb.received.len(), 3);
    assert_eq!(b.stats().corrupt_commands, 0, "a repeated request taken for a scribble");
}

/// A sender that disconnected is forgotten and its entry of the receiver's table freed; the
/// next sender to claim that entry (the receiver's only one) is met by its connection request
/// (its first command), and its messages are its own, not taken for ones the first left behind.
#[test]
fn a_sender_in_the_entry_another_left_is_met_by_its_request() {
    let d = Params::default();
    let mut a = Endpoint::create(&name("entrylefta"), d.clone()).unwrap();
    let one_entry = Params { counts: crate::layout::Counts { max_peers: 1, ..d.counts }, ..d };
    let mut b = Endpoint::create(&name("entryleftb"), one_entry).unwrap();
    let to_b = a.add_peer(b.name()).unwrap();
    let mut hb = Collect::default();
    assert_eq!(a.send_bytes(to_b, hdr(1), &pattern(8, 1), SendOpts::default()), Ok(SendStatus::Done));
    receive_until(&mut b, &mut hb, 1, "a's message");
    let entry = a.link(to_b).unwrap().slot;
    drop(a);
    b.progress(&mut hb);
    assert!(b.forgotten.contains_key(&(entry as SrcId)), "a's departure not seen");
    b.decide_due();
    let mut c = Endpoint::create(&name("entryleftc"), Params::default()).unwrap();
    let c_to_b = c.add_peer(b.name()).unwrap();
    assert_eq!(c.send_bytes(c_to_b, hdr(2), &pattern(8, 2), SendOpts::default()), Ok(SendStatus::Done));
    assert_eq!(c.link(c_to_b).unwrap().slot, entry, "c took another entry than a's");
    receive_until(&mut b, &mut hb, 2, "c's message");
    assert_eq!(hb.received[1], (hdr(2), Ok(8), pattern(8, 2)));
    assert_eq!(b.src_name(entry as SrcId), Some(c.name()));
}

/// A sender that closed before its receiver met it, its name taken at once by a new endpoint:
/// the receiver, opening the name, finds a region of another incarnation and does not take it
/// for the first sender's. Its inline message is still delivered, and nothing is answered into
/// the newcomer's ring, where the first sender's message ids would look like its own.
#[test]
fn a_request_whose_name_has_passed_to_a_successor_is_not_met_as_it() {
    let (mut a, mut b, to_b) = pair("namepassed", Params::default());
    let mut hb = Collect::default();
    assert_eq!(a.send_bytes(to_b, hdr(1), &pattern(8, 1), acked(1)), Ok(SendStatus::Pending));
    let first = a.name().to_owned();
    drop(a);
    let mut successor = Endpoint::create(&first, Params::default()).unwrap();
    receive_until(&mut b, &mut hb, 1, "the first sender's message");
    assert_eq!(hb.received[0], (hdr(1), Ok(8), pattern(8, 1)));
    b.progress(&mut hb);
    let mut hs = Collect::default();
    successor.progress(&mut hs);
    assert!(hs.sends_done.is_empty());
    assert_eq!(
        (successor.stats().late_answers, successor.stats().corrupt_commands),
        (0, 0),
        "answered into the successor"
    );
}

/// A receiver that sends to a peer, which closes, and whose name a new endpoint then takes:
/// the newcomer's messages are met with its own region, not the mapping of its predecessor's
/// that the receiver still holds for sending, and the receiver's next send reaches it.
#[test]
fn a_newcomer_in_a_closed_peers_name_is_met_with_its_own_region() {
    let (mut b, mut old, to_old) = pair("newcomer", Params::default());
    let mut h = Collect::default();
    assert_eq!(b.send_bytes(to_old, hdr(1), &pattern(8, 1), SendOpts::default()), Ok(SendStatus::Done));
    receive_until(&mut old, &mut h, 1, "b's message");
    let taken = old.name().to_owned();
    drop(old);
    let mut newcomer = Endpoint::create(&taken, Params::default()).unwrap();
    let to_b = newcomer.add_peer(b.name()).unwrap();
    let (mut hn, mut hb) = (Collect::default(), Collect::default());
    assert_eq!(newcomer.send_bytes(to_b, hdr(2), &pattern(8, 2), acked(2)), Ok(SendStatus::Pending));
    pump_until((&mut newcomer, &mut hn), (&mut b, &mut hb), "the answer", |hn, _| !hn.sends_done.is_empty());
    assert_eq!(hn.sends_done, vec![(2, Ok(()))], "the newcomer not met");
    assert_eq!(hb.received, vec![(hdr(2), Ok(8), pattern(8, 2))]);
    send_until_done((&mut b, &mut hb), to_old, 3, "no send to the newcomer");
    receive_until(&mut newcomer, &mut hn, 1, "b's message to the newcomer");
    assert_eq!(hn.received, vec![(hdr(3), Ok(8), pattern(8, 3))]);
}

/// A peer that closed, with nothing of ours waiting on it, is linked afresh to the successor
/// that took its name, while a send to another peer still waits (for its answer, or whole for
/// its receiver to take it): only sends waiting on the closed peer itself hold the new link back
/// until the liveness tick fails them.
#[test]
fn a_closed_peers_successor_is_linked_while_sends_to_others_wait() {
    for large in [false, true] {
        let tag = if large { "waitslarge" } else { "waitsother" };
        let (mut a, old, to_old) = pair(tag, Params::default());
        let mut y = Endpoint::create(&name(&format!("{tag}y")), Params::default()).unwrap();
        let to_y = a.add_peer(y.name()).unwrap();
        let (mut ha, mut h) = (Collect::default(), Collect::default());
        if large {
            // Never taken: y does not progress.
            let len = 100_000;
            let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
            assert_eq!(a.send(to_y, hdr, LocalIov::owned(pattern(len, 1)), acked(1)), Ok(SendStatus::Pending));
            assert_eq!((a.pending.len(), a.acked.len()), (1, 0));
        } else {
            // Taken, never answered.
            let mut hy = Collect { later: true, ..Default::default() };
            assert_eq!(a.send_bytes(to_y, hdr(1), &pattern(8, 1), acked(1)), Ok(SendStatus::Pending));
            receive_until(&mut y, &mut hy, 1, "y's message");
            assert_eq!((a.pending.len(), a.acked.len()), (0, 1));
        }
        assert_eq!(a.send_bytes(to_old, hdr(2), &pattern(8, 2), SendOpts::default()), Ok(SendStatus::Done));
        let taken = old.name().to_owned();
        drop(old);
        let mut successor = Endpoint::create(&taken, Params::default()).unwrap();
        send_until_done((&mut a, &mut ha), to_old, 3, "never linked to the successor");
        receive_until(&mut successor, &mut h, 1, "the message to the successor");
        assert_eq!(h.received, vec![(hdr(3), Ok(8), pattern(8, 3))]);
        assert!(ha.sends_done.is_empty(), "the send waiting on y completed");
    }
}
