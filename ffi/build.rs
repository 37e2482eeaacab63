//! Generate the libfabric bindings from the headers pkg-config points at, and link libfabric.
//!
//! Linking against the installed (1.17) libfabric.so binds our references to the versioned
//! symbols ABI.md names (fi_dupinfo/fi_freeinfo@FABRIC_1.3, the rest @FABRIC_1.0), which resolve
//! in 1.17 and in 2.x cores alike.

use std::path::PathBuf;
use std::process::Command;

fn pkg_config(args: &[&str]) -> Option<String> {
    let out = Command::new("pkg-config").args(args).arg("libfabric").output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=LIBFABRIC_INCLUDE_DIR");
    let include = std::env::var("LIBFABRIC_INCLUDE_DIR")
        .ok()
        .or_else(|| pkg_config(&["--variable=includedir"]))
        .unwrap_or_else(|| "/usr/include".into());
    if let Some(libdir) = pkg_config(&["--variable=libdir"]) {
        println!("cargo:rustc-link-search=native={libdir}");
    }
    println!("cargo:rustc-link-lib=dylib=fabric");
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{include}"))
        .allowlist_type("fi_.*|fid.*|fi_ops.*")
        .allowlist_function(
            "fi_(dupinfo|freeinfo|version|log|log_enabled|param_define|param_get|strerror|tostr|tostr_r)",
        )
        .allowlist_var("FI_.*|FID_.*|FI_E.*")
        .derive_default(true)
        .layout_tests(true)
        .prepend_enum_name(false)
        .generate()
        .expect("bindgen could not read the libfabric headers: install libfabric-dev and libclang-dev");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings.write_to_file(out).expect("write bindings");
}
