//! A real PostgreSQL server for one test: `initdb` and `pg_ctl` from the machine's server
//! binaries into a temporary folder, listening on 127.0.0.1 on a free port, stopped and
//! removed on drop. As root (CI), the server runs as the `postgres` user, since PostgreSQL
//! refuses to run as root. `.ci/run` installs Debian's `postgresql` when the binaries are
//! missing; without them a test fails in CI and says so elsewhere. Test support: it panics
//! on any failure, as a test should.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running PostgreSQL server of one test's own, stopped and removed on drop.
pub struct PgServer {
    /// The server's `postgres` database, as user `toolrail` without a password
    /// (`postgres://toolrail@127.0.0.1:PORT/postgres`); [`PgServer::fresh_database`] gives
    /// one of a test's own.
    pub url: String,
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

/// The folder holding `initdb` and `pg_ctl`: the newest of Debian's `/usr/lib/postgresql/*/bin`
/// (`.ci/run` installs `postgresql` when there is none).
fn binaries() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

fn run(program: &Path, args: &[&str], as_postgres: bool) {
    let mut command = if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    };
    let output = command.args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl PgServer {
    /// A fresh server, or `None` outside CI when the machine has no PostgreSQL.
    pub fn start() -> Option<Self> {
        let Some(bin) = binaries() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "PostgreSQL's server binaries are missing: .ci/run installs `postgresql`"
            );
            eprintln!("no PostgreSQL server binaries here: not run");
            return None;
        };
        let as_postgres = nix_is_root();
        let dir = tempfile::tempdir().unwrap();
        if as_postgres {
            let status = Command::new("chown")
                .arg("postgres")
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let data = dir.path().join("data");
        let data = data.to_str().unwrap();
        run(
            &bin.join("initdb"),
            &[
                "-D",
                data,
                "-A",
                "trust",
                "-U",
                "toolrail",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            as_postgres,
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let socket_dir = dir.path().to_str().unwrap();
        let log = dir.path().join("server.log");
        let options = format!("-p {port} -k {socket_dir} -h 127.0.0.1 -c max_connections=60");
        run(
            &bin.join("pg_ctl"),
            &[
                "-D",
                data,
                "-l",
                log.to_str().unwrap(),
                "-o",
                &options,
                "-w",
                "start",
            ],
            as_postgres,
        );
        Some(Self {
            url: format!("postgres://toolrail@127.0.0.1:{port}/postgres"),
            dir,
            bin,
            as_postgres,
        })
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // A paused postmaster would not stop: it is let go first (harmless when running).
        let pid = std::fs::read_to_string(self.dir.path().join("data").join("postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<u32>().ok())
            .filter(|pid| *pid > 0);
        if let Some(pid) = pid {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(pid.to_string())
                .status();
        }
        let data = self.dir.path().join("data");
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            command
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        let _ = command
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// A connection a test keeps to its server's `postgres` database, for what workers must not
/// do themselves: `pg_terminate_backend` of their connections, `pg_stat_activity`. Open it
/// before pausing the server ([`PgServer::pause`]): a stopped postmaster takes no new
/// connection, and the backends of open ones keep answering.
pub struct Admin(postgres::Client);

impl Admin {
    /// Runs `sql` (one statement, no parameters) and returns its rows as text, `None` for
    /// NULL.
    pub fn rows(&mut self, sql: &str) -> Vec<Vec<Option<String>>> {
        let mut rows = Vec::new();
        for message in self.0.simple_query(sql).unwrap() {
            if let postgres::SimpleQueryMessage::Row(row) = message {
                rows.push(
                    (0..row.len())
                        .map(|index| row.get(index).map(str::to_owned))
                        .collect(),
                );
            }
        }
        rows
    }
}

impl PgServer {
    /// A new admin connection. The blocking client runs a runtime of its own: call this
    /// (and use the connection) off any async runtime's threads.
    pub fn admin(&self) -> Admin {
        Admin(postgres::Client::connect(&self.url, postgres::NoTls).unwrap())
    }

    /// The postmaster's process id (the first line of `postmaster.pid`).
    pub fn postmaster_pid(&self) -> u32 {
        let pid_file = self.dir.path().join("data").join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    /// `pg_ctl restart -m fast`: every connection is ended, the server stops and starts again
    /// on the same port with the same options; returns once it accepts connections.
    pub fn restart(&self) {
        let data = self.dir.path().join("data");
        let log = self.dir.path().join("server.log");
        run(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-m",
                "fast",
                "-w",
                "restart",
            ],
            self.as_postgres,
        );
    }

    /// Stops the postmaster (SIGSTOP): it accepts TCP connections into its backlog and
    /// answers none, while the backends of connections made before keep working.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused postmaster go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.postmaster_pid().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} of the postmaster failed");
    }
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}

impl PgServer {
    /// The URL of a new, empty database on this server.
    pub fn fresh_database(&self) -> String {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
        // The blocking client runs a runtime of its own: not on a test's runtime thread.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let mut client = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
                    client
                        .batch_execute(&format!("CREATE DATABASE {name}"))
                        .unwrap();
                })
                .join()
                .unwrap();
        });
        self.url.replace("/postgres", &format!("/{name}"))
    }
}
