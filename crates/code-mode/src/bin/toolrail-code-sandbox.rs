//! The sandbox helper for code mode's Python runtime: the shell tool's helper
//! (`toolrail_shell_tool::sandbox_main`), built with this crate so that an embedder of code
//! mode alone (and this crate's tests) has it.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    toolrail_shell_tool::sandbox_main(&args)
}
