//! A read request that arrives as a delivery, not whole in its command: a peer that sent it
//! through SAR or CMA. Ours never does (every request fits an inject buffer), but a peer of
//! other parameters may, and the target must serve it as one offered whole: the bytes the
//! request names, as they were when it arrived (FI_ORDER_WAR), in the answer buffer it named or
//! in the answer itself.

use super::segments::Segment;
use super::*;
use crate::state::ep::sinks::Bindings;
use crate::state::mr::MrEntry;
use smr_core::endpoint::{AnswerBuf, Disposition, Incoming};

const KEY: u64 = 0x5a;
/// The registration's bytes, and where in it the reads start.
const SIZE: usize = 8192;
const AT: usize = 100;

/// What target memory holds before the reads.
fn pattern() -> Vec<u8> {
    (0..SIZE).map(|i| (i * 13 % 251) as u8).collect()
}

/// Serve a read request for `len` bytes at `AT` of `mem`, to be returned `by`, as the engine
/// would one that came through SAR or CMA: taken later, its bytes delivered, then
/// `on_delivered`. With `segmented`, the ranges come first in a list of their own, served whole
/// in its command. Then overwrite the memory, and return what the target queued to send.
fn serve_delivered(mem: &mut [u8], segmented: bool, by: ReturnBy, len: u64) -> Vec<Outgoing> {
    let mut mrs = MrTable::default();
    let access = ffi::FI_REMOTE_READ as u64;
    mrs.insert(KEY, MrEntry::new([(mem.as_ptr() as usize, mem.len())].into_iter().collect(), access));
    let mut rma = RmaState::default();
    let (mut cqs, mut cntrs) = (Slab::new(), Slab::new());
    let b = Bindings::default();
    let mut sinks = Sinks::new(&mut cqs, &mut cntrs, &b);
    let mut target = Target { rma: &mut rma, mrs: &mrs };
    let incoming = |hdr, msg_id| Incoming { key: msg_id, src: 3, src_gen: 1, msg_id, hdr, acked: false };
    let mut app_bits = 0;
    if segmented {
        // Two ranges, the second first: the answer gathers them in the list's order.
        let half = len / 2;
        let at = |addr: usize, len| Segment { key: KEY, addr: addr as u64, len };
        let (list, n) = Segments::new(&[at(AT + half as usize, len - half), at(AT, half)]).unwrap().encode();
        let msg = incoming(header(app(KIND_SEGMENTS, 0), 0, 0, 0, n), 1);
        assert!(matches!(target.on_payload(&msg, &list[..n], &mut sinks), Some(Disposition::Taken { .. })));
        app_bits = APP_SEGMENTED;
    }
    let payload = ReadReq { op_id: 0, len, by }.encode();
    let msg = incoming(header(app(KIND_READ_REQ, app_bits), KEY, AT as u64, 0, payload.len()), 2);
    let Disposition::Later { dest: LocalIov::Owned(mut dest), ctx } = target.on_message(&msg) else {
        panic!("a read request not here in full is taken later, into a buffer of its length");
    };
    assert!(ctx & CTX_TARGET != 0 && target.rma.outbox.is_empty());
    dest.copy_from_slice(&payload);
    target.on_delivered((ctx & !CTX_TARGET) as usize, Ok(payload.len()), LocalIov::Owned(dest), &mut sinks);
    assert!(target.rma.target.is_empty(), "the operation finished");
    // Written after the request arrived: the answer keeps what was there.
    mem.fill(0);
    rma.outbox.drain(..).collect()
}

/// The bytes a read of `len` at `AT` returns: with the list of `serve_delivered`, its second
/// half first.
fn expected(segmented: bool, len: usize) -> Vec<u8> {
    let (mem, half) = (pattern(), len / 2);
    match segmented {
        false => mem[AT..AT + len].to_vec(),
        true => [&mem[AT + half..AT + len], &mem[AT..AT + half]].concat(),
    }
}

#[test]
fn a_read_request_delivered_later_is_answered_as_one_offered_whole() {
    let buf = AnswerBuf::from_wire(7, &[]).expect("a buffer's name");
    for segmented in [false, true] {
        // Into the answer buffer named: larger than an answer holds.
        let len = 3000;
        assert!(len > ANSWER_DATA_MAX);
        let mut mem = pattern();
        let out = serve_delivered(&mut mem, segmented, ReturnBy::AnswerBuf(buf), len as u64);
        let want = expected(segmented, len);
        match &out[..] {
            [Outgoing::AnswerInto { to, buf: named, data }] => {
                assert_eq!((to.src, to.msg_id), (3, 2), "answered to the request's sender and message");
                assert_eq!(*named, buf);
                assert!(*data == want, "the bytes asked for, as they were (segmented: {segmented})");
            }
            _ => panic!("{} outgoing, not one answer into the buffer named (segmented: {segmented})", out.len()),
        }
        // With its bytes in the answer: small enough.
        let len = 64;
        let mut mem = pattern();
        let out = serve_delivered(&mut mem, segmented, ReturnBy::Reply, len as u64);
        match &out[..] {
            [Outgoing::AnswerData { to, data }] => {
                assert_eq!(to.msg_id, 2);
                assert_eq!(data.as_slice(), expected(segmented, len), "segmented: {segmented}");
            }
            _ => panic!("{} outgoing, not one answer with the bytes (segmented: {segmented})", out.len()),
        }
    }
}
