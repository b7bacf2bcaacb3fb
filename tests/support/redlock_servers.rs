//! N private Redis masters per test as one `redlock://` backend: the Redis fixture
//! ([`RedisServer`]) started N times, each on a free loopback port in a temporary directory of its
//! own, killed on drop. As a [`Fixture`], a fault hits every master (the backend as a whole goes
//! away, freezes or restarts), and the proxy stands in front of all of them with one set of faults;
//! the Redlock tests reach single masters through [`RedlockServers::master`] and
//! [`RedlockServers::proxied_each`].

use std::path::Path;

use super::fixture::{Counter, Fixture, Reachable, free_ports};
use super::proxy::Proxy;
use super::redis_server::RedisServer;
use super::server_process::ServerProcess;
use super::single_server::SingleServer;

/// `N` independent `redis-server` masters owned by one test.
pub struct RedlockServers<const N: usize> {
    masters: Vec<RedisServer>,
    password: Option<String>,
}

impl<const N: usize> RedlockServers<N> {
    /// `N` masters whose wall clocks are faked through libfaketime (`preload`, see
    /// `tools::faketime_for_redis`), master `i` offset by what the file `offsets/i` holds (see
    /// [`RedisServer::with_faketime`]).
    pub fn with_faketime(preload: &str, offsets: &Path) -> Self {
        let masters = (0..N)
            .map(|i| {
                let offset = offsets.join(i.to_string());
                std::fs::write(&offset, "+0\n").expect("write a clock offset");
                RedisServer::with_faketime(preload, &offset)
            })
            .collect();
        RedlockServers {
            masters,
            password: None,
        }
    }

    /// Master `i`.
    pub fn master(&self, i: usize) -> &RedisServer {
        &self.masters[i]
    }

    /// Master `i`, to kill or restart.
    pub fn master_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.masters[i]
    }

    /// The `redlock://` URL that reaches the masters on `ports`, in that order.
    pub fn url_on(&self, ports: &[u16]) -> String {
        let userinfo = self
            .password
            .as_ref()
            .map_or_else(String::new, |password| format!(":{password}@"));
        let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!("redlock://{userinfo}{}", hosts.join(","))
    }

    /// A proxy of its own in front of each master (a fault on one hits that master only), and the
    /// URL through them.
    pub fn proxied_each(&self) -> (Vec<Proxy>, String) {
        let proxies: Vec<Proxy> = self
            .masters
            .iter()
            .map(|m| Proxy::start(m.port()))
            .collect();
        let ports: Vec<u16> = proxies.iter().map(Proxy::port).collect();
        let url = self.url_on(&ports);
        (proxies, url)
    }

    fn ports(&self) -> Vec<u16> {
        self.masters.iter().map(RedisServer::port).collect()
    }

    /// Every master's token counter for NAME (0 where it has none).
    pub fn counters(&self, name: &str) -> Vec<u64> {
        self.masters
            .iter()
            .map(|m| {
                m.ask(&["HGET", &format!("lockrun:{{{name}}}:meta"), "token"])
                    .parse()
                    .unwrap_or(0)
            })
            .collect()
    }
}

impl<const N: usize> Reachable for RedlockServers<N> {
    fn url(&self) -> String {
        self.url_on(&self.ports())
    }

    /// One proxy, with one port per master, whose faults hit every master at once.
    fn proxied(&self) -> Option<(Proxy, String)> {
        let proxy = Proxy::start_each(&self.ports());
        let url = self.url_on(proxy.ports());
        Some((proxy, url))
    }

    fn servers(&self) -> Vec<&ServerProcess> {
        self.masters.iter().flat_map(RedisServer::servers).collect()
    }
}

impl<const N: usize> Fixture for RedlockServers<N> {
    fn start() -> Self {
        RedlockServers {
            masters: (0..N).map(|_| RedisServer::start()).collect(),
            password: None,
        }
    }

    fn with_password(password: &str) -> Option<Self> {
        Some(RedlockServers {
            masters: (0..N)
                .map(|_| RedisServer::with_password(password).expect("a Redis password"))
                .collect(),
            password: Some(password.to_owned()),
        })
    }

    /// `authority` as the first master, and two more where nothing listens.
    fn url_at(authority: &str) -> String {
        format!("redlock://{authority},127.0.0.1:2,127.0.0.1:3")
    }

    /// Masters on N free ports; the message must name the first.
    fn unreachable() -> (String, String) {
        // Distinct: a port drawn twice would make the URL malformed (a master named twice).
        let endpoints: Vec<String> = free_ports(N)
            .into_iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let url = format!("redlock://u:hunter2@{}", endpoints.join(","));
        (url, endpoints[0].clone())
    }

    fn malformed() -> Vec<(String, String)> {
        vec![
            (
                "redlock://u:hunter2@127.0.0.1:1,127.0.0.1:2".into(),
                "at least 3".into(),
            ),
            (
                "redlock://u:hunter2@127.0.0.1:1,127.0.0.1:2,127.0.0.1:1".into(),
                "named twice".into(),
            ),
        ]
    }

    fn restart(&mut self, wipe: bool) {
        for master in &mut self.masters {
            master.restart(wipe);
        }
    }

    /// The value a quorum of masters holds at least: the token written back last.
    fn counter(&self, name: &str) -> Counter {
        let mut counters = self.counters(name);
        counters.sort_unstable_by(|a, b| b.cmp(a));
        Counter::Exact(counters[N / 2])
    }
}
