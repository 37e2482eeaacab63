//! What an installed `runfabtests.sh` would run: its bash test arrays, the set names its `-t`
//! option expands, its default timeout, and the exclude file of the provider whose list we follow.
//! Everything is read from the installed files, so the list follows the fabtests version.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// How runfabtests.sh runs a test of a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `unit_test "$test" 0`: one process, `-p prov` appended, SERVER_ADDR/GOOD_ADDR replaced.
    Unit,
    /// `unit_test "$test" 1`: as `Unit`, and it passes only when it exits with FI_ENODATA.
    Neg,
    /// `cs_test`: a server, then (one second later) a client.
    Cs,
    /// `complex_test`: fi_ubertest, a server `-x` and a client `-u <config>`.
    Complex,
    /// `multinode_test "$test" N`: N processes with the same command line.
    Multinode(usize),
}

/// One entry of the list.
#[derive(Clone, Debug)]
pub struct TestDef {
    /// The set it comes from (`unit`, `functional`, `standard`, ...).
    pub set: String,
    pub kind: Kind,
    /// The array entry, as runfabtests.sh matches excludes against it (`fi_rdm_pingpong -k -v`).
    pub spec: String,
    /// The exclude pattern that matched `spec`, if any.
    pub excluded_by: Option<String>,
}

impl TestDef {
    /// The row label: `functional/fi_rdm -U` (negative unit tests get a ` (neg)` mark).
    pub fn label(&self) -> String {
        let neg = if self.kind == Kind::Neg { " (neg)" } else { "" };
        format!("{}/{}{neg}", self.set, self.spec)
    }

    /// The executable (first word of `spec`).
    pub fn exe(&self) -> &str {
        self.spec.split_whitespace().next().unwrap_or("")
    }
}

/// What we read from runfabtests.sh.
#[derive(Debug, Default)]
pub struct Script {
    pub path: PathBuf,
    /// Every top-level `name=( ... )` array, in order of definition.
    pub arrays: BTreeMap<String, Vec<String>>,
    /// `TIMEOUT_VAL` (seconds), the per-process `timeout` it wraps every command in.
    pub timeout: Option<u64>,
    /// What `-t all` expands to.
    pub all_sets: Vec<String>,
    /// What `-t quick` (its default) expands to.
    pub quick_sets: Vec<String>,
    /// Process count of `multinode_test "$test" N`.
    pub multinode_procs: usize,
}

/// The installed `runfabtests.sh`: `<bin>/runfabtests.sh` (make install puts it there), else
/// `<share>/runfabtests.sh`.
pub fn find_script(bin: &Path, share: &Path) -> Option<PathBuf> {
    [bin.join("runfabtests.sh"), share.join("runfabtests.sh")].into_iter().find(|p| p.is_file())
}

impl Script {
    pub fn load(path: &Path) -> Result<Script, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut s = Script::parse(&text);
        s.path = path.to_path_buf();
        if s.arrays.is_empty() {
            return Err(format!("{} defines no test arrays", path.display()));
        }
        Ok(s)
    }

    pub fn parse(text: &str) -> Script {
        let mut s = Script { arrays: parse_arrays(text), multinode_procs: 3, ..Script::default() };
        for line in text.lines() {
            let t = line.trim();
            if let Some(v) = t.strip_prefix("declare TIMEOUT_VAL=").or_else(|| t.strip_prefix("TIMEOUT_VAL=")) {
                s.timeout = v.trim_matches(|c| c == '"' || c == '\'').parse().ok();
            }
            if let Some(k) = t.find("s/all/") {
                if let Some(exp) = t[k + 6..].split('/').next() {
                    s.all_sets = split_sets(exp);
                }
            }
            if let Some(k) = t.find("multinode_test \"$test\"") {
                if let Some(n) = t[k + 22..].split_whitespace().next().and_then(|n| n.parse().ok()) {
                    s.multinode_procs = n;
                }
            }
        }
        // `if [[ $1 == "quick" ]]; then` followed by `local -r tests="unit functional short"`.
        let lines: Vec<&str> = text.lines().collect();
        if let Some(i) = lines.iter().position(|l| l.contains("== \"quick\"")) {
            for l in lines.iter().skip(i).take(4) {
                if let Some(k) = l.find("tests=\"") {
                    if let Some(v) = l[k + 7..].split('"').next() {
                        s.quick_sets = split_sets(v);
                        break;
                    }
                }
            }
        }
        // The values of fabtests 1.17, should a later script spell these differently.
        if s.all_sets.is_empty() {
            s.all_sets = split_sets("unit,regression,functional,standard,complex,multinode");
        }
        if s.quick_sets.is_empty() {
            s.quick_sets = split_sets("unit functional short");
        }
        s
    }

    /// The arrays a set's tests come from, with how they are run (runfabtests.sh's `main`).
    pub fn arrays_of(&self, set: &str) -> Vec<(String, Kind)> {
        match set {
            "unit" => vec![("unit_tests".into(), Kind::Unit), ("neg_unit_tests".into(), Kind::Neg)],
            "regression" => vec![("regression_tests".into(), Kind::Unit)],
            "complex" => vec![("complex_tests".into(), Kind::Complex)],
            "multinode" => vec![("multinode_tests".into(), Kind::Multinode(self.multinode_procs))],
            other => vec![(format!("{other}_tests"), Kind::Cs)],
        }
    }

    /// Expand `-t`-style input (`all`, `quick`, `verify` or a comma list) into set names and the
    /// ubertest config name runfabtests.sh would use (`quick`, `all` or `verify`).
    pub fn expand_sets(&self, input: &str) -> (Vec<String>, &'static str) {
        match input {
            "quick" => (self.quick_sets.clone(), "quick"),
            "verify" => (vec!["complex".into()], "verify"),
            _ => {
                let mut sets = Vec::new();
                for s in split_sets(input) {
                    if s == "all" {
                        sets.extend(self.all_sets.iter().cloned());
                    } else {
                        sets.push(s);
                    }
                }
                let complex = if input == "all" || input == "complex" { "all" } else { "quick" };
                (sets, complex)
            }
        }
    }

    /// The list for `sets`, each test marked with the exclude pattern that drops it.
    pub fn tests(&self, sets: &[String], excludes: &[Exclude]) -> Result<Vec<TestDef>, String> {
        let mut out = Vec::new();
        for set in sets {
            for (array, kind) in self.arrays_of(set) {
                let Some(entries) = self.arrays.get(&array) else {
                    if kind == Kind::Neg {
                        continue; // optional
                    }
                    return Err(format!("{} has no array {array} (test set {set})", self.path.display()));
                };
                for spec in entries {
                    let excluded_by = excludes.iter().find(|e| e.is_match(spec)).map(|e| e.pattern.clone());
                    out.push(TestDef { set: set.clone(), kind, spec: spec.clone(), excluded_by });
                }
            }
        }
        Ok(out)
    }
}

fn split_sets(s: &str) -> Vec<String> {
    s.split([',', ' ']).filter(|x| !x.is_empty()).map(str::to_string).collect()
}

/// Top-level bash arrays `name=( "a b" "c" ... )` (a line that starts with `name=(`; entries may
/// span lines, `\` continuations and `#` comments are skipped).
pub fn parse_arrays(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let b = text.as_bytes();
    let mut pos = 0;
    while pos < b.len() {
        let line_end = text[pos..].find('\n').map_or(b.len(), |k| pos + k);
        let line = &text[pos..line_end];
        let t = line.trim_start();
        let start_of_t = pos + (line.len() - t.len());
        let name_len = t.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
        if name_len > 0 && !t.as_bytes()[0].is_ascii_digit() && t[name_len..].starts_with("=(") {
            let name = t[..name_len].to_string();
            let (entries, end) = parse_array_body(text, start_of_t + name_len + 2);
            out.entry(name).or_insert(entries);
            pos = end;
            continue;
        }
        pos = line_end + 1;
    }
    out
}

/// Words of an array body starting at `i` (just after `(`); returns them and the index after `)`.
fn parse_array_body(text: &str, mut i: usize) -> (Vec<String>, usize) {
    let b = text.as_bytes();
    let mut words = Vec::new();
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'\\' => i += 2,
            b')' => return (words, i + 1),
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            _ => {
                let mut w = String::new();
                while i < b.len() && !matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | b')') {
                    match b[i] {
                        q @ (b'"' | b'\'') => {
                            i += 1;
                            let start = i;
                            while i < b.len() && b[i] != q {
                                if q == b'"' && b[i] == b'\\' {
                                    i += 1;
                                }
                                i += 1;
                            }
                            w.push_str(&text[start..i.min(b.len())].replace("\\\"", "\""));
                            i += 1;
                        }
                        _ => {
                            let start = i;
                            while i < b.len() && !matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | b')' | b'"' | b'\'') {
                                i += 1;
                            }
                            w.push_str(&text[start..i]);
                        }
                    }
                }
                words.push(w);
            }
        }
    }
    (words, i)
}

/// One line of an exclude file: a POSIX extended regex, matched as bash's `[[ $test =~ $re ]]`.
pub struct Exclude {
    pub pattern: String,
    re: Box<libc::regex_t>,
}

impl Exclude {
    pub fn new(pattern: &str) -> Result<Exclude, String> {
        let c = CString::new(pattern).map_err(|_| format!("NUL in pattern {pattern:?}"))?;
        // SAFETY: regex_t is a plain C struct that regcomp fully initializes; zeroes are a valid
        // bit pattern for it until then.
        let mut re: Box<libc::regex_t> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `re` is valid writable storage, `c` a NUL-terminated string.
        let rc = unsafe { libc::regcomp(&mut *re, c.as_ptr(), libc::REG_EXTENDED | libc::REG_NOSUB) };
        if rc != 0 {
            return Err(format!("bad exclude pattern {pattern:?} (regcomp {rc})"));
        }
        Ok(Exclude { pattern: pattern.to_string(), re })
    }

    pub fn is_match(&self, s: &str) -> bool {
        let Ok(c) = CString::new(s) else { return false };
        // SAFETY: `re` was compiled by regcomp; REG_NOSUB needs no match array.
        unsafe { libc::regexec(&*self.re, c.as_ptr(), 0, std::ptr::null_mut(), 0) == 0 }
    }
}

impl Drop for Exclude {
    fn drop(&mut self) {
        // SAFETY: `re` was compiled by regcomp (new() returns only then) and is freed once.
        unsafe { libc::regfree(&mut *self.re) };
    }
}

/// An exclude file as runfabtests.sh reads it: one pattern a line, surrounding blanks trimmed;
/// a line holding `#` anywhere, or only blanks, is ignored.
pub fn read_excludes(path: &Path) -> Result<Vec<Exclude>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_excludes(&text)
}

pub fn parse_excludes(text: &str) -> Result<Vec<Exclude>, String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.contains('#')).map(Exclude::new).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = r#"
declare TIMEOUT_VAL="120"
neg_unit_tests=(
	"fi_dgram g00n13s"
	"fi_rdm g00n13s"
)

functional_tests=(
	"fi_av_xfer -e rdm"
	"fi_rdm -U"
	# a comment
	"fi_poll -t queue"
)
prov_efa_tests=( \
	"fi_efa_rnr_read_cq_error"
	"fi_efa_rnr_queue_resend -c 0 -S 1048576"
)
unit_tests=(
	"fi_getinfo_test -s SERVER_ADDR GOOD_ADDR"
	"fi_eq_test"
)
short=( a 'b c' "d\"e" )
function main {
	local c_out_arr=()
	if [[ $1 == "quick" ]]; then
		local -r tests="unit functional short"
	else
		local -r tests=$(echo $1 | sed 's/all/unit,regression,functional/g' | tr ',' ' ')
	fi
	multinode_test "$test" 4
}
"#;

    #[test]
    fn arrays() {
        let s = Script::parse(SCRIPT);
        assert_eq!(s.arrays["functional_tests"], vec!["fi_av_xfer -e rdm", "fi_rdm -U", "fi_poll -t queue"]);
        assert_eq!(s.arrays["neg_unit_tests"].len(), 2);
        assert_eq!(s.arrays["prov_efa_tests"].len(), 2);
        assert_eq!(s.arrays["short"], vec!["a", "b c", "d\"e"]);
        assert!(!s.arrays.contains_key("c_out_arr"));
        assert_eq!(s.timeout, Some(120));
        assert_eq!(s.all_sets, vec!["unit", "regression", "functional"]);
        assert_eq!(s.quick_sets, vec!["unit", "functional", "short"]);
        assert_eq!(s.multinode_procs, 4);
        assert_eq!(s.expand_sets("all").1, "all");
        assert_eq!(s.expand_sets("unit,complex").1, "quick");
        assert_eq!(s.expand_sets("verify").0, vec!["complex"]);
    }

    #[test]
    fn excludes() {
        let ex = parse_excludes("# c\n^fi_msg\n-e msg\n\n  poll  \nx # y\n-S\n").expect("patterns");
        assert_eq!(ex.iter().map(|e| e.pattern.as_str()).collect::<Vec<_>>(), vec!["^fi_msg", "-e msg", "poll", "-S"]);
        let s = Script::parse(SCRIPT);
        let t = s.tests(&["unit".into(), "functional".into()], &ex).expect("list");
        let get = |spec: &str| t.iter().find(|x| x.spec == spec).expect(spec);
        assert!(get("fi_poll -t queue").excluded_by.as_deref() == Some("poll"));
        assert!(get("fi_rdm -U").excluded_by.is_none());
        assert_eq!(get("fi_rdm g00n13s").kind, Kind::Neg);
        assert!(Exclude::new("^fi_msg").expect("re").is_match("fi_msg_pingpong -k"));
        assert!(!Exclude::new("^fi_msg").expect("re").is_match("xfi_msg"));
        assert!(Exclude::new("rma.*write").expect("re").is_match("fi_rma_bw -e rdm -o write"));
        assert!(s.tests(&["bogus".into()], &ex).is_err());
    }
}
