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
    if std::env::var_os("CARGO_FEATURE_TRAIN").is_some() {
        config.after_includes = Some("#define FERRITE_FEATURE_TRAIN 1".to_string());
    }
    cbindgen::Builder::new().with_crate(&crate_dir).with_config(config).generate().expect("generate the C header").write_to_file(include.join("ferrite.h"));
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=src/train.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
}
