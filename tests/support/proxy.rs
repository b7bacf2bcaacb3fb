//! A TCP proxy between lockrun and a server that can go silent: in blackhole mode it keeps every
//! connection open (and accepts new ones) but forwards nothing in either direction, as a network
//! that drops packets would. Threads stop when the proxy is dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(20);

/// A running proxy to `127.0.0.1:upstream`.
pub struct Proxy {
    port: u16,
    blackhole: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("proxy address").port();
        let blackhole = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (hole, halt) = (Arc::clone(&blackhole), Arc::clone(&stop));
        thread::spawn(move || accept_loop(listener, upstream, hole, halt));
        Proxy {
            port,
            blackhole,
            stop,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops forwarding, without closing anything.
    pub fn blackhole(&self) {
        self.blackhole.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: u16,
    blackhole: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let _ = client.set_nonblocking(false);
                let server = if blackhole.load(Ordering::SeqCst) {
                    None
                } else {
                    TcpStream::connect(("127.0.0.1", upstream)).ok()
                };
                let Some(server) = server else {
                    // Hold the connection open, silently, until the proxy stops.
                    let halt = Arc::clone(&stop);
                    thread::spawn(move || {
                        while !halt.load(Ordering::SeqCst) {
                            thread::sleep(POLL);
                        }
                        drop(client);
                    });
                    continue;
                };
                for (from, to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ] {
                    if let (Ok(from), Ok(to)) = (from, to) {
                        let (hole, halt) = (Arc::clone(&blackhole), Arc::clone(&stop));
                        thread::spawn(move || pump(from, to, hole, halt));
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
            Err(_) => thread::sleep(POLL),
        }
    }
}

/// Copies `from` to `to` until either closes; in blackhole mode, reads and drops everything.
fn pump(mut from: TcpStream, mut to: TcpStream, blackhole: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if !blackhole.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    if !blackhole.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
        let _ = to.shutdown(Shutdown::Write);
    }
}
