//! What the SQL backends (PostgreSQL, MySQL) share in naming things: the rule for the names
//! lockrun splices into SQL (MySQL's table prefix, PostgreSQL's schema), and the stable hash that
//! names server-side locks and channels after longer text.

/// Whether `name` is 1 to `max_len` characters of `a-z 0-9 _`, not starting with a digit: safe to
/// splice into an identifier.
pub fn is_plain_name(name: &str, max_len: usize) -> bool {
    !name.is_empty()
        && name.len() <= max_len
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
}

/// FNV-1a, 64 bits: stable across builds and platforms.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_lowercase_words_within_the_limit() {
        assert!(is_plain_name("lockrun_2", 40));
        for bad in ["", "Locks", "1x", "a-b", "a\"b", "a.b"] {
            assert!(!is_plain_name(bad, 40), "{bad}");
        }
        assert!(is_plain_name(&"x".repeat(40), 40));
        assert!(!is_plain_name(&"x".repeat(41), 40));
    }

    #[test]
    fn fnv1a_is_the_published_function() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
