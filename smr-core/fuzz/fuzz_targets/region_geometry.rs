//! Whatever counts a hostile header claims, geometry either refuses them or lays out parts that
//! are ordered, aligned and inside the region.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smr_core::layout::{Counts, Geometry};

fuzz_target!(|words: [u64; 6]| {
    let counts = Counts {
        cmd_len: words[0],
        resp_len: words[1],
        inject_count: words[2],
        sar_count: words[3],
        sar_size: words[4],
        max_peers: words[5],
    };
    let Ok(g) = Geometry::compute(counts) else { return };
    let parts = g.part_offsets();
    assert!(parts.windows(2).all(|w| w[0] < w[1]));
    assert!(parts.iter().all(|p| p % 128 == 0 && *p < g.size));
    let last = g.sar_offset((counts.sar_count - 1) as u32).unwrap();
    assert!(last + counts.sar_size <= g.peers);
});
