# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_lockrun_global_optspecs
    string join \n name= ttl= renew= w/wait= n/no-wait E/busy-exit-code= limit= s/shared token-env= kill-after= timeout= min-interval= supersede progress= note= b/backend= backend-file= q/quiet v/verbose h/help V/version
end

function __fish_lockrun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_lockrun_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_lockrun_using_subcommand
    set -l cmd (__fish_lockrun_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l name -d 'Lease name: 1–200 bytes of A-Z a-z 0-9 . _ : - in segments joined by single /. Names are per backend: on the default backend each user has a state directory of their own, so the same name run by two users does not exclude (share one with --backend file:///DIR)' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l ttl -d 'Lease length, e.g. 500ms, 15s, 2m. A backend may raise it to its minimum; the command is told the granted value in $LOCKRUN_TTL_MS' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l renew -d 'Renewal interval (at least 10ms); must be shorter than the TTL. Default: a third of the TTL' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s w -l wait -d 'Give up waiting for the lock after this long and exit 75 (see --busy-exit-code). A bare number is seconds, as for flock -w. Default: wait forever' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s E -l busy-exit-code -d 'Exit status when the lock was not acquired; 0 skips quietly, for cron' -r
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l limit -d 'Semaphore: up to N (at most 1024) holders at once, each with its own slot and token. All users of NAME must pass the same N' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l token-env -d 'Environment variable that carries the fencing token to the command (not a LOCKRUN_* name: lockrun sets those itself)' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l kill-after -d 'Grace between SIGTERM and SIGKILL when the command is stopped (lease lost, --timeout). Default: a quarter of the TTL, at most 10s. On a lost lease, TERM is sent early enough that TERM, the grace and KILL all land before the lease could expire on the backend' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l timeout -d 'The command\'s own time limit: when it runs out, TERM the command, KILL it after --kill-after, release the lease and exit 124 (as timeout(1) does). Distinct from --wait, the time to get the lock' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l min-interval -d 'Run at most once per DURATION across the fleet: if NAME was last acquired less than DURATION ago (by anyone, on any host), do not run; exit with the busy code. Measured by the backend\'s clock where it has one, so skewed host clocks cannot cause a second run. The time is recorded when the lease is taken, whether or not the command then succeeds' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l progress -d 'While waiting, print one line this often saying who holds NAME (host, pid, note, for how long) and the place in line; the first after 1s. 0 never prints; -q silences it too' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l note -d 'Free text stored with the holder and shown by `status` and to waiters (a CI job URL, a ticket); longer than 1024 bytes it is cut, with a warning. Default: the job\'s URL when run in GitHub Actions, GitLab CI, Buildkite, Jenkins or CircleCI' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s b -l backend -d 'Backend URL: file:///DIR (one host, no server), redis://[USER:PASS@]HOST[:PORT][/DB], rediss://… (TLS), etcd://[USER:PASS@]HOST:PORT[,HOST:PORT…][?cacert=CA.pem] (TLS with cacert, plus cert= and key= for client certificates), postgres://… or postgresql://… (sslmode=require for TLS; lockrun_schema=NAME picks the schema of lockrun\'s tables), dynamodb://TABLE[?region=R&endpoint=URL&create=false] (AWS credentials from the standard chain: environment, AWS_PROFILE, SSO, instance role; the table is created on first use)' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l backend-file -d 'Read the backend URL from the first line of FILE instead, so that a password appears on no command line and in no environment. The file must be private (mode 0600) when the URL holds a password' -r -F
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s n -l no-wait -d 'Try once and exit 75 if the lock is busy (same as --wait 0, and as flock -n)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s s -l shared -d 'Shared (reader) mode, as flock -s: any number of shared holders at once, never together with an exclusive holder. Waiters are served in arrival order, so an exclusive waiter is never starved by readers that came after it. Not with --limit'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -l supersede -d 'Newest-wins waiting, for deploys: a newer waiter on NAME that also passed --supersede makes this one give up with the busy code ("superseded by ..."). The running holder is never touched (to cancel it, use release --force)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s q -l quiet -d 'Print only errors (and, for status, nothing: the exit status says whether NAME is held)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s v -l verbose -d 'Print more: acquisition, token, renewals (repeat for more)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -s V -l version -d 'Print version'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -a "status" -d 'Show who holds NAME, since when, its token, the lease left, and the waiters in order'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -a "list" -d 'List the names currently held'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -a "release" -d 'Break-glass: drop NAME\'s holder(s) on a networked backend; each is told at once, stops its command and exits 76'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -a "drill" -d 'Rehearse a paused holder on the backend, and check that fencing tokens stop it'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand status" -s b -l backend -d 'Backend URL: file:///DIR (one host, no server), redis://[USER:PASS@]HOST[:PORT][/DB], rediss://… (TLS), etcd://[USER:PASS@]HOST:PORT[,HOST:PORT…][?cacert=CA.pem] (TLS with cacert, plus cert= and key= for client certificates), postgres://… or postgresql://… (sslmode=require for TLS; lockrun_schema=NAME picks the schema of lockrun\'s tables), dynamodb://TABLE[?region=R&endpoint=URL&create=false] (AWS credentials from the standard chain: environment, AWS_PROFILE, SSO, instance role; the table is created on first use)' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand status" -l backend-file -d 'Read the backend URL from the first line of FILE instead, so that a password appears on no command line and in no environment. The file must be private (mode 0600) when the URL holds a password' -r -F
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand status" -l json -d 'Print JSON: {"name", "held", "limit", "waiters", "holders": [...], "queue": [...]}'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand status" -s q -l quiet -d 'Print only errors (and, for status, nothing: the exit status says whether NAME is held)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand status" -s v -l verbose -d 'Print more: acquisition, token, renewals (repeat for more)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand list" -s b -l backend -d 'Backend URL: file:///DIR (one host, no server), redis://[USER:PASS@]HOST[:PORT][/DB], rediss://… (TLS), etcd://[USER:PASS@]HOST:PORT[,HOST:PORT…][?cacert=CA.pem] (TLS with cacert, plus cert= and key= for client certificates), postgres://… or postgresql://… (sslmode=require for TLS; lockrun_schema=NAME picks the schema of lockrun\'s tables), dynamodb://TABLE[?region=R&endpoint=URL&create=false] (AWS credentials from the standard chain: environment, AWS_PROFILE, SSO, instance role; the table is created on first use)' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand list" -l backend-file -d 'Read the backend URL from the first line of FILE instead, so that a password appears on no command line and in no environment. The file must be private (mode 0600) when the URL holds a password' -r -F
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand list" -l json -d 'Print a JSON array of status objects'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand list" -s q -l quiet -d 'Print only errors (and, for status, nothing: the exit status says whether NAME is held)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand list" -s v -l verbose -d 'Print more: acquisition, token, renewals (repeat for more)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand release" -s b -l backend -d 'Backend URL: file:///DIR (one host, no server), redis://[USER:PASS@]HOST[:PORT][/DB], rediss://… (TLS), etcd://[USER:PASS@]HOST:PORT[,HOST:PORT…][?cacert=CA.pem] (TLS with cacert, plus cert= and key= for client certificates), postgres://… or postgresql://… (sslmode=require for TLS; lockrun_schema=NAME picks the schema of lockrun\'s tables), dynamodb://TABLE[?region=R&endpoint=URL&create=false] (AWS credentials from the standard chain: environment, AWS_PROFILE, SSO, instance role; the table is created on first use)' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand release" -l backend-file -d 'Read the backend URL from the first line of FILE instead, so that a password appears on no command line and in no environment. The file must be private (mode 0600) when the URL holds a password' -r -F
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand release" -l force -d 'Required: confirms that you mean to break another process\'s lease'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand release" -s q -l quiet -d 'Print only errors (and, for status, nothing: the exit status says whether NAME is held)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand release" -s v -l verbose -d 'Print more: acquisition, token, renewals (repeat for more)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand drill" -l ttl -d 'Lease length for the drill\'s holders, e.g. 1s, 2s. A backend may raise it to its minimum (etcd does)' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand drill" -l name -d 'Lease name for the drill; it must be free. Default: lockrun-drill/HOST-PID, which no real lock uses' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand drill" -s b -l backend -d 'Backend URL: file:///DIR (one host, no server), redis://[USER:PASS@]HOST[:PORT][/DB], rediss://… (TLS), etcd://[USER:PASS@]HOST:PORT[,HOST:PORT…][?cacert=CA.pem] (TLS with cacert, plus cert= and key= for client certificates), postgres://… or postgresql://… (sslmode=require for TLS; lockrun_schema=NAME picks the schema of lockrun\'s tables), dynamodb://TABLE[?region=R&endpoint=URL&create=false] (AWS credentials from the standard chain: environment, AWS_PROFILE, SSO, instance role; the table is created on first use)' -r -f
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand drill" -l backend-file -d 'Read the backend URL from the first line of FILE instead, so that a password appears on no command line and in no environment. The file must be private (mode 0600) when the URL holds a password' -r -F
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand drill" -l json -d 'Print the report as one JSON object: "verdict", "failed", "checks", "a", "b", "writes", "granted_ttl_ms", "round_trip_ms", "clock_skew_ms", ...'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand drill" -s q -l quiet -d 'Print only errors (and, for status, nothing: the exit status says whether NAME is held)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand drill" -s v -l verbose -d 'Print more: acquisition, token, renewals (repeat for more)'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand drill" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from status list release drill help" -f -a "status" -d 'Show who holds NAME, since when, its token, the lease left, and the waiters in order'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from status list release drill help" -f -a "list" -d 'List the names currently held'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from status list release drill help" -f -a "release" -d 'Break-glass: drop NAME\'s holder(s) on a networked backend; each is told at once, stops its command and exits 76'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from status list release drill help" -f -a "drill" -d 'Rehearse a paused holder on the backend, and check that fencing tokens stop it'
complete -c lockrun -n "not __lockrun_after_dashdash; and __fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from status list release drill help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'

# After `--`: the command and its arguments, not lockrun's options.
function __lockrun_after_dashdash
    contains -- -- (commandline -opc)
end

function __lockrun_complete_command
    set -l tokens (commandline -opc)
    set -l at (contains -i -- -- $tokens)
    complete -C (string join ' ' -- $tokens[(math $at + 1)..-1] (commandline -ct))
end

complete -c lockrun -n __lockrun_after_dashdash -f -a '(__lockrun_complete_command)'
