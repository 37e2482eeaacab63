//! Queue semantics on the one-PE stand-in for OpenSHMEM (sys.rs under cfg(test)): the C entry
//! points, batches shipped through the inbox and applied by the service thread, limits, flush
//! ordering, data-queue contents, shared queues. Multi-PE behaviour is tested on real OpenSHMEM
//! by scripts/queues-tests.sh.

use std::ffi::c_void;
use std::ptr::null_mut;

use crate::config::*;
use crate::ffi::*;
use crate::handle::{self, Kind};

fn comm(cfg: QueueConfig) -> Handle {
    let mut q: Handle = null_mut();
    // SAFETY: valid pointers.
    assert_eq!(unsafe { shmem_queue_comm_create(&mut q, &cfg) }, OK);
    // Drive the inbox path even to PE 0 itself (one PE here).
    // SAFETY: a live exclusive handle used by this thread only.
    unsafe {
        handle::with(q, (), |k| {
            if let Kind::Comm(c) = k {
                c.set_local_shortcut(false)
            }
        })
    };
    q
}

fn symmetric(n: usize) -> *mut u64 {
    crate::sys::malloc(n * 8).cast()
}

fn push(q: Handle, dest: *mut u64, src: *const u64, n: usize, op: u64) -> i32 {
    // SAFETY: dest/src valid for n u64 (tests' own buffers).
    unsafe { shmem_queue_comm_push_mem(q, dest.cast(), src.cast(), 8, n, 0, op) }
}

fn size(q: Handle) -> usize {
    let mut s = usize::MAX;
    // SAFETY: live handle, valid out pointer.
    assert_eq!(unsafe { shmem_query_size(q, &mut s) }, OK);
    s
}

#[test]
fn comm_ops_apply_after_flush_in_push_order() {
    let q = comm(QueueConfig::default());
    let t = symmetric(16);
    let one = [1u64];
    let vals = [10u64, 20, 30];
    for i in 0..1000 {
        assert_eq!(push(q, t.wrapping_add(i % 4), null_mut(), 1, OP_ATOMIC_INC), OK);
    }
    assert_eq!(push(q, t.wrapping_add(4), one.as_ptr(), 1, OP_ATOMIC_ADD), OK);
    assert_eq!(push(q, t.wrapping_add(5), vals.as_ptr(), 3, OP_PUT), OK);
    assert_eq!(push(q, t.wrapping_add(5), one.as_ptr(), 1, OP_PUT), OK); // later put wins
    let mut got = [0u64; 4];
    assert_eq!(push(q, got.as_mut_ptr(), t.cast_const(), 4, OP_GET), OK);
    assert_eq!(size(q), 1004);
    // SAFETY: live handle.
    assert_eq!(unsafe { shmem_queue_local_flush(q) }, OK);
    assert_eq!(size(q), 0);
    // SAFETY: t has 16 elements.
    let table = unsafe { std::slice::from_raw_parts(t, 8) };
    assert_eq!(table, &[250, 250, 250, 250, 1, 1, 20, 30]);
    assert_eq!(got, [250; 4]); // the get was pushed after the increments: it sees them
                               // SAFETY: live handle, destroyed once.
    assert_eq!(unsafe { shmem_queue_comm_destroy(q) }, OK);
}

#[test]
fn big_batches_chunks_and_direct_ops() {
    std::env::set_var("SHMEM_QUEUE_BATCH_BYTES", "4096");
    let q = comm(QueueConfig::default());
    std::env::remove_var("SHMEM_QUEUE_BATCH_BYTES");
    let t = symmetric(4096);
    let src: Vec<u64> = (0..4096).collect();
    let adds = vec![2u64; 1500]; // one ADD bigger than a batch: split into records
    assert_eq!(push(q, t, src.as_ptr(), 4096, OP_PUT), OK); // above a quarter slot: direct nbi
                                                            // SAFETY: live handle.
    assert_eq!(unsafe { shmem_queue_local_flush(q) }, OK);
    assert_eq!(push(q, t, adds.as_ptr(), 1500, OP_ATOMIC_ADD), OK);
    let mut back = vec![0u64; 300];
    for (i, b) in back.iter_mut().enumerate() {
        assert_eq!(push(q, b, t.wrapping_add(i * 10).cast_const(), 1, OP_GET), OK);
    }
    // SAFETY: live handle.
    assert_eq!(unsafe { shmem_queue_local_flush(q) }, OK);
    for (i, b) in back.iter().enumerate() {
        let v = (i * 10) as u64;
        assert_eq!(*b, if i * 10 < 1500 { v + 2 } else { v });
    }
    // SAFETY: live handle, destroyed once.
    assert_eq!(unsafe { shmem_queue_comm_destroy(q) }, OK);
}

#[test]
fn increments_of_ints_and_longs_and_their_errors() {
    let q = comm(QueueConfig::default());
    let longs = symmetric(4);
    let ints = symmetric(2).cast::<u32>();
    // SAFETY: live handle; the tables are live symmetric memory; the bad arguments are the point.
    unsafe {
        for i in 0..1000usize {
            assert_eq!(shmem_queue_comm_push_mem(q, longs.add(i % 4).cast(), null_mut(), 8, 1, 0, OP_ATOMIC_INC), OK);
            assert_eq!(shmem_queue_comm_push_mem(q, ints.add(i % 3).cast(), null_mut(), 4, 1, 0, OP_ATOMIC_INC), OK);
        }
        for pe in [1, -1, i32::MIN] {
            assert_eq!(shmem_queue_comm_push_mem(q, longs.cast(), null_mut(), 8, 1, pe, OP_ATOMIC_INC), EINVAL);
        }
        assert_eq!(shmem_queue_comm_push_mem(q, null_mut(), null_mut(), 8, 1, 0, OP_ATOMIC_INC), EINVAL);
        assert_eq!(shmem_queue_comm_push_mem(q, ints.add(1).cast(), null_mut(), 8, 1, 0, OP_ATOMIC_INC), EINVAL);
        assert_eq!(shmem_queue_comm_push_mem(q, longs.cast(), null_mut(), 2, 1, 0, OP_ATOMIC_INC), ENOTSUP);
        assert_eq!(size(q), 2000);
        assert_eq!(shmem_queue_local_flush(q), OK);
        assert_eq!(std::slice::from_raw_parts(longs, 4), &[250, 250, 250, 250]);
        assert_eq!(std::slice::from_raw_parts(ints, 4), &[334, 333, 333, 0]);
        assert_eq!(shmem_queue_comm_destroy(q), OK);
        // With the local shortcut (the default), an increment to this PE is applied at once.
        let mut l: Handle = null_mut();
        assert_eq!(shmem_queue_comm_create(&mut l, &QueueConfig::default()), OK);
        assert_eq!(shmem_queue_comm_push_mem(l, longs.cast(), null_mut(), 8, 1, 0, OP_ATOMIC_INC), OK);
        assert_eq!(shmem_queue_comm_push_mem(l, ints.add(3).cast(), null_mut(), 4, 1, 0, OP_ATOMIC_INC), OK);
        assert_eq!((size(l), *longs, *ints.add(3)), (0, 251, 1));
        assert_eq!(shmem_queue_comm_destroy(l), OK);
    }
}

#[test]
fn max_elems_returns_efull_then_flush_frees() {
    let q = comm(QueueConfig { max_elems: 3, ..Default::default() });
    let t = symmetric(1);
    for _ in 0..3 {
        assert_eq!(push(q, t, null_mut(), 1, OP_ATOMIC_INC), OK);
    }
    assert_eq!(push(q, t, null_mut(), 1, OP_ATOMIC_INC), EFULL);
    let mut a = QueueAttr::default();
    // SAFETY: live handle, valid out pointer.
    assert_eq!(unsafe { shmem_query_attr(q, &mut a) }, OK);
    assert_eq!((a.outstanding_elems, a.available_elems), (3, 0));
    // SAFETY: live handle.
    assert_eq!(unsafe { shmem_queue_local_flush(q) }, OK);
    assert_eq!(push(q, t, null_mut(), 1, OP_ATOMIC_INC), OK);
    // SAFETY: live handle.
    assert_eq!(unsafe { shmem_queue_local_flush(q) }, OK);
    // SAFETY: t is a live symmetric word.
    assert_eq!(unsafe { *t }, 4);
    // SAFETY: live handle, destroyed once.
    assert_eq!(unsafe { shmem_queue_comm_destroy(q) }, OK);
}

#[test]
fn errors_are_codes() {
    let q = comm(QueueConfig::default());
    let t = symmetric(2);
    let v = [1u64];
    // SAFETY: every call gets valid or null pointers; the bad arguments are the point.
    unsafe {
        assert_eq!(shmem_queue_comm_push_mem(q, t.cast(), v.as_ptr().cast(), 8, 1, 1, OP_PUT), EINVAL); // PE 1 of 1
        assert_eq!(shmem_queue_comm_push_mem(q, t.cast(), v.as_ptr().cast(), 8, 1, -1, OP_PUT), EINVAL);
        assert_eq!(shmem_queue_comm_push_mem(q, t.cast(), v.as_ptr().cast(), 3, 1, 0, OP_PUT), EINVAL);
        assert_eq!(shmem_queue_comm_push_mem(q, t.cast(), v.as_ptr().cast(), 8, 1, 0, 9), ENOTSUP);
        assert_eq!(shmem_queue_comm_push_mem(q, t.cast(), v.as_ptr().cast(), 2, 1, 0, OP_ATOMIC_ADD), ENOTSUP);
        let odd = t.cast::<u8>().wrapping_add(4).cast::<c_void>();
        assert_eq!(shmem_queue_comm_push_mem(q, odd, null_mut(), 8, 1, 0, OP_ATOMIC_INC), EINVAL);
        assert_eq!(shmem_queue_comm_push_mem(q, null_mut(), v.as_ptr().cast(), 8, 1, 0, OP_PUT), EINVAL);
        assert_eq!(shmem_queue_comm_push_mem(null_mut(), t.cast(), v.as_ptr().cast(), 8, 1, 0, OP_PUT), EINVAL);
        assert_eq!(shmem_queue_local_flush(null_mut()), EINVAL);
        assert_eq!(shmem_queue_global_flush(q), ENOTSUP);
        assert_eq!(shmem_query_size(q, null_mut()), EINVAL);
        let mut h: Handle = null_mut();
        let bad = QueueConfig { sharing_model: 5, ..Default::default() };
        assert_eq!(shmem_queue_comm_create(&mut h, &bad), EINVAL);
        assert!(h.is_null());
        let data_cfg = QueueConfig { qtype: QUEUE_DATA, ..Default::default() };
        assert_eq!(shmem_queue_comm_create(&mut h, &data_cfg), EINVAL);
        assert_eq!(shmem_queue_comm_destroy(q), OK);
    }
}

#[test]
fn timeout_ships_without_flush_and_no_timeout_does_not() {
    for (timeout, expect_shipped) in [(0.001, true), (0.0, false)] {
        let q = comm(QueueConfig { timeout_flush: timeout, ..Default::default() });
        let t = symmetric(1);
        assert_eq!(push(q, t, null_mut(), 1, OP_ATOMIC_INC), OK);
        let start = std::time::Instant::now();
        // SAFETY: live handle.
        while start.elapsed() < std::time::Duration::from_millis(100) && unsafe { shmem_queue_progress(q) } > 0 {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        assert_eq!(size(q) == 0, expect_shipped, "timeout {timeout}");
        // SAFETY: t is a live symmetric word; live handle destroyed once.
        unsafe {
            assert_eq!(*t, u64::from(expect_shipped));
            assert_eq!(shmem_queue_comm_destroy(q), OK);
        }
    }
}

#[test]
fn shared_queue_from_threads() {
    let q = comm(QueueConfig { sharing_model: QUEUE_SHARED, ..Default::default() });
    let t = symmetric(8);
    let (qa, ta) = (q as usize, t as usize);
    let threads: Vec<_> = (0..4)
        .map(|k| {
            std::thread::spawn(move || {
                for i in 0..5000usize {
                    let dest = (ta as *mut u64).wrapping_add((i + k) % 8);
                    assert_eq!(push(qa as Handle, dest, null_mut(), 1, OP_ATOMIC_INC), OK);
                    if i % 100 == 0 {
                        // SAFETY: live shared handle.
                        assert!(unsafe { shmem_queue_progress(qa as Handle) } >= 0);
                    }
                }
                // SAFETY: live shared handle.
                assert_eq!(unsafe { shmem_queue_local_flush(qa as Handle) }, OK);
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    // SAFETY: t has 8 live words; the handle is destroyed once, after the threads.
    unsafe {
        assert_eq!(std::slice::from_raw_parts(t, 8).iter().sum::<u64>(), 20000);
        assert_eq!(shmem_queue_comm_destroy(q), OK);
    }
}

fn data(max_bytes: u64, esize: u64) -> Handle {
    let mut q: Handle = null_mut();
    let cfg = QueueConfig { qtype: QUEUE_DATA, max_bytes, data_elem_size: esize, ..Default::default() };
    // SAFETY: valid pointers; the team is ignored.
    assert_eq!(unsafe { shmem_queue_data_create(&mut q, &cfg, null_mut()) }, OK);
    q
}

fn sizes(q: Handle, pe: i32) -> (usize, usize) {
    let (mut i, mut o) = (0, 0);
    // SAFETY: live handle, valid out pointers.
    assert_eq!(unsafe { shmem_query_data_size(q, &mut i, &mut o, pe) }, OK);
    (i, o)
}

#[test]
fn data_queue_fifo_limits_and_partial_flush() {
    let q = data(64, 8);
    let a: Vec<u64> = (1..=6).collect();
    // SAFETY: live handle, buffers of the stated sizes.
    unsafe {
        assert_eq!(shmem_queue_data_push_mem(q, a.as_ptr().cast(), 8, 6, 0), OK);
        assert_eq!(shmem_queue_data_push_mem(q, a.as_ptr().cast(), 8, 3, 0), EFULL); // 72 > 64
        assert_eq!(shmem_queue_data_push_mem(q, a.as_ptr().cast(), 4, 1, 0), EINVAL); // half an element
        assert_eq!(shmem_queue_data_push_mem(q, a.as_ptr().cast(), 8, 1, 1), EINVAL);
        assert_eq!(sizes(q, 0), (0, 48));
        let mut out = [0u64; 8];
        assert_eq!(shmem_queue_data_pop_mem(q, out.as_mut_ptr().cast(), 8, 1, ANY_PE), EAGAIN);
        assert_eq!(shmem_queue_global_flush(q), OK);
        assert_eq!(sizes(q, 0), (48, 0));
        assert_eq!(shmem_queue_data_pop_mem(q, out.as_mut_ptr().cast(), 8, 2, 0), OK);
        assert_eq!(out[..2], [1, 2]);
        // 32 bytes still incoming; push 6 more elements (48 B): only 32 B of room after compaction.
        assert_eq!(shmem_queue_data_push_mem(q, a.as_ptr().cast(), 8, 6, 0), OK);
        assert_eq!(shmem_queue_data_global_flush(q), EPARTIAL);
        assert_eq!(sizes(q, ANY_PE), (64, 16));
        assert_eq!(shmem_queue_data_pop_mem(q, out.as_mut_ptr().cast(), 8, 8, ANY_PE), OK);
        assert_eq!(out, [3, 4, 5, 6, 1, 2, 3, 4]);
        assert_eq!(shmem_queue_global_flush(q), OK); // the 16 B kept back now fit
        assert_eq!(shmem_queue_data_pop_mem(q, out.as_mut_ptr().cast(), 8, 2, 0), OK);
        assert_eq!(out[..2], [5, 6]);
        assert_eq!(sizes(q, 0), (0, 0));
        assert_eq!(shmem_queue_local_flush(q), ENOTSUP);
        let mut h = q;
        assert_eq!(shmem_queue_data_destroy(&mut h, null_mut()), OK);
        assert!(h.is_null());
        assert_eq!(shmem_queue_data_destroy(&mut h, null_mut()), EINVAL);
    }
}

static GLOBALS: [std::sync::atomic::AtomicU64; 4] = [const { std::sync::atomic::AtomicU64::new(0) }; 4];

#[test]
fn global_symmetric_variables_are_translated_through_the_program_image() {
    let q = comm(QueueConfig::default());
    let g = GLOBALS.as_ptr().cast::<u64>().cast_mut();
    let v = [5u64];
    for _ in 0..3 {
        assert_eq!(push(q, g.wrapping_add(1), null_mut(), 1, OP_ATOMIC_INC), OK);
    }
    assert_eq!(push(q, g.wrapping_add(2), v.as_ptr(), 1, OP_PUT), OK);
    // SAFETY: live handle, destroyed once.
    unsafe {
        assert_eq!(shmem_queue_local_flush(q), OK);
        assert_eq!(shmem_queue_comm_destroy(q), OK);
    }
    let got: Vec<u64> = GLOBALS.iter().map(|a| a.load(std::sync::atomic::Ordering::Relaxed)).collect();
    assert_eq!(got, [0, 3, 5, 0]);
}
