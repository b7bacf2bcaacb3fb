//! The run form: acquire NAME, start the command with its token, keep the lease while it runs.

use std::time::Duration;

use crate::backend::{AcquireRequest, Backend, HolderInfo, has_secret};
use crate::clock::BootInstant;
use crate::config::RunConfig;
use crate::exit::{self, Error};
use crate::supervisor::{self, Child, Launch, Outcome};

/// How long the busy message may spend asking who holds the lock.
const BUSY_DETAIL_TIMEOUT: Duration = Duration::from_secs(1);

/// Runs the command under the lease; returns the status lockrun exits with.
pub async fn run(config: RunConfig) -> Result<u8, Error> {
    // Before waiting or spawning: a signal from now on is ours to handle, never lost.
    let mut signals = supervisor::listen()
        .map_err(|e| Error::internal(format!("cannot install signal handlers: {e}")))?;
    let backend = config.backend.open().await?;
    let request = AcquireRequest {
        name: config.name.clone(),
        limit: config.limit,
        ttl: config.timing.ttl,
        deadline: config.wait.map(|wait| BootInstant::now() + wait),
        holder: HolderInfo::current(config.note.clone()),
    };
    crate::info!("acquiring {} on {}", config.name, backend.describe());
    let acquired = tokio::select! {
        acquired = backend.acquire(&request) => acquired?,
        Some(signal) = signals.recv() => {
            return Err(Error::Interrupted { signal, during: format!("while waiting for {}", config.name) });
        }
    };
    let Some(lease) = acquired else {
        return Err(busy(&*backend, &config).await);
    };
    let grant = lease.grant();
    let timing = grant
        .ttl
        .map_or(config.timing, |ttl| config.timing.for_granted(ttl));
    crate::info!(
        "acquired {} (token {}, slot {})",
        config.name,
        grant.token,
        grant.slot
    );

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
    };
    let mut child = match Child::spawn(launch) {
        Ok(child) => child,
        Err(e) => {
            if let Err(release) = lease.release().await {
                crate::warn!("release failed: {release}; the lease will expire by itself");
            }
            return Err(e);
        }
    };
    crate::debug!("started the command as pid {}", child.pid());
    match supervisor::supervise(lease, timing, &mut child, &mut signals).await? {
        Outcome::Exited(code) => Ok(code),
        // The supervisor has said why; only the status is left to give.
        Outcome::LeaseLost(_) => Ok(exit::LEASE_LOST),
    }
}

/// The busy error, naming the holder when the backend can say quickly.
async fn busy(backend: &dyn Backend, config: &RunConfig) -> Error {
    let waited = match config.wait {
        Some(wait) if !wait.is_zero() => {
            format!(" after waiting {}", humantime::format_duration(wait))
        }
        _ => String::new(),
    };
    let holder = match tokio::time::timeout(BUSY_DETAIL_TIMEOUT, backend.status(&config.name)).await
    {
        Ok(Ok(status)) => status
            .holders
            .first()
            .map(|h| format!(" (held by pid {} on {}, token {})", h.pid, h.host, h.token))
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
    std::env::vars_os()
        .filter_map(|(key, value)| {
            let key = key.into_string().ok()?;
            let secret = key == "LOCKRUN_BACKEND" && value.to_str().is_none_or(has_secret);
            secret.then_some(key)
        })
        .collect()
}
