//! What toolrail's tests and benches share, in a leaf crate that depends on none of
//! toolrail's own, so any crate's tests may use it without building the layers above:
//! a real PostgreSQL server for a test ([`pg`]) and the process table ([`processes`]).

#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod pg;
pub mod processes;
