//! Exhausted resources: /dev/shm too small for a region, and endpoints created and closed many
//! times. (A full command ring answering `Again` until progress drains it is
//! `backpressure.rs`.)

use rshm_tests::*;
use smr_core::endpoint::{Endpoint, Params};
use smr_core::layout::Counts;
use std::process::Command;

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

/// A /dev/shm with less room than a region (a private mount namespace with a 1 MiB tmpfs):
/// creating the endpoint fails with ENOSPC, cleanly, instead of the process dying of SIGBUS
/// when it first touches a page the tmpfs cannot back. Needs root (unshare -m); SKIPPED without.
#[test]
fn small_dev_shm_fails_creation_with_enospc() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: a private /dev/shm (unshare -m, mount) needs root");
        return;
    }
    let name = unique_name("enospc");
    let script = format!("mount -t tmpfs -o size=1m tmpfs /dev/shm && exec '{PEER}' hang --name {name} --max-secs 10");
    let out = Command::new("timeout")
        .args(["-k", "5", "30", "unshare", "-m", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.contains("READY") && !stdout.contains("ERROR create") {
        // Neither outcome: the namespace or the mount itself was refused (a container without
        // CAP_SYS_ADMIN), not rshm.
        println!("SKIPPED: cannot mount a private /dev/shm here: {}", String::from_utf8_lossy(&out.stderr).trim());
        return;
    }
    assert!(
        stdout.contains(&format!("ERROR create {name}: Os({})", libc::ENOSPC)),
        "expected ENOSPC at creation, got status {:?}, stdout {stdout:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{:?}", out.status);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// 10,000 endpoints created and dropped (16 alive at a time, each sending to the previous one
/// so that peers get mapped too): no region file, fd or memory left behind.
#[test]
fn ten_thousand_endpoints_leak_nothing() {
    let d = Params::default();
    let params = Params {
        counts: Counts { cmd_len: 16, resp_len: 16, inject_count: 4, sar_count: 2, sar_size: 4096, max_peers: 8 },
        ..d
    };
    let prefix = unique_name("churn");
    let mut live: std::collections::VecDeque<Endpoint> = Default::default();
    let (mut fds0, mut rss0) = (0, 0);
    let (mut fds1, mut rss1) = (0, 0);
    for i in 0..10_000 {
        let mut ep = Endpoint::create(&format!("{prefix}_{i}"), params.clone()).unwrap();
        if let Some(prev) = live.back() {
            let peer = ep.add_peer(prev.name()).unwrap();
            let mut data = *b"hello";
            // SAFETY: `data` outlives the send: an inline send is complete when it returns.
            let iov = unsafe { smr_core::iov::LocalIov::from_raw(&[(data.as_mut_ptr(), data.len())]) };
            let hdr = smr_core::endpoint::Header { len: 5, ..Default::default() };
            let _ = ep.send(peer, hdr, iov, Default::default());
        }
        live.push_back(ep);
        if live.len() > 16 {
            live.pop_front();
        }
        // Measured with the same 16 endpoints alive: a leak grows between the two points.
        if i == 999 {
            (fds0, rss0) = (open_fds(), rss_kib());
        }
        if i == 9_999 {
            (fds1, rss1) = (open_fds(), rss_kib());
        }
    }
    live.clear();
    println!("endpoints 1000 -> 10000 (16 alive): fds {fds0} -> {fds1}, RSS {rss0} -> {rss1} KiB");
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "{} region files left, e.g. {:?}", left.len(), &left[..left.len().min(3)]);
    // The other test of this file may hold a few pipe fds for its child at either instant.
    assert!(fds1 <= fds0 + 3, "fds grew from {fds0} to {fds1}");
    // Generous: the allocator may keep some freed memory, but a leak of even 1 KiB per endpoint
    // would show as 9 MiB.
    assert!(rss1 < rss0 + 8 * 1024, "RSS grew from {rss0} KiB to {rss1} KiB");
}
