//! Link settings for the executables (issue 19: a draining worker's memory).
//!
//! A position-independent executable carries a relocation for every pointer in its
//! `.data.rel.ro` (vtables, panic locations, string tables: ~1.4 MB here), and the dynamic
//! loader reads all of them at start. As `.rela.dyn` (24 bytes each) that table was 1.3 MB,
//! all of it resident in every worker; packed as RELR (`-z pack-relative-relocs`, glibc 2.36+
//! and lld or GNU ld 2.38+) it is ~25 KB, and a draining worker's peak RSS fell by ~1.5 MiB
//! (BENCHMARKS.md, issue 19, session 7). The executable stays position-independent.
//!
//! A RELR executable does not start on a glibc older than 2.36, so the flag is only given
//! when building natively on a glibc that has it (`getconf GNU_LIBC_VERSION`); anywhere else
//! (an older distribution, a cross build, musl) the link is the default one.

use std::process::Command;

/// The build machine's glibc as (major, minor), if `getconf` says.
fn host_glibc() -> Option<(u32, u32)> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.trim().strip_prefix("glibc ")?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    Some((major, minor))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    let relr_glibc = host_glibc().is_some_and(|v| v >= (2, 36));
    if os == "linux" && env == "gnu" && native && relr_glibc {
        for kind in ["bins", "examples"] {
            println!("cargo:rustc-link-arg-{kind}=-Wl,-z,pack-relative-relocs");
        }
    }
}
