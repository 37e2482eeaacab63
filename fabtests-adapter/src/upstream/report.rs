//! The outputs of `upstream`: the comparison table, the details of what did not pass, the
//! summary and JUnit XML (one testsuite per provider).

use super::exec::{last_lines, Res, RunOut};
use super::script::TestDef;
use std::fmt::Write as _;
use std::time::Duration;

/// The results: `runs[test][provider]`.
pub struct Results<'a> {
    pub tests: &'a [TestDef],
    pub providers: &'a [String],
    pub runs: Vec<Vec<RunOut>>,
    /// Index of the provider under test (rshm) and of the comparison (shm), if any.
    pub primary: usize,
    pub comparison: Option<usize>,
}

/// How the provider under test fares against the comparison on one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Diff {
    Same,
    /// Passes with the provider under test, not with the comparison.
    PrimaryBetter,
    /// Passes with the comparison, not with the provider under test.
    ComparisonBetter,
}

pub fn diff(primary: &Res, comparison: &Res) -> Diff {
    match (primary.is_pass(), comparison.is_pass()) {
        (true, false) if comparison.ran() => Diff::PrimaryBetter,
        (false, true) if primary.ran() => Diff::ComparisonBetter,
        _ => Diff::Same,
    }
}

#[derive(Default, Debug, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    /// Failed, including timeouts (runfabtests.sh's "Fail").
    pub failed: usize,
    pub timeouts: usize,
    pub notrun: usize,
    pub excluded: usize,
    pub skipped: usize,
}

impl Results<'_> {
    pub fn diff_of(&self, t: usize) -> Diff {
        match self.comparison {
            Some(c) => diff(&self.runs[t][self.primary].res, &self.runs[t][c].res),
            None => Diff::Same,
        }
    }

    pub fn counts(&self, p: usize) -> Counts {
        let mut c = Counts::default();
        for row in &self.runs {
            match &row[p].res {
                Res::Pass(_) => c.passed += 1,
                Res::Fail(_) => c.failed += 1,
                Res::Timeout(_) => {
                    c.failed += 1;
                    c.timeouts += 1
                }
                Res::NotRun(_) => c.notrun += 1,
                Res::Excluded(_) => c.excluded += 1,
                Res::Skipped(_) => c.skipped += 1,
            }
        }
        c
    }

    fn marker(&self, t: usize) -> String {
        let Some(c) = self.comparison else { return String::new() };
        match self.diff_of(t) {
            Diff::Same => String::new(),
            Diff::PrimaryBetter => format!("{} better", self.providers[self.primary]),
            Diff::ComparisonBetter => format!("{} better", self.providers[c]),
        }
    }

    /// The table: one row per test, one column per provider, and the comparison marker.
    pub fn table(&self) -> String {
        let mut cols: Vec<String> = self.providers.to_vec();
        if self.comparison.is_some() {
            cols.push("compare".into());
        }
        let rows: Vec<(String, Vec<String>)> = self
            .tests
            .iter()
            .enumerate()
            .map(|(t, def)| {
                let mut cells: Vec<String> = self.runs[t].iter().map(|r| r.res.cell()).collect();
                if self.comparison.is_some() {
                    cells.push(self.marker(t));
                }
                (def.label(), cells)
            })
            .collect();
        crate::runner::render_table("test", &cols, &rows)
    }

    /// Every difference between the two providers, one line each.
    pub fn differences(&self) -> String {
        let Some(c) = self.comparison else { return String::new() };
        let mut out = String::new();
        for (t, def) in self.tests.iter().enumerate() {
            let m = self.marker(t);
            if !m.is_empty() {
                let _ = writeln!(
                    out,
                    "  {m:<12} {}: {} = {}, {} = {}",
                    def.label(),
                    self.providers[self.primary],
                    self.runs[t][self.primary].res.cell(),
                    self.providers[c],
                    self.runs[t][c].res.cell()
                );
            }
        }
        out
    }

    /// Details of every run that failed, timed out or did not run: command lines, exit
    /// statuses, the last lines of output, the log files.
    pub fn details(&self) -> String {
        let mut out = String::new();
        for (t, def) in self.tests.iter().enumerate() {
            for (p, prov) in self.providers.iter().enumerate() {
                let run = &self.runs[t][p];
                let (what, why) = match &run.res {
                    Res::Fail(w) => ("FAIL", w),
                    Res::Timeout(w) => ("TIMEOUT", w),
                    Res::NotRun(w) => ("NOTRUN", w),
                    _ => continue,
                };
                let _ = writeln!(out, "\n{} [{prov}] {what}: {why}", def.label());
                out.push_str(&proc_details(run, if matches!(run.res, Res::NotRun(_)) { 2 } else { 8 }));
            }
        }
        out
    }

    /// JUnit XML: `<testsuites>` with one `<testsuite>` per provider.
    pub fn junit(&self, total: Duration) -> String {
        let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let all_fail: usize = (0..self.providers.len()).map(|p| self.counts(p).failed).sum();
        let _ = writeln!(
            x,
            "<testsuites name=\"fabtests-upstream\" tests=\"{}\" failures=\"{all_fail}\" time=\"{:.3}\">",
            self.tests.len() * self.providers.len(),
            total.as_secs_f64()
        );
        for (p, prov) in self.providers.iter().enumerate() {
            let c = self.counts(p);
            let time: f64 = self.runs.iter().map(|r| r[p].elapsed.as_secs_f64()).sum();
            let _ = writeln!(
                x,
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{time:.3}\">",
                esc(prov),
                self.tests.len(),
                c.failed,
                c.notrun + c.excluded + c.skipped
            );
            for (t, def) in self.tests.iter().enumerate() {
                let run = &self.runs[t][p];
                let _ = write!(
                    x,
                    "    <testcase classname=\"fabtests.{}.{}\" name=\"{}\" time=\"{:.3}\"",
                    esc(prov),
                    esc(&def.set),
                    esc(&def.label()),
                    run.elapsed.as_secs_f64()
                );
                let body = match &run.res {
                    Res::Pass(extra) => extra
                        .as_ref()
                        .map(|e| format!("      <system-out>{}</system-out>\n", esc(e)))
                        .unwrap_or_default(),
                    Res::Fail(w) | Res::Timeout(w) => {
                        let kind = if matches!(run.res, Res::Timeout(_)) { "timeout" } else { "failure" };
                        format!(
                            "      <failure type=\"{kind}\" message=\"{}\">{}</failure>\n",
                            esc(w),
                            esc(&proc_details(run, 20))
                        )
                    }
                    Res::NotRun(w) => format!("      <skipped message=\"notrun: {}\"/>\n", esc(w)),
                    Res::Excluded(w) => format!("      <skipped message=\"excluded by pattern {}\"/>\n", esc(w)),
                    Res::Skipped(w) => format!("      <skipped message=\"{}\"/>\n", esc(w)),
                };
                if body.is_empty() {
                    x.push_str("/>\n");
                } else {
                    x.push_str(">\n");
                    x.push_str(&body);
                    x.push_str("    </testcase>\n");
                }
            }
            x.push_str("  </testsuite>\n");
        }
        x.push_str("</testsuites>\n");
        x
    }
}

/// Command lines, exits and output tails of a run's processes.
fn proc_details(run: &RunOut, lines: usize) -> String {
    let mut out = String::new();
    for p in &run.procs {
        let _ = writeln!(out, "    {}: {}", p.role, p.cmdline);
        let _ = writeln!(out, "        -> {} after {:.1}s", p.status, p.elapsed.as_secs_f64());
        for (name, path) in [("stderr", &p.err), ("stdout", &p.out)] {
            let tail = last_lines(path, lines);
            if !tail.is_empty() {
                let _ = writeln!(out, "        {name}: {}", tail.join("\n                "));
            }
        }
    }
    for n in &run.notes {
        let _ = writeln!(out, "    note: {n}");
    }
    if let Some(p) = run.procs.first() {
        if let Some(dir) = p.out.parent() {
            let stem = p.out.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            let stem = stem.split('.').next().unwrap_or("");
            let _ = writeln!(out, "    logs: {}/{stem}.*", dir.display());
        }
    }
    out
}

/// XML text/attribute escaping (and dropping characters XML 1.0 cannot hold).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            '\n' | '\t' | '\r' => o.push(c),
            c if (c as u32) < 0x20 => {}
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::super::exec::not_started;
    use super::super::script::Kind;
    use super::*;

    #[test]
    fn diffs() {
        let p = Res::Pass(None);
        let f = Res::Fail("x".into());
        let to = Res::Timeout("x".into());
        let ex = Res::Excluded("x".into());
        let nr = Res::NotRun("-FI_ENODATA".into());
        assert_eq!(diff(&p, &f), Diff::PrimaryBetter);
        assert_eq!(diff(&to, &p), Diff::ComparisonBetter);
        assert_eq!(diff(&nr, &p), Diff::ComparisonBetter);
        assert_eq!(diff(&p, &nr), Diff::PrimaryBetter);
        assert_eq!(diff(&p, &p), Diff::Same);
        assert_eq!(diff(&f, &to), Diff::Same);
        assert_eq!(diff(&ex, &ex), Diff::Same);
    }

    #[test]
    fn table_and_junit() {
        let tests = vec![
            TestDef { set: "unit".into(), kind: Kind::Unit, spec: "fi_eq_test".into(), excluded_by: None },
            TestDef { set: "functional".into(), kind: Kind::Cs, spec: "fi_rdm -U".into(), excluded_by: None },
            TestDef {
                set: "functional".into(),
                kind: Kind::Cs,
                spec: "fi_poll".into(),
                excluded_by: Some("poll".into()),
            },
        ];
        let providers = vec!["rshm".to_string(), "shm".to_string()];
        let runs = vec![
            vec![not_started(Res::Pass(None)), not_started(Res::Fail("test exit 1: <bad> & \"x\"".into()))],
            vec![not_started(Res::Timeout("client".into())), not_started(Res::Pass(None))],
            vec![not_started(Res::Excluded("poll".into())), not_started(Res::Excluded("poll".into()))],
        ];
        let r = Results { tests: &tests, providers: &providers, runs, primary: 0, comparison: Some(1) };
        let t = r.table();
        assert!(t.contains("unit/fi_eq_test"), "{t}");
        assert!(t.contains("rshm better") && t.contains("shm better"), "{t}");
        assert_eq!(r.counts(0), Counts { passed: 1, failed: 1, timeouts: 1, excluded: 1, ..Counts::default() });
        let x = r.junit(Duration::from_secs(1));
        assert!(x.contains("<testsuite name=\"rshm\"") && x.contains("<testsuite name=\"shm\""));
        assert!(x.contains("&lt;bad&gt; &amp; &quot;x&quot;"));
        assert!(x.contains("type=\"timeout\""));
        assert_eq!(x.matches("<testcase").count(), 6);
        assert!(r.differences().lines().count() == 2);
    }
}
