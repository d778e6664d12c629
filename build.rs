//! Rebuild when migrations change, since they are embedded with `sqlx::migrate!`.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
