//! Regions are private to their user: the file is mode 0600, owned by us, and a process of
//! another uid can neither open it for reading or writing (so it cannot map it) nor truncate it;
//! the endpoint keeps working afterwards. The other uid is `nobody` (or a user `rshm-other`
//! created with useradd); without root to switch uid the test says SKIPPED.

use rshm_tests::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

/// (uid, gid) of a user other than us, creating one if needed (root only).
fn other_user() -> Option<(u32, u32)> {
    let id = |flag: &str, user: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, user]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    for user in ["nobody", "rshm-other"] {
        if let (Some(u), Some(g)) = (id("-u", user), id("-g", user)) {
            return Some((u, g));
        }
    }
    let created = Command::new("useradd")
        .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "rshm-other"])
        .status()
        .ok()?;
    created.success().then_some(())?;
    Some((id("-u", "rshm-other")?, id("-g", "rshm-other")?))
}

/// Run `script` with `sh -c` as uid:gid (no supplementary groups, no capabilities).
fn as_user(uid: u32, gid: u32, script: &str) -> std::process::Output {
    Command::new("timeout")
        .args(["-k", "5", "20", "setpriv"])
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .args(["--clear-groups", "--", "sh", "-c", script])
        .output()
        .expect("setpriv")
}

#[test]
fn regions_are_private_to_their_user() {
    let mut sc = Scenario::new(PEER, "acc");
    let me = sc.name("r");
    let mut node = Node::create(&me, params(false)).unwrap();
    let path = std::path::Path::new("/dev/shm").join(&me);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "region mode");
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(meta.uid(), euid, "region owner");
    let before = std::fs::read(&path).unwrap();

    if euid != 0 {
        println!("SKIPPED: trying another uid needs root (setpriv, useradd); checked mode 0600 only");
        return;
    }
    if !Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success()) {
        println!("SKIPPED: no setpriv (util-linux) to switch uid; checked mode 0600 only");
        return;
    }
    let Some((uid, gid)) = other_user() else {
        println!("SKIPPED: no other user and useradd failed; checked mode 0600 only");
        return;
    };
    assert_ne!(uid, euid);
    let p = path.display();
    for (what, script) in [
        ("open for reading", format!("exec 3<'{p}'")),
        ("open for writing", format!("exec 3>>'{p}'")),
        ("open read-write", format!("exec 3<>'{p}'")),
        ("truncate", format!(": > '{p}'")),
        ("unlink", format!("rm -f '{p}'")),
    ] {
        let out = as_user(uid, gid, &script);
        assert!(!out.status.success(), "uid {uid} could {what} our region: {}", String::from_utf8_lossy(&out.stderr));
        println!("uid {uid}: {what}: refused ({})", String::from_utf8_lossy(&out.stderr).trim());
    }
    // /dev/shm is sticky: another user cannot remove the file either.
    assert!(path.exists());
    assert_eq!(std::fs::read(&path).unwrap().len(), before.len());

    // Still serving: a process of our own uid gets its messages through.
    let s = sc.name("s");
    let args = ["node", "--name", &s, "--id", "1", "--to", &me, "--sizes", "100,100000", "--count", "2"];
    let c = sc.spawn("sender", &args);
    let dl = deadline();
    node.wait_until(dl, "4 messages", |n| n.h.received.len() >= 4);
    for m in &node.h.received {
        assert_eq!(m.result, Ok(m.hdr.len as usize));
        verify(&m.hdr, &m.bytes).unwrap();
    }
    sc.child(c).expect_line_while("RESULT", dl, || {
        node.pump_or_wait(Duration::from_millis(1));
    });
    sc.child(c).finish(dl);
}
