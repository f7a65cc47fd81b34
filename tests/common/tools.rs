//! External tools some tests need (shellcheck, sharutils' uudecode). Where
//! one is missing a developer's run skips that test with a note, but under
//! `CI=true` it fails: `.ci/run` installs them, so a missing tool there is
//! a broken setup, never a pass.

/// Whether `tool` can be run (`command -v`). Missing: panics under
/// `CI=true`, else prints why the caller skips and returns false.
pub fn require_tool(tool: &str, package: &str) -> bool {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{tool} is not installed (Debian package {package}); .ci/run installs it");
    }
    eprintln!("{tool} is not installed (Debian package {package}); skipped outside CI");
    false
}
