//! The conformance suite: the contract's scenarios, each written once (in the modules below) and
//! run on every backend by [`conformance!`], so that each shows as its own test,
//! `conformance::BACKEND::SCENARIO`. A backend without a capability the scenario exercises
//! (leases that expire, forced release, FIFO, a server) asserts its documented alternative instead
//! of skipping. Adding a backend is one [`Fixture`](crate::support::fixture::Fixture) and one
//! `conformance!` line at the end of this file.

mod exclusion;
mod failures;
mod inspection;
mod modes;
mod runs;
mod waiting;

/// The shortest lease of the scenarios that pause a holder or a waiter briefly: long enough that
/// the pause (a fraction of it) leaves a slow test server time to answer the renewal or heartbeat
/// it held up.
const BRIEF_PAUSES_LEASE: std::time::Duration = std::time::Duration::from_secs(6);

/// `conformance!(module, Fixture)`: one `#[test]` per scenario, on that fixture.
macro_rules! conformance {
    ($backend:ident, $fixture:ty) => {
        conformance!(@suite $backend, $fixture,
            exclusion::contention_loses_no_update,
            exclusion::tokens_strictly_rise_and_reach_the_child,
            exclusion::limit_three_admits_exactly_three,
            exclusion::tokens_rise_across_restarts,
            waiting::busy_exits_75_or_the_chosen_code,
            waiting::wait_runs_out_with_75_and_leaves_no_waiter,
            waiting::waiters_are_served_in_arrival_order,
            waiting::a_release_wakes_the_next_waiter,
            waiting::a_dead_waiter_does_not_block_the_line,
            waiting::a_waiter_that_gives_up_leaves_the_line_at_once,
            waiting::a_frozen_waiters_place_expires_and_is_never_used,
            waiting::a_waiter_frozen_briefly_keeps_its_place,
            waiting::a_waiter_dying_mid_line_keeps_the_order,
            exclusion::limit_three_with_ten_waiters_keeps_exactly_three,
            failures::a_crashed_holder_frees_the_lock_within_a_ttl,
            failures::server_killed_stops_the_holder_before_expiry,
            failures::server_paused_stops_the_holder_before_expiry,
            failures::silent_network_stops_the_holder_before_expiry,
            failures::a_brief_outage_is_ridden_through,
            failures::a_release_right_after_a_restart_frees_the_name,
            failures::a_frozen_holder_is_overtaken_and_stopped_when_it_wakes,
            failures::a_holder_frozen_briefly_keeps_its_lease,
            failures::a_command_that_ends_while_lockrun_is_frozen_past_its_lease_is_a_lost_lease,
            failures::forced_release_stops_every_holder_at_once,
            failures::a_command_ending_right_after_a_forced_release_is_a_lost_lease,
            inspection::status_and_list_show_the_contract_shape,
            inspection::the_longest_name_works_end_to_end,
            inspection::passwords_never_leak,
            inspection::unreachable_backend_exits_69_naming_it,
            inspection::silent_server_at_startup_exits_69,
            inspection::a_signal_while_the_server_is_silent_ends_the_run_at_once,
            inspection::malformed_urls_exit_64_without_the_password,
            inspection::the_drill_passes,
            modes::readers_share_and_writers_run_alone,
            modes::a_waiting_writer_goes_before_later_readers,
            modes::status_shows_modes_and_a_crashed_reader_frees_its_share,
            modes::supersede_runs_only_the_newest_waiter,
            modes::a_run_that_does_not_wait_supersedes_nobody,
            modes::min_interval_runs_once_per_period,
            modes::min_interval_skips_at_once_behind_a_recent_run,
            modes::min_interval_is_each_runs_own,
            modes::min_interval_lets_a_run_through_just_past_it,
            modes::shared_never_holds_beside_an_exclusive_limit_holder,
            runs::timeout_stops_the_command_with_124_and_frees_the_lock,
            runs::progress_names_the_holder_and_the_place_in_line,
            runs::the_ci_jobs_url_is_the_note,
            runs::nothing_outlives_a_killed_lockrun,
        );
    };
    (@suite $backend:ident, $fixture:ty, $($module:ident::$scenario:ident),* $(,)?) => {
        mod $backend {
            $(
                #[test]
                fn $scenario() {
                    super::$module::$scenario::<$fixture>();
                }
            )*
        }
    };
}

conformance!(file, crate::support::file_dir::FileDir);
conformance!(redis, crate::support::redis_server::RedisServer);
conformance!(etcd, crate::support::etcd_cluster::Etcd<1>);
conformance!(etcd_cluster, crate::support::etcd_cluster::Etcd<3>);
conformance!(postgres, crate::support::postgres_server::PgServer);
conformance!(postgres_pgbouncer, crate::support::pgbouncer::Pooled);
conformance!(
    postgres_pgbouncer_listen,
    crate::support::pgbouncer::PooledListening
);
conformance!(mysql, crate::support::mysql_server::MySqlServer);
conformance!(zookeeper, crate::support::zk_ensemble::ZooKeeper<1>);
conformance!(redlock, crate::support::redlock_servers::RedlockServers<3>);
conformance!(dynamodb, crate::support::dynalite_server::Dynalite);
