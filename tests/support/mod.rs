//! What the tests share, one job per file: running the real binary ([`lockrun`]), a test's scene
//! and its holders, waiting with bounds, the backend fixtures and the servers behind them, the
//! fault proxy, the contract's lease timing, certificates, the machine's prerequisites and the man page.

pub mod asserts;
pub mod backend_scenarios;
pub mod certs;
pub mod cluster;
pub mod dynalite_server;
pub mod etcd_cluster;
pub mod file_dir;
pub mod fixture;
pub mod holder;
pub mod lockrun;
pub mod manual;
pub mod mysql_server;
pub mod pgbouncer;
pub mod postgres_server;
pub mod proxy;
pub mod redis_server;
pub mod redlock_servers;
pub mod scene;
pub mod seccomp;
pub mod server_process;
pub mod server_user;
pub mod single_server;
pub mod timing;
pub mod tools;
pub mod wait;
pub mod zk_ensemble;
