//! Puts the compiler version and the git commit into the binary
//! (`LOCKGATE_RUSTC`, `LOCKGATE_GIT_COMMIT`), for the environment block of
//! `lockgate loadgen --json`. Either is "unknown" when its tool is missing.

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = run(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    let commit = run("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LOCKGATE_RUSTC={version}");
    println!("cargo:rustc-env=LOCKGATE_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Rebuild when HEAD moves (best effort: the git dir's HEAD and the
    // branch's ref file, wherever this worktree keeps them).
    if let Some(head) = run("git", &["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(branch) = run("git", &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = run("git", &["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
