//! The command line as clap sees it: flags, their help text, their environment variables. These
//! doc comments are the manual: `man/lockrun.1` and the shell completions are generated from this
//! definition.

use std::ffi::OsString;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, CommandFactory, Parser, Subcommand, ValueHint};

const AFTER_HELP: &str = "\
Exit status: the command's own; 128+N if it was killed by signal N; 64 usage error; 69 backend
unreachable; 70 internal error; 75 lock busy (see --busy-exit-code); 76 lease lost while the command
ran (it was stopped); 124 --timeout ran out (the command was stopped); 126 command not executable;
127 command not found.

The command gets FENCING_TOKEN (see --token-env), a number that strictly increases with every
acquisition of NAME: pass it to the storage you write so it can reject a stale holder.";

/// What kinds of option have in common, written once and applied as `#[arg(duration())]` or
/// `#[arg(free_text())]` (clap's derive calls any `Arg` method it is given).
trait ArgKinds {
    /// A duration: shows as DURATION (500ms, 15s, 2m), and may start with `-`, so that
    /// `--ttl -1s` reaches `config`'s message about durations instead of clap's "unexpected
    /// argument".
    fn duration(self) -> Self;

    /// Text that may start with `-` (`--note -urgent`, `--name -a`): a value, not an option.
    fn free_text(self) -> Self;
}

impl ArgKinds for clap::Arg {
    fn duration(self) -> Self {
        self.value_name("DURATION").free_text()
    }

    fn free_text(self) -> Self {
        self.allow_hyphen_values(true).value_hint(ValueHint::Other)
    }
}

/// Run a command while holding a named lease, with a fencing token.
///
/// lockrun acquires the lease NAME on a backend, starts COMMAND (directly, no shell) with a fencing
/// token in $FENCING_TOKEN, renews the lease while the command runs, and stops the command and exits
/// 76 if the lease cannot be kept.
#[derive(Debug, Parser)]
#[command(
    name = "lockrun",
    version,
    after_help = AFTER_HELP,
    subcommand_negates_reqs = true,
    override_usage = "lockrun [OPTIONS] --name <NAME> -- <COMMAND> [ARG]...\n       lockrun <SUBCOMMAND> ..."
)]
pub struct Cli {
    #[command(subcommand)]
    pub subcommand: Option<Command>,

    #[command(flatten)]
    pub run: RunArgs,

    /// Backend URL: file:///DIR (one host, no server), redis://[USER:PASS@]HOST[:PORT][/DB],
    /// rediss://… (TLS), redlock://[USER:PASS@]HOST:PORT,HOST:PORT,HOST:PORT[,…] (Redlock over
    /// N ≥ 3 independent Redis masters, a majority needed; it assumes bounded clock drift, so
    /// fence your storage with the token), etcd://[USER:PASS@]HOST:PORT[,HOST:PORT…][?cacert=CA.pem]
    /// (TLS with cacert, plus cert= and key= for client certificates),
    /// zk://[USER:PASS@]HOST:PORT[,HOST:PORT…][/CHROOT] (ZooKeeper; USER:PASS is digest auth, and
    /// the session timeout granted is the lease), postgres://… or postgresql://…
    /// (sslmode=require for TLS; lockrun_schema=NAME picks the schema of lockrun's tables;
    /// behind PgBouncer, listen=HOST[:PORT][/DBNAME] names the server itself, where waiters near
    /// their turn listen to be woken),
    /// mysql://USER[:PASS]@HOST[:PORT]/DB for MySQL 8 or MariaDB 10.6+ (ssl-mode=REQUIRED,
    /// VERIFY_CA or VERIFY_IDENTITY and ssl-ca=PATH for TLS; lockrun_table_prefix=NAME names
    /// lockrun's tables),
    /// dynamodb://TABLE[?region=R&endpoint=URL&create=false] (AWS credentials from the standard
    /// chain: environment, AWS_PROFILE, SSO, instance role; the table is created on first use)
    ///
    /// Default: file:// with a per-user state directory that survives reboots (/var/lib/lockrun for
    /// root, else $XDG_STATE_HOME/lockrun or ~/.local/state/lockrun). Passwords in the URL are never
    /// printed.
    #[arg(
        short,
        long,
        env = "LOCKRUN_BACKEND",
        value_name = "URL",
        global = true,
        hide_env_values = true,
        value_hint = ValueHint::Url
    )]
    pub backend: Option<String>,

    /// Read the backend URL from the first line of FILE instead, so that a password appears on no
    /// command line and in no environment. When the URL holds a password, others than the file's
    /// owner and group must not be able to read it (chmod 600 or 640).
    #[arg(
        long,
        env = "LOCKRUN_BACKEND_FILE",
        value_name = "FILE",
        global = true,
        value_hint = ValueHint::FilePath
    )]
    pub backend_file: Option<std::path::PathBuf>,

    /// Print only errors (and, for status, nothing: the exit status says whether NAME is held).
    #[arg(short, long, env = "LOCKRUN_QUIET", global = true, value_parser = BoolishValueParser::new())]
    pub quiet: bool,

    /// Print more: acquisition, token, renewals (repeat for more).
    #[arg(
        short,
        long,
        env = "LOCKRUN_VERBOSE",
        global = true,
        action = ArgAction::Count,
        value_parser = verbosity
    )]
    pub verbose: u8,

    /// The options whose value came from their `LOCKRUN_*` variable, as (`--flag`, variable):
    /// filled by [`super::parse`], so that a message about a bad value names where it was set.
    #[arg(skip)]
    pub from_variables: Vec<(String, String)>,
}

/// Options of the run form: `lockrun [OPTIONS] --name NAME -- COMMAND [ARG]...`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Lease name: 1–200 bytes of A-Z a-z 0-9 . _ : - in segments joined by single /. Names are
    /// per backend: on the default backend each user has a state directory of their own, so the
    /// same name run by two users does not exclude (share one with --backend file:///DIR).
    #[arg(
        long,
        env = "LOCKRUN_NAME",
        value_name = "NAME",
        required = true,
        free_text()
    )]
    pub name: Option<String>,

    /// Lease length, e.g. 500ms, 15s, 2m. A backend may raise it to its minimum (ZooKeeper also
    /// lowers it to its maximum session timeout); the command is told the granted value in
    /// $LOCKRUN_TTL_MS.
    #[arg(long, env = "LOCKRUN_TTL", default_value = "15s", duration())]
    pub ttl: String,

    /// Renewal interval (at least 10ms); must be shorter than the TTL. Default: a third of the TTL.
    #[arg(long, env = "LOCKRUN_RENEW", duration())]
    pub renew: Option<String>,

    /// Give up waiting for the lock after this long and exit 75 (see --busy-exit-code). A bare
    /// number is seconds, as for flock -w. Default: wait forever.
    #[arg(short, long, env = "LOCKRUN_WAIT", duration())]
    pub wait: Option<String>,

    /// Try once and exit 75 if the lock is busy (same as --wait 0, and as flock -n).
    #[arg(short, long, env = "LOCKRUN_NO_WAIT", value_parser = BoolishValueParser::new())]
    pub no_wait: bool,

    /// Exit status when the lock was not acquired; 0 skips quietly, for cron.
    #[arg(
        short = 'E',
        long,
        env = "LOCKRUN_BUSY_EXIT_CODE",
        value_name = "N",
        default_value_t = crate::exit::BUSY
    )]
    pub busy_exit_code: u8,

    /// Semaphore: up to N (at most 1024) holders at once, each with its own slot and token. All
    /// users of NAME must pass the same N. Default: 1.
    #[arg(long, env = "LOCKRUN_LIMIT", value_name = "N", value_hint = ValueHint::Other)]
    pub limit: Option<String>,

    /// Shared (reader) mode, as flock -s: any number of shared holders at once, never together
    /// with an exclusive holder. Waiters are served in arrival order, so an exclusive waiter is
    /// never starved by readers that came after it. Not with --limit.
    #[arg(short, long, env = "LOCKRUN_SHARED", value_parser = BoolishValueParser::new())]
    pub shared: bool,

    /// Environment variable that carries the fencing token to the command (not a LOCKRUN_* name,
    /// which lockrun sets itself, nor one the command needs: PATH, HOME, SHELL, IFS, PWD, TMPDIR,
    /// LD_*).
    #[arg(
        long,
        env = "LOCKRUN_TOKEN_ENV",
        value_name = "VAR",
        default_value = "FENCING_TOKEN",
        value_hint = ValueHint::Other
    )]
    pub token_env: String,

    /// Grace between SIGTERM and SIGKILL when the command is stopped (lease lost, --timeout).
    /// Default: a quarter of the TTL, at most 10s. On a lost lease, TERM is sent early enough that
    /// TERM, the grace and KILL all land before the lease could expire on the backend.
    #[arg(long, env = "LOCKRUN_KILL_AFTER", duration())]
    pub kill_after: Option<String>,

    /// The command's own time limit: when it runs out, TERM the command, KILL it after
    /// --kill-after, release the lease and exit 124 (as timeout(1) does). Distinct from --wait,
    /// the time to get the lock.
    #[arg(long, env = "LOCKRUN_TIMEOUT", duration())]
    pub timeout: Option<String>,

    /// Run at most once per DURATION across the fleet: if NAME was last acquired less than
    /// DURATION ago by a run that also passed --min-interval (any user, on any host), do not run;
    /// exit with the busy code. Measured by the backend's clock where it has one, so skewed host
    /// clocks cannot cause a second run. The time is recorded when the lease is taken, whether or
    /// not the command then succeeds; a run without --min-interval neither checks nor records it.
    /// A run that finds NAME ran too recently skips before waiting, not after the holder is done.
    #[arg(long, env = "LOCKRUN_MIN_INTERVAL", duration())]
    pub min_interval: Option<String>,

    /// Newest-wins waiting, for deploys: a newer waiter on NAME that also passed --supersede makes
    /// this one give up with the busy code ("superseded by ..."). The running holder is never
    /// touched (to cancel it, use release --force).
    #[arg(long, env = "LOCKRUN_SUPERSEDE", value_parser = BoolishValueParser::new())]
    pub supersede: bool,

    /// While waiting, print one line this often saying who holds NAME (host, pid, note, for how
    /// long) and the place in line; the first after 1s. At least 100ms (each line asks the
    /// backend); 0 never prints; -q silences it too.
    #[arg(long, env = "LOCKRUN_PROGRESS", default_value = "30s", duration())]
    pub progress: String,

    /// Free text stored with the holder and shown by `status` and to waiters (a CI job URL, a
    /// ticket); longer than 1024 bytes it is cut, with a warning. Default: the job's URL when run
    /// in GitHub Actions, GitLab CI, Buildkite, Jenkins or CircleCI (--note "" for none).
    #[arg(long, env = "LOCKRUN_NOTE", value_name = "TEXT", free_text())]
    pub note: Option<OsString>,

    /// The command to run, with its arguments, after `--`. Executed directly, not by a shell:
    /// for a pipeline or a shell builtin, run sh -c '...'.
    #[arg(value_name = "COMMAND", last = true, required = true, value_hint = ValueHint::CommandWithArguments)]
    pub command: Vec<OsString>,
}

/// The inspection and break-glass subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show who holds NAME, since when, its token, the lease left, and the waiters in order.
    ///
    /// Exit status 0; with --quiet (-q), nothing is printed and the status says it: 0 held, 1 free.
    Status {
        /// The lease name.
        #[arg(value_hint = ValueHint::Other)]
        name: String,
        /// Print JSON: {"name", "held", "limit", "waiters", "holders": [...], "queue": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// List the names currently held.
    List {
        /// Only names that start with PREFIX.
        #[arg(value_hint = ValueHint::Other)]
        prefix: Option<String>,
        /// Print a JSON array of status objects.
        #[arg(long)]
        json: bool,
    },
    /// Break-glass: drop NAME's holder(s) on a networked backend; each is told at once (on
    /// DynamoDB, at its next look at the table, within half a second), stops its command and
    /// exits 76.
    ///
    /// The next waiter may start at once. What a forced release cannot do: stop a holder that
    /// cannot be reached (paused, cut off) before its next renewal fails — until then its command
    /// may run beside the next holder, which is what fencing tokens are for. On the file backend a
    /// kernel lock cannot be broken from outside: the message names the holding pid.
    Release {
        /// The lease name.
        #[arg(value_hint = ValueHint::Other)]
        name: String,
        /// Required: confirms that you mean to break another process's lease.
        #[arg(long)]
        force: bool,
    },
    /// Rehearse a paused holder on the backend, and check that fencing tokens stop it.
    ///
    /// Runs the failure drill against the backend (--backend) with two real lockrun holders and a
    /// fenced probe store in a temporary directory: holder A acquires NAME and writes; A's lockrun
    /// and command are paused (SIGSTOP) past the lease; holder B acquires NAME with a higher token
    /// and writes; A is resumed. It passes only if B took over after A's lease expired with a
    /// higher token, A's command was stopped at once on waking and its lockrun exited 76, and the
    /// store rejected every write with A's stale token. On the file backend no takeover is
    /// possible while A lives (a kernel lock does not expire): B must give up and A finish
    /// normally. Also reports the granted TTL, the backend's round trip and its clock skew.
    ///
    /// Prints a timeline and one line per check, then `drill: PASS` or `drill: FAIL (checks)`.
    /// Exit status: 0 pass, 1 a check failed, 64 usage error, 69 backend unreachable, 75 NAME in
    /// use. Takes one to two TTLs.
    Drill {
        /// Lease length for the drill's holders, e.g. 1s, 2s. A backend may raise it to its
        /// minimum (etcd does).
        #[arg(long, default_value = "2s", duration())]
        ttl: String,
        /// Lease name for the drill; it must be free. Default: lockrun-drill/HOST-PID, which no
        /// real lock uses.
        #[arg(long, value_name = "NAME", value_hint = ValueHint::Other)]
        name: Option<String>,
        /// Print the report as one JSON object: "verdict", "failed", "checks", "a", "b",
        /// "writes", "granted_ttl_ms", "round_trip_ms", "clock_skew_ms", ...
        #[arg(long)]
        json: bool,
    },
}

/// The clap command, for generating completions and the man page.
pub fn command() -> clap::Command {
    Cli::command()
}

/// `LOCKRUN_VERBOSE`: how many `-v` (`2` is `-vv`), or a switch's words (`true`, `yes`, `on` are
/// one `-v`; `false`, `no`, `off` none), as every other `LOCKRUN_*` switch takes them.
fn verbosity(value: &str) -> Result<u8, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => Ok(1),
        "false" | "no" | "off" => Ok(0),
        count => count
            .parse()
            .map_err(|_| "use a count (1, 2) or true/false, yes/no, on/off".to_owned()),
    }
}
