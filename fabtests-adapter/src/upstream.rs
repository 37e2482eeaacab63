//! `fabtests-adapter upstream`: run the installed upstream fabtests binaries against rshm and
//! shm and fold their results into the same table (part 2 of the issue; not written yet).

pub fn run(args: &[String]) -> i32 {
    let _ = args;
    eprintln!("fabtests-adapter upstream: not implemented yet (part 2: runs installed upstream fabtests binaries)");
    2
}
