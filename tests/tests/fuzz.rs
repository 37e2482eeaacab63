//! Garbage commands from another process: a live receiver process counts and survives
//! thousands of random command entries pushed into its queue, then still receives real
//! messages intact.

use rshm_tests::*;

const PEER: &str = env!("CARGO_BIN_EXE_rshm-peer");

/// Fuzz receiver R from a separate process, then send it `rounds` of `sizes` for real.
fn fuzz_then_send(tag: &str, fuzz_args: &[&str], sender_args: &[&str], sizes: &[usize], rounds: u64) {
    let mut sc = Scenario::new(PEER, tag);
    let recv = sc.name("r");
    let expect = (sizes.len() as u64 * rounds).to_string();
    let r = sc.spawn("receiver", &["node", "--name", &recv, "--expect", &expect]);
    let dl = deadline();
    sc.child(r).expect_line("READY", dl);

    let mut args = vec!["fuzz", "--target", &recv];
    args.extend(fuzz_args);
    let f = sc.spawn("fuzzer", &args);
    let line = sc.child(f).expect_line("FUZZED", dl);
    let pushed = kv_u64(&parse_kv(&line), "pushed");
    sc.child(f).finish(dl);

    let s = sc.name("s");
    let sizes_arg = sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let rounds_arg = rounds.to_string();
    let mut args =
        vec!["node", "--name", &s, "--id", "3", "--to", &recv, "--sizes", &sizes_arg, "--count", &rounds_arg];
    args.extend(sender_args);
    let c = sc.spawn("sender", &args);

    let line = sc.child(r).expect_line("RESULT", dl);
    println!("receiver after {pushed} random commands: {line}");
    let kv = parse_kv(&line);
    let ctx = || format!("{line}\n{}", sc.transcripts());
    assert_eq!(kv_u64(&kv, "received"), sizes.len() as u64 * rounds, "{}", ctx());
    assert_eq!(kv_u64(&kv, "bad"), 0, "{}", ctx());
    assert_eq!(kv_u64(&kv, "dups"), 0, "{}", ctx());
    assert_eq!(kv["senders"], format!("3:{}", sizes.len() as u64 * rounds), "{}", ctx());
    let corrupt = kv_u64(&kv, "corrupt");
    assert!(corrupt > 0 && corrupt <= pushed, "{}", ctx());
    let line = sc.child(c).expect_line("RESULT", dl);
    assert_eq!(kv_u64(&parse_kv(&line), "send_errors"), 0, "{line}");
    sc.child(c).finish(dl);
    sc.child(r).finish(dl);
}

/// Random bytes, random op/proto/src/len, as the in-process unit test does, but from another
/// process into a receiver that is progressing meanwhile.
#[test]
fn random_commands_from_another_process_are_counted_and_survived() {
    fuzz_then_send("fz", &["--count", "3000", "--seed", "12345"], &[], SIZES_UP_TO_1M, 1);
}

/// Plausible garbage (valid ops and protocols, small buffer indices, sane lengths) from a
/// process that never connected; afterwards a real sender streams inject and SAR messages, which
/// must all arrive intact.
#[test]
fn plausible_commands_from_a_stranger_do_not_corrupt_later_messages() {
    fuzz_then_send(
        "fzb",
        &["--count", "3000", "--seed", "777", "--bias"],
        &["--sar"],
        &[300, 4096, 70_000, 200_000],
        50,
    );
}
