//! Generates the C header with cbindgen into OUT_DIR; a test checks that the
//! checked-in `include/polycl.h` equals it.

fn main() {
    println!("cargo:rerun-if-changed=src/capi");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("polycl.h");
    let config =
        cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
    match cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
    {
        Ok(b) => {
            b.write_to_file(&out);
        }
        Err(e) => panic!("cbindgen failed: {e}"),
    }
}
