//! The test binary run again as a child, for tests of what is set once per process (signal
//! handlers, the CMA probe, a seccomp filter): each case gets a process of its own.

/// A command that runs only the test `path` (`module::tests::name`) of this binary, alone, with
/// `var` set to `value`: that test does its work only where `var` is set, and passes at once in
/// an ordinary run.
pub(crate) fn rerun(path: &str, var: &str, value: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", path, "--nocapture", "--test-threads=1"]).env(var, value);
    cmd
}
