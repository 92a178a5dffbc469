//! What toolrail's tests and benches share, in a leaf crate that depends on none of
//! toolrail's own, so any crate's tests may use it without building the layers above:
//! a real PostgreSQL server for a test ([`pg`]), the process table ([`processes`]), a
//! scripted model server ([`http`]), the benches' `BENCH_ROW` lines and statistics
//! ([`bench`](mod@bench)), a counting allocator ([`alloc`]), and a seeded generator for
//! randomized tests ([`rng`]).
//!
//! # Examples
//!
//! What a test of a kill path checks: a process it started is in the process table while
//! it lives, and gone once it was killed and reaped.
//!
//! ```
//! use std::io::{BufRead, BufReader};
//! use std::process::{Command, Stdio};
//!
//! use toolrail_test_support::processes::live_with;
//!
//! // A name no other process has, to find this one by (`$0` of the script).
//! let name = format!("toolrail-example-{}", std::process::id());
//! let mut child = Command::new("sh")
//!     .args(["-c", "echo ready && read -r _", &name])
//!     .stdin(Stdio::piped()) // `read` waits on it; it closes if this test dies
//!     .stdout(Stdio::piped())
//!     .spawn()?;
//! // Once the script speaks, its command line is in place: `spawn` can return before that.
//! let mut ready = String::new();
//! BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut ready)?;
//! let needles = [name.clone()];
//! let expected = format!("{}: sh -c echo ready && read -r _ {name} ", child.id());
//! assert_eq!(live_with(&needles), [expected]);
//!
//! child.kill()?;
//! child.wait()?; // right after `kill` it may still be running: wait until it is reaped
//! assert_eq!(live_with(&needles), Vec::<String>::new());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A PostgreSQL server of its own for one test, with a fresh database per store under test
//! (`no_run`: it runs `initdb` and `pg_ctl` from the machine's PostgreSQL server binaries,
//! which a documentation build cannot count on):
//!
//! ```no_run
//! use toolrail_test_support::pg::PgServer;
//!
//! // `None` outside CI when the machine has no PostgreSQL: the test has nothing to run on.
//! let Some(server) = PgServer::start() else { return };
//! let url = server.fresh_database();
//! assert!(url.starts_with("postgres://toolrail@127.0.0.1:"));
//! // The server is stopped and its folder removed when `server` is dropped.
//! ```

pub mod alloc;
pub mod bench;
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod http;
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod pg;
pub mod processes;
pub mod rng;
