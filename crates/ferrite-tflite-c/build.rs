//! Gives the shared library the soname LiteRT's has, so a program linked against
//! ferrite's library records the same dependency name as one linked against LiteRT's
//! and either library satisfies it at run time.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtensorflowlite_c.so");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
