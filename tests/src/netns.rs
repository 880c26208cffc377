//! A multi-host test bed on one machine: each "host" is a Linux network namespace with its own
//! address on a private bridge, and faults are applied to hosts the way networks fail.
//!
//! ```text
//!   root namespace (the test, the driver)
//!     bridge shn<pid>x<k>b  10.77.S.1/24 ─┬─ veth shn<pid>x<k>v1 ══ eth0 10.77.S.11  netns shn-<pid>-<k>-h1
//!                                         ├─ veth shn<pid>x<k>v2 ══ eth0 10.77.S.12  netns shn-<pid>-<k>-h2
//!                                         └─ ...
//! ```
//!
//! The subnet `10.77.S.0/24` is chosen under a lock file (`/run/shoal-netns.lock`) among those no
//! interface or route of this machine uses yet, so parallel test processes never share one.
//! Faults are [`Fault`] values applied with [`Bed::apply`] and undone with [`Bed::undo`]: a host
//! cut off (an nftables table in the host's namespace that drops all but loopback), a one-way
//! partition (what one host sends to another is dropped), one port partitioned between hosts, a
//! link down, and `tc netem` delay and loss (`Ok(false)` when the kernel lacks it). Besides,
//! [`Bed::kill_host`] sends SIGKILL to every process in a host's namespace.
//!
//! Invariants:
//! - every name this module creates starts with `shn` and carries the test process's pid; it
//!   deletes only such names, and at start only those whose pid is no longer running (a crashed
//!   run's leftovers), never anything else on the machine;
//! - a [`Bed`] deletes its namespaces, veths and bridge on drop (panics unwind into it), and a bed
//!   still alive when the process exits is deleted by an `atexit` hook; nftables tables live in
//!   the hosts' namespaces and go with them.
//!
//! Needs root, iproute2 and nftables ([`Bed::available`] says whether this machine has them).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};

use anyhow::{Context as _, bail};

/// The first two octets of every bed's subnet.
const SUBNET_PREFIX: [u8; 2] = [10, 77];
/// The lock under which a subnet is picked and its bridge addressed.
const LOCK_PATH: &str = "/run/shoal-netns.lock";
/// The nftables table faults are written to, in a host's namespace.
const FAULT_TABLE: &str = "shoal_fault";
/// The prefix of every interface and namespace name this module creates.
const PREFIX: &str = "shn";

/// A network fault between hosts, as a value: applied with [`Bed::apply`], undone with
/// [`Bed::undo`] (a campaign draws them from a seed and prints them).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The host drops everything it sends or receives but loopback.
    Cut(usize),
    /// `from` can no longer send to `to`.
    OneWay { from: usize, to: usize },
    /// TCP to and from `port` between `host` and each of `others` is dropped both ways.
    PortBetween { host: usize, others: Vec<usize>, port: u16 },
    /// The host's `eth0` is down.
    LinkDown(usize),
    /// What the host sends is delayed and some of it lost (`tc netem`).
    Netem { host: usize, delay_ms: u32, loss_percent: f32 },
}

/// One host: a namespace and the address its `eth0` has on the bed's bridge.
#[derive(Debug, Clone)]
pub struct Host {
    /// 1-based.
    pub index: usize,
    pub netns: String,
    pub ip: Ipv4Addr,
    /// The root-namespace end of its veth pair (on the bridge).
    veth: String,
}

/// A bridge and its hosts. Dropping it deletes them all.
#[derive(Debug)]
pub struct Bed {
    key: String,
    bridge: String,
    subnet: u8,
    hosts: BTreeMap<usize, Host>,
}

/// What must be deleted when the process exits, by bed key.
fn live() -> &'static Mutex<BTreeMap<String, Vec<String>>> {
    static LIVE: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());
    &LIVE
}

extern "C" fn delete_live_beds_at_exit() {
    let Ok(mut beds) = live().try_lock() else { return };
    for (_, names) in std::mem::take(&mut *beds) {
        delete_names(&names);
    }
}

/// Deletes links (`link:NAME`) and namespaces (`netns:NAME`), best effort.
fn delete_names(names: &[String]) {
    for name in names {
        if let Some(ns) = name.strip_prefix("netns:") {
            kill_all_in(ns);
            let _ = quiet(&["ip", "netns", "del", ns]);
        } else if let Some(link) = name.strip_prefix("link:") {
            let _ = quiet(&["ip", "link", "del", link]);
        }
    }
}

/// SIGKILL to every process in namespace `ns`.
fn kill_all_in(ns: &str) -> usize {
    let Ok(out) = quiet(&["ip", "netns", "pids", ns]) else { return 0 };
    let pids: Vec<i32> =
        String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect();
    for pid in &pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
    }
    pids.len()
}

/// Runs a command, capturing its output (no check of its status).
fn quiet(argv: &[&str]) -> std::io::Result<Output> {
    Command::new(argv[0]).args(&argv[1..]).stdin(Stdio::null()).output()
}

/// Runs a command and fails with its stderr unless it succeeds.
fn run(argv: &[&str]) -> anyhow::Result<Output> {
    let out = quiet(argv).with_context(|| format!("running {}", argv.join(" ")))?;
    if !out.status.success() {
        bail!("`{}` failed ({}): {}", argv.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out)
}

/// Runs `nft -f -` with `script` in namespace `ns`.
fn nft(ns: &str, script: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running nft")?;
    child.stdin.take().context("nft stdin")?.write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("nft in {ns} failed: {}\n{script}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The pid a name of ours carries (`shn<pid>x...`, `shn-<pid>-...`).
fn pid_of_name(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(PREFIX)?;
    let rest = rest.strip_prefix('-').unwrap_or(rest);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn is_running(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Deletes the namespaces and links of crashed runs: ours by prefix, whose pid is gone.
pub fn reap_stale() {
    if let Ok(out) = quiet(&["ip", "netns", "list"]) {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(ns) = line.split_whitespace().next() else { continue };
            if let Some(pid) = pid_of_name(ns)
                && ns.starts_with("shn-")
                && !is_running(pid)
            {
                eprintln!("netns: deleting namespace {ns} left by process {pid}");
                delete_names(&[format!("netns:{ns}")]);
            }
        }
    }
    if let Ok(out) = quiet(&["ip", "-o", "link", "show"]) {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "12: shn123x1b: <...>" or "13: shn123x1v2@if3: <...>"
            let Some(name) = line.split(':').nth(1).map(str::trim) else { continue };
            let name = name.split('@').next().unwrap_or(name);
            if let Some(pid) = pid_of_name(name)
                && !name.starts_with("shn-")
                && !is_running(pid)
            {
                eprintln!("netns: deleting link {name} left by process {pid}");
                delete_names(&[format!("link:{name}")]);
            }
        }
    }
}

impl Bed {
    /// Whether this machine can run a bed: root, `ip` and `nft` present. The reason when not.
    pub fn available() -> Result<(), String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root".into());
        }
        for tool in ["ip", "nft"] {
            if quiet(&[tool, "--version"]).is_err() && quiet(&[tool, "-V"]).is_err() {
                return Err(format!("`{tool}` is not installed (iproute2, nftables)"));
            }
        }
        Ok(())
    }

    /// A bridge with `hosts` namespaces on it, loopback and `eth0` up in each.
    pub fn new(hosts: usize) -> anyhow::Result<Bed> {
        static REAP: Once = Once::new();
        static AT_EXIT: Once = Once::new();
        static NEXT: AtomicU32 = AtomicU32::new(1);
        REAP.call_once(reap_stale);
        AT_EXIT.call_once(|| {
            // SAFETY: registers a plain function with no arguments; it only takes a lock without
            // blocking and runs `ip` commands.
            #[allow(unsafe_code, reason = "atexit is the only hook that runs when a test binary exits")]
            unsafe {
                nix::libc::atexit(delete_live_beds_at_exit);
            }
        });
        let pid = std::process::id();
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let key = format!("{PREFIX}{pid}x{k}");
        anyhow::ensure!(key.len() + 3 <= 15, "interface names too long for {key}");
        let bridge = format!("{key}b");
        let subnet = {
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(LOCK_PATH)
                .with_context(|| format!("opening {LOCK_PATH}"))?;
            let _guard = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
                .map_err(|(_, e)| anyhow::anyhow!("locking {LOCK_PATH}: {e}"))?;
            let used = format!(
                "{}{}",
                String::from_utf8_lossy(&run(&["ip", "-4", "-o", "addr", "show"])?.stdout),
                String::from_utf8_lossy(&run(&["ip", "-4", "route", "show", "table", "all"])?.stdout)
            );
            let start = (pid % 200) as u8;
            let subnet = (0..250u16)
                .map(|i| ((u16::from(start) + i) % 250 + 1) as u8)
                .find(|s| !used.contains(&format!("{}.{}.{s}.", SUBNET_PREFIX[0], SUBNET_PREFIX[1])))
                .context("no free 10.77.x.0/24 subnet")?;
            run(&["ip", "link", "add", &bridge, "type", "bridge"])?;
            live().lock().expect("live beds").insert(key.clone(), vec![format!("link:{bridge}")]);
            run(&["ip", "addr", "add", &format!("10.77.{subnet}.1/24"), "dev", &bridge])?;
            run(&["ip", "link", "set", &bridge, "up"])?;
            subnet
        };
        let mut bed = Bed { key, bridge, subnet, hosts: BTreeMap::new() };
        for index in 1..=hosts {
            bed.add_host(index)?;
        }
        Ok(bed)
    }

    /// The address host `index` has (or will have).
    pub fn ip_of(&self, index: usize) -> Ipv4Addr {
        Ipv4Addr::new(SUBNET_PREFIX[0], SUBNET_PREFIX[1], self.subnet, 10 + index as u8)
    }

    /// The bridge's address in the root namespace (the test's side).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(SUBNET_PREFIX[0], SUBNET_PREFIX[1], self.subnet, 1)
    }

    pub fn host(&self, index: usize) -> &Host {
        &self.hosts[&index]
    }

    pub fn hosts(&self) -> impl Iterator<Item = &Host> {
        self.hosts.values()
    }

    /// Creates host `index`: its namespace, a veth pair onto the bridge, its address.
    pub fn add_host(&mut self, index: usize) -> anyhow::Result<&Host> {
        anyhow::ensure!(!self.hosts.contains_key(&index), "host {index} exists");
        let pid = std::process::id();
        let netns = format!("shn-{pid}-{}-h{index}", self.key.rsplit('x').next().unwrap_or("0"));
        let veth = format!("{}v{index}", self.key);
        let peer = format!("{}p{index}", self.key);
        run(&["ip", "netns", "add", &netns])?;
        self.remember(&[format!("netns:{netns}"), format!("link:{veth}")]);
        run(&["ip", "link", "add", &veth, "type", "veth", "peer", "name", &peer])?;
        run(&["ip", "link", "set", &peer, "netns", &netns])?;
        run(&["ip", "-n", &netns, "link", "set", &peer, "name", "eth0"])?;
        run(&["ip", "link", "set", &veth, "master", &self.bridge])?;
        run(&["ip", "link", "set", &veth, "up"])?;
        let ip = self.ip_of(index);
        run(&["ip", "-n", &netns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"])?;
        run(&["ip", "-n", &netns, "link", "set", "eth0", "up"])?;
        run(&["ip", "-n", &netns, "link", "set", "lo", "up"])?;
        self.hosts.insert(index, Host { index, netns, ip, veth });
        Ok(&self.hosts[&index])
    }

    /// Deletes host `index` for good: kills its processes, deletes its veth and namespace.
    pub fn remove_host(&mut self, index: usize) -> anyhow::Result<()> {
        let host = self.hosts.remove(&index).context("no such host")?;
        let names = [format!("netns:{}", host.netns), format!("link:{}", host.veth)];
        kill_all_in(&host.netns);
        // The veth goes when its namespace's last process is gone; delete it now to be sure.
        let _ = quiet(&["ip", "link", "del", &host.veth]);
        run(&["ip", "netns", "del", &host.netns])?;
        if let Some(list) = live().lock().expect("live beds").get_mut(&self.key) {
            list.retain(|n| !names.contains(n));
        }
        Ok(())
    }

    fn remember(&self, names: &[String]) {
        let mut beds = live().lock().expect("live beds");
        let list = beds.entry(self.key.clone()).or_default();
        // Namespaces and veths first, the bridge last.
        for name in names {
            list.insert(0, name.clone());
        }
    }

    /// `ip netns exec <host's namespace> argv...`, captured; fails unless it succeeds.
    pub fn exec(&self, index: usize, argv: &[&str]) -> anyhow::Result<Output> {
        let ns = &self.host(index).netns;
        let mut full = vec!["ip", "netns", "exec", ns.as_str()];
        full.extend_from_slice(argv);
        run(&full)
    }

    /// The prefix that runs a program inside host `index`'s namespace.
    pub fn wrapper(&self, index: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.host(index).netns.clone()]
    }

    /// SIGKILL to every process of host `index`; how many there were.
    pub fn kill_host(&self, index: usize) -> usize {
        kill_all_in(&self.host(index).netns)
    }

    /// Applies `fault`; `Ok(false)` when this machine cannot (netem without kernel support).
    pub fn apply(&self, fault: &Fault) -> anyhow::Result<bool> {
        match fault {
            Fault::Cut(host) => self.cut(*host).map(|()| true),
            Fault::OneWay { from, to } => self.block_one_way(*from, *to).map(|()| true),
            Fault::PortBetween { host, others, port } => self.block_port_between(*host, others, *port).map(|()| true),
            Fault::LinkDown(host) => self.link_down(*host).map(|()| true),
            Fault::Netem { host, delay_ms, loss_percent } => self.netem(*host, *delay_ms, *loss_percent),
        }
    }

    /// Undoes `fault` (and any other nftables fault of the same host).
    pub fn undo(&self, fault: &Fault) -> anyhow::Result<()> {
        match fault {
            Fault::Cut(host) | Fault::PortBetween { host, .. } | Fault::OneWay { from: host, .. } => self.heal(*host),
            Fault::LinkDown(host) => self.link_up(*host),
            Fault::Netem { host, .. } => {
                let _ = quiet(&["ip", "-n", &self.host(*host).netns, "qdisc", "del", "dev", "eth0", "root"]);
                Ok(())
            }
        }
    }

    /// Cuts host `index` off: it drops everything it sends or receives but loopback.
    pub fn cut(&self, index: usize) -> anyhow::Result<()> {
        self.fault(index, "iifname \"lo\" accept; drop", "oifname \"lo\" accept; drop")
    }

    /// Host `from` can no longer send to host `to` (what `to` sends still arrives).
    pub fn block_one_way(&self, from: usize, to: usize) -> anyhow::Result<()> {
        let to_ip = self.host(to).ip;
        self.fault(from, "", &format!("ip daddr {to_ip} drop"))
    }

    /// Host `index` can neither send to nor receive from any of `others`.
    pub fn block_between(&self, index: usize, others: &[usize]) -> anyhow::Result<()> {
        let ips: Vec<String> = others.iter().map(|o| self.host(*o).ip.to_string()).collect();
        let set = ips.join(", ");
        self.fault(index, &format!("ip saddr {{ {set} }} drop"), &format!("ip daddr {{ {set} }} drop"))
    }

    /// TCP to and from `port` between host `index` and each of `others` is dropped both ways (one
    /// service partitioned, the rest of the hosts' traffic flowing).
    pub fn block_port_between(&self, index: usize, others: &[usize], port: u16) -> anyhow::Result<()> {
        let ips: Vec<String> = others.iter().map(|o| self.host(*o).ip.to_string()).collect();
        let set = ips.join(", ");
        self.fault(
            index,
            &format!("ip saddr {{ {set} }} tcp sport {port} drop; ip saddr {{ {set} }} tcp dport {port} drop"),
            &format!("ip daddr {{ {set} }} tcp dport {port} drop; ip daddr {{ {set} }} tcp sport {port} drop"),
        )
    }

    /// Adds rules to host `index`'s fault table (input and output chains).
    fn fault(&self, index: usize, input: &str, output: &str) -> anyhow::Result<()> {
        let ns = &self.host(index).netns;
        let mut script = format!(
            "table inet {FAULT_TABLE} {{\n  chain input {{ type filter hook input priority -10; policy accept; }}\n  \
             chain output {{ type filter hook output priority -10; policy accept; }}\n}}\n"
        );
        for (chain, rules) in [("input", input), ("output", output)] {
            for rule in rules.split(';').map(str::trim).filter(|r| !r.is_empty()) {
                script.push_str(&format!("add rule inet {FAULT_TABLE} {chain} {rule}\n"));
            }
        }
        nft(ns, &script)
    }

    /// Removes every nftables fault of host `index`.
    pub fn heal(&self, index: usize) -> anyhow::Result<()> {
        let ns = &self.host(index).netns;
        let _ = quiet(&["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", FAULT_TABLE]);
        Ok(())
    }

    /// Removes every fault of every host (nftables, netem, links down).
    pub fn heal_all(&self) -> anyhow::Result<()> {
        for host in self.hosts.values() {
            self.heal(host.index)?;
            let _ = quiet(&["ip", "-n", &host.netns, "qdisc", "del", "dev", "eth0", "root"]);
            self.link_up(host.index)?;
        }
        Ok(())
    }

    /// Takes host `index`'s `eth0` down.
    pub fn link_down(&self, index: usize) -> anyhow::Result<()> {
        run(&["ip", "-n", &self.host(index).netns, "link", "set", "eth0", "down"]).map(drop)
    }

    pub fn link_up(&self, index: usize) -> anyhow::Result<()> {
        run(&["ip", "-n", &self.host(index).netns, "link", "set", "eth0", "up"]).map(drop)
    }

    /// `tc netem` on what host `index` sends: `delay_ms` of delay and `loss_percent` loss.
    /// `Ok(false)` (and a message on stderr) when the kernel has no netem.
    pub fn netem(&self, index: usize, delay_ms: u32, loss_percent: f32) -> anyhow::Result<bool> {
        let ns = &self.host(index).netns;
        let delay = format!("{delay_ms}ms");
        let loss = format!("{loss_percent}%");
        let argv = ["tc", "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", &delay, "loss", &loss];
        let out = quiet(&argv).context("running tc")?;
        if out.status.success() {
            return Ok(true);
        }
        let _ = quiet(&["modprobe", "sch_netem"]);
        let out = quiet(&argv).context("running tc")?;
        if out.status.success() {
            return Ok(true);
        }
        eprintln!(
            "netns: tc netem is not available on this kernel ({}); skipping the delay/loss fault",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(false)
    }

    /// Runs `f` on a thread inside host `index`'s network namespace, on a runtime of its own: every
    /// socket it opens is that host's (e.g. a driver reaching `127.0.0.1` there).
    pub fn within<T, F, Fut>(&self, index: usize, f: F) -> anyhow::Result<T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = anyhow::Result<T>>,
        T: Send + 'static,
    {
        let path = format!("/run/netns/{}", self.host(index).netns);
        std::thread::spawn(move || -> anyhow::Result<T> {
            let ns = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(f())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))?
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let names = live().lock().map(|mut beds| beds.remove(&self.key)).ok().flatten();
        if let Some(names) = names {
            delete_names(&names);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_pid() {
        assert_eq!(pid_of_name("shn1234x1b"), Some(1234));
        assert_eq!(pid_of_name("shn1234x2v3"), Some(1234));
        assert_eq!(pid_of_name("shn-1234-1-h2"), Some(1234));
        assert_eq!(pid_of_name("eth0"), None);
        assert_eq!(pid_of_name("shnx"), None);
    }
}
