//! The fencing token of a `redlock://` acquisition: a max-register kept by a quorum of masters.
//!
//! Each master keeps a counter per name. A master that grants proposes `max(counter + 1, its
//! clock in µs)` and records it (acquire.lua); the acquisition's token is the largest proposal of
//! its winning round; then [`write_back`] raises the counter to the token on a quorum of masters
//! — each master refusing a token that is not above what it has already seen (from another
//! acquisition, or its own proposal that came after the round was decided), which a quorum of
//! other masters must then accept, or the token is raised past it — and only after that does the
//! command start.
//!
//! **Why every later acquisition gets a larger token.** Let A's command start with token `a`. A's
//! last write-back round ended before that, with a quorum `W_A` of masters whose counters were then
//! at least `a`. Now let B be an acquisition that comes after A: one whose grant round won a master
//! of A's grant quorum only once A's hold there had ended (A released it after its command, or it
//! expired; B needs such a master, since two quorums share one). A's command started only while its
//! lease was still valid, so A's hold outlived A's write-back: B's grants, and so B's write-back
//! round that follows them, come after A's write-back ended. B's write-back quorum `W_B` shares a
//! master `m` with `W_A`, and `m` saw A's write-back before B's. Then:
//!
//! - if `m` kept its data, its counter is at least `a` when B's token `b` reaches it, and `m`
//!   accepts `b` only if `b` is above its counter, or equals a proposal `m` made for B itself. A
//!   proposal `m` made for B before A's write-back reached it is below `a` (`m` accepted `a`, so
//!   nothing it had seen from anyone else was at or above `a`); one made after it is above `a`.
//!   Either way `b > a` — or `m` refuses, and B outbids every counter that refused. So `b > a`.
//! - if `m` restarted empty meanwhile, the clock floor takes over: `a` is at most some master's
//!   clock reading at A's grant (plus one per grant within the same microsecond), and B's grant
//!   came from a quorum after A's write-back, each master proposing at least its own clock; a
//!   master whose clock is not behind the one that produced `a` by more than the time between the
//!   two acquisitions proposes more than `a`.
//!
//! So B's token is larger as long as a quorum kept its data or its clock — a minority restarted
//! empty, or one master's clock stepped back, changes nothing. What it assumes is Redlock's own
//! premise, bounded clock drift: a hold must not end early on a master (its clock jumping forward)
//! before the holder's write-back has ended. lockrun checks, before the command starts, that the
//! write-back ended while the lease was still valid by the boot clock less the drift; a lease that
//! did not is released unused. A pause of A's lockrun *after* its command started is what fencing
//! is for: B then holds beside A, but `b > a`, and storage that checks the token rejects A's
//! stale writes.

use std::time::Duration;

use super::masters::Masters;
use super::scripts::{Call, FENCE, line_keys};
use crate::backend::redis::keys::Keys;
use crate::backend::{BackendError, Mode};

/// How many times a token may be outbid before the try gives up (each outbid raises it above
/// every counter that answered).
const MAX_BIDS: usize = 8;

/// The hold whose token is written back.
pub struct Hold<'a> {
    pub owner: &'a str,
    pub mode: Mode,
    /// The slot a quorum granted (0 for a shared hold).
    pub slot: u32,
    pub limit: u32,
}

/// Writes `token` back on a quorum of masters (outbidding counters that are already at or above
/// it); returns the token written. Each round's requests give up after `limit`.
pub async fn write_back(
    masters: &Masters,
    keys: &Keys,
    hold: Hold<'_>,
    token: u64,
    limit: Duration,
) -> Result<u64, BackendError> {
    let mut token = token;
    for _ in 0..MAX_BIDS {
        let call = Call::new(&FENCE)
            .keys(line_keys(keys))
            .keys(match hold.mode {
                Mode::Exclusive => keys.slots(hold.limit),
                Mode::Shared => Vec::new(),
            })
            .arg(hold.owner)
            .arg(token)
            .arg(match hold.mode {
                Mode::Exclusive => "x",
                Mode::Shared => "s",
            })
            .arg(hold.slot)
            .arg(keys.wake_prefix());
        let mut round = masters.call::<(i64, i64)>(&call, limit);
        let (mut written, mut outbid, mut failures) = (0, None::<u64>, Vec::new());
        while let Some((i, answer)) = round.next().await {
            match answer {
                Ok((0, _)) => written += 1,
                Ok((_, seen)) => {
                    let seen = u64::try_from(seen).unwrap_or(0);
                    outbid = Some(outbid.map_or(seen, |o| o.max(seen)));
                }
                Err(e) => failures.push((i, e)),
            }
            if written >= masters.quorum() {
                for (_, e) in &failures {
                    crate::debug!("{e}");
                }
                return Ok(token);
            }
            if written + round.outstanding() < masters.quorum() {
                break;
            }
        }
        match outbid {
            Some(seen) => {
                crate::debug!("fencing token {token} outbid by {seen} on a master; raising it");
                token = token.max(seen) + 1;
            }
            None => return Err(masters.no_quorum(failures)),
        }
    }
    Err(BackendError::Failed {
        endpoint: format!("the redlock masters ({})", masters.len()),
        reason: format!("the fencing token was outbid {MAX_BIDS} times in a row"),
    })
}
