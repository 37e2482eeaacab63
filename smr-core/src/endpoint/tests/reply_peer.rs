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
