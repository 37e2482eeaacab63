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

/// Run `cmd` (from `rerun`), which must pass, and return the line of its output that starts
/// with `marker` (libtest prints the test's name on the same line, before it), from `marker` on.
pub(crate) fn report_line(cmd: &mut std::process::Command, marker: &str) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "the child failed: {out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let at = stdout.find(marker).unwrap_or_else(|| panic!("no report {marker:?} in {stdout}"));
    stdout[at..].lines().next().unwrap().to_owned()
}

/// Install, for this thread, a seccomp filter that fails process_vm_readv and
/// process_vm_writev with EPERM and allows everything else.
#[cfg(target_arch = "x86_64")]
pub(crate) fn refuse_cma_by_seccomp() {
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    let stmt = |code: u32, k: u32| libc::sock_filter { code: code as u16, jt: 0, jf: 0, k };
    let jeq = |k: libc::c_long, jt: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf: 0,
        k: k as u32,
    };
    let load = |at: u32| stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, at);
    let allow = stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW);
    let mut prog = [
        load(4), // seccomp_data.arch
        jeq(AUDIT_ARCH_X86_64.into(), 1),
        allow,
        load(0), // seccomp_data.nr
        jeq(libc::SYS_process_vm_readv, 2),
        jeq(libc::SYS_process_vm_writev, 1),
        allow,
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ];
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
    // SAFETY: prctl with plain integer arguments, and then with a pointer to a filter program
    // that outlives the call (the kernel copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &fprog as *const _), 0);
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn refuse_cma_by_seccomp() {}
