//! The durable per-name fencing counter.
//!
//! The counter lives in its own file, is incremented under an exclusive `flock` on that file (slots
//! of a semaphore share it), and is on disk (`fdatasync`) before the token is handed to anyone, so
//! tokens never go backwards after a crash or a reboot. A counter file that cannot be read as a
//! number stops lockrun rather than restarting at 1.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::state_dir::StateDir;

/// Fixed width, so an update rewrites the same bytes in place and never leaves a longer tail.
const WIDTH: usize = 20;

/// Issues the next token for the counter in `file_name`.
pub fn next_token(dir: &StateDir, file_name: &str) -> io::Result<u64> {
    let existed = dir.file_id(file_name)?.is_some();
    let file = dir.open_rw(file_name)?;
    if !existed {
        // The file's directory entry must survive a crash as much as its contents do.
        dir.sync()?;
    }
    file.lock()?;
    let token = read_counter(&file, dir, file_name)?
        .checked_add(1)
        .ok_or_else(|| io::Error::other("the fencing counter is exhausted"))?;
    file.write_all_at(format!("{token:0WIDTH$}\n").as_bytes(), 0)?;
    file.sync_data()?;
    Ok(token)
    // Dropping `file` closes it, which releases the counter's lock.
}

/// The last token issued, 0 for a new counter.
pub fn read_counter(file: &File, dir: &StateDir, file_name: &str) -> io::Result<u64> {
    let mut buf = [0u8; WIDTH + 1];
    let len = file.read_at(&mut buf, 0)?;
    let text = std::str::from_utf8(&buf[..len]).unwrap_or("?").trim();
    if text.is_empty() {
        return Ok(0);
    }
    text.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the fencing counter {} is corrupt ({text:?}); refusing to issue a token that could go backwards",
                dir.path().join(file_name).display()
            ),
        )
    })
}
