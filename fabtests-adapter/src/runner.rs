//! The suite side: start the ranks of each scenario for each provider, serve their out-of-band
//! requests (see pmi.rs), enforce the deadline, combine the ranks' results, print the table.

use crate::harness::shm_files_of;
use crate::scenarios::{self, Scenario};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct SuiteOpts {
    pub providers: Vec<String>,
    pub filter: Vec<String>,
    /// Scenarios whose name contains one of these are left out (after `filter`).
    pub skip: Vec<String>,
    pub provider_path: Option<PathBuf>,
    /// Per-wait deadline inside the ranks of the provider under test.
    pub wait_timeout: Duration,
    /// The same for the providers it is compared with. Shorter by default: the C shm fails many
    /// scenarios by never completing an operation (no error completion for a bad key, a dead
    /// peer, a closed MR), and at 10 s per wait those timeouts were most of the suite's time in
    /// CI. Nothing the providers pass waits longer than a few hundred milliseconds.
    pub compare_wait_timeout: Duration,
    pub verbose: bool,
}

impl SuiteOpts {
    /// The provider under test: rshm if listed, else the first.
    pub fn primary(&self) -> &str {
        if self.providers.iter().any(|p| p == "rshm") {
            "rshm"
        } else {
            &self.providers[0]
        }
    }

    /// The per-wait deadline given to `prov`'s ranks.
    pub fn wait_timeout_of(&self, prov: &str) -> Duration {
        if prov == self.primary() {
            self.wait_timeout
        } else {
            self.compare_wait_timeout
        }
    }
}

/// The outcome of one scenario on one provider.
#[derive(Clone, Debug)]
pub enum Outcome {
    Pass,
    Fail(String),
    NotSupported(i32, String),
}

impl Outcome {
    pub fn cell(&self) -> String {
        match self {
            Outcome::Pass => "pass".into(),
            Outcome::Fail(why) => format!("FAIL({})", short(strip_rank(why), 60)),
            Outcome::NotSupported(code, _) => format!("n/s({})", crate::fabric::errname(*code)),
        }
    }
}

/// "rank 3: reason" -> "reason" (the table cell is short; the details keep the rank).
fn strip_rank(s: &str) -> &str {
    match s.strip_prefix("rank ").and_then(|t| t.split_once(": ")) {
        Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest,
        _ => s,
    }
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 3).collect();
        format!("{t}...")
    }
}

enum Ev {
    Line(usize, String),
    Eof(usize),
}

struct RankState {
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    result: Option<String>,
    status: Option<ExitStatus>,
    eof: bool,
    kill_expected: bool,
    killed_by_us: bool,
    last_step: String,
    stderr: Arc<Mutex<VecDeque<String>>>,
    result_at: Option<Instant>,
}

/// Everything one scenario run produced.
pub struct RunReport {
    pub outcome: Outcome,
    pub details: Vec<String>,
    pub elapsed: Duration,
    /// /dev/shm files a rank left behind although it exited normally.
    pub leaks: Vec<String>,
}

/// Remove what the ranks of a run left in /dev/shm; returns notes (killed ranks) and leaks
/// (ranks that exited normally).
fn sweep_shm(ranks: &[RankState]) -> (Vec<String>, Vec<String>) {
    let (mut notes, mut leaks) = (Vec::new(), Vec::new());
    for (i, r) in ranks.iter().enumerate() {
        let files = shm_files_of(r.pid);
        if files.is_empty() {
            continue;
        }
        for f in &files {
            let _ = std::fs::remove_file(std::path::Path::new("/dev/shm").join(f));
        }
        let normal = r.status.is_some_and(|s| s.success()) && !r.killed_by_us && !r.kill_expected;
        if normal {
            leaks.push(format!("rank {i} left {}", files.join(", ")));
        } else {
            notes.push(format!("removed {} left by rank {i} (killed or crashed)", files.join(", ")));
        }
    }
    (notes, leaks)
}

fn send_to(ranks: &mut [RankState], i: usize, line: &str) {
    if let Some(s) = ranks[i].stdin.as_mut() {
        let _ = writeln!(s, "{line}");
        let _ = s.flush();
    }
}

pub fn run_scenario(scn: &Scenario, prov: &str, opts: &SuiteOpts) -> RunReport {
    let t0 = Instant::now();
    let exe = std::env::current_exe().expect("current_exe");
    let (tx, rx) = mpsc::channel::<Ev>();
    let mut ranks: Vec<RankState> = Vec::new();
    for i in 0..scn.nprocs {
        let mut cmd = Command::new(&exe);
        cmd.arg("__rank")
            .args(["--scenario", scn.name, "--provider", prov])
            .args(["--rank", &i.to_string(), "--nprocs", &scn.nprocs.to_string()])
            .args(["--wait-ms", &opts.wait_timeout_of(prov).as_millis().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("FI_PROVIDER");
        if let Some(p) = &opts.provider_path {
            cmd.env("FI_PROVIDER_PATH", p);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for r in &mut ranks {
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                }
                return RunReport {
                    outcome: Outcome::Fail(format!("cannot start rank {i}: {e}")),
                    details: vec![],
                    elapsed: t0.elapsed(),
                    leaks: vec![],
                };
            }
        };
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let txc = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(l) = line else { break };
                if txc.send(Ev::Line(i, l)).is_err() {
                    return;
                }
            }
            let _ = txc.send(Ev::Eof(i));
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail2 = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(l) = line else { break };
                let mut t = tail2.lock().expect("stderr tail");
                t.push_back(l);
                if t.len() > 30 {
                    t.pop_front();
                }
            }
        });
        let stdin = child.stdin.take();
        ranks.push(RankState {
            pid: child.id(),
            child,
            stdin,
            result: None,
            status: None,
            eof: false,
            kill_expected: false,
            killed_by_us: false,
            last_step: String::from("start"),
            stderr: tail,
            result_at: None,
        });
    }
    drop(tx);

    let deadline = t0 + scn.timeout;
    // key -> (values by rank)
    let mut gathers: HashMap<String, Vec<Option<String>>> = HashMap::new();
    let mut kv: HashMap<String, String> = HashMap::new();
    let mut exit_waiters: Vec<(usize, usize)> = Vec::new();
    let mut timed_out = false;
    // Set when a rank fails, reports n/s or dies: the others get a short grace period.
    let mut abort_at: Option<Instant> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(10)) {
            Ok(Ev::Line(i, l)) => {
                let (cmd, rest) = l.split_once(' ').unwrap_or((l.as_str(), ""));
                match cmd {
                    "STEP" => {
                        ranks[i].last_step = rest.to_string();
                        if opts.verbose {
                            eprintln!("    [{prov} rank {i}] {rest}");
                        }
                    }
                    "AG" => {
                        let (key, val) = rest.split_once(' ').unwrap_or((rest, "-"));
                        let n = ranks.len();
                        let e = gathers.entry(key.to_string()).or_insert_with(|| vec![None; n]);
                        e[i] = Some(val.to_string());
                        if e.iter().all(Option::is_some) {
                            let vals: Vec<String> = e.iter().map(|v| v.clone().expect("all set")).collect();
                            let line = format!("AG {key} {}", vals.join(" "));
                            gathers.remove(key);
                            for j in 0..n {
                                send_to(&mut ranks, j, &line);
                            }
                        }
                    }
                    "SET" => {
                        let (key, val) = rest.split_once(' ').unwrap_or((rest, "1"));
                        kv.insert(key.to_string(), val.to_string());
                    }
                    "GET" => {
                        let v = kv.get(rest).cloned().unwrap_or_else(|| "?".into());
                        send_to(&mut ranks, i, &format!("VAL {rest} {v}"));
                    }
                    "KILLME" => {
                        ranks[i].kill_expected = true;
                        let _ = ranks[i].child.kill();
                    }
                    "WAITEXIT" => {
                        if let Ok(r) = rest.trim().parse::<usize>() {
                            exit_waiters.push((i, r));
                        }
                    }
                    "RESULT" => {
                        if !rest.starts_with("PASS") && abort_at.is_none() {
                            abort_at = Some(Instant::now() + Duration::from_secs(2));
                        }
                        ranks[i].result = Some(rest.to_string());
                        ranks[i].result_at = Some(Instant::now());
                    }
                    _ => {}
                }
            }
            Ok(Ev::Eof(i)) => ranks[i].eof = true,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {}
        }
        // Reap exited ranks.
        for r in ranks.iter_mut() {
            if r.status.is_none() {
                if let Ok(Some(st)) = r.child.try_wait() {
                    r.status = Some(st);
                    r.stdin = None;
                    if r.result.is_none() && !r.kill_expected && abort_at.is_none() {
                        abort_at = Some(Instant::now() + Duration::from_secs(2));
                    }
                }
            }
        }
        // Answer WAITEXIT for exited ranks.
        let mut k = 0;
        while k < exit_waiters.len() {
            let (w, r) = exit_waiters[k];
            if r < ranks.len() && ranks[r].status.is_some() {
                send_to(&mut ranks, w, &format!("EXITED {r}"));
                exit_waiters.remove(k);
            } else {
                k += 1;
            }
        }
        // A gather that waits for a rank that has exited can never complete.
        let dead: Vec<usize> = (0..ranks.len()).filter(|&i| ranks[i].status.is_some() && ranks[i].eof).collect();
        if !dead.is_empty() {
            let mut to_abort = Vec::new();
            gathers.retain(|_, vals| {
                if dead.iter().any(|&d| vals[d].is_none()) {
                    for (j, v) in vals.iter().enumerate() {
                        if v.is_some() {
                            to_abort.push(j);
                        }
                    }
                    false
                } else {
                    true
                }
            });
            for j in to_abort {
                send_to(&mut ranks, j, &format!("ABORT rank {} exited", dead[0]));
            }
        }
        if ranks.iter().all(|r| r.status.is_some() && r.eof) {
            break;
        }
        let now = Instant::now();
        if abort_at.is_some_and(|t| now > t) || now > deadline {
            if now > deadline && !matches!(abort_at, Some(t) if now > t) {
                timed_out = true;
            }
            for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
                r.killed_by_us = true;
                let _ = r.child.kill();
            }
            for r in ranks.iter_mut() {
                if r.status.is_none() {
                    r.status = r.child.wait().ok();
                }
            }
            // Drain what is left of the output (RESULT lines written just before the kill).
            let until = Instant::now() + Duration::from_millis(200);
            while let Ok(ev) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                if let Ev::Line(i, l) = ev {
                    if let Some(res) = l.strip_prefix("RESULT ") {
                        ranks[i].result = Some(res.to_string());
                    } else if let Some(s) = l.strip_prefix("STEP ") {
                        ranks[i].last_step = s.to_string();
                    }
                }
            }
            break;
        }
    }
    let elapsed = t0.elapsed();
    let (outcome, mut details) = combine(&ranks, timed_out, scn);
    let (notes, leaks) = sweep_shm(&ranks);
    details.extend(notes);
    RunReport { outcome, details, elapsed, leaks }
}

fn status_text(st: &Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match st {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(sig)) => format!("signal {sig}{}", if s.core_dumped() { " (core dumped)" } else { "" }),
            _ => "unknown status".into(),
        },
        None => "still running".into(),
    }
}

fn combine(ranks: &[RankState], timed_out: bool, scn: &Scenario) -> (Outcome, Vec<String>) {
    let mut details = Vec::new();
    let mut fails: Vec<(Instant, String)> = Vec::new();
    let mut nos: Option<(i32, String)> = None;
    let mut aborted = Vec::new();
    let mut died = Vec::new();
    let mut hung = Vec::new();
    for (i, r) in ranks.iter().enumerate() {
        let tail: Vec<String> = r.stderr.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
        let mut line = format!(
            "rank {i}: {} ({}); last step: {}",
            r.result.as_deref().unwrap_or("no result"),
            status_text(&r.status),
            r.last_step
        );
        if !tail.is_empty() {
            line.push_str(&format!(
                "\n        stderr: {}",
                tail[tail.len().saturating_sub(6)..].join("\n                ")
            ));
        }
        details.push(line);
        match r.result.as_deref() {
            Some(res) if res.starts_with("FAIL") => {
                fails.push((r.result_at.unwrap_or_else(Instant::now), format!("rank {i}: {}", res[4..].trim())))
            }
            Some(res) if res.starts_with("NOS") => {
                let mut it = res[3..].trim().splitn(2, ' ');
                let code = it.next().and_then(|c| c.parse().ok()).unwrap_or(0);
                nos.get_or_insert((code, it.next().unwrap_or("").to_string()));
            }
            Some(res) if res.starts_with("ABORTED") => aborted.push(format!("rank {i}: {}", res[7..].trim())),
            Some(_) => {}
            None if r.kill_expected => {}
            None if r.killed_by_us => hung.push(format!("rank {i} at '{}'", r.last_step)),
            None => {
                // Debian's libfabric loads libinfinipath, whose SIGSEGV handler prints
                // "... terminated with signal N at PC=..." and exits with code 1.
                let crash = tail.iter().find_map(|l| {
                    l.find("terminated with signal").map(|k| l[k..].split(" at PC").next().unwrap_or("").to_string())
                });
                match crash {
                    Some(c) => died.push(format!("rank {i} crashed ({c}) during '{}'", r.last_step)),
                    None => died.push(format!("rank {i} died ({})", status_text(&r.status))),
                }
            }
        }
        let failed_result = r.result.as_deref().is_some_and(|x| x.starts_with("FAIL"));
        if r.result.is_some()
            && !failed_result
            && r.status.is_some_and(|s| !s.success())
            && !r.kill_expected
            && !r.killed_by_us
        {
            died.push(format!("rank {i} exited with {} after its result", status_text(&r.status)));
        }
    }
    fails.sort_by_key(|(t, _)| *t);
    let outcome = if let Some((_, f)) = fails.first() {
        Outcome::Fail(f.clone())
    } else if !died.is_empty() {
        Outcome::Fail(died.join("; "))
    } else if timed_out {
        Outcome::Fail(format!("timeout after {:?}: {}", scn.timeout, hung.join(", ")))
    } else if let Some((c, why)) = nos {
        Outcome::NotSupported(c, why)
    } else if !hung.is_empty() {
        Outcome::Fail(format!("hung: {}", hung.join(", ")))
    } else if !aborted.is_empty() {
        Outcome::Fail(format!("aborted: {}", aborted.join("; ")))
    } else {
        Outcome::Pass
    };
    (outcome, details)
}

fn matches_filter(name: &str, filter: &[String]) -> bool {
    filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()))
}

/// Whether scenario `name` runs: it matches `filter` (any, or none given) and no `skip`.
fn selected(name: &str, filter: &[String], skip: &[String]) -> bool {
    matches_filter(name, filter) && !skip.iter().any(|s| name.contains(s.as_str()))
}

/// A plain-text table: `head` names the first column, `cols` the others; every row is a label
/// and one cell per column (shared by `suite` and `upstream`).
pub fn render_table(head: &str, cols: &[String], rows: &[(String, Vec<String>)]) -> String {
    let w0 = rows.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(8).max(head.len());
    let widths: Vec<usize> = (0..cols.len())
        .map(|j| {
            rows.iter().map(|(_, c)| c.get(j).map_or(0, |x| x.chars().count())).max().unwrap_or(4).max(cols[j].len())
        })
        .collect();
    let mut out = String::new();
    out.push_str(&format!("{head:<w0$}"));
    for (j, p) in cols.iter().enumerate() {
        out.push_str(&format!(" | {:<w$}", p, w = widths[j]));
    }
    while out.ends_with(' ') {
        out.pop();
    }
    out.push('\n');
    out.push_str(&"-".repeat(w0));
    for w in &widths {
        out.push_str(&format!("-+-{}", "-".repeat(*w)));
    }
    out.push('\n');
    for (label, c) in rows {
        out.push_str(&format!("{label:<w0$}"));
        for (j, w) in widths.iter().enumerate() {
            out.push_str(&format!(" | {:<w$}", c.get(j).map_or("", String::as_str), w = *w));
        }
        // No trailing blanks after the last column.
        while out.ends_with(' ') {
            out.pop();
        }
        out.push('\n');
    }
    out
}

/// Run the suite; returns the process exit code.
pub fn run_suite(opts: &SuiteOpts) -> i32 {
    let list: Vec<Scenario> =
        scenarios::all().into_iter().filter(|s| selected(s.name, &opts.filter, &opts.skip)).collect();
    if list.is_empty() {
        eprintln!("no scenario matches {:?} without {:?}", opts.filter, opts.skip);
        return 2;
    }
    let t0 = Instant::now();
    let primary = opts.primary().to_string();
    eprintln!(
        "fabtests-adapter suite: {} scenarios x {} providers ({}), libfabric API {}.{}, core {}.{}, FI_PROVIDER_PATH={}{}",
        list.len(),
        opts.providers.len(),
        opts.providers.join(","),
        crate::fabric::ffi::fi_major(crate::fabric::API_VERSION),
        crate::fabric::ffi::fi_minor(crate::fabric::API_VERSION),
        crate::fabric::ffi::fi_major(crate::fabric::core_version()),
        crate::fabric::ffi::fi_minor(crate::fabric::core_version()),
        opts.provider_path.as_ref().map_or("(unset)".into(), |p| p.display().to_string()),
        if opts.providers.len() > 1 {
            format!(
                "; a wait times out after {} ms for {primary}, {} ms for the others",
                opts.wait_timeout.as_millis(),
                opts.compare_wait_timeout.as_millis()
            )
        } else {
            String::new()
        }
    );
    let total = list.len() * opts.providers.len();
    let mut rows: Vec<(&Scenario, Vec<RunReport>)> = Vec::new();
    // (scenario, provider, reason) of expected-n/s entries that passed.
    let mut stale_entries: Vec<(&str, String, &str)> = Vec::new();
    let mut k = 0;
    for s in &list {
        let mut reps = Vec::new();
        for p in &opts.providers {
            k += 1;
            let mut rep = run_scenario(s, p, opts);
            let (judged, stale) = judge(p, s.name, rep.outcome);
            rep.outcome = judged;
            if let Some(reason) = stale {
                stale_entries.push((s.name, p.clone(), reason));
            }
            eprintln!(
                "[{k:3}/{total}] {:<32} {:<5} {} ({:.2}s)",
                s.name,
                p,
                rep.outcome.cell(),
                rep.elapsed.as_secs_f64()
            );
            if opts.verbose && !matches!(rep.outcome, Outcome::Pass) {
                for d in &rep.details {
                    eprintln!("        {d}");
                }
            }
            reps.push(rep);
        }
        rows.push((s, reps));
    }
    // The table.
    let table_rows: Vec<(String, Vec<String>)> =
        rows.iter().map(|(s, r)| (s.name.to_string(), r.iter().map(|x| x.outcome.cell()).collect())).collect();
    let out = render_table("scenario", &opts.providers, &table_rows);
    // Details of everything that did not pass.
    let mut notes = String::new();
    for (s, reps) in &rows {
        for (p, rep) in opts.providers.iter().zip(reps) {
            match &rep.outcome {
                Outcome::Pass => {}
                Outcome::Fail(why) => {
                    notes.push_str(&format!("\n{} [{p}] FAIL: {why}\n", s.name));
                    for d in &rep.details {
                        notes.push_str(&format!("    {d}\n"));
                    }
                }
                Outcome::NotSupported(c, why) => {
                    notes.push_str(&format!(
                        "\n{} [{p}] not supported ({}): {why}\n",
                        s.name,
                        crate::fabric::errname(*c)
                    ));
                }
            }
        }
    }
    let mut leaks = String::new();
    for (s, reps) in &rows {
        for (p, rep) in opts.providers.iter().zip(reps) {
            for l in &rep.leaks {
                leaks.push_str(&format!("  {} [{p}]: {l}\n", s.name));
            }
        }
    }
    if !leaks.is_empty() {
        notes.push_str(&format!("\nShared-memory files left behind by ranks that exited normally (removed):\n{leaks}"));
    }
    let pi = opts.providers.iter().position(|p| *p == primary).unwrap_or(0);
    let passed = rows.iter().filter(|(_, r)| matches!(r[pi].outcome, Outcome::Pass)).count();
    let failed = rows.iter().filter(|(_, r)| matches!(r[pi].outcome, Outcome::Fail(_))).count();
    let nos = rows.len() - passed - failed;
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "\n{out}");
    if !notes.is_empty() {
        let _ = write!(stdout, "\nDetails:{notes}");
    }
    let judged = if crate::expected::not_supported_list(&primary).is_some() {
        " (each on its expected-not-supported list)"
    } else {
        ""
    };
    let _ = writeln!(stdout, "\n{primary}: {nos} not supported{judged}; suite time {:.1}s", t0.elapsed().as_secs_f64());
    let stale = stale_report(&stale_entries);
    if !stale.is_empty() {
        let _ = write!(stdout, "\n{stale}\n");
        eprint!("\n{stale}");
    }
    let stale_fatal = crate::expected::STALE_ENTRY_IS_FATAL && !stale_entries.is_empty();
    let stale_note = if stale_fatal {
        let n = stale_entries.len();
        format!(", {n} stale expected-not-supported entr{} (fatal)", if n == 1 { "y" } else { "ies" })
    } else {
        String::new()
    };
    let _ = writeln!(stdout, "{passed} passed, {failed} failed{stale_note}");
    if failed > 0 || stale_fatal {
        1
    } else {
        0
    }
}

/// A provider's "not supported" judged against its expected list (`expected.rs`): an n/s that is
/// not on the list is a failure (declining is not passing); a pass of a listed scenario is
/// returned as stale (its reason) so that the list shrinks. Providers without a list (shm) keep
/// their outcome.
fn judge(prov: &str, scenario: &str, outcome: Outcome) -> (Outcome, Option<&'static str>) {
    judge_with(crate::expected::not_supported_list(prov), prov, scenario, outcome)
}

fn judge_with(
    list: Option<&'static [crate::expected::Declined]>,
    prov: &str,
    scenario: &str,
    outcome: Outcome,
) -> (Outcome, Option<&'static str>) {
    let Some(list) = list else { return (outcome, None) };
    let listed = crate::expected::expected_reason(list, scenario);
    match (outcome, listed) {
        (Outcome::NotSupported(code, why), None) => (
            Outcome::Fail(format!(
                "declined with {} ({why}), but {scenario} is not on {prov}'s expected-not-supported list \
                 (fabtests-adapter/src/expected.rs): {prov} must support it",
                crate::fabric::errname(code)
            )),
            None,
        ),
        (Outcome::Pass, Some(reason)) => (Outcome::Pass, Some(reason)),
        (o, _) => (o, None),
    }
}

/// The loud notice for expected-n/s entries that now pass (empty if none).
fn stale_report(stale: &[(&str, String, &str)]) -> String {
    if stale.is_empty() {
        return String::new();
    }
    let bar = "!".repeat(100);
    let mut s = format!("{bar}\n");
    for (name, prov, reason) in stale {
        s.push_str(&format!(
            "!! expected n/s now passes: remove it from the list: {name} [{prov}] (listed because: {reason})\n"
        ));
    }
    s.push_str(&format!(
        "!! ({} entr{} of RSHM_NOT_SUPPORTED in fabtests-adapter/src/expected.rs; {})\n{bar}\n",
        stale.len(),
        if stale.len() == 1 { "y" } else { "ies" },
        if crate::expected::STALE_ENTRY_IS_FATAL { "this fails the run" } else { "not fatal" }
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells() {
        assert_eq!(Outcome::Pass.cell(), "pass");
        assert_eq!(Outcome::Fail("rank 1: boom".into()).cell(), "FAIL(boom)");
        assert_eq!(Outcome::Fail("rankings: x".into()).cell(), "FAIL(rankings: x)");
        assert_eq!(Outcome::NotSupported(-61, String::new()).cell(), "n/s(-FI_ENODATA)");
        assert!(Outcome::Fail("x".repeat(200)).cell().len() < 70);
    }

    #[test]
    fn declining_is_judged_for_rshm_only() {
        use crate::expected::Declined;
        static LIST: [Declined; 1] = [Declined { scenario: "rma/write_read", reason: "not yet" }];
        let nos = || Outcome::NotSupported(-61, "fi_getinfo".into());
        let j = |s: &str, o: Outcome| judge_with(Some(&LIST), "rshm", s, o);
        assert!(matches!(j("pair/multi_recv", nos()), (Outcome::Fail(_), None)));
        assert!(matches!(j("rma/write_read", nos()), (Outcome::NotSupported(..), None)));
        assert!(matches!(j("rma/write_read", Outcome::Pass), (Outcome::Pass, Some("not yet"))));
        assert!(matches!(j("pair/multi_recv", Outcome::Pass), (Outcome::Pass, None)));
        assert!(matches!(judge("rshm", "pair/multi_recv", nos()), (Outcome::Fail(_), None)));
        assert!(matches!(judge("shm", "pair/multi_recv", nos()), (Outcome::NotSupported(..), None)));
        assert!(stale_report(&[]).is_empty());
        assert!(stale_report(&[("rma/mr_keys", "rshm".into(), "x")]).contains("remove it from the list"));
    }

    #[test]
    fn filters() {
        assert!(matches_filter("pair/cancel", &[]));
        assert!(matches_filter("pair/cancel", &["cancel".into()]));
        assert!(!matches_filter("pair/cancel", &["unit/".into()]));
        assert!(selected("unit/eq", &[], &["soak/".into()]));
        assert!(!selected("unit/eq", &["unit/".into()], &["eq".into()]));
        assert!(!selected("soak/rma_atomic", &[], &["soak/".into(), "x".into()]));
    }

    #[test]
    fn scenario_names_are_unique() {
        let all = scenarios::all();
        let mut names: Vec<&str> = all.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }
}
