//! The rshm-regions tool against real /dev/shm files: it sees live regions, removes dead ones and
//! leaves other programs' files alone.
#![cfg(not(loom))]

use smr_core::layout::{Counts, RegionHeader};
use smr_core::region::Region;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// `clean` in one test must not remove the dead region another test is about to look for.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serialize() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn counts() -> Counts {
    Counts { cmd_len: 64, resp_len: 64, inject_count: 4, sar_count: 2, sar_size: 65536, max_peers: 8 }
}

fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("rshm_test_cli_{tag}_{}_{nanos}", std::process::id())
}

fn run(args: &[&str]) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rshm-regions")).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, stdout)
}

/// The `list` line for `name`, if any.
fn line_of<'a>(stdout: &'a str, name: &str) -> Option<&'a str> {
    stdout.lines().find(|line| line.split_whitespace().next() == Some(name))
}

#[test]
fn lists_a_live_region_then_cleans_it_once_its_owner_is_dead() {
    let _guard = serialize();
    let name = unique("dead");
    let region = Region::create(&name, counts(), 0).unwrap();

    let (out, stdout) = run(&["list"]);
    assert!(out.status.success(), "{out:?}");
    let line = line_of(&stdout, &name).unwrap_or_else(|| panic!("{name} not listed:\n{stdout}"));
    assert!(line.ends_with("alive"), "{line}");
    assert!(line.contains(&std::process::id().to_string()), "{line}");

    let hdr = region.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
    // SAFETY: our own region's header page, mapped and in bounds; make it claim a process that
    // cannot exist, as after a SIGKILL.
    unsafe { (*hdr).owner_start = 1 };
    // A killed owner never unlinks its file: let the header name another incarnation, so that
    // dropping our view unmaps it without unlinking (forgetting it would leak, and AddressSanitizer
    // reports leaks).
    // SAFETY: as above.
    unsafe { (*hdr).incarnation ^= 1 };
    drop(region);

    let (out, stdout) = run(&["list"]);
    assert!(out.status.success(), "{out:?}");
    assert!(line_of(&stdout, &name).is_some_and(|line| line.ends_with("dead")), "{stdout}");

    let (out, stdout) = run(&["clean"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.lines().any(|line| line.starts_with(&format!("removed {name} "))), "{stdout}");
    assert!(!Path::new(&format!("/dev/shm/{name}")).exists());
}

#[test]
fn other_programs_files_are_neither_listed_nor_removed() {
    let _guard = serialize();
    let name = format!("notrshm_{}", std::process::id());
    let path = format!("/dev/shm/{name}");
    std::fs::write(&path, [0u8; 4096]).unwrap();
    // Old enough that `inspect` would call it a dead region, were the tool to ask.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();

    let (list_out, list_stdout) = run(&["list"]);
    let (all_out, all_stdout) = run(&["list", "--all"]);
    let (clean_out, clean_stdout) = run(&["clean"]);
    let survived = Path::new(&path).exists();
    std::fs::remove_file(&path).unwrap();

    assert!(list_out.status.success(), "{list_out:?}");
    assert!(line_of(&list_stdout, &name).is_none(), "{list_stdout}");
    assert!(all_out.status.success(), "{all_out:?}");
    let line = line_of(&all_stdout, &name).unwrap_or_else(|| panic!("{name} not in --all:\n{all_stdout}"));
    assert!(line.ends_with("not-rshm"), "{line}");
    assert!(clean_out.status.success(), "{clean_out:?}");
    assert!(!clean_stdout.contains(&name), "{clean_stdout}");
    assert!(survived, "clean removed {path}");
}

/// The stderr lines of `list --fail-if-any` that name a leaked region, by name.
fn leaked(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|line| line.strip_prefix("rshm-regions: leaked region "))
        .filter_map(|rest| rest.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn fail_if_any_names_each_region_of_this_user_alive_or_dead_and_exits_3() {
    let _guard = serialize();
    let live = unique("leak_live");
    let dead = unique("leak_dead");
    let live_region = Region::create(&live, counts(), 0).unwrap();
    let dead_region = Region::create(&dead, counts(), 0).unwrap();
    let hdr = dead_region.mapping().bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>();
    // SAFETY: our own region's header page, mapped and in bounds; as after a SIGKILL.
    unsafe { (*hdr).owner_start = 1 };
    // Dropped without unlinking, as above.
    // SAFETY: as above.
    unsafe { (*hdr).incarnation ^= 1 };
    drop(dead_region);

    let (out, stdout) = run(&["list", "--fail-if-any"]);
    let names = leaked(&out);
    // Remove the dead one before asserting, so a failure leaves nothing behind.
    smr_core::shm::unlink(&dead).unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(names.contains(&live) && names.contains(&dead), "{names:?} lacks {live} or {dead}: {out:?}");
    assert!(line_of(&stdout, &live).is_some_and(|line| line.ends_with("alive")), "{stdout}");
    assert!(line_of(&stdout, &dead).is_some_and(|line| line.ends_with("dead")), "{stdout}");
    // Both flags together.
    let (out, _) = run(&["list", "--all", "--fail-if-any"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(leaked(&out).contains(&live), "{out:?}");

    drop(live_region);
    let (out, _) = run(&["list", "--fail-if-any"]);
    let names = leaked(&out);
    assert!(!names.contains(&live) && !names.contains(&dead), "{names:?}");
    // Other tests (or programs) may have regions right now, so the status may be 3, but it must
    // agree with what was named: 0 exactly when nothing was.
    let expected = if names.is_empty() { 0 } else { 3 };
    assert_eq!(out.status.code(), Some(expected), "{out:?}");
    // Without the flag, leftovers never fail the listing.
    let (out, _) = run(&["list"]);
    assert!(out.status.success() && leaked(&out).is_empty(), "{out:?}");
}

/// Another user's region is listed but is not this user's leak (needs root to give it away).
#[test]
fn fail_if_any_ignores_other_users_regions() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to create a file owned by another user");
        return;
    }
    let _guard = serialize();
    let name = unique("other_user");
    let path = format!("/dev/shm/{name}");
    std::fs::write(&path, b"").unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let (out, stdout) = run(&["list", "--fail-if-any"]);
    std::fs::remove_file(&path).unwrap();
    assert!(line_of(&stdout, &name).is_some(), "{stdout}");
    assert!(!leaked(&out).contains(&name), "{out:?}");
}

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    for bad in [&["--bogus"][..], &["list", "--bogus"], &["clean", "--fail-if-any"]] {
        let (out, _) = run(bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    let (out, stdout) = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout.contains("clean") && stdout.contains("--fail-if-any"), "{stdout}");
}
