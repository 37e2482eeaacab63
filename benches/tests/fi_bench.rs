//! rshm-fi-bench end to end: two processes, real providers, every family, tiny runs. Figures are
//! not checked (this machine may be busy); that every test either reports a result with sane
//! fields or says n/a, and that the data checks pass (a failed check is a FAIL line), is.

use rshm_benches::fi::{Family, Test};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// One bench at a time: two busy-polling pairs on two CPUs would only measure each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn bench(provider: &str, provider_path: Option<PathBuf>) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rshm-fi-bench"));
    cmd.args(["--provider", provider, "--sizes", "8,5000,65536", "--time-ms", "20", "--tries", "1"]);
    if let Some(p) = provider_path {
        cmd.env("FI_PROVIDER_PATH", p);
    }
    let out = cmd.output().expect("run rshm-fi-bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rshm-fi-bench --provider {provider} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split('\t').find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix('='))).unwrap_or("")
}

fn check(out: &str, want_results: usize) {
    let results: Vec<&str> = out.lines().filter(|l| l.starts_with("RESULT\t")).collect();
    assert!(!out.lines().any(|l| l.starts_with("FAIL")), "{out}");
    assert!(results.len() >= want_results, "expected at least {want_results} results:\n{out}");
    for l in results {
        let ns: u64 = field(l, "ns").parse().expect("ns");
        let ops: u64 = field(l, "ops").parse().expect("ops");
        assert!(ns > 0 && ops > 0, "{l}");
        assert!(["0", "1"].contains(&field(l, "busy")), "{l}");
    }
}

#[test]
fn c_shm_provider_runs_every_family() {
    if Command::new("fi_info").args(["-p", "shm"]).output().map_or(true, |o| !o.status.success()) {
        eprintln!("skipped: no shm provider (fi_info from libfabric-bin)");
        return;
    }
    // 2 families x 2 tests x 3 sizes + tagged bw_msg and bw_more at 8 B (they stop at 4 KiB)
    // + 5 RMA tests x 3 sizes + the atomic tests (one size each).
    check(&bench("shm", None), 30);
}

#[test]
fn rshm_runs_every_family_when_built() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/rshm");
    if !dir.join("librshm-fi.so").exists() {
        eprintln!("skipped: run scripts/build-provider.sh first");
        return;
    }
    check(&bench("rshm", Some(dir)), 30);
}

#[test]
fn a_missing_provider_is_reported_not_failed() {
    let out = bench("no-such-provider", None);
    assert!(out.lines().all(|l| l.starts_with("NA\t")), "{out}");
    // One line per test of every family.
    let tests: usize = Family::ALL.iter().map(|&f| Test::of(f).len()).sum();
    assert_eq!(out.lines().count(), tests, "{out}");
}

#[test]
fn the_driver_aggregates_and_reports() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("--self-test")
        .env("RSHM_FI_BENCH_BIN", env!("CARGO_BIN_EXE_rshm-fi-bench"))
        .output()
        .expect("run python3");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}
