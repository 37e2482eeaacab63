//! fabtests-adapter: a conformance suite that drives libfabric providers only through
//! libfabric's public API, as an application does, and compares rshm with the C `shm`.
//!
//! ```text
//! fabtests-adapter suite [--providers rshm,shm] [--filter SUBSTR]... [--skip SUBSTR]... [--provider-path DIR]
//!                        [--wait-ms N] [--compare-wait-ms N] [-v]
//! fabtests-adapter list
//! fabtests-adapter upstream --bin DIR [--providers rshm,shm] [--jobs N] [--junit FILE] ...
//! ```
//! Each scenario runs in fresh processes (`__rank`, hidden) started by the suite, which also
//! serves their out-of-band address exchange and barriers. `upstream` runs an installed
//! upstream fabtests the way its runfabtests.sh does (`__hold`, hidden, keeps one run's private
//! namespaces alive).

mod expected;
// The wrapper covers more of the API than today's scenarios call (part 2 and later scenarios).
#[allow(dead_code)]
mod fabric;
mod harness;
mod outcome;
mod pmi;
mod runner;
mod scenarios;
mod upstream;

use std::path::PathBuf;
use std::time::Duration;

const USAGE: &str = "usage:
  fabtests-adapter suite [--providers rshm,shm] [--filter SUBSTR]... [--skip SUBSTR]... [--provider-path DIR] [--wait-ms N] [--compare-wait-ms N] [-v]
  fabtests-adapter list
  fabtests-adapter upstream --bin DIR ...   (installed upstream fabtests; options below)

suite:
  --providers      providers to run every scenario against (default rshm,shm)
  --filter         run only scenarios whose name contains SUBSTR (repeatable, or comma-separated)
  --skip           leave out scenarios whose name contains SUBSTR (repeatable, or comma-separated)
  --provider-path  directory holding librshm-fi.so (sets FI_PROVIDER_PATH for the test processes;
                   default: $FI_PROVIDER_PATH, else <dir of this binary>/../rshm if it has the library)
  --wait-ms        deadline for any single wait inside a scenario (default 10000)
  --compare-wait-ms
                   the same for the providers compared with rshm (default 3000: the C shm fails
                   many scenarios by never completing, and nothing it passes waits that long)
  -v               show progress steps and failure details while running

upstream:
{UPSTREAM}";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("suite") => suite(&args[1..]),
        Some("list") => {
            for s in scenarios::all() {
                println!("{:<32} {}p  {}", s.name, s.nprocs, s.about);
            }
            0
        }
        Some("upstream") => upstream::run(&args[1..]),
        Some("__hold") => upstream::hold_main(),
        Some("__rank") => rank_main(&args[1..]),
        Some("__churn_child") => scenarios::churn_child_main(&args[1..]),
        Some("-h") | Some("--help") | Some("help") => {
            println!("{}", usage());
            0
        }
        _ => {
            eprintln!("{}", usage());
            2
        }
    };
    std::process::exit(code);
}

fn usage() -> String {
    USAGE.replace("{UPSTREAM}", upstream::USAGE)
}

fn take_value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i).map(String::as_str).ok_or_else(|| format!("{flag} needs a value"))
}

/// A provider directory (`--provider-path`, or FI_PROVIDER_PATH), made absolute: the tests run
/// in other directories (and the upstream ones in namespaces of their own), where a relative
/// path named nothing and every getinfo of rshm answered ENODATA.
fn provider_dir(arg: impl AsRef<std::path::Path>) -> PathBuf {
    std::path::absolute(&arg).unwrap_or_else(|_| arg.as_ref().to_path_buf())
}

fn default_provider_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FI_PROVIDER_PATH") {
        return Some(provider_dir(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?.join("rshm");
    dir.join("librshm-fi.so").exists().then_some(dir)
}

fn suite(args: &[String]) -> i32 {
    let mut opts = runner::SuiteOpts {
        providers: vec!["rshm".into(), "shm".into()],
        filter: Vec::new(),
        skip: Vec::new(),
        provider_path: None,
        wait_timeout: Duration::from_secs(10),
        compare_wait_timeout: Duration::from_secs(3),
        verbose: false,
    };
    let mut i = 0;
    while i < args.len() {
        let r: Result<(), String> = (|| {
            match args[i].as_str() {
                "--providers" | "-p" => {
                    opts.providers = take_value(args, &mut i, "--providers")?
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect();
                }
                "--filter" | "-f" => {
                    opts.filter.extend(take_value(args, &mut i, "--filter")?.split(',').map(str::to_string))
                }
                "--skip" => opts.skip.extend(
                    take_value(args, &mut i, "--skip")?.split(',').filter(|s| !s.is_empty()).map(str::to_string),
                ),
                "--provider-path" => {
                    opts.provider_path = Some(provider_dir(take_value(args, &mut i, "--provider-path")?))
                }
                "--wait-ms" => {
                    let v = take_value(args, &mut i, "--wait-ms")?;
                    opts.wait_timeout = Duration::from_millis(v.parse().map_err(|_| format!("bad --wait-ms {v}"))?);
                }
                "--compare-wait-ms" => {
                    let v = take_value(args, &mut i, "--compare-wait-ms")?;
                    opts.compare_wait_timeout =
                        Duration::from_millis(v.parse().map_err(|_| format!("bad --compare-wait-ms {v}"))?);
                }
                "-v" | "--verbose" => opts.verbose = true,
                other => return Err(format!("unknown argument {other}")),
            }
            Ok(())
        })();
        if let Err(e) = r {
            eprintln!("fabtests-adapter: {e}\n{}", usage());
            return 2;
        }
        i += 1;
    }
    if opts.providers.is_empty() {
        eprintln!("fabtests-adapter: --providers is empty");
        return 2;
    }
    if opts.provider_path.is_none() {
        opts.provider_path = default_provider_path();
    }
    if let Some(p) = &opts.provider_path {
        if opts.providers.iter().any(|x| x == "rshm") && !p.join("librshm-fi.so").exists() {
            eprintln!("fabtests-adapter: warning: {} has no librshm-fi.so", p.display());
        }
    }
    runner::run_suite(&opts)
}

/// One rank of one scenario (started by the suite with its stdin/stdout as the OOB channel).
fn rank_main(args: &[String]) -> i32 {
    let (mut name, mut prov, mut rank, mut nprocs, mut wait_ms) =
        (String::new(), String::new(), 0usize, 1usize, 10_000u64);
    let mut i = 0;
    while i + 1 < args.len() {
        let v = args[i + 1].clone();
        match args[i].as_str() {
            "--scenario" => name = v,
            "--provider" => prov = v,
            "--rank" => rank = v.parse().unwrap_or(0),
            "--nprocs" => nprocs = v.parse().unwrap_or(1),
            "--wait-ms" => wait_ms = v.parse().unwrap_or(10_000),
            _ => {}
        }
        i += 2;
    }
    let Some(scn) = scenarios::find(&name) else {
        eprintln!("unknown scenario {name}");
        return 3;
    };
    let mut r =
        harness::Rank { prov, rank, nprocs, pmi: pmi::Pmi::connect(nprocs), timeout: Duration::from_millis(wait_ms) };
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (scn.run)(&mut r)));
    let res = match res {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(harness::TestErr::Fail(format!("panic: {msg}")))
        }
    };
    // Leftovers found when the scenario's endpoints closed fail a scenario that passed.
    let late = harness::take_drop_failures();
    let res = match res {
        Ok(()) if !late.is_empty() => Err(harness::TestErr::Fail(late.join("; "))),
        other => other,
    };
    r.pmi.result(&res);
    0
}
