//! The man page, `man/lockrun.1`: one page for the run form and every subcommand, generated from
//! the clap definition (options, their help, defaults and environment variables) and the exit
//! table, with the sections a man page reader expects — ENVIRONMENT, EXIT STATUS, FILES,
//! EXAMPLES, SEE ALSO. Hyphenation is off, so no URL or name is broken across lines.

use clap::{Arg, ArgAction, Command};
use roff::{Roff, bold, italic, roman};

/// The whole page, in roff.
pub fn render(cmd: &Command) -> String {
    let mut page = Roff::new();
    let version = cmd.get_version().unwrap_or_default();
    page.control(
        "TH",
        [
            "LOCKRUN",
            "1",
            "",
            &format!("lockrun {version}"),
            "User Commands",
        ],
    );
    page.control("nh", [] as [&str; 0]);
    page.control("ad", ["l"]);

    page.control("SH", ["NAME"]);
    page.text([roman(
        "lockrun - run a command while holding a named lease, with a fencing token",
    )]);

    page.control("SH", ["SYNOPSIS"]);
    let synopsis: [&[roff::Inline]; 5] = [
        &[
            bold("lockrun"),
            roman(" ["),
            italic("OPTIONS"),
            roman("] "),
            bold("--name"),
            roman(" "),
            italic("NAME"),
            roman(" "),
            bold("--"),
            roman(" "),
            italic("COMMAND"),
            roman(" ["),
            italic("ARG"),
            roman("]..."),
        ],
        &[
            bold("lockrun status"),
            roman(" "),
            italic("NAME"),
            roman(" [--backend "),
            italic("URL"),
            roman("] [--json] [-q]"),
        ],
        &[
            bold("lockrun list"),
            roman(" ["),
            italic("PREFIX"),
            roman("] [--backend "),
            italic("URL"),
            roman("] [--json]"),
        ],
        &[
            bold("lockrun release"),
            roman(" "),
            italic("NAME"),
            roman(" --force [--backend "),
            italic("URL"),
            roman("]"),
        ],
        &[
            bold("lockrun drill"),
            roman(" [--backend "),
            italic("URL"),
            roman("] [--ttl "),
            italic("DURATION"),
            roman("] [--name "),
            italic("NAME"),
            roman("] [--json]"),
        ],
    ];
    for (i, line) in synopsis.iter().enumerate() {
        if i > 0 {
            page.control("br", [] as [&str; 0]);
        }
        page.text(line.to_vec());
    }

    page.control("SH", ["DESCRIPTION"]);
    about(&mut page, cmd);

    page.control("SH", ["OPTIONS"]);
    options(
        &mut page,
        cmd.get_arguments().filter(|a| !a.is_positional()),
    );

    page.control("SH", ["COMMANDS"]);
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let positionals: Vec<String> = sub
            .get_positionals()
            .map(|a| {
                let name = a.get_id().as_str().to_uppercase();
                if a.is_required_set() {
                    name
                } else {
                    format!("[{name}]")
                }
            })
            .collect();
        page.control(
            "SS",
            [format!("{} {}", sub.get_name(), positionals.join(" ")).trim_end()],
        );
        about(&mut page, sub);
        options(
            &mut page,
            sub.get_arguments()
                .filter(|a| !a.is_positional() && !a.is_global_set()),
        );
    }

    page.control("SH", ["ENVIRONMENT"]);
    page.text([roman(
        "Every option of the run form can be set by a variable LOCKRUN_OPTION (upper case, dashes \
         as underscores), as listed with each option above; the command line wins over the \
         environment, and a variable that is set but empty counts as unset, so a crontab can set \
         options once for all its lines.",
    )]);
    for (var, meaning) in CHILD_ENVIRONMENT {
        page.control("TP", [] as [&str; 0]);
        page.text([bold(*var)]);
        page.text([roman(*meaning)]);
    }

    page.control("SH", ["EXIT STATUS"]);
    for (status, meaning) in lockrun::exit::TABLE {
        page.control("TP", [] as [&str; 0]);
        page.text([bold(*status)]);
        page.text([roman(*meaning)]);
    }

    page.control("SH", ["FILES"]);
    for (file, meaning) in FILES {
        page.control("TP", [] as [&str; 0]);
        page.text([italic(*file)]);
        page.text([roman(*meaning)]);
    }

    page.control("SH", ["EXAMPLES"]);
    for (what, example) in EXAMPLES {
        page.control("PP", [] as [&str; 0]);
        page.text([roman(*what)]);
        page.control("PP", [] as [&str; 0]);
        page.control("RS", ["4"]);
        page.control("nf", [] as [&str; 0]);
        page.text([roman(*example)]);
        page.control("fi", [] as [&str; 0]);
        page.control("RE", [] as [&str; 0]);
    }

    page.control("SH", ["SEE ALSO"]);
    page.text([
        bold("flock"),
        roman("(1), "),
        bold("timeout"),
        roman("(1), "),
        bold("crontab"),
        roman("(5); the README of lockrun for each backend's design and limits."),
    ]);
    page.render()
}

/// One `.TP` entry per option: its flags and value, its help, default and variable.
/// What a command is for (its long help where it has one), a paragraph at a time.
fn about(page: &mut Roff, cmd: &Command) {
    let about = cmd.get_long_about().or(cmd.get_about());
    for paragraph in about
        .map(ToString::to_string)
        .unwrap_or_default()
        .split("\n\n")
    {
        page.control("PP", [] as [&str; 0]);
        page.text([roman(paragraph)]);
    }
}

fn options<'a>(page: &mut Roff, args: impl Iterator<Item = &'a Arg>) {
    for arg in args.filter(|a| !a.is_hide_set()) {
        let mut head = Vec::new();
        if let Some(short) = arg.get_short() {
            head.push(bold(format!("-{short}")));
            head.push(roman(", "));
        }
        if let Some(long) = arg.get_long() {
            head.push(bold(format!("--{long}")));
        }
        let takes_value = !matches!(
            arg.get_action(),
            ArgAction::SetTrue
                | ArgAction::SetFalse
                | ArgAction::Count
                | ArgAction::Help
                | ArgAction::Version
        ) && arg.get_num_args().is_none_or(|n| n.takes_values());
        if takes_value && let Some(names) = arg.get_value_names() {
            head.push(roman(" "));
            head.push(italic(names.join(" ")));
        }
        page.control("TP", [] as [&str; 0]);
        page.text(head);
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        let mut body = vec![roman(help.replace('\n', " "))];
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        if !defaults.is_empty() && takes_value {
            body.push(roman(format!(" [default: {}]", defaults.join(", "))));
        }
        if let Some(env) = arg.get_env() {
            body.push(roman(" [environment: "));
            body.push(bold(env.to_string_lossy()));
            body.push(roman("]"));
        }
        page.text(body);
    }
}

/// What the command gets.
const CHILD_ENVIRONMENT: &[(&str, &str)] = &[
    (
        "FENCING_TOKEN",
        "Given to the command (or the variable --token-env names): a decimal number that strictly \
         increases with every acquisition of NAME on the backend, also after a forced release and \
         across restarts. Pass it to the storage you write, so that it can reject a stale holder.",
    ),
    ("LOCKRUN_NAME", "Given to the command: the lease name."),
    (
        "LOCKRUN_TTL_MS",
        "Given to the command: the lease the backend granted, in milliseconds.",
    ),
    (
        "LOCKRUN_SLOT",
        "Given to the command: its semaphore slot, 0 to N-1 with --limit N (0 for a shared holder).",
    ),
    (
        "GITHUB_SERVER_URL, GITHUB_REPOSITORY, GITHUB_RUN_ID, CI_JOB_URL, BUILDKITE_BUILD_URL, CIRCLE_BUILD_URL, BUILD_URL",
        "Read without --note: the URL of the CI job (GitHub Actions, GitLab CI, Buildkite, \
         CircleCI, and last Jenkins' BUILD_URL) becomes the holder's note.",
    ),
    (
        "PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD, PGSSLMODE, PGSSLROOTCERT, PGPASSFILE",
        "Read by the PostgreSQL backend for what its URL leaves out, as psql reads them.",
    ),
    (
        "SSL_CERT_FILE",
        "A bundle of trusted certificate authorities for TLS (rediss://, and the other backends \
         without their own CA option).",
    ),
    (
        "XDG_STATE_HOME, HOME",
        "Where the default state directory is, for a user other than root.",
    ),
];

/// Where the file backend keeps its state.
const FILES: &[(&str, &str)] = &[
    (
        "/var/lib/lockrun",
        "The default state directory of the file backend for root.",
    ),
    (
        "$XDG_STATE_HOME/lockrun, ~/.local/state/lockrun",
        "The default state directory for other users: each user has a namespace of their own. \
         To share locks between users, pass --backend file:///DIR with a directory owned by root \
         and a common group, mode 2770.",
    ),
    (
        "DIR/NAME.lock, DIR/NAME@K.lock",
        "The kernel lock of NAME (slot K with --limit), and its holder's record; never remove \
         them while in use.",
    ),
    (
        "DIR/NAME.fence, DIR/NAME.fence-hot",
        "The fencing token counter of NAME; removing it could reissue tokens.",
    ),
    (
        "DIR/NAME.line/",
        "The line of waiters and the records of shared holders.",
    ),
];

/// A few runs, as users write them.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "A crontab line that must not overlap with itself, and skips quietly when the previous \
         run still goes on (cron's PATH is /usr/bin:/bin: give the full path):",
        "*/5 * * * * /usr/local/bin/lockrun --name reports -n -E 0 -- /opt/reports/run.sh",
    ),
    (
        "A fleet cron that runs at most once an hour across all hosts, whatever their clocks:",
        "0 * * * * /usr/local/bin/lockrun -b redis://locks:6379 --name rollup --min-interval 50m -E 0 -- ./rollup",
    ),
    (
        "A deploy that waits its turn, lets newer deploys replace it while it waits, and gives up \
         on a runaway script:",
        "lockrun --name deploy/prod --wait 30m --supersede --timeout 20m -- ./deploy.sh",
    ),
    (
        "Backups read together; a migration waits for them and keeps new ones out:",
        "lockrun --name db --shared -- ./backup.sh\nlockrun --name db -- ./migrate.sh",
    ),
    (
        "Who holds a name, for a script:",
        "lockrun status deploy/prod -q && echo held\nlockrun status deploy/prod --json",
    ),
];
