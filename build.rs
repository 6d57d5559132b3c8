//! Link settings for the executables (issue 19: a draining worker's memory).
//!
//! A position-independent executable carries a relocation for every pointer in its
//! `.data.rel.ro` (vtables, panic locations, string tables: ~1.4 MB here), and the dynamic
//! loader reads all of them at start. As `.rela.dyn` (24 bytes each) that table was 1.3 MB,
//! all of it resident in every worker; packed as RELR (`-z pack-relative-relocs`, glibc 2.36+
//! and lld or GNU ld 2.38+) it is ~25 KB, and a draining worker's peak RSS fell by ~1.5 MiB
//! (BENCHMARKS.md, issue 19, session 7). The executable stays position-independent.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        for kind in ["bins", "examples"] {
            println!("cargo:rustc-link-arg-{kind}=-Wl,-z,pack-relative-relocs");
        }
    }
}
