//! A head of one of our rings that a producer claimed and never published (`check_stalls`):
//! of our command ring by a sender (`Known::command_claimant_lives`), of our response ring by a
//! receiver we send to (`Known::response_claimant_lives`). Waited for while the claimant
//! lives, however long; skipped once it is dead and `stall_timeout` has passed, so that what
//! is behind it arrives.

use super::*;

/// `a` and `c` send to `b`; `a` has claimed the head of `b`'s command ring (through its entry's
/// claim record) and published nothing there, and `c`'s message waits behind it. `b`'s stall
/// clock has run past `stall_timeout`. Returned: a, b, c (a and c kept open: a closing would
/// push through its claim record), b's handler, a's entry.
fn stalled_behind_a(tag: &str) -> ([Endpoint; 3], Collect, SrcId) {
    let (mut a, mut b, a_to_b) = pair(tag, stalls());
    let mut c = Endpoint::create(&name(&format!("{tag}c")), stalls()).unwrap();
    let c_to_b = c.add_peer(b.name()).unwrap();
    let mut hb = Collect::default();
    assert_eq!(a.send_bytes(a_to_b, hdr(1), &pattern(8, 1), SendOpts::default()), Ok(SendStatus::Done));
    receive_until(&mut b, &mut hb, 1, "a's first message");
    assert_eq!(c.send_bytes(c_to_b, hdr(2), &pattern(8, 2), SendOpts::default()), Ok(SendStatus::Done));
    receive_until(&mut b, &mut hb, 2, "c's first message");
    let a_src = a.link(a_to_b).unwrap().slot;
    b.region.cmd_ring_as(a_src).claim_unpublished();
    assert_eq!(c.send_bytes(c_to_b, hdr(3), &pattern(8, 3), SendOpts::default()), Ok(SendStatus::Done));
    b.progress(&mut hb);
    b.check_stalls();
    std::thread::sleep(std::time::Duration::from_millis(60));
    ([a, b, c], hb, a_src as SrcId)
}

#[test]
fn a_live_senders_claimed_head_is_waited_for() {
    let ([_a, mut b, _c], mut hb, _) = stalled_behind_a("stalllive");
    for _ in 0..3 {
        b.check_stalls();
        b.progress(&mut hb);
    }
    assert_eq!(b.stats().skipped_slots, 0, "a live sender's claim skipped");
    assert_eq!(hb.received.len(), 2, "a message behind the head taken");
}

#[test]
fn a_dead_senders_claimed_head_is_skipped_and_what_follows_arrives() {
    let ([_a, mut b, _c], mut hb, a_src) = stalled_behind_a("stalldead");
    let known = b.inp.get_mut(&a_src).unwrap();
    known.watch = dead_watch(&known.watch);
    b.check_stalls();
    assert_eq!(b.stats().skipped_slots, 1, "a dead sender's claim waited for");
    receive_until(&mut b, &mut hb, 3, "c's message behind the skipped head");
    assert_eq!(hb.received[2], (hdr(3), Ok(8), pattern(8, 3)));
}

/// `a` sends to `b`, which has claimed the head of `a`'s response ring (through its claim
/// record, in its table's entry for `a`) and published nothing there; `a`'s stall clock has
/// run past `stall_timeout`. Returned: a, b, a's link to b.
fn answer_stalled(tag: &str) -> ([Endpoint; 2], PeerId) {
    let (mut a, b, to_b, _, _) = answered_once(tag, stalls());
    let entry = a.link(to_b).unwrap().slot as usize;
    a.region.resp_ring().with_claim_record(&b.region.peer_slots()[entry].resp_claim).claim_unpublished();
    a.check_stalls();
    std::thread::sleep(std::time::Duration::from_millis(60));
    ([a, b], to_b)
}

#[test]
fn a_live_receivers_claimed_head_of_our_responses_is_waited_for() {
    let ([mut a, _b], _) = answer_stalled("respstalllive");
    for _ in 0..3 {
        a.check_stalls();
    }
    assert_eq!(a.stats().skipped_slots, 0, "a live receiver's claim skipped");
}

#[test]
fn a_dead_receivers_claimed_head_of_our_responses_is_skipped() {
    let ([mut a, _b], to_b) = answer_stalled("respstalldead");
    let link = a.out[to_b as usize].link.as_mut().unwrap();
    link.owner = dead_watch(&link.owner);
    a.check_stalls();
    assert_eq!(a.stats().skipped_slots, 1, "a dead receiver's claim waited for");
}
