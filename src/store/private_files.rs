//! The embedded database's files are its owner's alone: the database holds input secrets and
//! webhook credentials, so the data directory is created `0700` and the database file `0600`
//! (SQLite gives its `-wal` and `-shm` files the database file's mode). An existing database
//! that others may read is made private, with a warning; an existing directory is left as it
//! is, since it may be shared (`/var/lib`, a home directory) and the file's mode suffices.

use std::path::Path;

use anyhow::Context;

/// Creates the database's missing parent directories (`0700`) and the database file itself
/// (`0600`, empty, for SQLite to initialise), or makes an existing file private.
pub(super) fn prepare(database: &Path) -> anyhow::Result<()> {
    if let Some(dir) = database.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)
            .with_context(|| format!("failed to create data directory {}", dir.display()))?;
    }
    make_private_file(database)
        .with_context(|| format!("failed to create database file {}", database.display()))
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    // Only the directories created here get the mode; `recursive` accepts existing ones.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The file mode of the database and its companions.
#[cfg(unix)]
const PRIVATE: u32 = 0o600;
/// SQLite's companion files, next to the database, named after it.
#[cfg(unix)]
const COMPANIONS: &[&str] = &["-wal", "-shm", "-journal"];

#[cfg(unix)]
fn make_private_file(file: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE)
        .open(file);
    match created {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            tighten(file)?;
            for suffix in COMPANIONS {
                let mut companion = file.as_os_str().to_owned();
                companion.push(suffix);
                let companion = Path::new(&companion);
                if companion.exists() {
                    tighten(companion)?;
                }
            }
            Ok(())
        }
        Err(error) => Err(error),
    }
}

/// Makes a file that others may read or write private to its owner, with a warning, since
/// an earlier version (or a copy) left it open.
#[cfg(unix)]
fn tighten(file: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file)?.permissions().mode();
    if mode & 0o077 != 0 {
        tracing::warn!(
            file = %file.display(),
            mode = format!("{:o}", mode & 0o777),
            "A database file was open to other users; it is now 0600."
        );
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(PRIVATE))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(not(unix))]
fn make_private_file(_file: &Path) -> std::io::Result<()> {
    Ok(())
}
