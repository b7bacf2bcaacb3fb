//! The user a server that refuses to run as root (PostgreSQL, PgBouncer) runs as when the tests
//! run as root: `postgres`, or `nobody`; its files given to that user, its commands run as it.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use nix::unistd::User;

/// The user a server that refuses to run as root runs as, when the tests run as root: `postgres`,
/// or `nobody`. When they do not, servers run as the tests do.
pub struct ServerUser(Option<User>);

impl ServerUser {
    pub fn find() -> Self {
        if !nix::unistd::geteuid().is_root() {
            return ServerUser(None);
        }
        let user = ["postgres", "nobody"]
            .into_iter()
            .find_map(|name| User::from_name(name).ok().flatten())
            .unwrap_or_else(|| panic!("running as root, but there is no postgres or nobody user"));
        ServerUser(Some(user))
    }

    /// Gives `path` to the server's user (when it is not ourselves).
    pub fn own(&self, path: &Path) {
        if let Some(user) = &self.0 {
            nix::unistd::chown(path, Some(user.uid), Some(user.gid))
                .unwrap_or_else(|err| panic!("chown {}: {err}", path.display()));
        }
    }

    /// Makes `cmd` run as the server's user (when it is not ourselves).
    pub fn run<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        if let Some(user) = &self.0 {
            cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        cmd
    }
}
