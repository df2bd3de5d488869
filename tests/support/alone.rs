//! Tests that measure their own process (its CPU time, open files, heap or
//! log subscriber) and so must not share it with the binary's other tests:
//! each starts with `if !alone!(its_name) { return ...; }`, which runs this
//! binary again filtered to exactly that test, and passes when that run
//! ran it and it passed.

use std::process::{Command, Stdio};

/// Set in the child run: the one test it is for.
const ALONE: &str = "TTS_RT_TEST_ALONE";

/// `alone!(test_fn)`: true in the process that is to run the test's body
/// (a child of its own); elsewhere runs that child, forwards the test's own
/// output and answers false (a failed child fails the test).
macro_rules! alone {
    ($test:ident) => {
        $crate::alone::here(module_path!(), stringify!($test))
    };
}
pub(crate) use alone;

pub fn here(module: &str, test: &str) -> bool {
    // libtest's name: the module path without the crate's own name.
    let module = module.split_once("::").map_or("", |(_, m)| m);
    let name = format!("{module}::{test}");
    if std::env::var(ALONE).is_ok_and(|v| v == name) {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args([&name, "--exact", "--include-ignored", "--nocapture"])
        // More than one thread: libtest then prints a test's "... ok" line
        // whole at its end, apart from the test's own output.
        .args(["--test-threads", "2"])
        .env(ALONE, &name)
        .stdin(Stdio::null())
        .output()
        .expect("run this test binary again");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed;"),
        "{name} alone: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    // The test's own lines, without the child's test-harness lines.
    let harness = |l: &str| {
        l.is_empty()
            || l.starts_with("running ")
            || l.starts_with("test result: ")
            || l == format!("test {name} ... ok")
    };
    for l in stdout.lines().filter(|l| !harness(l)) {
        println!("{l}");
    }
    eprint!("{stderr}");
    false
}
