//! `ralph controller` as a child process, exactly as deployed, scoped to the test namespace.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A running controller; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct ControllerProcess {
    child: Child,
    log: PathBuf,
}

impl ControllerProcess {
    /// Starts `ralph controller` for `namespace` with leader election in that namespace, and
    /// `extra` arguments.
    pub fn start(
        kubeconfig: &Path,
        namespace: &str,
        ralph_image: &str,
        log_dir: &Path,
        extra: &[String],
    ) -> Self {
        let log = log_dir.join("controller.log");
        let out = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let err = out.try_clone().unwrap_or_else(|e| panic!("log file: {e}"));
        let metrics_port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_ralph"))
            .args([
                "controller",
                "--namespace",
                namespace,
                "--ralph-image",
                ralph_image,
            ])
            .args(["--lease-namespace", namespace])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RALPH_LOG", "info,ralph=debug")
            .env("POD_NAME", format!("e2e-controller-{namespace}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting `ralph controller`: {e}"));
        Self { child, log }
    }

    /// The controller's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with the log when the controller has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "`ralph controller` exited ({status}); its log:\n{}",
                self.log()
            );
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(18080)
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // Already exited is fine.
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Still running after the grace period: kill it; failing means it is gone.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
