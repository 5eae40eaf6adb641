//! Crash durability: a job whose insert was acknowledged survives `kill -9` of the writer.
//!
//! The test binary plays both parts. The parent re-runs itself (`current_exe`) with only the
//! writer test selected and an environment variable naming the database file; the writer
//! inserts jobs and prints `ack <id>` after each insert returns. The parent reads a few hundred
//! acknowledgements, sends SIGKILL, reopens the file and looks for every acknowledged job.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use trainyard_app::ports::JobStore;

use trainyard_app::contract::job;
use trainyard_local::SqliteStore;

/// Set (to a database path) only in the child process.
const WRITER_ENV: &str = "TRAINYARD_SQLITE_CRASH_WRITER";
/// Acknowledgements the parent waits for before it kills the writer.
const ACKS_BEFORE_KILL: usize = 300;
/// The writer stops on its own after this many inserts, should the kill never come.
const WRITER_MAX_JOBS: usize = 200_000;
/// Longest the parent waits for the acknowledgements.
const DEADLINE: Duration = Duration::from_secs(60);

/// The writer's part. Does nothing unless started by
/// [`acknowledged_jobs_survive_the_writer_being_killed`] with [`WRITER_ENV`] set.
#[tokio::test]
async fn crash_writer_role() {
    let Some(path) = std::env::var_os(WRITER_ENV) else {
        return;
    };
    let store = SqliteStore::open(std::path::Path::new(&path)).expect("open");
    // Written straight to the process's stdout (not the test harness's capture), line by line,
    // each only after its insert has returned.
    let mut out = std::io::stdout().lock();
    for n in 0..WRITER_MAX_JOBS {
        let id = format!("job-{n:06}");
        store
            .insert_job(&job(&id).build(), None)
            .await
            .expect("insert");
        writeln!(out, "ack {id}").expect("write ack");
        out.flush().expect("flush ack");
    }
}

#[tokio::test]
async fn acknowledged_jobs_survive_the_writer_being_killed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("crash.sqlite");
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "crash_writer_role",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WRITER_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix("ack ")
                && tx.send(id.to_owned()).is_err()
            {
                break;
            }
        }
    });

    let started = Instant::now();
    let mut acked = Vec::new();
    while acked.len() < ACKS_BEFORE_KILL {
        let left = DEADLINE.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(id) => acked.push(id),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("writer gave {} acks before {e:?}", acked.len());
            }
        }
    }
    child.kill().expect("SIGKILL the writer");
    let status = child.wait().expect("reap the writer");
    assert_eq!(
        status.signal(),
        Some(9),
        "the writer died of SIGKILL, mid-flight: {status:?}"
    );
    // Acks already in the pipe when the kill landed count too: their inserts had returned.
    reader.join().expect("reader thread");
    acked.extend(rx.try_iter());

    let store = SqliteStore::open(&path).expect("reopen after the crash");
    let mut missing = Vec::new();
    for id in &acked {
        if store.get_job(id).await.expect("get").is_none() {
            missing.push(id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged jobs lost, e.g. {:?}",
        missing.len(),
        acked.len(),
        missing.first()
    );
    assert!(acked.len() >= ACKS_BEFORE_KILL);
}
