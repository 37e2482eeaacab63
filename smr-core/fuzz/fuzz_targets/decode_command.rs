//! Any bytes a peer can put in a command slot must decode to an error or to a command whose
//! every index and length is inside the receiver's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smr_core::cmd::{
    compact_at, decode, proto, Body, CmdEntry, Command, Limits, FLAG_ACK, FLAG_SPLIT_EARLY, FLAG_TIMED, HEADER_BYTES,
    INLINE_MAX,
};

fn entry_from(bytes: &[u8]) -> CmdEntry {
    let mut e = CmdEntry::default();
    let take = |at: usize, n: usize| -> u64 {
        let mut v = [0u8; 8];
        for (i, b) in v.iter_mut().enumerate().take(n) {
            *b = bytes.get(at + i).copied().unwrap_or(0);
        }
        u64::from_le_bytes(v)
    };
    e.op = take(0, 1) as u8;
    e.proto = take(1, 1) as u8;
    e.flags = take(2, 1) as u8;
    e.app = take(3, 1) as u8;
    e.src = take(4, 4) as u32;
    e.len = take(8, 8);
    e.tag = take(16, 8);
    e.data = take(24, 8);
    e.msg_id = take(32, 8);
    e.aux = take(40, 8);
    for (i, b) in e.payload.iter_mut().enumerate() {
        *b = bytes.get(48 + i).copied().unwrap_or(0);
    }
    e
}

fuzz_target!(|bytes: &[u8]| {
    let limits = Limits { max_peers: 64, inject_count: 16, sar_count: 8, sar_size: 65536, max_msg_size: 1 << 30 };
    let entry = entry_from(bytes);
    let Ok(cmd) = decode(&entry, &limits) else { return };
    match cmd {
        Command::Connect { src, .. } | Command::Disconnect { src } => assert!(u64::from(src) < limits.max_peers),
        Command::SarSeg { seg, .. } => assert!(u64::from(seg.buf) < limits.sar_count),
        Command::Msg { src, msg_id, ack, hdr, body } => {
            assert!(u64::from(src) < limits.max_peers && hdr.len <= limits.max_msg_size);
            assert!(hdr.app == entry.app && hdr.tag == entry.tag);
            if let Some(at) = compact_at(entry.proto) {
                // The bytes all lie in the slot's first line, from where the protocol starts them.
                assert!(entry.inline_at() == at && at + hdr.len as usize <= 56);
                if entry.proto == proto::COMPACT_AUX {
                    // No CQ data; `aux` in its word, the answer's id in `data`'s.
                    assert!(hdr.data == 0 && hdr.aux == entry.aux && msg_id == entry.data);
                    assert!(ack == (entry.flags & FLAG_ACK != 0));
                } else {
                    // The words a compact command leaves out hold its payload: they read as 0,
                    // and no answer is wanted.
                    let data = if entry.proto == proto::COMPACT_DATA { entry.data } else { 0 };
                    assert!(hdr.data == data && hdr.aux == 0 && !ack && msg_id == 0);
                }
            } else {
                // The provider's words pass through untouched.
                assert!(hdr.data == entry.data && hdr.aux == entry.aux && entry.inline_at() == HEADER_BYTES);
            }
            match body {
                Body::Inline { len, .. } => assert!(len <= INLINE_MAX),
                Body::Inject { buf } => assert!(u64::from(buf) < limits.inject_count && hdr.len <= 4096),
                Body::Iov { count, timed, split_early } => {
                    assert_eq!((0..count).map(|i| entry.iov(i).len).sum::<u64>(), hdr.len);
                    assert_eq!(timed, entry.flags & FLAG_TIMED != 0);
                    assert_eq!(split_early, entry.flags & FLAG_SPLIT_EARLY != 0);
                }
                Body::Sar(seg) => assert!(seg.offset + u64::from(seg.len) <= hdr.len),
            }
        }
    }
});
