//! Golden files: compare printed output with `tests/golden/<name>`, or
//! rewrite the file when `UPDATE_GOLDEN=1` is set. The one helper every
//! suite uses.

use std::path::PathBuf;

/// Assert that `actual` is the content of `tests/golden/<name>`
/// (`UPDATE_GOLDEN=1` rewrites the file instead).
pub fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("tests/golden")).expect("mkdir tests/golden");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing golden file {}; run with UPDATE_GOLDEN=1",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "golden file {name} differs (UPDATE_GOLDEN=1 rewrites it)"
    );
}
