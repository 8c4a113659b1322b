#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    lockstorm::cli::main()
}
