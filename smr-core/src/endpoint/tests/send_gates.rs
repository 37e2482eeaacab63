//! What holds a send back or refuses it. Small sends behind a large message to the same peer
//! (`sar_unstarted`, `PendingSend::unstarted`) wait only while a SAR message has not pushed the
//! first segment its receiver matches; behind one already matched (a CMA message, a SAR message
//! under way) they go at once, and are matched after it. And `max_msg_size`.

use super::*;
use crate::layout::Counts;

/// Send a large message of `len` to `to_b`, then a small one: the small one goes at once, not
/// "again"; both are matched in send order.
fn small_after_large(tag: &str, params: Params, len: usize) {
    let (mut a, mut b, to_b) = pair(tag, params);
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    let hdr1 = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
    assert_eq!(a.send(to_b, hdr1, LocalIov::owned(pattern(len, 1)), acked(1)), Ok(SendStatus::Pending));
    assert!(!a.sar_unstarted(to_b), "{tag}: the large message not matched yet");
    assert_eq!(a.send_bytes(to_b, hdr(2), &pattern(8, 2), acked(2)), Ok(SendStatus::Pending), "{tag}");
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "both sends", |ha, _| ha.sends_done.len() == 2);
    let order: Vec<u64> = hb.offered.iter().map(|m| m.hdr.tag).collect();
    assert_eq!(order, [1, 2], "{tag}: matched out of send order");
    let mut got: Vec<_> = hb.received.iter().map(|(h, r, bytes)| (h.tag, r.clone(), bytes.clone())).collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(got, [(1, Ok(len), pattern(len, 1)), (2, Ok(8), pattern(8, 2))], "{tag}");
}

#[test]
fn a_small_send_goes_at_once_behind_a_cma_message() {
    if !cma_or_skip("behindcma") {
        return;
    }
    let params = Params { cma_min: 0, measure_protocol: false, ..Params::default() };
    small_after_large("behindcma", params, 100_000);
}

#[test]
fn a_small_send_goes_at_once_behind_a_sar_message_under_way() {
    let d = Params::default();
    // Two buffers of 16 KiB: a 100 KB message pushes two segments and waits for the rest.
    let counts = Counts { sar_count: 2, sar_size: 16384, ..d.counts };
    let params = Params { cma: false, counts, sar_hold: 0, ..d };
    small_after_large("behindsar", params, 100_000);
}

/// `max_msg_size` bounds a message's length, through `send` and through `send_bytes` (by the
/// express path and the general one): a message of exactly that many bytes is sent and
/// arrives, one byte more is refused before anything goes.
#[test]
fn a_message_of_max_msg_size_goes_and_one_byte_more_is_refused() {
    for max in [10_000usize, 100] {
        let tag = format!("maxmsg{max}");
        let (mut a, mut b, to_b) = pair(&tag, Params { max_msg_size: max as u64, ..Params::default() });
        let (mut ha, mut hb) = (Collect::default(), Collect::default());
        let over = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: max as u64 + 1 };
        let refused = |r: Result<SendStatus>| matches!(r, Err(Error::Invalid(_)));
        assert!(refused(a.send(to_b, over, LocalIov::owned(pattern(max + 1, 1)), acked(1))), "{tag}");
        let at = MsgHeader { len: max as u64, ..over };
        assert_eq!(a.send(to_b, at, LocalIov::owned(pattern(max, 2)), acked(2)), Ok(SendStatus::Pending));
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the send", |ha, _| !ha.sends_done.is_empty());
        assert_eq!(ha.sends_done, [(2, Ok(()))]);
        assert_eq!(hb.received, [(at, Ok(max), pattern(max, 2))]);
        if max <= INJECT_SIZE as usize {
            // Linked and acknowledged now: the express path first, then the general one (an
            // acknowledged send, or one behind a staged batch, takes it).
            for opts in [SendOpts::default(), acked(3), SendOpts { more: true, ..SendOpts::default() }] {
                assert!(refused(a.send_bytes(to_b, over, &pattern(max + 1, 3), opts)), "{tag}: {opts:?}");
            }
            assert_eq!(a.send_bytes(to_b, at, &pattern(max, 4), SendOpts::default()), Ok(SendStatus::Done));
            receive_until(&mut b, &mut hb, 2, "the message sent with send_bytes");
            assert_eq!(hb.received[1], (at, Ok(max), pattern(max, 4)));
        }
    }
}
