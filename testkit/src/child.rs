//! Child processes that never outlive the test process.
//!
//! Every child is spawned by one thread that lives as long as the process, with
//! `PR_SET_PDEATHSIG = SIGKILL`: the kernel sends that signal when the *thread* that forked the
//! child ends, so forking from a test's own thread (or a blocking-pool thread, retired after
//! ten idle seconds) would kill a server shared by the whole test binary as soon as the
//! first test finished. From the one long-lived thread it fires only when the process exits,
//! however it exits (a panic, an abort, SIGKILL of the test runner). A [`ChildGuard`] also
//! kills the child (its process group, when it got one) when dropped.

use std::io;
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from the process-lifetime spawner thread with `PR_SET_PDEATHSIG = SIGKILL`,
/// in a process group of its own when `own_group` (so a shell or a forking child goes with it).
pub fn spawn(mut cmd: Command, own_group: bool) -> io::Result<Child> {
    use std::os::unix::process::CommandExt;
    if own_group {
        cmd.process_group(0);
    }
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent; this runs in
    // the forked child before exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                // Never returns while the process lives: the receiver's sender sits in a
                // static, so `recv` only blocks.
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("spawner thread gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("spawner thread gone"))?
}

/// A running child, killed (SIGKILL, its whole process group when it has one of its own) and
/// reaped when dropped.
pub struct ChildGuard {
    child: Option<Child>,
    own_group: bool,
}

impl ChildGuard {
    /// Spawns `cmd` (see [`spawn`]); its process group is the child itself.
    pub fn spawn_group(cmd: Command) -> io::Result<ChildGuard> {
        Ok(ChildGuard {
            child: Some(spawn(cmd, true)?),
            own_group: true,
        })
    }

    /// Spawns `cmd` (see [`spawn`]) in the test's process group.
    pub fn spawn(cmd: Command) -> io::Result<ChildGuard> {
        Ok(ChildGuard {
            child: Some(spawn(cmd, false)?),
            own_group: false,
        })
    }

    /// Guards a child spawned elsewhere (its group is not signalled).
    pub fn adopt(child: Child) -> ChildGuard {
        ChildGuard {
            child: Some(child),
            own_group: false,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or_default()
    }

    pub fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("child already killed")
    }

    /// Its exit status if it has exited (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Sends `sig` to the child (its process group when it has one of its own); an already
    /// reaped child is not signalled (its pid may belong to another process by now).
    pub fn signal(&self, sig: i32) {
        let Some(child) = &self.child else { return };
        let Ok(pid) = i32::try_from(child.id()) else {
            return;
        };
        let target = if self.own_group { -pid } else { pid };
        // SAFETY: kill(2) touches no memory; a child gone meanwhile just gives ESRCH.
        unsafe {
            libc::kill(target, sig);
        }
    }

    /// SIGKILL (SIGCONT first: a stopped process keeps a pending SIGKILL only until it is
    /// continued) and reap; the exit status. A child that has already exited and been reaped
    /// is not signalled: its pid may belong to another process by now.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.exited() {
            self.child = None;
            return Some(status);
        }
        self.signal(libc::SIGCONT);
        self.signal(libc::SIGKILL);
        let mut child = self.child.take()?;
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}
