//! `fabtests-adapter upstream`: run an installed upstream fabtests (the list its runfabtests.sh
//! would run for shm) against rshm and shm, side by side, and print the same kind of table as
//! `suite`, with JUnit XML on request.
//!
//! The list comes from the installed `runfabtests.sh` (its bash arrays) and the comparison
//! provider's `test_configs/<prov>/<prov>.exclude`; each test runs as runfabtests.sh runs it
//! (unit tests alone, client/server pairs with a server started one second before the client,
//! ubertest with the provider's config), every process under a deadline, several runs at once.

mod exec;
mod report;
mod script;

use exec::{not_started, ExecEnv, Job, Res, RunOut};
use report::{Diff, Results};
use script::{Kind, Script};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub use exec::hold_main;

pub const USAGE: &str = "  fabtests-adapter upstream --bin DIR [--share DIR] [--providers rshm,shm | --provider P]
                   [--sets all] [--filter SUBSTR]... [--jobs N] [--timeout S] [--complex-timeout S]
                   [--junit FILE] [--log-dir DIR] [--provider-path DIR] [--no-exclude] [--list]

  --bin              the installed fabtests' bin directory (holds fi_* and runfabtests.sh)
  --share            its share/fabtests directory (test_configs/); default <bin>/../share/fabtests
  --providers        providers to run (default rshm,shm); the first is the one under test and
                     shm, if listed, the comparison. --provider P means P,shm
  --sets             runfabtests.sh -t value: all (default: unit,regression,functional,standard,
                     complex,multinode as the script defines it), quick, verify, or a list
  --config-provider  whose exclude list and ubertest configs define the list (default shm)
  --exclude-file     a different exclude file;  --no-exclude  run excluded tests too
  --filter           only tests whose label (set/test args) contains SUBSTR
  --jobs             runs at once (default 2; 1 without namespaces)
  --cpus             CPU budget of runs at once (default: this machine's CPUs); a run needs one
                     CPU per process (fabtests poll): with 2, one client/server pair at a time,
                     or two unit tests
  --timeout          seconds per process (default: the script's TIMEOUT_VAL, 120)
  --complex-timeout  seconds per ubertest process (default 3600)
  --isolate          ns (private mount+network namespaces per run, needs root/CAP_SYS_ADMIN),
                     none (one run at a time in the machine's namespaces) or auto (default)
  --junit FILE       also write JUnit XML (one testsuite per provider)
  --log-dir DIR      keep every process's stdout/stderr there (default $TMPDIR/fabtests-upstream-<pid>)
  --base-port N      first of the ports given to servers (-B) and clients (-P) (default 20000)
  --server-wait-ms   pause between starting a server and its clients (default 1000)
  --server-iface     runfabtests.sh -s: the server's -s, the client's destination (default 127.0.0.1)
  --client-iface     runfabtests.sh -c: the client's -s (default 127.0.0.1); `none` leaves -s off
                     the client (a diagnostic: the client then names no source address)
  --list             print the test list (with exclusions) and exit";

struct Opts {
    bin: Option<PathBuf>,
    share: Option<PathBuf>,
    providers: Vec<String>,
    sets: String,
    config_provider: String,
    exclude_file: Option<PathBuf>,
    no_exclude: bool,
    filter: Vec<String>,
    jobs: Option<usize>,
    cpus: Option<usize>,
    timeout: Option<u64>,
    complex_timeout: u64,
    isolate: String,
    junit: Option<PathBuf>,
    log_dir: Option<PathBuf>,
    provider_path: Option<PathBuf>,
    base_port: u16,
    server_wait_ms: u64,
    list: bool,
    server_iface: String,
    client_iface: String,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        bin: None,
        share: None,
        providers: vec!["rshm".into(), "shm".into()],
        sets: "all".into(),
        config_provider: "shm".into(),
        exclude_file: None,
        no_exclude: false,
        filter: Vec::new(),
        jobs: None,
        cpus: None,
        timeout: None,
        complex_timeout: 3600,
        isolate: "auto".into(),
        junit: None,
        log_dir: None,
        provider_path: None,
        base_port: 20000,
        server_wait_ms: 1000,
        list: false,
        server_iface: "127.0.0.1".into(),
        client_iface: "127.0.0.1".into(),
    };
    let num = |v: &str, f: &str| v.parse::<u64>().map_err(|_| format!("bad {f} {v}"));
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let mut val = || crate::take_value(args, &mut i, a).map(str::to_string);
        match a {
            "--bin" => o.bin = Some(PathBuf::from(val()?)),
            "--share" => o.share = Some(PathBuf::from(val()?)),
            "--providers" | "-p" => {
                o.providers = val()?.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
            }
            "--provider" => {
                let p = val()?;
                o.providers = if p == "shm" { vec![p] } else { vec![p, "shm".into()] };
            }
            "--sets" | "-t" => o.sets = val()?,
            "--config-provider" => o.config_provider = val()?,
            "--exclude-file" => o.exclude_file = Some(PathBuf::from(val()?)),
            "--no-exclude" => o.no_exclude = true,
            "--filter" | "-f" => o.filter.extend(val()?.split(',').filter(|s| !s.is_empty()).map(str::to_string)),
            "--jobs" | "-j" => o.jobs = Some(num(&val()?, a)?.max(1) as usize),
            "--cpus" => o.cpus = Some(num(&val()?, a)?.max(1) as usize),
            "--timeout" | "-T" => o.timeout = Some(num(&val()?, a)?),
            "--complex-timeout" => o.complex_timeout = num(&val()?, a)?,
            "--isolate" => o.isolate = val()?,
            "--junit" => o.junit = Some(PathBuf::from(val()?)),
            "--log-dir" => o.log_dir = Some(PathBuf::from(val()?)),
            "--provider-path" => o.provider_path = Some(crate::provider_dir(val()?)),
            "--base-port" => o.base_port = u16::try_from(num(&val()?, a)?).map_err(|_| "bad --base-port")?,
            "--server-wait-ms" => o.server_wait_ms = num(&val()?, a)?,
            "--list" => o.list = true,
            "--server-iface" => o.server_iface = val()?,
            "--client-iface" => o.client_iface = val()?,
            other => return Err(format!("unknown argument {other}")),
        }
        i += 1;
    }
    if o.providers.is_empty() {
        return Err("--providers is empty".into());
    }
    if !["auto", "ns", "none"].contains(&o.isolate.as_str()) {
        return Err(format!("--isolate must be auto, ns or none, not {}", o.isolate));
    }
    Ok(o)
}

pub fn run(args: &[String]) -> i32 {
    let opts = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fabtests-adapter upstream: {e}\nusage:\n{USAGE}");
            return 2;
        }
    };
    match run_opts(opts) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fabtests-adapter upstream: {e}");
            2
        }
    }
}

/// The ubertest config for `prov`: the config provider's file as is, or a copy in `dir` with
/// its `prov_name:` entries naming `prov`.
fn complex_config_for(src: &Path, cfg_prov: &str, prov: &str, dir: &Path) -> Result<PathBuf, String> {
    if prov == cfg_prov {
        return Ok(src.to_path_buf());
    }
    let text = std::fs::read_to_string(src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            let t = l.trim_start();
            match t.strip_prefix("prov_name:") {
                Some(v) if v.trim().trim_end_matches(',').trim() == cfg_prov => {
                    let indent = &l[..l.len() - t.len()];
                    format!("{indent}prov_name: {prov},")
                }
                _ => l.to_string(),
            }
        })
        .collect();
    let name = src.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| "config.test".into());
    let dst = dir.join(format!("ubertest-{prov}-{name}"));
    std::fs::write(&dst, out.join("\n") + "\n").map_err(|e| format!("cannot write {}: {e}", dst.display()))?;
    Ok(dst)
}

/// The runs still to start and the CPUs the running ones keep busy.
struct Sched {
    queue: VecDeque<(usize, usize, usize)>,
    used: usize,
}

/// The first queued run that fits in the CPU budget (any run when nothing else runs); waits
/// while none fits. `None` when the queue is empty or the run was interrupted.
fn next_job(
    sched: &Mutex<Sched>,
    wake: &Condvar,
    cpus: usize,
    cost: impl Fn(usize) -> usize,
) -> Option<(usize, usize, usize)> {
    let mut g = sched.lock().expect("sched");
    loop {
        if exec::stopped() || g.queue.is_empty() {
            return None;
        }
        let used = g.used;
        if let Some(k) = g.queue.iter().position(|&(_, t, _)| used == 0 || used + cost(t) <= cpus) {
            let job = g.queue.remove(k).expect("queued");
            g.used += cost(job.1);
            return Some(job);
        }
        g = wake.wait_timeout(g, Duration::from_millis(200)).expect("sched").0;
    }
}

/// Order of the sets in the queue: long runs first so they overlap with the short ones.
fn set_rank(kind: Kind, set: &str) -> u8 {
    match (kind, set) {
        (Kind::Complex, _) => 0,
        (Kind::Multinode(_), _) => 1,
        (_, "standard") => 2,
        (_, "functional") => 3,
        (_, "short") => 4,
        _ => 5,
    }
}

fn run_opts(o: Opts) -> Result<i32, String> {
    let t0 = Instant::now();
    let bin = o.bin.clone().ok_or("--bin DIR is required (the installed fabtests' bin directory)")?;
    let bin = bin.canonicalize().map_err(|e| format!("--bin {}: {e}", bin.display()))?;
    let share = o.share.clone().unwrap_or_else(|| bin.join("../share/fabtests"));
    let share = share.canonicalize().unwrap_or(share);
    let script_path = script::find_script(&bin, &share)
        .ok_or_else(|| format!("no runfabtests.sh in {} or {}", bin.display(), share.display()))?;
    let script = Script::load(&script_path)?;
    let (sets, complex_type) = script.expand_sets(&o.sets);
    let cfg_dir = share.join("test_configs").join(&o.config_provider);
    let exclude_path = o.exclude_file.clone().unwrap_or_else(|| cfg_dir.join(format!("{}.exclude", o.config_provider)));
    let excludes = if o.no_exclude || !exclude_path.is_file() {
        if !o.no_exclude {
            eprintln!("fabtests-adapter upstream: no {} (nothing excluded)", exclude_path.display());
        }
        Vec::new()
    } else {
        script::read_excludes(&exclude_path)?
    };
    let mut tests = script.tests(&sets, &excludes)?;
    if !o.filter.is_empty() {
        tests.retain(|t| o.filter.iter().any(|f| t.label().contains(f.as_str())));
    }
    if tests.is_empty() {
        return Err(format!("no test selected (sets {:?}, filter {:?})", sets, o.filter));
    }
    let complex_src = cfg_dir.join(format!("{complex_type}.test"));
    if o.list {
        for t in &tests {
            let note = match &t.excluded_by {
                Some(p) => format!("excluded by {p:?}"),
                None if t.kind == Kind::Complex && !complex_src.is_file() => "skipped: no config".into(),
                None => String::new(),
            };
            println!("{}", format!("{:<56} {note}", t.label()).trim_end());
        }
        return Ok(0);
    }

    // How to run.
    let isolate = match o.isolate.as_str() {
        "none" => false,
        want => match exec::namespaces_available() {
            Ok(()) => true,
            Err(e) if want == "auto" => {
                eprintln!("fabtests-adapter upstream: no private namespaces ({e}): running one test at a time");
                false
            }
            Err(e) => return Err(format!("--isolate ns: cannot create namespaces: {e}")),
        },
    };
    let jobs = if isolate { o.jobs.unwrap_or(2) } else { 1 };
    let cpus = o.cpus.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    if !isolate && o.jobs.is_some_and(|j| j > 1) {
        eprintln!("fabtests-adapter upstream: --jobs {} needs namespaces; using 1", o.jobs.unwrap_or(1));
    }
    let log_dir = o
        .log_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("fabtests-upstream-{}", std::process::id())));
    std::fs::create_dir_all(&log_dir).map_err(|e| format!("cannot create {}: {e}", log_dir.display()))?;
    let log_dir = log_dir.canonicalize().unwrap_or(log_dir);
    let provider_path = o.provider_path.clone().or_else(crate::default_provider_path);
    if let Some(p) = &provider_path {
        if o.providers.iter().any(|x| x == "rshm") && !p.join("librshm-fi.so").exists() {
            eprintln!("fabtests-adapter upstream: warning: {} has no librshm-fi.so", p.display());
        }
    }
    let timeout = o.timeout.or(script.timeout).unwrap_or(120);
    let env = ExecEnv {
        bin: bin.clone(),
        provider_path: provider_path.clone(),
        isolate,
        timeout: Duration::from_secs(timeout),
        complex_timeout: Duration::from_secs(o.complex_timeout),
        server_wait: Duration::from_millis(o.server_wait_ms),
        log_dir: log_dir.clone(),
        cwd: log_dir.clone(),
        s_iface: o.server_iface.clone(),
        c_iface: if o.client_iface == "none" { String::new() } else { o.client_iface.clone() },
        good_addr: o.server_iface.clone(),
    };
    let mut complex_cfgs: Vec<Option<PathBuf>> = Vec::new();
    let complex_runs = tests.iter().any(|t| t.kind == Kind::Complex && t.excluded_by.is_none());
    for p in &o.providers {
        complex_cfgs.push(if complex_runs && complex_src.is_file() {
            Some(complex_config_for(&complex_src, &o.config_provider, p, &log_dir)?)
        } else {
            None
        });
    }
    let primary = o.providers.iter().position(|p| p == "rshm").unwrap_or(0);
    let comparison = o
        .providers
        .iter()
        .position(|p| *p == o.config_provider)
        .filter(|&c| c != primary)
        .or(if o.providers.len() > 1 { Some(if primary == 0 { 1 } else { 0 }) } else { None });

    // The queue: long sets first; for each test, every provider.
    let mut order: Vec<usize> = (0..tests.len()).collect();
    order.sort_by_key(|&t| set_rank(tests[t].kind, &tests[t].set));
    let mut runs: Vec<Vec<Option<RunOut>>> = tests.iter().map(|_| o.providers.iter().map(|_| None).collect()).collect();
    let mut queue: VecDeque<(usize, usize, usize)> = VecDeque::new();
    for &t in &order {
        for p in 0..o.providers.len() {
            if let Some(pat) = &tests[t].excluded_by {
                runs[t][p] = Some(not_started(Res::Excluded(pat.clone())));
            } else if tests[t].kind == Kind::Complex && complex_cfgs[p].is_none() {
                runs[t][p] = Some(not_started(Res::Skipped(format!("no {}", complex_src.display()))));
            } else {
                let id = queue.len();
                queue.push_back((id, t, p));
            }
        }
    }
    let total = queue.len();
    let nexcl = tests.iter().filter(|t| t.excluded_by.is_some()).count();
    eprintln!(
        "fabtests-adapter upstream: {} ({}), sets {}, {} tests ({nexcl} excluded by {}) x {} providers = {total} runs, \
         up to {jobs} at a time within {cpus} CPUs, {}, timeout {timeout}s (ubertest {}s), FI_PROVIDER_PATH={} (not for shm), logs in {}",
        bin.display(),
        script_path.display(),
        sets.join(","),
        tests.len(),
        if excludes.is_empty() { "nothing".into() } else { exclude_path.display().to_string() },
        o.providers.len(),
        if isolate { "private namespaces per run" } else { "no namespaces" },
        o.complex_timeout,
        provider_path.as_ref().map_or("(unset)".into(), |p| p.display().to_string()),
        log_dir.display()
    );

    exec::install_stop_handler();
    let sched = Mutex::new(Sched { queue, used: 0 });
    let wake = Condvar::new();
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, usize, RunOut)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(total.max(1)) {
            s.spawn(|| {
                while let Some((id, t, p)) = next_job(&sched, &wake, cpus, |t| exec::cpus_of(tests[t].kind)) {
                    let job = Job {
                        id,
                        test: &tests[t],
                        prov: &o.providers[p],
                        port: o.base_port.wrapping_add(id as u16),
                        complex_cfg: complex_cfgs[p].as_deref(),
                    };
                    let out = env.run(&job);
                    sched.lock().expect("sched").used -= exec::cpus_of(tests[t].kind);
                    wake.notify_all();
                    let k = done.fetch_add(1, Ordering::SeqCst) + 1;
                    eprintln!(
                        "[{k:3}/{total}] {:<52} {:<5} {} ({:.1}s)",
                        tests[t].label(),
                        o.providers[p],
                        out.res.cell(),
                        out.elapsed.as_secs_f64()
                    );
                    results.lock().expect("results").push((t, p, out));
                }
            });
        }
    });
    if exec::stopped() {
        eprintln!("fabtests-adapter upstream: interrupted; the table shows what finished");
    }
    for (t, p, out) in results.into_inner().expect("results") {
        runs[t][p] = Some(out);
    }
    let runs: Vec<Vec<RunOut>> = runs
        .into_iter()
        .map(|row| row.into_iter().map(|r| r.unwrap_or_else(|| not_started(Res::Skipped("not run".into())))).collect())
        .collect();
    let res = Results { tests: &tests, providers: &o.providers, runs, primary, comparison };
    let elapsed = t0.elapsed();

    let mut out = String::new();
    out.push('\n');
    out.push_str(&res.table());
    let diffs = res.differences();
    if !diffs.is_empty() {
        out.push_str(&format!("\nDifferences:\n{diffs}"));
    }
    let details = res.details();
    if !details.is_empty() {
        out.push_str(&format!("\nDetails (FAIL, TIMEOUT, NOTRUN):{details}"));
    }
    out.push('\n');
    for (p, prov) in o.providers.iter().enumerate() {
        let c = res.counts(p);
        out.push_str(&format!(
            "{prov}: {} passed, {} failed ({} timeouts), {} not run, {} excluded, {} skipped\n",
            c.passed, c.failed, c.timeouts, c.notrun, c.excluded, c.skipped
        ));
    }
    let worse = (0..tests.len()).filter(|&t| res.diff_of(t) == Diff::ComparisonBetter).count();
    let better = (0..tests.len()).filter(|&t| res.diff_of(t) == Diff::PrimaryBetter).count();
    if let Some(c) = comparison {
        out.push_str(&format!(
            "{} better on {better}, {} better on {worse} (tests that pass with one and not the other)\n",
            o.providers[primary], o.providers[c]
        ));
    }
    out.push_str(&format!("run time {:.1}s; logs in {}\n", elapsed.as_secs_f64(), log_dir.display()));
    let pc = res.counts(primary);
    out.push_str(&format!("{} passed, {} failed\n", pc.passed, pc.failed));
    print!("{out}");
    if let Some(j) = &o.junit {
        std::fs::write(j, res.junit(elapsed)).map_err(|e| format!("cannot write {}: {e}", j.display()))?;
        eprintln!("fabtests-adapter upstream: JUnit XML in {}", j.display());
    }
    // Non-zero only when the provider under test fails what the comparison passes (or, alone,
    // when it fails anything).
    if exec::stopped() {
        return Ok(130);
    }
    Ok(match comparison {
        Some(_) if worse > 0 => 1,
        None if pc.failed > 0 => 1,
        _ => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = parse(&a(&["--bin", "/x", "--provider", "rshm", "--jobs", "3", "--filter", "rdm,msg"])).expect("ok");
        assert_eq!(o.providers, vec!["rshm", "shm"]);
        assert_eq!(o.jobs, Some(3));
        assert_eq!(o.filter, vec!["rdm", "msg"]);
        assert!(parse(&a(&["--bogus"])).is_err());
        assert!(parse(&a(&["--isolate", "maybe"])).is_err());
        assert!(parse(&a(&["--jobs"])).is_err());
    }

    #[test]
    fn ubertest_config_rewrite() {
        let dir = std::env::temp_dir().join(format!("fta-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let src = dir.join("all.test");
        std::fs::write(&src, "{\n\tprov_name: shm,\n\ttest_type: [\n\t\tFT_TEST_LATENCY,\n\t],\n},\n").expect("write");
        let dst = complex_config_for(&src, "shm", "rshm", &dir).expect("copy");
        let text = std::fs::read_to_string(&dst).expect("read");
        assert!(text.contains("\tprov_name: rshm,\n") && !text.contains("prov_name: shm"), "{text}");
        assert_eq!(complex_config_for(&src, "shm", "shm", &dir).expect("same"), src);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
