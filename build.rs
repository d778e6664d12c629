//! Rebuild when migrations or dashboard assets change: both are embedded in the binary.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=dashboard");
}
