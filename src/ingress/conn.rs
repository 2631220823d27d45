//! Open-connection accounting for the ingress: the global and per-client
//! limits (`limits.max_connections`, `limits.max_connections_per_ip`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Every open ingress connection, counted in total and per client address.
#[derive(Debug, Default)]
pub struct ConnTable {
    total: AtomicUsize,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// `limits.max_connections` reached.
    Global(usize),
    /// `limits.max_connections_per_ip` reached for this client address.
    PerClient(usize),
}

/// One admitted connection; dropping it gives the slot back.
#[derive(Debug)]
pub struct ConnGuard {
    table: Arc<ConnTable>,
    ip: Option<IpAddr>,
}

impl ConnTable {
    /// Count a new connection from `ip`, unless a limit (0 = none) is reached.
    /// Every connection is counted per address, limit or not, so a reload
    /// that turns the per-client limit on sees the connections already open.
    pub fn admit(
        self: &Arc<Self>,
        ip: Option<IpAddr>,
        max: usize,
        max_per_ip: usize,
    ) -> Result<ConnGuard, Full> {
        let open = self.total.fetch_add(1, Ordering::AcqRel) + 1;
        if max > 0 && open > max {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Full::Global(max));
        }
        let ip = ip.map(|ip| ip.to_canonical());
        if let Some(ip) = ip {
            let mut map = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
            let n = map.entry(ip).or_insert(0);
            if max_per_ip > 0 && *n >= max_per_ip {
                if *n == 0 {
                    map.remove(&ip);
                }
                drop(map);
                self.total.fetch_sub(1, Ordering::AcqRel);
                return Err(Full::PerClient(max_per_ip));
            }
            *n += 1;
        }
        Ok(ConnGuard {
            table: self.clone(),
            ip,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.table.total.fetch_sub(1, Ordering::AcqRel);
        if let Some(ip) = self.ip {
            let mut map = self.table.per_ip.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = map.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_and_release() {
        let t = Arc::new(ConnTable::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let g1 = t.admit(Some(a), 3, 2).unwrap();
        let g2 = t.admit(Some(a), 3, 2).unwrap();
        assert_eq!(t.admit(Some(a), 3, 2).unwrap_err(), Full::PerClient(2));
        let g3 = t.admit(Some(b), 3, 2).unwrap();
        assert_eq!(t.admit(Some(b), 3, 2).unwrap_err(), Full::Global(3));
        assert_eq!(t.open(), 3);
        drop((g1, g2, g3));
        assert_eq!(t.open(), 0);
        assert!(t.per_ip.lock().unwrap().is_empty());
        // IPv4-mapped IPv6 is the same client.
        let _g = t.admit(Some(a), 0, 1).unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(t.admit(Some(mapped), 0, 1).is_err());
    }
}
