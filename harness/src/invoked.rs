//! How the user started lockstorm, so that the commands it prints for them
//! to type start the same way: `cargo run --` from a checkout (the README's
//! way), `lockstorm` once installed.

use std::sync::OnceLock;

/// The words that start a lockstorm command as this process was started:
/// `cargo run --` when cargo started it, else `lockstorm`.
pub fn prefix() -> &'static str {
    static PREFIX: OnceLock<&'static str> = OnceLock::new();
    PREFIX.get_or_init(|| match started_by_cargo() {
        true => "cargo run --",
        false => "lockstorm",
    })
}

/// Whether the parent process is cargo (`cargo run`): its name in /proc.
fn started_by_cargo() -> bool {
    let parent = nix::unistd::getppid();
    std::fs::read_to_string(format!("/proc/{parent}/comm")).is_ok_and(|name| name.trim() == "cargo")
}
