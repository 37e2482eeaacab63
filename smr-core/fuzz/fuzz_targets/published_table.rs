//! Whatever a peer's MR table holds (every word of every slot is the owner's, or a scribbler's),
//! a lookup finds an entry of the key asked for that is live, read between two equal even
//! sequence counts, or nothing; `Published::target` gives only an address whose whole access
//! lies inside the entry's range; and a writer counted in and out of the entry it found
//! (`begin_write`, `end_write`) is admitted and leaves the count as it found it, whatever a
//! scribbler put there.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smr_core::published::{self, MrSlot, LIVE, USED, VIRT_ADDR};
use std::sync::atomic::Ordering;

fuzz_target!(|input: (Vec<[u64; 6]>, u64, u64, u64)| {
    let (words, key, addr, len) = input;
    let table: Vec<MrSlot> = (0..8)
        .map(|i| {
            let s = MrSlot::unused();
            if let Some(w) = words.get(i) {
                s.seq.store(w[0], Ordering::Relaxed);
                s.key.store(w[1], Ordering::Relaxed);
                s.base.store(w[2], Ordering::Relaxed);
                s.len.store(w[3], Ordering::Relaxed);
                s.flags.store(w[4], Ordering::Relaxed);
                s.writers.store(w[5], Ordering::Relaxed);
            }
            s
        })
        .collect();
    let Some(p) = published::lookup(&table, key) else { return };
    assert_eq!(p.key, key);
    assert!(p.flags & (USED | LIVE) == USED | LIVE);
    assert_eq!(p.seq & 1, 0);
    assert!((p.slot as usize) < table.len());
    assert!(published::unchanged(&table, &p));
    let writers = table[p.slot as usize].writers.load(Ordering::Relaxed);
    assert!(published::begin_write(&table, &p), "an entry that stands admits a writer");
    assert_eq!(table[p.slot as usize].writers.load(Ordering::Relaxed), writers.wrapping_add(1));
    published::end_write(&table, &p);
    assert_eq!(table[p.slot as usize].writers.load(Ordering::Relaxed), writers);
    if let Some(at) = p.target(addr, len) {
        let start = if p.flags & VIRT_ADDR != 0 { addr - p.base } else { addr };
        assert!(start.checked_add(len).is_some_and(|end| end <= p.len));
        assert_eq!(at, p.base + start);
    }
});
