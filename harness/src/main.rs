#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    harness::cli::main()
}
