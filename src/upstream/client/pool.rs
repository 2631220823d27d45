//! Idle keep-alive connections to the peers, kept by the client itself
//! instead of in Pingora's connection pool.
//!
//! Pingora's pool (`TransportConnector::release_stream`/`get_stream`) spawns
//! a task per released connection that watches it while it is idle (a
//! oneshot, a `Notify`, an LRU entry, a timer and a mutex per connection),
//! and taking a connection wakes that task and waits for it to hand the
//! connection back: on the full gateway's search call that was a task spawn,
//! two cross-thread wake-ups (about 0.8 `eventfd` writes per request at
//! saturation), a timer and a `getpeername` per request. Here an idle
//! connection is a plain entry in a per-peer stack:
//!
//! - taken most recent first; one idle longer than the idle timeout, or
//!   that is readable (the peer closed it, or sent something unasked), is
//!   closed instead of used, as Pingora's reuse test does;
//! - entries are keyed by the peer's index, which names one address, TLS
//!   mode and server name for the client's lifetime, so a connection is
//!   only ever handed back to requests for the peer it was opened to
//!   (Pingora re-checks that with `getpeername` because its key is a hash);
//! - at most `pool_size` are kept in all (the longest idle is closed to make
//!   room, as Pingora's LRU does);
//! - a sweep on the client's background runtime closes, once a second,
//!   those idle past the timeout and those the peer closed, so an idle
//!   gateway does not hold them (Pingora's watcher task did this per
//!   connection).

use pingora::protocols::Stream;
// foldhash, not std's SipHash: the keys are the client's own peer indexes, never a client's
// input, so SipHash's resistance to chosen colliding keys buys nothing, and every call takes
// and puts back a connection (a lookup each).
use foldhash::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, ReadBuf};

/// How often idle connections are looked at while the client is idle.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A peer's index, and whether the connections carry writes (kept apart
/// from those of reads, as Pingora's `group_key` kept them).
pub(super) type Key = (usize, bool);

struct Idle {
    stream: Stream,
    since: Instant,
}

#[derive(Default)]
struct Stacks {
    /// Per peer index, oldest first.
    by_peer: HashMap<Key, Vec<Idle>>,
    count: usize,
}

pub(super) struct Pool {
    stacks: Mutex<Stacks>,
    size: usize,
    idle_timeout: Duration,
}

impl Pool {
    /// A pool of at most `size` idle connections, each kept `idle_timeout`;
    /// swept on `background` when there is one.
    pub(super) fn new(
        size: usize,
        idle_timeout: Duration,
        background: Option<&tokio::runtime::Handle>,
    ) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            stacks: Mutex::new(Stacks::default()),
            size,
            idle_timeout,
        });
        if let Some(bg) = background {
            let weak = Arc::downgrade(&pool);
            bg.spawn(sweep(weak));
        }
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stacks> {
        self.stacks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection to peer `peer` that can carry another request.
    pub(super) fn take(&self, peer: Key) -> Option<Stream> {
        loop {
            let idle = {
                let mut s = self.lock();
                let stack = s.by_peer.get_mut(&peer)?;
                let idle = stack.pop()?;
                s.count -= 1;
                idle
            };
            // Closed outside the lock (a TLS close may write).
            let mut stream = idle.stream;
            if idle.since.elapsed() <= self.idle_timeout && reusable(&mut stream) {
                return Some(stream);
            }
        }
    }

    /// Keep `stream` (its answer read to the end) for the next request to
    /// peer `peer`.
    pub(super) fn put(&self, peer: Key, mut stream: Stream) {
        if self.size == 0 || !reusable(&mut stream) {
            return;
        }
        let evicted = {
            let mut s = self.lock();
            let evicted = if s.count >= self.size {
                s.count -= 1;
                oldest(&mut s.by_peer)
            } else {
                None
            };
            s.by_peer.entry(peer).or_default().push(Idle {
                stream,
                since: Instant::now(),
            });
            s.count += 1;
            evicted
        };
        drop(evicted);
    }

    /// Close those idle past the timeout and those the peer closed.
    fn sweep(&self) {
        let mut closed = Vec::new();
        {
            let mut s = self.lock();
            let mut removed = 0;
            for stack in s.by_peer.values_mut() {
                let before = stack.len();
                let mut kept = Vec::with_capacity(before);
                for mut idle in stack.drain(..) {
                    if idle.since.elapsed() <= self.idle_timeout && reusable(&mut idle.stream) {
                        kept.push(idle);
                    } else {
                        closed.push(idle);
                    }
                }
                removed += before - kept.len();
                *stack = kept;
            }
            s.count -= removed;
            s.by_peer.retain(|_, stack| !stack.is_empty());
        }
        drop(closed);
    }
}

/// Remove the connection idle longest, of any peer.
fn oldest(by_peer: &mut HashMap<Key, Vec<Idle>>) -> Option<Idle> {
    let peer = by_peer
        .iter()
        .filter_map(|(k, stack)| stack.first().map(|i| (*k, i.since)))
        .min_by_key(|(_, since)| *since)
        .map(|(p, _)| p)?;
    let stack = by_peer.get_mut(&peer)?;
    (!stack.is_empty()).then(|| stack.remove(0))
}

/// Whether an idle connection can carry a request: nothing to read on it
/// now, neither an end of stream nor bytes nobody asked for (the test
/// Pingora's pool makes, a read that must not be ready).
fn reusable(stream: &mut Stream) -> bool {
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    let mut cx = Context::from_waker(Waker::noop());
    std::pin::Pin::new(stream)
        .poll_read(&mut cx, &mut buf)
        .is_pending()
}

async fn sweep(pool: Weak<Pool>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // The client was dropped (a config reload): its connections with it.
        let Some(pool) = pool.upgrade() else { return };
        pool.sweep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (Stream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
        (
            Box::new(pingora::protocols::l4::stream::Stream::from(c.unwrap())),
            s.unwrap().0,
        )
    }

    #[tokio::test]
    async fn a_connection_comes_back_to_its_peer_only() {
        let pool = Pool::new(4, Duration::from_secs(60), None);
        let (a, _sa) = pair().await;
        pool.put((0, false), a);
        assert!(pool.take((1, false)).is_none());
        assert!(pool.take((0, false)).is_some());
        assert!(pool.take((0, false)).is_none());
    }

    #[tokio::test]
    async fn a_closed_or_chatty_connection_is_not_reused() {
        let pool = Pool::new(4, Duration::from_secs(60), None);
        let (a, sa) = pair().await;
        let (b, mut sb) = pair().await;
        pool.put((0, false), a);
        pool.put((0, false), b);
        drop(sa);
        sb.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(pool.take((0, false)).is_none());
    }

    #[tokio::test]
    async fn the_pool_is_bounded_and_entries_expire() {
        let pool = Pool::new(2, Duration::from_millis(30), None);
        let mut servers = Vec::new();
        for _ in 0..3 {
            let (c, s) = pair().await;
            servers.push(s);
            pool.put((0, false), c);
        }
        assert_eq!(pool.lock().count, 2);
        tokio::time::sleep(Duration::from_millis(60)).await;
        pool.sweep();
        assert_eq!(pool.lock().count, 0);
        assert!(pool.take((0, false)).is_none());
    }
}
