//! The sandbox helper as a program of its own: see `toolrail_shell_tool::sandbox_main`.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    toolrail_shell_tool::sandbox_main(&args)
}
