//! A real git server on 127.0.0.1 for tests: `git daemon` (receive-pack enabled, no
//! auth) and `git http-backend` run as CGI behind a small axum server with Basic auth.
//!
//! ```ignore
//! let server = GitServer::start();
//! server.create_repo("app");                  // bare repo, one commit on `main`
//! let url = server.http_url("app");           // needs HTTP_USER / HTTP_TOKEN
//! let url = server.daemon_url("app");         // no credentials
//! ```

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tokio::io::AsyncWriteExt;

/// The only user the HTTP server accepts.
pub const HTTP_USER: &str = "ralph-bot";
/// That user's token.
pub const HTTP_TOKEN: &str = "tok-3f9a1c7e5b2d4f60";

/// The git daemon and the HTTP server, serving the bare repositories under one directory.
pub struct GitServer {
    root: tempfile::TempDir,
    daemon: Child,
    daemon_port: u16,
    http_addr: SocketAddr,
    _http_thread: std::thread::JoinHandle<()>,
}

impl GitServer {
    /// Starts both servers and waits until they accept connections.
    pub fn start() -> Self {
        let root = tempfile::tempdir().expect("server root");
        let daemon_port = free_port();
        let daemon = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                "--max-connections=0",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={daemon_port}"))
            .arg(format!("--base-path={}", root.path().display()))
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start git daemon");
        wait_for_port(daemon_port);

        let listener = TcpListener::bind("127.0.0.1:0").expect("bind http");
        listener.set_nonblocking(true).expect("nonblocking");
        let http_addr = listener.local_addr().expect("http addr");
        let project_root = root.path().to_owned();
        let http_thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app = Router::new().fallback(serve_git).with_state(project_root);
                axum::serve(listener, app).await.expect("serve");
            });
        });
        wait_for_port(http_addr.port());
        Self {
            root,
            daemon,
            daemon_port,
            http_addr,
            _http_thread: http_thread,
        }
    }

    /// Path of the bare repository `name`.
    pub fn repo_path(&self, name: &str) -> PathBuf {
        self.root.path().join(format!("{name}.git"))
    }

    /// `git://` URL of `name` (anyone may fetch and push).
    pub fn daemon_url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}.git", self.daemon_port)
    }

    /// `http://` URL of `name` (Basic auth with [`HTTP_USER`] and [`HTTP_TOKEN`]).
    pub fn http_url(&self, name: &str) -> String {
        format!("http://{}/{name}.git", self.http_addr)
    }

    /// A URL where nothing listens.
    pub fn unreachable_url(&self) -> String {
        format!("git://127.0.0.1:{}/nothing.git", free_port())
    }

    /// Starts a server holding the repository `name` made by [`GitServer::create_repo`].
    pub fn with_repo(name: &str) -> Self {
        let server = Self::start();
        server.create_repo(name);
        server
    }

    /// Creates the bare repository `name` with one commit on `main` holding `README.md`.
    pub fn create_repo(&self, name: &str) -> PathBuf {
        self.create_repo_with(name, |dir| {
            std::fs::write(dir.join("README.md"), "# app\n\nstatus: new\n").expect("write");
        })
    }

    /// Creates the bare repository `name` whose `main` holds what `fill` writes.
    pub fn create_repo_with(&self, name: &str, fill: impl FnOnce(&Path)) -> PathBuf {
        let bare = self.repo_path(name);
        git(
            self.root.path(),
            &[
                "init",
                "-q",
                "--bare",
                "-b",
                "main",
                &bare.to_string_lossy(),
            ],
        );
        let seed = tempfile::tempdir().expect("seed");
        git(seed.path(), &["init", "-q", "-b", "main"]);
        fill(seed.path());
        git(seed.path(), &["add", "-A"]);
        git(seed.path(), &["commit", "-q", "-m", "initial commit"]);
        git(
            seed.path(),
            &["push", "-q", &bare.to_string_lossy(), "main"],
        );
        bare
    }

    /// Creates `branch` at `from` in the bare repository.
    pub fn create_branch(&self, name: &str, branch: &str, from: &str) {
        git(&self.repo_path(name), &["branch", branch, from]);
    }

    /// Installs a `pre-receive` hook that prints `message` and declines every push.
    pub fn protect(&self, name: &str, message: &str) {
        let hook = self.repo_path(name).join("hooks/pre-receive");
        std::fs::write(&hook, format!("#!/bin/sh\necho '{message}' >&2\nexit 1\n")).expect("hook");
        let mut permissions = std::fs::metadata(&hook).expect("hook").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&hook, permissions).expect("chmod hook");
    }

    /// Subjects of `branch`'s commits, newest first; empty when the branch does not exist.
    pub fn subjects(&self, name: &str, branch: &str) -> Vec<String> {
        self.output_lines(name, &["log", "--format=%s", branch])
    }

    /// The head commit of `branch`, if it exists.
    pub fn head(&self, name: &str, branch: &str) -> Option<String> {
        let output = Command::new("git")
            .args([
                "rev-parse",
                "--verify",
                "-q",
                &format!("refs/heads/{branch}"),
            ])
            .current_dir(self.repo_path(name))
            .output()
            .expect("git rev-parse");
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Names of the files in `branch`'s head.
    pub fn files(&self, name: &str, branch: &str) -> Vec<String> {
        self.output_lines(name, &["ls-tree", "-r", "--name-only", branch])
    }

    /// The lines git `args` prints in the repository `name` (none when it fails).
    fn output_lines(&self, name: &str, args: &[&str]) -> Vec<String> {
        let output = Command::new("git")
            .args(args)
            .current_dir(self.repo_path(name))
            .output()
            .unwrap_or_else(|error| panic!("git {args:?}: {error}"));
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// Runs git in `dir` and panics with its stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "seed")
        .env("GIT_AUTHOR_EMAIL", "seed@example.com")
        .env("GIT_COMMITTER_NAME", "seed")
        .env("GIT_COMMITTER_EMAIL", "seed@example.com")
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "server on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `Basic base64(user:token)`.
fn expected_authorization() -> String {
    format!(
        "Basic {}",
        base64(format!("{HTTP_USER}:{HTTP_TOKEN}").as_bytes())
    )
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Checks Basic auth, then runs `git http-backend` as a CGI script for the request.
async fn serve_git(State(root): State<PathBuf>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let authorized = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value == expected_authorization());
    if !authorized {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(header::WWW_AUTHENTICATE, "Basic realm=\"git\"")
            .body(Body::from("authentication required\n"))
            .expect("response");
    }
    let body = to_bytes(body, usize::MAX).await.expect("request body");
    let header_value = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", &root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or_default())
        .env("CONTENT_TYPE", header_value(header::CONTENT_TYPE))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env(
            "HTTP_CONTENT_ENCODING",
            header_value(header::CONTENT_ENCODING),
        )
        .env(
            "HTTP_GIT_PROTOCOL",
            parts
                .headers
                .get("git-protocol")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default(),
        )
        .env("REMOTE_USER", HTTP_USER)
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().expect("git http-backend");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let output = child.wait_with_output().await.expect("http-backend output");
    let _ = writer.await;
    cgi_response(&output.stdout)
}

/// Turns a CGI response (headers, blank line, body) into an HTTP response.
fn cgi_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4))
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|at| (at, 2)));
    let Some((at, gap)) = split else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("bad CGI output"))
            .expect("response");
    };
    let head = String::from_utf8_lossy(&raw[..at]);
    let mut status = StatusCode::OK;
    let mut headers = HeaderMap::new();
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().unwrap_or("200");
            status = code
                .parse()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::OK);
        } else if let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    }
    let mut response = Response::new(Body::from(raw[at + gap..].to_vec()));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}
