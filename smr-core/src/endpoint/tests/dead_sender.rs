//! What a receiver does with the messages of a sender that died (`recv::fail_receives_from`):
//! they fail, and no other sender's.

use super::*;

/// A CMA message held for the handler (`Disposition::Hold`) whose sender died before its
/// delivery fails with `PeerDead` when delivered: it is never read from the process that
/// holds the sender's entry of our table by then (here, one that maps the dead sender's
/// buffer at the same address), and its destination is left as it was.
#[test]
fn a_held_cma_message_of_a_dead_sender_is_never_read_from_its_successor() {
    if !cma_or_skip("heldcmadead") {
        return;
    }
    let params = Params { cma_min: 0, measure_protocol: false, ..Params::default() };
    let (mut a, mut b, to_b) = pair("heldcmadead", params.clone());
    let (mut ha, mut hb) = (Collect::default(), Collect { hold: true, ..Default::default() });
    let len = 100_000;
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
    assert_eq!(a.send(to_b, hdr, LocalIov::owned(pattern(len, 7)), acked(1)), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the message offered", |_, hb| hb.offered.len() == 1);
    assert_eq!((b.held_count(), a.stats().sent_cma), (1, 1), "held, by CMA");

    let _successor = successor_in_entry(&mut a, &mut b, to_b, &mut hb, "heldcmadeads", params);
    let delivered = b.deliver(hb.offered[0].key, LocalIov::owned(vec![0; len]), 1).unwrap();
    let Delivered::Now(result, dest) = delivered else { panic!("not finished at once") };
    assert_eq!(result, Err(Error::PeerDead));
    assert!(dest.into_owned().unwrap().iter().all(|&x| x == 0), "bytes read from the entry's new holder");
    assert_eq!(b.stats().cma_reads, 0);
}

/// Two senders' SAR messages arriving at once, one sender forgotten (it died): its receive
/// fails with `PeerDead`, and the other's goes on and arrives intact.
#[test]
fn one_senders_death_fails_only_its_own_arriving_messages() {
    use crate::layout::Counts;
    let d = Params::default();
    let params = Params { cma: false, counts: Counts { sar_count: 16, sar_size: 16384, ..d.counts }, sar_hold: 0, ..d };
    let (mut a, mut b, a_to_b) = pair("twosenders", params.clone());
    let mut c = Endpoint::create(&name("twosendersc"), params).unwrap();
    let c_to_b = c.add_peer(b.name()).unwrap();
    let (mut hb, mut hc) = (Collect::default(), Collect::default());
    let len = 300_000;
    for (ep, to, seed) in [(&mut a, a_to_b, 1), (&mut c, c_to_b, 2)] {
        let hdr = MsgHeader { app: 0, tag: seed.into(), data: 0, aux: 0, len: len as u64 };
        assert_eq!(ep.send(to, hdr, LocalIov::owned(pattern(len, seed)), acked(seed.into())), Ok(SendStatus::Pending));
    }
    // a's first segments arrive; a is not progressed again, so its message stays in flight
    // while c's starts.
    b.progress(&mut hb);
    let dl = deadline();
    while b.sar_rx.len() < 2 {
        assert!(std::time::Instant::now() < dl, "both never arriving at once: {:?}", hb.received);
        c.progress(&mut hc);
        b.progress(&mut hb);
    }
    assert!(hb.received.is_empty(), "a message arrived whole before the death");
    let a_src = a.link(a_to_b).unwrap().slot as SrcId;
    b.forget_in_peer(a_src, &mut hb);
    pump_until((&mut c, &mut hc), (&mut b, &mut hb), "c's message", |hc, _| !hc.sends_done.is_empty());
    let got: Vec<_> =
        hb.received.iter().map(|(hdr, r, bytes)| (hdr.tag, r.clone(), bytes == &pattern(len, 2))).collect();
    assert_eq!(got, [(1, Err(Error::PeerDead), false), (2, Ok(len), true)]);
    assert_eq!(hc.sends_done, [(2, Ok(()))]);
}

/// Three senders: once one is forgotten (it disconnected), the deaths of the other two are
/// still found by the liveness check, each forgotten once.
#[test]
fn a_forgotten_sender_leaves_the_others_watched() {
    let (mut a, mut b, a_to_b) = pair("watchedrest", Params::default());
    let mut hb = Collect::default();
    let mut senders = vec![(a_to_b, Collect::default())];
    let mut others: Vec<Endpoint> =
        (0..2).map(|i| Endpoint::create(&name(&format!("watchedrest{i}")), Params::default()).unwrap()).collect();
    for ep in others.iter_mut() {
        senders.push((ep.add_peer(b.name()).unwrap(), Collect::default()));
    }
    let mut srcs = Vec::new();
    for (i, ep) in std::iter::once(&mut a).chain(others.iter_mut()).enumerate() {
        let (to_b, h) = &mut senders[i];
        assert_eq!(ep.send_bytes(*to_b, hdr(i as u64), &pattern(8, i as u8), acked(1)), Ok(SendStatus::Pending));
        pump_until((ep, h), (&mut b, &mut hb), "the message answered", |h, _| h.sends_done.len() == 1);
        srcs.push(ep.link(*to_b).unwrap().slot as SrcId);
    }
    b.forget_in_peer(srcs[0], &mut hb);
    for &src in &srcs[1..] {
        let known = b.inp.get_mut(&src).expect("a sender known");
        known.watch = dead_watch(&known.watch);
    }
    b.check_peers(&mut hb);
    for &src in &srcs {
        assert!(!b.inp.contains_key(&src) && b.forgotten.contains_key(&src), "sender at {src} still known");
    }
    assert_eq!(b.inp.iter().count(), 0);
}
