//! The `file://` backend's fixture: a private state directory (`DIR/state`, created by lockrun).
//! Kernel locks last exactly as long as their holder process, there is no server to freeze and no
//! network; "killing" the backend removes its lock files, and a wiping restart loses what a reboot
//! loses (the unflushed record of the last token).

use std::path::PathBuf;

use super::fixture::{Counter, Fixture, Reachable};
use super::proxy::Proxy;
use super::server_process::ServerProcess;

pub struct FileDir {
    dir: tempfile::TempDir,
}

impl FileDir {
    pub fn new() -> Self {
        FileDir {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// The state directory lockrun is pointed at.
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Removes every file in the state directory whose name ends with `suffix`.
    fn remove_files(&self, suffix: &str) {
        for entry in std::fs::read_dir(self.state())
            .into_iter()
            .flatten()
            .flatten()
        {
            if entry.file_name().to_string_lossy().ends_with(suffix) {
                std::fs::remove_file(entry.path()).expect("remove a state file");
            }
        }
    }
}

impl Reachable for FileDir {
    fn url(&self) -> String {
        format!("file://{}", self.state().display())
    }

    fn proxied(&self) -> Option<(Proxy, String)> {
        None
    }

    /// Nothing to kill or freeze: a kernel lock needs no process but its holder.
    fn servers(&self) -> Vec<&ServerProcess> {
        Vec::new()
    }
}

impl Fixture for FileDir {
    const EXPIRES: bool = false;
    const FORCE_RELEASE: bool = false;
    const FIFO: bool = false;
    const SERVER_CLOCK: bool = false;

    fn start() -> Self {
        FileDir::new()
    }

    fn with_password(_password: &str) -> Option<Self> {
        None
    }

    fn url_at(authority: &str) -> String {
        format!("file://{authority}/var/lib/lockrun")
    }

    fn unreachable() -> (String, String) {
        ("file:///dev/null/locks".into(), "/dev/null/locks".into())
    }

    fn kill(&mut self) {
        self.remove_files(".lock");
    }

    fn restart(&mut self, wipe: bool) {
        if wipe {
            self.remove_files(".fence-hot");
        }
    }

    fn counter(&self, name: &str) -> Counter {
        // `NAME.fence-hot`: the boot id, then the last token issued.
        let hot = std::fs::read_to_string(
            self.state()
                .join(format!("{}.fence-hot", name.replace('/', "%"))),
        )
        .expect("read the hot token record");
        let last = hot.split_whitespace().nth(1).expect("boot id, then token");
        Counter::Exact(last.parse().expect("the last token is a number"))
    }
}
