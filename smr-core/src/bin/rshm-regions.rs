//! rshm-regions: list the rshm regions in /dev/shm and remove those whose owner has died.
//!
//! A file counts as an rshm region when its first 8 bytes are the region magic, or when its name
//! starts with `rshm_` (a creation that died before writing the header). Every other file in
//! /dev/shm belongs to some other program and is never touched.

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    cli::main()
}

/// Under `--cfg loom` the engine builds only its lock-free algorithms; there is nothing to inspect.
#[cfg(loom)]
fn main() {}

#[cfg(not(loom))]
mod cli {
    use smr_core::layout::MAGIC;
    use smr_core::reap::unlink_if_dead;
    use smr_core::region::{inspect, Occupant};
    use smr_core::shm::SHM_DIR;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    use std::process::ExitCode;

    const NAME_PREFIX: &str = "rshm_";
    const USAGE: &str = "\
usage: rshm-regions [list [--all] [--fail-if-any] | clean | --help]

  list        show every rshm region in /dev/shm: name, size, owner pid and status
              (alive, dead, creating; unknown if unreadable) (default)
  list --all  also show the other files in /dev/shm: rshm's CPU marks (kept: one word per
              CPU, see smr_core::cpu_marks) as cpu-marks, the rest as not-rshm
  list --fail-if-any
              also name, on stderr, each rshm region owned by this user (whatever its
              status) and exit 3 if there is any: after a test run, every one is a leak
  clean       unlink the regions whose owner process is dead, and say which
  --help      show this text

exit status: 0 ok, 1 error, 2 usage error, 3 regions found with --fail-if-any";

    /// One file in /dev/shm, as far as we could tell what it is.
    struct Entry {
        name: String,
        size: u64,
        inode: u64,
        /// The file's owner.
        uid: u32,
        /// `None` when the file is not an rshm region.
        occupant: Option<Result<Occupant, smr_core::Error>>,
    }

    /// Exit status of `list --fail-if-any` when it found regions.
    const FOUND: u8 = 3;

    pub fn main() -> ExitCode {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            [] => list(false, false).map(drop),
            ["list", ref flags @ ..] if flags.iter().all(|f| ["--all", "--fail-if-any"].contains(f)) => {
                let leaked = list(flags.contains(&"--all"), flags.contains(&"--fail-if-any"));
                match leaked {
                    Ok(0) => Ok(()),
                    Ok(n) => {
                        eprintln!("rshm-regions: {n} rshm region(s) of this user exist (--fail-if-any)");
                        return ExitCode::from(FOUND);
                    }
                    Err(e) => Err(e),
                }
            }
            ["clean"] => clean(),
            ["--help"] | ["-h"] => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => {
                eprintln!("rshm-regions: unexpected arguments: {}\n{USAGE}", args.join(" "));
                return ExitCode::from(2);
            }
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(msg) => {
                eprintln!("rshm-regions: {msg}");
                ExitCode::from(1)
            }
        }
    }

    /// Print the table; with `leaks`, also name each rshm region of this user on stderr. Returns
    /// how many were named.
    fn list(all: bool, leaks: bool) -> Result<usize, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let mut leaked = 0;
        println!("{:<40} {:>12} {:>8}  STATUS", "NAME", "SIZE", "PID");
        for entry in scan()? {
            let (pid, status) = match &entry.occupant {
                None if !all => continue,
                // The CPU marks (`smr_core::cpu_marks`): rshm's, but no region, and kept.
                None if entry.name.starts_with(smr_core::cpu_marks::FILE_PREFIX) => ("-".to_string(), "cpu-marks"),
                None => ("-".to_string(), "not-rshm"),
                Some(Ok(Occupant::Alive(who))) => (who.pid.to_string(), "alive"),
                Some(Ok(Occupant::Dead(Some(who)))) => (who.pid.to_string(), "dead"),
                Some(Ok(Occupant::Dead(None))) => ("-".to_string(), "dead"),
                Some(Ok(Occupant::Creating)) => ("-".to_string(), "creating"),
                Some(Err(e)) => {
                    eprintln!("rshm-regions: {}: {e}", entry.name);
                    ("-".to_string(), "unknown")
                }
            };
            println!("{:<40} {:>12} {:>8}  {status}", entry.name, entry.size, pid);
            if leaks && entry.occupant.is_some() && entry.uid == me {
                eprintln!("rshm-regions: leaked region {} ({} bytes, pid {pid}, {status})", entry.name, entry.size);
                leaked += 1;
            }
        }
        Ok(leaked)
    }

    fn clean() -> Result<(), String> {
        let mut failures = 0;
        let mut removed = 0;
        for entry in scan()? {
            let Some(Ok(Occupant::Dead(owner))) = &entry.occupant else {
                continue;
            };
            let why = match owner {
                Some(who) => format!("owner pid {} is dead", who.pid),
                None => "no header, left by a failed creation".to_string(),
            };
            // Between our look and the unlink, another process may have reclaimed the name and
            // created a fresh region: unlinked only if it is still the same file and still dead.
            match unlink_if_dead(&entry.name, entry.inode) {
                Ok(false) => {}
                Ok(true) => {
                    println!("removed {} ({} bytes, {why})", entry.name, entry.size);
                    removed += 1;
                }
                Err(e) => {
                    eprintln!("rshm-regions: cannot remove {}: {e}", entry.name);
                    failures += 1;
                }
            }
        }
        if removed == 0 && failures == 0 {
            println!("no dead regions");
        }
        match failures {
            0 => Ok(()),
            n => Err(format!("{n} dead region(s) could not be removed")),
        }
    }

    /// Every regular file in /dev/shm, sorted by name, with its liveness if it is an rshm region.
    fn scan() -> Result<Vec<Entry>, String> {
        let dir = std::fs::read_dir(SHM_DIR).map_err(|e| format!("cannot read {SHM_DIR}: {e}"))?;
        let mut entries = Vec::new();
        for dirent in dir {
            let dirent = dirent.map_err(|e| format!("cannot read {SHM_DIR}: {e}"))?;
            let Ok(name) = dirent.file_name().into_string() else {
                continue;
            };
            let Ok(meta) = dirent.metadata() else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let is_rshm = name.starts_with(NAME_PREFIX) || has_magic(&dirent.path());
            let occupant = is_rshm.then(|| inspect(&name));
            entries.push(Entry { name, size: meta.len(), inode: meta.ino(), uid: meta.uid(), occupant });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// True when the file begins with the rshm region magic. Unreadable files are not ours.
    fn has_magic(path: &std::path::Path) -> bool {
        let mut first = [0u8; 8];
        std::fs::File::open(path)
            .and_then(|mut file| file.read_exact(&mut first))
            .is_ok_and(|()| u64::from_le_bytes(first) == MAGIC)
    }
}
