//! Child processes and temporary directories that never outlive the suite.
//!
//! Every child runs in its own process group (so a `repoll` that forks, or a shell, goes with
//! it) and gets `PR_SET_PDEATHSIG = SIGKILL`, so even a SIGKILL of the suite itself takes its
//! children down. The process groups and temp dirs are also kept in a global registry that
//! [`cleanup`] empties: it runs on normal exit (a [`Guard`] in `main`), on Ctrl-C / SIGTERM
//! (the signal task in `main`) and on panic (the hook installed by [`install_panic_hook`]),
//! because a panic in a tokio task does not unwind `main` and `process::exit` skips destructors.

use std::{
    fs::File,
    io,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Mutex,
    time::Duration,
};

use tokio::process::{Child, Command};

/// Process groups and directories to remove, in the order they were made.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    groups: Vec::new(),
    dirs: Vec::new(),
});

struct Registry {
    groups: Vec<i32>,
    dirs: Vec<PathBuf>,
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // A panic while holding the lock must not stop the cleanup that the panic hook runs.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills every registered process group (SIGCONT first: a stopped Redis would otherwise keep
/// its SIGKILL pending only until it is continued, which nobody would do) and removes every
/// registered directory. Safe to call more than once and from any thread.
pub fn cleanup() {
    let (groups, dirs) = {
        let mut r = registry();
        (std::mem::take(&mut r.groups), std::mem::take(&mut r.dirs))
    };
    for pgid in groups.iter().rev() {
        signal_group(*pgid, libc::SIGCONT);
        signal_group(*pgid, libc::SIGKILL);
    }
    for dir in dirs.iter().rev() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Runs [`cleanup`] when dropped: the normal way out of `main`, early returns included.
pub struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        cleanup();
    }
}

/// Cleans up before the default panic message, so a panic anywhere (a tokio task included)
/// leaves no `repoll` or `redis-server` behind. The panic itself still aborts the run: `main`
/// treats a failed task as a failed run.
pub fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        cleanup();
        previous(info);
    }));
}

/// Sends `sig` to the process group `pgid`; errors (already gone) are ignored.
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// A fresh directory under the system temp dir, removed by [`cleanup`].
pub fn temp_dir(tag: &str) -> io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "repoll-chaos-{tag}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir)?;
    registry().dirs.push(dir.clone());
    Ok(dir)
}

/// A running child in its own process group, registered for [`cleanup`].
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub pgid: i32,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr appended to `log`, stdin closed.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> io::Result<Proc> {
        let out = File::options().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0)
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent; this runs
        // in the forked child before exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        let pgid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| io::Error::other("child has no pid"))?;
        registry().groups.push(pgid);
        Ok(Proc {
            name: name.to_string(),
            child,
            pgid,
        })
    }

    /// SIGKILLs the whole group and waits for the child, so the port and files are free.
    pub async fn kill(mut self) {
        signal_group(self.pgid, libc::SIGCONT);
        signal_group(self.pgid, libc::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        registry().groups.retain(|g| *g != self.pgid);
    }

    /// Whether the child has exited on its own (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// A TCP port that was free a moment ago on 127.0.0.1 (the OS picks it).
pub fn free_port() -> io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Gives the child `n` as its open-file soft limit (capped at the hard limit), so the server
/// under test runs with the limit it would have had without the suite raising its own.
pub fn child_nofile(cmd: &mut Command, n: u64) {
    // SAFETY: getrlimit/setrlimit are async-signal-safe and touch only the struct on the
    // child's stack; this runs in the forked child before exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                return Err(io::Error::last_os_error());
            }
            lim.rlim_cur = n.min(lim.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// This process's open-file (soft, hard) limits.
pub fn nofile() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct we pass.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    (lim.rlim_cur, lim.rlim_max)
}

/// Raises this process's open-file soft limit to its hard limit (children inherit it), so the
/// abuse check's thousands of sockets measure the server and not the client. Returns the
/// resulting (soft, hard).
pub fn raise_nofile() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read only the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim = want;
            }
        }
    }
    (lim.rlim_cur, lim.rlim_max)
}
