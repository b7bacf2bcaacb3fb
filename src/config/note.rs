//! The holder's note: `--note` as given (cut to [`MAX_NOTE_LEN`] bytes, control characters other
//! than tabs turned into spaces, never refused: a CI URL plus a commit message must not stop a
//! deploy), or — without `--note` — the job's URL from the CI system lockrun runs in, so that
//! `status` and the waiting messages show which job holds the lock.

use std::ffi::OsString;

/// Longest note, in bytes.
pub const MAX_NOTE_LEN: usize = 1024;

/// Reads an environment variable.
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Where a CI system keeps its job's URL.
enum JobUrl {
    /// Whole, in one variable.
    Variable(&'static str),
    /// In pieces: server, repository and run id.
    GitHubActions,
}

impl JobUrl {
    /// The job's URL from `env`; `None` when any piece of it is missing.
    fn read(&self, env: Env<'_>) -> Option<String> {
        match self {
            JobUrl::Variable(key) => env(key),
            JobUrl::GitHubActions => Some(format!(
                "{}/{}/actions/runs/{}",
                env("GITHUB_SERVER_URL")?.trim_end_matches('/'),
                env("GITHUB_REPOSITORY")?,
                env("GITHUB_RUN_ID")?
            )),
        }
    }
}

/// The CI systems lockrun recognizes, by name, in the order they are tried. Jenkins' `BUILD_URL`
/// comes last: its name is common enough that another CI system's job may carry one too, and
/// that system's own variable is then the job's URL.
const CI_SYSTEMS: [(&str, JobUrl); 5] = [
    ("GitHub Actions", JobUrl::GitHubActions),
    ("GitLab CI", JobUrl::Variable("CI_JOB_URL")),
    ("Buildkite", JobUrl::Variable("BUILDKITE_BUILD_URL")),
    ("CircleCI", JobUrl::Variable("CIRCLE_BUILD_URL")),
    ("Jenkins", JobUrl::Variable("BUILD_URL")),
];

/// The note to store: `given`, made fit, or the CI job's URL from `env`. A blank `--note ""` is
/// no note at all: `null` in `status --json`, and not the CI job's URL either.
pub fn resolve(given: Option<OsString>, env: Env<'_>) -> Option<String> {
    match given {
        Some(raw) => Some(fit(raw)).filter(|note| !note.trim().is_empty()),
        None => from_ci(env),
    }
}

/// The job URL of the CI system the environment belongs to, if any.
fn from_ci(env: Env<'_>) -> Option<String> {
    let nonempty = |key: &str| env(key).filter(|v| !v.trim().is_empty());
    CI_SYSTEMS.iter().find_map(|(system, job_url)| {
        let url = job_url.read(&nonempty)?;
        crate::info!("note: the {system} job's URL, {url}");
        Some(fit(url.into()))
    })
}

/// The note as stored: UTF-8 (invalid bytes replaced), control characters other than tabs made
/// spaces, at most [`MAX_NOTE_LEN`] bytes (cut at a character boundary); each change is warned of.
fn fit(raw: OsString) -> String {
    let text = match raw.into_string() {
        Ok(text) => text,
        Err(raw) => {
            crate::warn!(
                "the note (--note or LOCKRUN_NOTE) is not valid UTF-8; invalid bytes were replaced"
            );
            raw.to_string_lossy().into_owned()
        }
    };
    let mut text: String = text
        .chars()
        .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
        .collect();
    if text.len() > MAX_NOTE_LEN {
        let total = text.len();
        let mut cut = MAX_NOTE_LEN;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        crate::warn!("the note is {total} bytes; it was cut to the first {cut}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |key| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn each_ci_system_gives_its_job_url() {
        let cases: [(&'static [(&str, &str)], &str); 5] = [
            (
                &[
                    ("GITHUB_SERVER_URL", "https://github.com/"),
                    ("GITHUB_REPOSITORY", "o/r"),
                    ("GITHUB_RUN_ID", "42"),
                ],
                "https://github.com/o/r/actions/runs/42",
            ),
            (&[("CI_JOB_URL", "https://gl/j/1")], "https://gl/j/1"),
            (
                &[("BUILDKITE_BUILD_URL", "https://bk/b/2")],
                "https://bk/b/2",
            ),
            (&[("BUILD_URL", "https://jk/job/3/")], "https://jk/job/3/"),
            (&[("CIRCLE_BUILD_URL", "https://cc/4")], "https://cc/4"),
        ];
        for (pairs, url) in cases {
            assert_eq!(resolve(None, &env_of(pairs)).as_deref(), Some(url));
        }
        assert_eq!(resolve(None, &env_of(&[("GITHUB_RUN_ID", "1")])), None);
        // Another CI system's job that also carries a BUILD_URL is that system's.
        let both = env_of(&[
            ("BUILD_URL", "https://x/"),
            ("CI_JOB_URL", "https://gl/j/5"),
        ]);
        assert_eq!(resolve(None, &both).as_deref(), Some("https://gl/j/5"));
        // An explicit note wins.
        let given = resolve(Some("mine".into()), &env_of(&[("CI_JOB_URL", "x")]));
        assert_eq!(given.as_deref(), Some("mine"));
        // A blank one is none, and keeps the job's URL out too.
        for blank in ["", "  ", "\t\n"] {
            assert_eq!(
                resolve(Some(blank.into()), &env_of(&[("CI_JOB_URL", "x")])),
                None
            );
        }
    }

    #[test]
    fn long_notes_are_cut_at_a_character_boundary_and_tabs_kept() {
        let long = "é".repeat(600);
        let fitted = fit(long.into());
        assert!(fitted.len() <= MAX_NOTE_LEN && fitted.len() >= MAX_NOTE_LEN - 1);
        assert_eq!(fit("a\tb\nc".into()), "a\tb c");
    }
}
