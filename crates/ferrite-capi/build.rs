//! Generates `ferrite.h` from the crate's `extern "C"` items with cbindgen and
//! writes it to `<target>/<profile>/include/ferrite.h`, next to the libraries.

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out: three levels up is the profile dir.
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let profile_dir = out.ancestors().nth(3).expect("OUT_DIR has the usual layout").to_path_buf();
    let include = profile_dir.join("include");
    std::fs::create_dir_all(&include).expect("create include dir");
    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    // The header describes the library it was built with: the training functions are
    // declared under FERRITE_FEATURE_TRAIN, defined here only when they are compiled in,
    // so a selective library's header does not promise symbols it lacks.
    let defines: Vec<&str> = [("CARGO_FEATURE_TRAIN", "#define FERRITE_FEATURE_TRAIN 1"), ("CARGO_FEATURE_OBSERVE", "#define FERRITE_FEATURE_OBSERVE 1")]
        .into_iter()
        .filter(|(var, _)| std::env::var_os(var).is_some())
        .map(|(_, define)| define)
        .collect();
    if !defines.is_empty() {
        config.after_includes = Some(defines.join("\n"));
    }
    cbindgen::Builder::new().with_crate(&crate_dir).with_config(config).generate().expect("generate the C header").write_to_file(include.join("ferrite.h"));
    fold_identical_code();
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=src/train.rs");
    println!("cargo:rerun-if-changed=src/observe.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
}

/// Asks the linker to fold functions whose machine code is identical (`--icf=all`)
/// when linking the shared library: monomorphized loops and closures that compile to
/// the same bytes (one per element type of the same width, one per op builder) then
/// take their place once: 26 KB of the full library, 12 KB of a selective one
/// (docs/memory.md, "Library size"). Rust functions carry `unnamed_addr`, so no code
/// relies on two of them having distinct addresses.
///
/// Only where the linker is known to be LLD: rustc's own on x86_64-linux-gnu from
/// Rust 1.90 on, when no other linker is configured. GNU ld rejects the option, so
/// any other setup (a cross linker, an older toolchain) links as before.
fn fold_identical_code() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if var("OPT_LEVEL") == "0" || var("TARGET") != "x86_64-unknown-linux-gnu" || std::env::var_os("RUSTC_LINKER").is_some() {
        return;
    }
    // A linker chosen through the flags (`-C linker=...`, `-C linker-flavor=...`,
    // `-C link-self-contained=...`) may not be LLD either.
    if var("CARGO_ENCODED_RUSTFLAGS").split('\x1f').any(|f| f.contains("link")) {
        return;
    }
    let version = std::process::Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into())).arg("--version").output();
    let minor = version.ok().and_then(|o| String::from_utf8(o.stdout).ok()).and_then(|v| v.split_whitespace().nth(1)?.split('.').nth(1)?.parse::<u32>().ok());
    if minor.is_some_and(|m| m >= 90) {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--icf=all");
    }
}
