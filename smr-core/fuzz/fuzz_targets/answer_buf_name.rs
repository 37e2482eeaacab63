//! Whatever answer buffers a request names (a peer-written u32 and the further SAR buffers'
//! u16s), in a region of any valid geometry, `AnswerBuf::spans` either refuses them or gives
//! whole pool buffers: each inside the inject or the SAR data part, on a buffer boundary, of
//! that pool's buffer size, and only SAR buffers after the first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smr_core::endpoint::AnswerBuf;
use smr_core::layout::{Counts, Geometry, INJECT_SIZE};

fuzz_target!(|input: (u32, Vec<u16>, u16, u16, u8)| {
    let (name, more, inject_count, sar_count, sar_shift) = input;
    let counts = Counts {
        cmd_len: 64,
        resp_len: 64,
        inject_count: u64::from(inject_count),
        sar_count: u64::from(sar_count),
        sar_size: 4096 << (sar_shift % 8),
        max_peers: 4,
    };
    let Ok(g) = Geometry::compute(counts) else { return };
    let Some(buf) = AnswerBuf::from_wire(name, &more) else { return };
    let Ok(spans) = buf.spans(&g) else { return };
    for (i, (off, size)) in spans.iter().enumerate() {
        let (start, count, each) = if off >= g.sar_data {
            (g.sar_data, counts.sar_count, counts.sar_size)
        } else {
            assert_eq!(i, 0, "an inject buffer after the first");
            (g.inject_data, counts.inject_count, INJECT_SIZE)
        };
        assert_eq!(size, each);
        assert!(off >= start && (off - start) % each == 0 && (off - start) / each < count);
        assert!(off + size <= g.size);
    }
    assert_eq!(spans.iter().count(), more.len() + 1);
});
