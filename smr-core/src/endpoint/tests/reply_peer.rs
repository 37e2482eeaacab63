//! The peer a receiver sends a reply to (`peer_of`): the sender of the message it answers, by
//! that sender's name (`src_name`), whatever else the receiver sends to.

use super::*;

/// Two senders to `b`, which already sends to a third endpoint: each message's reply peer is
/// its own sender (named so, the same peer each time, and the one a later `add_peer` of the
/// name finds); a sender `b` has forgotten has none.
#[test]
fn a_reply_goes_to_the_sender_of_the_message_answered() {
    let (mut a, mut b, a_to_b) = pair("replypeer", Params::default());
    let mut c = Endpoint::create(&name("replypeerc"), Params::default()).unwrap();
    let c_to_b = c.add_peer(b.name()).unwrap();
    let elsewhere = b.add_peer(&name("replypeerd")).unwrap();
    let mut hb = Collect::default();
    let mut from = Vec::new();
    for (ep, to_b, tag) in [(&mut a, a_to_b, 1), (&mut c, c_to_b, 2)] {
        assert_eq!(ep.send_bytes(to_b, hdr(tag), &pattern(8, tag as u8), SendOpts::default()), Ok(SendStatus::Done));
        receive_until(&mut b, &mut hb, tag as usize, "the message not offered");
        let msg = *hb.offered.last().unwrap();
        assert_eq!(msg.hdr.tag, tag);
        from.push((msg.answer_to(), ep.name().to_owned()));
    }
    let mut peers = Vec::new();
    for (to, sender) in &from {
        assert_eq!(b.src_name(to.src), Some(sender.as_str()));
        let peer = b.peer_of(*to).unwrap();
        assert_eq!(b.peer_name(peer), Some(sender.as_str()), "a reply to another than the sender");
        assert_eq!(b.peer_of(*to), Ok(peer), "a second reply to another peer");
        assert_eq!(b.add_peer(sender), Ok(peer));
        peers.push(peer);
    }
    assert!(peers[0] != peers[1] && !peers.contains(&elsewhere));
    assert_eq!(b.peer_name(elsewhere).map(str::to_owned), Some(name("replypeerd")));
    b.forget_in_peer(from[0].0.src, &mut hb);
    assert_eq!(b.peer_of(from[0].0), Err(Error::PeerDead), "a reply to a sender forgotten");
    assert_eq!(b.src_name(from[0].0.src), None);
}

/// `b` sends to `d`, then meets senders `a` and `c`, and replies to each: every peer gets
/// its own messages, and each direction between `b` and a sender shares one mapping of the
/// sender's region (`mapped_region`), the sender's own.
#[test]
fn replies_reach_their_senders_through_the_mapping_of_their_messages() {
    let (mut a, mut b, a_to_b) = pair("replymap", Params::default());
    let mut c = Endpoint::create(&name("replymapc"), Params::default()).unwrap();
    let mut d = Endpoint::create(&name("replymapd"), Params::default()).unwrap();
    let c_to_b = c.add_peer(b.name()).unwrap();
    let (mut hb, mut hd) = (Collect::default(), Collect::default());
    let to_d = b.add_peer(d.name()).unwrap();
    assert_eq!(b.send_bytes(to_d, hdr(9), &pattern(8, 9), SendOpts::default()), Ok(SendStatus::Done));
    receive_until(&mut d, &mut hd, 1, "b's message to d");
    let mut senders = [(&mut a, a_to_b, Collect::default()), (&mut c, c_to_b, Collect::default())];
    let mut replies = Vec::new();
    for (tag, (ep, to_b, h)) in (1u64..).zip(senders.iter_mut()) {
        assert_eq!(ep.send_bytes(*to_b, hdr(tag), &pattern(8, tag as u8), acked(tag)), Ok(SendStatus::Pending));
        pump_until((&mut **ep, &mut *h), (&mut b, &mut hb), "the answer", |h, _| h.sends_done.len() == 1);
        assert_eq!(h.sends_done, vec![(tag, Ok(()))], "a sender met in the mapping of another peer");
        let to = hb.offered.last().unwrap().answer_to();
        replies.push((to.src, b.peer_of(to).unwrap()));
    }
    for (tag, (ep, _, h)) in (1u64..).zip(senders.iter_mut()) {
        let (src, peer) = replies[tag as usize - 1];
        assert_eq!(
            b.send_bytes(peer, hdr(10 + tag), &pattern(8, tag as u8), SendOpts::default()),
            Ok(SendStatus::Done)
        );
        receive_until(ep, h, 1, "the reply");
        assert_eq!(h.received, vec![(hdr(10 + tag), Ok(8), pattern(8, tag as u8))], "another peer's reply");
        let link = Arc::clone(&b.link(peer).unwrap().region);
        assert!(Arc::ptr_eq(&link, &b.inp.get(&src).unwrap().region), "two mappings of one sender's region");
    }
    d.progress(&mut hd);
    assert_eq!(hd.received.len(), 1, "a reply reached d");
}
