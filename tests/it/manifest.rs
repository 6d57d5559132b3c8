//! Cargo.toml housekeeping (issue 17, item 12): no dependency the library does not use.

fn manifest() -> toml::Table {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    std::fs::read_to_string(path).unwrap().parse().unwrap()
}

#[test]
fn libc_is_not_a_dependency_and_anyhow_is_only_for_examples() {
    let m = manifest();
    let deps = m["dependencies"].as_table().unwrap();
    let dev = m["dev-dependencies"].as_table().unwrap();
    assert!(!deps.contains_key("libc"), "libc is unused: {deps:?}");
    assert!(
        !deps.contains_key("anyhow"),
        "anyhow is used by examples only"
    );
    assert!(dev.contains_key("anyhow"), "the examples use anyhow");
}
