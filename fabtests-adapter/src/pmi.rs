//! Out-of-band channel between the ranks of a scenario and the suite process that started them
//! (a tiny PMI, like fabtests' socket exchange): one text line per message over the rank's
//! stdin/stdout.
//!
//! Rank -> coordinator:
//!   `STEP <text>`            progress marker, shown when a scenario times out
//!   `AG <key> <value>`       all-gather: answered with `AG <key> <v0> .. <vn-1>` once every rank
//!                            sent the same key (a barrier is an all-gather of "-")
//!   `SET <key> <value>`      publish a value (no reply)
//!   `GET <key>`              answered at once with `VAL <key> <value>` or `VAL <key> ?`
//!   `KILLME`                 the coordinator SIGKILLs this rank (a peer that dies)
//!   `WAITEXIT <r>`           answered with `EXITED <r>` once rank r has exited
//!   `RESULT PASS|FAIL <why>|NOS <code> <why>|ABORTED <why>`
//! Coordinator -> rank: the answers above, or `ABORT <why>` when the scenario cannot go on.

use crate::outcome::{TResult, TestErr};
use std::io::{BufRead, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// Longest any out-of-band wait may take (the coordinator's scenario deadline is shorter).
const OOB_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Pmi {
    rx: Receiver<String>,
    out: std::io::Stdout,
    pub nprocs: usize,
    seq: u64,
}

/// Text safe to put on one protocol line.
pub fn oneline(s: &str) -> String {
    s.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect()
}

pub fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s == "-" {
        return Some(Vec::new());
    }
    if s.len() & 1 == 1 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

/// A progress marker from anywhere in a rank (the suite shows the last one when a rank hangs
/// or crashes).
pub fn step(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "STEP {}", oneline(text));
    let _ = o.flush();
}

impl Pmi {
    pub fn connect(nprocs: usize) -> Pmi {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Pmi { rx, out: std::io::stdout(), nprocs, seq: 0 }
    }

    pub fn send(&mut self, line: &str) {
        let mut o = self.out.lock();
        // A broken pipe means the coordinator is gone; the next wait reports it.
        let _ = writeln!(o, "{}", oneline(line));
        let _ = o.flush();
    }

    pub fn step(&mut self, text: &str) {
        step(text);
    }

    /// Wait for a line starting with `prefix`, driving `progress` (if any) meanwhile.
    fn wait_line(&mut self, prefix: &str, mut progress: Option<&mut dyn FnMut() -> TResult>) -> TResult<String> {
        let deadline = Instant::now() + OOB_TIMEOUT;
        loop {
            let line = if let Some(p) = progress.as_mut() {
                match self.rx.try_recv() {
                    Ok(l) => Some(l),
                    Err(TryRecvError::Empty) => {
                        p()?;
                        std::thread::yield_now();
                        None
                    }
                    Err(TryRecvError::Disconnected) => {
                        return Err(TestErr::Aborted("coordinator closed the channel".into()))
                    }
                }
            } else {
                match self.rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(l) => Some(l),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        return Err(TestErr::Aborted("coordinator closed the channel".into()))
                    }
                }
            };
            if let Some(l) = line {
                if let Some(why) = l.strip_prefix("ABORT ") {
                    return Err(TestErr::Aborted(why.to_string()));
                }
                if l.starts_with(prefix) {
                    return Ok(l);
                }
            }
            if Instant::now() > deadline {
                return Err(TestErr::Fail(format!("timeout in out-of-band wait for {prefix}")));
            }
        }
    }

    /// All-gather one token per rank (no spaces); returns them by rank.
    pub fn allgather_with(
        &mut self,
        value: &str,
        progress: Option<&mut dyn FnMut() -> TResult>,
    ) -> TResult<Vec<String>> {
        self.seq += 1;
        let key = format!("ag{}", self.seq);
        assert!(!value.contains(' ') && !value.is_empty());
        self.send(&format!("AG {key} {value}"));
        let l = self.wait_line(&format!("AG {key} "), progress)?;
        let vals: Vec<String> = l.split(' ').skip(2).map(str::to_string).collect();
        if vals.len() != self.nprocs {
            return Err(TestErr::Fail(format!("all-gather returned {} values for {} ranks", vals.len(), self.nprocs)));
        }
        Ok(vals)
    }

    pub fn allgather(&mut self, value: &str) -> TResult<Vec<String>> {
        self.allgather_with(value, None)
    }

    pub fn barrier(&mut self) -> TResult {
        self.allgather("-").map(|_| ())
    }

    /// Barrier that keeps driving `progress` (manual-progress providers need it).
    pub fn barrier_with(&mut self, progress: &mut dyn FnMut() -> TResult) -> TResult {
        self.allgather_with("-", Some(progress)).map(|_| ())
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.send(&format!("SET {key} {value}"));
    }

    pub fn get_with(&mut self, key: &str, progress: Option<&mut dyn FnMut() -> TResult>) -> TResult<Option<String>> {
        self.send(&format!("GET {key}"));
        let l = self.wait_line(&format!("VAL {key} "), progress)?;
        let v = l.split(' ').nth(2).unwrap_or("?");
        Ok(if v == "?" { None } else { Some(v.to_string()) })
    }

    /// Poll `key` until some rank sets it, driving `progress` meanwhile.
    pub fn wait_key_with(&mut self, key: &str, progress: &mut dyn FnMut() -> TResult) -> TResult<String> {
        let deadline = Instant::now() + OOB_TIMEOUT;
        loop {
            if let Some(v) = self.get_with(key, Some(&mut *progress))? {
                return Ok(v);
            }
            for _ in 0..20 {
                progress()?;
            }
            if Instant::now() > deadline {
                return Err(TestErr::Fail(format!("timeout waiting for out-of-band key {key}")));
            }
        }
    }

    /// Ask the coordinator to SIGKILL this process (a peer that dies without cleaning up).
    pub fn killme(&mut self) -> ! {
        self.send("KILLME");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Wait until rank `r` has exited, driving `progress` meanwhile.
    pub fn wait_exit_with(&mut self, r: usize, progress: &mut dyn FnMut() -> TResult) -> TResult {
        self.send(&format!("WAITEXIT {r}"));
        self.wait_line(&format!("EXITED {r}"), Some(progress)).map(|_| ())
    }

    pub fn result(&mut self, r: &TResult) {
        let line = match r {
            Ok(()) => "RESULT PASS".to_string(),
            Err(TestErr::Fail(why)) => format!("RESULT FAIL {why}"),
            Err(TestErr::Nos(code, why)) => format!("RESULT NOS {code} {why}"),
            Err(TestErr::Aborted(why)) => format!("RESULT ABORTED {why}"),
        };
        self.send(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_roundtrip() {
        for v in [vec![], vec![0u8], vec![0xde, 0xad, 0xbe, 0xef, 0x00, 0x7f]] {
            assert_eq!(unhex(&hex(&v)).as_deref(), Some(&v[..]));
        }
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn oneline_strips_newlines() {
        assert_eq!(oneline("a\nb\rc"), "a b c");
    }
}
