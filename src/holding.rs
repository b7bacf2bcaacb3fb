//! The run form: acquire NAME (saying who holds it while waiting), check that the lease just won
//! still has its safety window ahead and that `--min-interval` allows a run (looked at before
//! joining the line too), check the window again if that took a while, start the command with its
//! token, and keep the lease while it runs.

use std::time::Duration;

use crate::backend::{
    AcquireRequest, Acquired, Backend, Grant, HolderInfo, IntervalClaim, Lease, has_secret,
};
use crate::clock::{BootInstant, BootTimer};
use crate::config::RunConfig;
use crate::exit::{self, Error};
use crate::messages::{duration, printable};
use crate::supervisor::{self, Child, Launch, Outcome, Signals, Standby, unless_signalled};
use crate::{progress, timing::Timing};

/// How long the busy message may spend asking who holds the lock.
const BUSY_DETAIL_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a `--min-interval` run that found NAME held may spend seeing when NAME last ran: one
/// request's limit on every networked backend (the server has just answered, so it is there).
const INTERVAL_LOOK_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs the command under the lease; returns the status lockrun exits with.
pub async fn run(config: RunConfig) -> Result<u8, Error> {
    // Before waiting or spawning: a signal from now on is ours to handle, never lost.
    let mut signals =
        supervisor::listen().map_err(|e| Error::os("cannot install signal handlers", &e))?;
    // The supervisor's clock, made before anything is taken: a system that refuses it (no
    // descriptor left) ends the run here, not with the command already started.
    let timer = BootTimer::new().map_err(|e| Error::os("cannot create a timer", &e))?;
    // Opening may wait on the server (a first request that checks it answers): a signal ends
    // that wait as it ends the wait for the lock.
    let backend = unless_signalled(config.backend.open(), &mut signals)
        .await
        .map_err(|signal| interrupted_waiting(signal, &config))??;
    let mut request = AcquireRequest {
        name: config.name.clone(),
        limit: config.limit,
        mode: config.mode,
        ttl: config.timing.ttl,
        deadline: config.wait.map(|wait| BootInstant::now() + wait),
        holder: HolderInfo::current(config.note.clone(), config.mode),
        supersede: config.supersede,
        answered: false,
    };
    // Only a waiter supersedes: a run that tries once (`--no-wait`) never stands in line, so it
    // must not make the waiters there give up.
    request.supersede &= request.waits();
    crate::info!("acquiring {} on {}", config.name, backend.describe());
    // Filled while the acquisition waits (see `Standby`), and disarmed if the run ends unused.
    let mut standby = Standby::default();
    let (lease, timing) = loop {
        let lease = acquire(&*backend, &request, &config, &mut signals, &mut standby).await?;
        let grant = lease.grant();
        let timing = grant
            .ttl
            .map_or(config.timing, |ttl| config.timing.for_granted(ttl));
        // A lease whose answer came too late (a slow reply path) must not be used: the server may
        // already have expired it and handed it on.
        if let Some(late) = too_late(&grant, &timing, BootInstant::now()) {
            release_unused(lease).await;
            if request.expired() {
                return Err(Error::LeaseLost(format!(
                    "the lease on {} was granted too late to use ({late}), and --wait ran out",
                    config.name
                )));
            }
            crate::warn!(
                "the lease on {} was granted too late to use ({late}); asking again",
                config.name
            );
            // The backend answers (too slowly): a try that now gets no answer at all is an
            // outage to ride out within --wait, not an unreachable backend.
            request.answered = true;
            continue;
        }
        break (lease, timing);
    };
    let grant = lease.grant();
    crate::info!(
        "acquired {} (token {}, slot {})",
        config.name,
        grant.token,
        grant.slot
    );
    if let Some(granted) = grant.ttl
        && granted != config.timing.ttl
    {
        // etcd raises a short lease to its minimum; ZooKeeper also lowers a long one to its
        // maximum session timeout.
        let bound = match granted > config.timing.ttl {
            true => "its minimum",
            false => "its maximum",
        };
        crate::info!(
            "the backend granted a {} lease for the {} asked for ({bound}); the command is told {} ms",
            duration(granted),
            duration(config.timing.ttl),
            granted.as_millis()
        );
    }
    if let Some(interval) = config.min_interval
        && let Err(e) = unless_signalled(claim_interval(&*backend, &config, interval), &mut signals)
            .await
            .unwrap_or_else(|signal| Err(interrupted_starting(signal, &config)))
    {
        release_unused(lease).await;
        return Err(e);
    }
    // The claim may have taken long (a slow server, or etcd settling a run right at its
    // interval's end): the command starts only while the lease's safety window is still ahead.
    if let Some(late) = too_late(&grant, &timing, BootInstant::now()) {
        release_unused(lease).await;
        return Err(Error::LeaseLost(format!(
            "the lease on {} came too close to its end while --min-interval was checked ({late}); the command was not started",
            config.name
        )));
    }
    run_command(lease, timing, &config, &mut signals, standby, timer).await
}

/// Why a lease granted as `grant` may no longer start the command at `now` ("Xs after it was
/// asked for, against a Ys lease"): the point where the supervisor would stop the command unless
/// a renewal confirmed the lease is behind. `None` while it is ahead, and always for a kernel lock.
fn too_late(grant: &Grant, timing: &Timing, now: BootInstant) -> Option<String> {
    let ttl = grant.ttl?;
    (now >= timing.stop_at(grant.sent_at + ttl)).then(|| {
        format!(
            "{} after it was asked for, against a {} lease",
            duration(now.saturating_since(grant.sent_at)),
            duration(ttl)
        )
    })
}

/// Waits for the lease, printing who holds it every `--progress`, until it is held, the wait
/// runs out, a newer `--supersede` waiter takes the place, or a signal ends the wait. A
/// `--min-interval` run tries once first, and finding NAME held, sees whether NAME ran too
/// recently before it joins the line.
async fn acquire(
    backend: &dyn Backend,
    request: &AcquireRequest,
    config: &RunConfig,
    signals: &mut Signals,
    standby: &mut Standby,
) -> Result<Box<dyn Lease>, Error> {
    if let Some(interval) = config.min_interval
        && request.waits()
    {
        // A try, not a wait: it supersedes nobody (if it skips, it never waited at all).
        let once = AcquireRequest {
            deadline: Some(BootInstant::now()),
            supersede: false,
            ..request.clone()
        };
        match wait_for(backend, &once, config, signals, standby).await? {
            (Acquired::Busy, _) => skip_if_ran_recently(backend, config, interval, signals).await?,
            ended => return lease_of(backend, config, ended).await,
        }
    }
    let ended = wait_for(backend, request, config, signals, standby).await?;
    lease_of(backend, config, ended).await
}

/// How `request` ended, and the signal that cut it short, if one did. If it does not end at once
/// (a wait in line, or a server's answer), the watchdog is forked meanwhile.
async fn wait_for(
    backend: &dyn Backend,
    request: &AcquireRequest,
    config: &RunConfig,
    signals: &mut Signals,
    standby: &mut Standby,
) -> Result<(Acquired, Option<nix::sys::signal::Signal>), Error> {
    let mut interrupted = None;
    let acquired = {
        let cancel = async {
            match signals.recv().await {
                Some(signal) => interrupted = Some(signal),
                None => std::future::pending().await,
            }
        };
        tokio::pin!(cancel);
        let waiting = meanwhile(backend.acquire(request, cancel), || standby.prepare());
        match config.progress.filter(|_| request.waits()) {
            None => waiting.await?,
            Some(every) => tokio::select! {
                acquired = waiting => acquired?,
                never = progress::report(backend, request, every) => match never {},
            },
        }
    };
    Ok((acquired, interrupted))
}

/// Runs `future`, and calls `on_wait` the first time it has to wait: work that would otherwise
/// come after it is done while it waits.
async fn meanwhile<F: Future>(future: F, on_wait: impl FnOnce()) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut on_wait = Some(on_wait);
    std::future::poll_fn(|cx| {
        let polled = future.as_mut().poll(cx);
        if polled.is_pending()
            && let Some(on_wait) = on_wait.take()
        {
            on_wait();
        }
        polled
    })
    .await
}

/// The lease an acquisition ended with, or the error that says why there is none.
async fn lease_of(
    backend: &dyn Backend,
    config: &RunConfig,
    (acquired, interrupted): (Acquired, Option<nix::sys::signal::Signal>),
) -> Result<Box<dyn Lease>, Error> {
    match acquired {
        Acquired::Held(lease) => Ok(lease),
        Acquired::Busy => Err(busy(backend, config).await),
        Acquired::Superseded(newer) => Err(Error::Busy {
            message: format!(
                "gave up waiting for {}: superseded by {}",
                config.name,
                newer.describe()
            ),
            code: config.busy_exit_code,
        }),
        Acquired::Cancelled => Err(match interrupted {
            Some(signal) => interrupted_waiting(signal, config),
            None => Error::internal("the wait was cancelled for no reason"),
        }),
    }
}

/// `--min-interval`, with NAME held by another: a run that would only find, once it holds NAME,
/// that NAME ran too recently skips now instead of queueing behind the holder (a fleet cron whose
/// job outlasts its period would pile up waiters that each skip in turn). Only a clear "too soon"
/// counts: when the backend cannot tell in time, or fails (a transient condition, such as a
/// server out of connections, is for the acquisition to ride out), the claim made once NAME is
/// held decides.
async fn skip_if_ran_recently(
    backend: &dyn Backend,
    config: &RunConfig,
    interval: Duration,
    signals: &mut Signals,
) -> Result<(), Error> {
    let look = tokio::time::timeout(
        INTERVAL_LOOK_TIMEOUT,
        backend.inspect().ran_within(&config.name, interval),
    );
    // A signal ends the run at once, as it ends a wait: a slow look is not worth waiting out.
    let looked = unless_signalled(look, signals)
        .await
        .map_err(|signal| interrupted_waiting(signal, config))?;
    match looked {
        Ok(Ok(Some(ago))) => Err(too_soon(config, ago, interval)),
        Ok(Ok(None)) => Ok(()),
        Ok(Err(e)) => {
            crate::debug!("cannot see when {} last ran: {e}", config.name);
            Ok(())
        }
        Err(_) => {
            crate::debug!("seeing when {} last ran took too long", config.name);
            Ok(())
        }
    }
}

/// `--min-interval`, once NAME is held: records this run, or is the busy error when NAME ran too
/// recently (by the backend's clock).
async fn claim_interval(
    backend: &dyn Backend,
    config: &RunConfig,
    interval: Duration,
) -> Result<(), Error> {
    match backend
        .inspect()
        .claim_interval(&config.name, interval)
        .await?
    {
        IntervalClaim::Claimed => Ok(()),
        IntervalClaim::TooSoon { ago } => Err(too_soon(config, ago, interval)),
    }
}

/// A signal ended the run before it held NAME.
fn interrupted_waiting(signal: nix::sys::signal::Signal, config: &RunConfig) -> Error {
    Error::Interrupted {
        signal,
        during: format!("while waiting for {}", config.name),
    }
}

/// A signal ended the run once it held NAME, before the command started.
fn interrupted_starting(signal: nix::sys::signal::Signal, config: &RunConfig) -> Error {
    Error::Interrupted {
        signal,
        during: format!("before starting the command under {}", config.name),
    }
}

fn too_soon(config: &RunConfig, ago: Duration, interval: Duration) -> Error {
    Error::Busy {
        message: format!(
            "{} ran {} ago, less than --min-interval {}: not running it again yet",
            config.name,
            duration(ago),
            duration(interval)
        ),
        code: config.busy_exit_code,
    }
}

/// Starts the command with its token and supervises it until it ends.
async fn run_command(
    lease: Box<dyn Lease>,
    timing: Timing,
    config: &RunConfig,
    signals: &mut Signals,
    standby: Standby,
    timer: BootTimer,
) -> Result<u8, Error> {
    let grant = lease.grant();
    let launch = Launch {
        program: &config.program,
        args: &config.args,
        env: vec![
            (config.token_env.clone(), grant.token.to_string()),
            ("LOCKRUN_NAME".into(), config.name.to_string()),
            ("LOCKRUN_TTL_MS".into(), timing.ttl.as_millis().to_string()),
            ("LOCKRUN_SLOT".into(), grant.slot.to_string()),
        ],
        env_remove: secret_variables(),
        sole_child: true,
        standby,
    };
    // A signal that came while the lease was being made ready (the `--min-interval` claim, a
    // grant too late to use) ends the run as it would have ended the wait: the command is not
    // started only to be signalled at once.
    if let Some(signal) = signals.try_recv() {
        release_unused(lease).await;
        return Err(interrupted_starting(signal, config));
    }
    let mut child = match Child::spawn(launch) {
        Ok(child) => child,
        Err(e) => {
            release_unused(lease).await;
            return Err(e);
        }
    };
    lease.started();
    crate::debug!("started the command as pid {}", child.pid());
    match supervisor::supervise(lease, timing, config.timeout, &mut child, signals, timer).await? {
        Outcome::Exited(code) => Ok(code),
        // The supervisor has said why; only the status is left to give.
        Outcome::LeaseLost(_) => Ok(exit::LEASE_LOST),
        Outcome::TimedOut => Ok(exit::TIMED_OUT),
    }
}

/// Gives back a lease that will not be used.
async fn release_unused(lease: Box<dyn Lease>) {
    if let Err(e) = lease.release().await {
        crate::warn!("release failed: {e}; the lease will expire by itself");
    }
}

/// The busy error, naming the holder when the backend can say quickly.
async fn busy(backend: &dyn Backend, config: &RunConfig) -> Error {
    let waited = match config.wait {
        Some(wait) if !wait.is_zero() => format!(" after waiting {}", duration(wait)),
        _ => String::new(),
    };
    let holder =
        match tokio::time::timeout(BUSY_DETAIL_TIMEOUT, backend.inspect().status(&config.name))
            .await
        {
            Ok(Ok(status)) => status
                .holders
                .first()
                .map(|h| match (h.token, h.host.is_empty()) {
                    (0, true) => format!(" (held by pid {}: not a lockrun, no token)", h.pid),
                    _ => format!(
                        " (held by pid {} on {}, token {})",
                        h.pid,
                        printable(&h.host),
                        h.token
                    ),
                })
                .unwrap_or_default(),
            _ => String::new(),
        };
    Error::Busy {
        message: format!("{} is busy{waited}{holder}", config.name),
        code: config.busy_exit_code,
    }
}

/// Inherited variables that would hand a password to the command.
fn secret_variables() -> Vec<String> {
    const KEY: &str = "LOCKRUN_BACKEND";
    let secret = std::env::var_os(KEY).is_some_and(|value| value.to_str().is_none_or(has_secret));
    match secret {
        true => vec![KEY.to_owned()],
        false => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_usable_until_the_supervisors_stop_point_and_a_kernel_lock_always() {
        let timing = Timing::new(Duration::from_secs(3), None, None).unwrap();
        let sent_at = BootInstant::now();
        let mut grant = Grant {
            token: 1,
            slot: 0,
            ttl: Some(Duration::from_secs(3)),
            sent_at,
        };
        let stop = timing.stop_at(sent_at + Duration::from_secs(3));
        let usable = |grant: &Grant, at| too_late(grant, &timing, at).is_none();
        assert!(usable(&grant, sent_at));
        assert!(usable(
            &grant,
            stop.saturating_sub(Duration::from_millis(1))
        ));
        assert!(!usable(&grant, stop));
        grant.ttl = None;
        assert!(usable(&grant, stop + Duration::from_secs(60)));
    }
}
