//! The per-name fencing counter: strictly increasing across crashes and reboots, without a disk
//! flush on every acquisition.
//!
//! Two files, both changed only under an exclusive `flock` on the first (slots of a semaphore
//! share them):
//! - `NAME.fence` holds a *reservation* R, on disk (`fdatasync`) before any token up to R is
//!   handed out. Every token ever issued is ≤ the R on disk.
//! - `NAME.fence-hot` holds the last token issued, L, and the kernel's boot id, written without a
//!   flush. Within one boot every process reads the same page cache, so L is exact.
//!
//! The next token is L + 1 when the hot file is from this boot, otherwise R + 1 (after a reboot the
//! hot file may have lost its latest writes, but no issued token exceeds R). When the next token
//! would pass R, a new reservation is flushed first. So a flush happens once per [`BLOCK`] tokens
//! and once per boot, and tokens jump by up to [`BLOCK`] after a reboot. A reservation file that
//! cannot be read as a number stops lockrun rather than restarting at 1.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::state_dir::StateDir;

/// Fixed width, so an update rewrites the same bytes in place and never leaves a longer tail.
const WIDTH: usize = 20;
/// Tokens reserved by one flushed write.
pub const BLOCK: u64 = 1024;

/// Issues the next token for the name whose reservation file is `file_name` (its hot file is
/// `file_name` + `-hot`); `None` while another holder of the name holds the reservation's lock
/// (for an instant as it takes its own token), to be tried again.
pub fn next_token(dir: &StateDir, file_name: &str) -> io::Result<Option<u64>> {
    let existed = dir.file_id(file_name)?.is_some();
    let locked = dir.open_locked(file_name)?;
    if !existed {
        // The file's directory entry must survive a crash as much as its contents do. The one
        // who created it flushes it, lock or not: whoever holds the lock now saw the file there
        // and will not.
        dir.sync()?;
    }
    let Some(reservation) = locked else {
        return Ok(None);
    };
    let reserved = read_counter(&reservation, dir, file_name)?;
    let hot = dir.open_rw(&format!("{file_name}-hot"))?;
    let boot = boot_id();
    let last = match (&boot, read_hot(&hot)) {
        (Some(boot), Some((hot_boot, last))) if *boot == hot_boot => last,
        _ => reserved,
    };
    let token = last
        .checked_add(1)
        .ok_or_else(|| io::Error::other("the fencing counter is exhausted"))?;
    if token > reserved || boot.is_none() {
        let next = if boot.is_some() {
            token.saturating_add(BLOCK - 1)
        } else {
            token
        };
        reservation.write_all_at(format!("{next:0WIDTH$}\n").as_bytes(), 0)?;
        reservation.sync_data()?;
    }
    if let Some(boot) = boot {
        hot.write_all_at(format!("{boot} {token:0WIDTH$}\n").as_bytes(), 0)?;
    }
    Ok(Some(token))
    // Dropping `reservation` closes it, which releases the counter's lock.
}

/// The reservation, 0 for a new counter.
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

/// The hot file's boot id and last token, if it holds a well-formed record.
fn read_hot(file: &File) -> Option<(String, u64)> {
    let mut buf = [0u8; 80];
    let len = file.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..len]).ok()?;
    let (boot, last) = text.trim().split_once(' ')?;
    Some((boot.to_owned(), last.parse().ok()?))
}

/// This boot's id; `None` where the kernel does not say (then every token is flushed, and an
/// interval is measured on the wall clock).
///
/// Read with one `read` into a buffer that holds it (36 characters and a newline): reading to
/// the end would add a `statx` and two more reads to every acquisition.
pub(super) fn boot_id() -> Option<String> {
    use std::io::Read;
    let mut buf = [0u8; 64];
    let len = std::fs::File::open("/proc/sys/kernel/random/boot_id")
        .and_then(|mut file| file.read(&mut buf))
        .ok()?;
    let id = std::str::from_utf8(&buf[..len]).ok()?.trim();
    (!id.is_empty() && !id.contains(' ')).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next token, the reservation being free.
    fn token(dir: &StateDir) -> u64 {
        next_token(dir, "n.fence")
            .unwrap()
            .expect("a free reservation")
    }

    #[test]
    fn a_token_waits_while_another_holder_takes_its_own() {
        let (_tmp, dir) = StateDir::temporary();
        let first = token(&dir);
        let held = dir.open_rw("n.fence").unwrap();
        held.lock().unwrap();
        assert_eq!(next_token(&dir, "n.fence").unwrap(), None);
        drop(held);
        assert_eq!(token(&dir), first + 1);
    }

    #[test]
    fn tokens_rise_by_one_within_a_boot_and_flush_once_per_block() {
        let (tmp, dir) = StateDir::temporary();
        let tokens: Vec<u64> = (0..5).map(|_| token(&dir)).collect();
        assert_eq!(tokens, [1, 2, 3, 4, 5]);
        let reserved = std::fs::read_to_string(tmp.path().join("state/n.fence")).unwrap();
        assert_eq!(
            reserved.trim().parse::<u64>().unwrap(),
            BLOCK,
            "one reservation so far"
        );
    }

    #[test]
    fn after_a_reboot_tokens_continue_above_everything_reserved() {
        let (tmp, dir) = StateDir::temporary();
        for _ in 0..3 {
            token(&dir);
        }
        // A reboot: the hot file is from another boot (and may have lost writes).
        let hot = tmp.path().join("state/n.fence-hot");
        std::fs::write(
            &hot,
            "00000000-0000-0000-0000-000000000000 00000000000000000001\n",
        )
        .unwrap();
        let after = token(&dir);
        assert_eq!(
            after,
            BLOCK + 1,
            "no token issued before the reboot can be reissued"
        );
        assert_eq!(token(&dir), BLOCK + 2);
        // A lost or garbled hot file is treated the same way.
        std::fs::write(&hot, "garbage").unwrap();
        assert_eq!(token(&dir), 2 * BLOCK + 1);
        std::fs::remove_file(&hot).unwrap();
        assert_eq!(token(&dir), 3 * BLOCK + 1);
    }

    #[test]
    fn crossing_a_reservation_flushes_a_new_one_first() {
        let (tmp, dir) = StateDir::temporary();
        std::fs::write(tmp.path().join("state/n.fence"), format!("{:020}\n", 10)).unwrap();
        let boot = boot_id().unwrap();
        std::fs::write(
            tmp.path().join("state/n.fence-hot"),
            format!("{boot} {:020}\n", 10),
        )
        .unwrap();
        assert_eq!(token(&dir), 11);
        let reserved = std::fs::read_to_string(tmp.path().join("state/n.fence")).unwrap();
        assert_eq!(reserved.trim().parse::<u64>().unwrap(), 11 + BLOCK - 1);
    }
}
