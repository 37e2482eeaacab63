//! A head of our command ring that a sender claimed and never published (`check_stalls`,
//! `Known::command_claimant_lives`): waited for while the claimant lives, however long;
//! skipped once it is dead and `stall_timeout` has passed, so that the commands behind it
//! arrive.

use super::*;

/// `a` and `c` send to `b`; `a` has claimed the head of `b`'s command ring (through its entry's
/// claim record) and published nothing there, and `c`'s message waits behind it. `b`'s stall
/// clock has run past `stall_timeout`. Returned: a, b, c (a and c kept open: a closing would
/// push through its claim record), b's handler, a's entry.
fn stalled_behind_a(tag: &str) -> ([Endpoint; 3], Collect, SrcId) {
    let params = Params {
        stall_timeout: std::time::Duration::from_millis(20),
        liveness_interval: std::time::Duration::from_secs(3600),
        ..Params::default()
    };
    let (mut a, mut b, a_to_b) = pair(tag, params.clone());
    let mut c = Endpoint::create(&name(&format!("{tag}c")), params).unwrap();
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
    let pid = crate::liveness::dead_pid();
    known.watch = crate::liveness::Watch::new(crate::liveness::ProcessIdentity { pid, ..known.watch.ident() });
    b.check_stalls();
    assert_eq!(b.stats().skipped_slots, 1, "a dead sender's claim waited for");
    receive_until(&mut b, &mut hb, 3, "c's message behind the skipped head");
    assert_eq!(hb.received[2], (hdr(3), Ok(8), pattern(8, 3)));
}
