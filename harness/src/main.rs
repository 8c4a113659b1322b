fn main() -> std::process::ExitCode {
    harness::cli::main()
}
