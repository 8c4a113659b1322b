//! Builds the node-side time shim (`shim/timeshim.c`) into
//! `$OUT_DIR/libtimeshim.so`, which `clock::TIME_SHIM` embeds.

use std::env;
use std::path::PathBuf;

fn main() {
    let src = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("shim/timeshim.c");
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("libtimeshim.so");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed=build.rs");

    let compiler = cc::Build::new()
        .pic(true)
        .opt_level(2)
        .cargo_metadata(false)
        .get_compiler();
    let status = compiler
        .to_command()
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-fvisibility=hidden",
            "-Wall",
            "-Wextra",
        ])
        .args(["-Wl,-soname,libtimeshim.so", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler for {}: {e}", src.display()));
    assert!(
        status.success(),
        "compiling {} failed: {status}",
        src.display()
    );
}
