//! lockrun's own environment read where it lies, in the C library's `environ`, without copying it.
//!
//! `std::env::vars_os` copies every variable into two new strings; lockrun looks through its
//! environment three times a run (empty `LOCKRUN_*` variables, secrets to keep from the command,
//! the command's own environment), which was about 200 allocations of a run's 1,050 on the file
//! backend. Read in place, the command's environment is a list of pointers to the very strings
//! lockrun was given, plus the variables it sets.
//!
//! Sound because lockrun changes its environment only in `cli::parse`, first thing in `main`,
//! before any other thread exists; and the C library never frees a variable's string (the ones
//! lockrun started with are on the initial stack, and `setenv`'s are kept).

use std::ffi::{CStr, c_char};

unsafe extern "C" {
    /// The C library's list of `KEY=VALUE` strings, ended by a null pointer.
    static environ: *const *const c_char;
}

/// Every entry of the environment, in order, as `KEY=VALUE` (an entry without `=` is kept as it
/// is: the command gets what lockrun got).
pub fn entries() -> impl Iterator<Item = &'static CStr> {
    // SAFETY: `environ` is the C library's; it is only changed before other threads start (see
    // the module header), so reading it here races with nothing.
    let mut at = unsafe { environ };
    std::iter::from_fn(move || {
        if at.is_null() {
            return None;
        }
        // SAFETY: `at` points into the null-terminated list; each entry is a NUL-terminated
        // string that lives as long as the process (see the module header).
        unsafe {
            let entry = *at;
            if entry.is_null() {
                return None;
            }
            at = at.add(1);
            Some(CStr::from_ptr(entry))
        }
    })
}

/// An entry's key: its bytes before the first `=` after the first byte (as `std` reads them, so
/// a key may start with `=`), or the whole entry when it has none.
pub fn key(entry: &CStr) -> &[u8] {
    let bytes = entry.to_bytes();
    match bytes.iter().skip(1).position(|&b| b == b'=') {
        Some(at) => &bytes[..at + 1],
        None => bytes,
    }
}

/// An entry's value: its bytes after the key's `=` (empty when it has none).
pub fn value(entry: &CStr) -> &[u8] {
    let bytes = entry.to_bytes();
    bytes.get(key(entry).len() + 1..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_split_at_the_first_equals_sign_after_the_first_byte() {
        let split = |entry: &CStr| (key(entry).to_vec(), value(entry).to_vec());
        assert_eq!(split(c"A=b=c"), (b"A".to_vec(), b"b=c".to_vec()));
        assert_eq!(split(c"EMPTY="), (b"EMPTY".to_vec(), b"".to_vec()));
        assert_eq!(split(c"=C:=x"), (b"=C:".to_vec(), b"x".to_vec()));
        assert_eq!(split(c"NOEQUALS"), (b"NOEQUALS".to_vec(), b"".to_vec()));
    }

    #[test]
    fn entries_are_what_std_sees() {
        let ours: Vec<(Vec<u8>, Vec<u8>)> = entries()
            .filter(|entry| entry.to_bytes().contains(&b'='))
            .map(|entry| (key(entry).to_vec(), value(entry).to_vec()))
            .collect();
        let std: Vec<(Vec<u8>, Vec<u8>)> = std::env::vars_os()
            .map(|(k, v)| {
                use std::os::unix::ffi::OsStrExt;
                (k.as_bytes().to_vec(), v.as_bytes().to_vec())
            })
            .collect();
        assert!(!ours.is_empty());
        assert_eq!(ours, std);
    }
}
