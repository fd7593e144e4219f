//! A real `weir serve` for tests: its own data dir and port, an admin token, and a
//! small JSON client (ureq, status codes returned rather than raised).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// A running server. Killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct TestServer {
    pub dir: PathBuf,
    pub url: String,
    child: Child,
    agent: ureq::Agent,
}

/// An answer: status and body (JSON, or a string for non-JSON bodies).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    /// The `Retry-After` header, if the answer has one.
    pub retry_after: Option<String>,
}

impl Answer {
    /// The `error` line of an error answer.
    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }
}

/// Writes `server.toml` in `dir` with `extra` appended (tenants, `[workers]`, ...).
pub fn write_config(dir: &Path, extra: &str) -> PathBuf {
    crate::write_file(dir, "admin-token", ADMIN_TOKEN);
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = \"data\"\nadmin_token_file = \"admin-token\"\n{extra}\n"
    );
    crate::write_file(dir, "server.toml", &text)
}

impl TestServer {
    /// Starts `weir serve` on the `server.toml` in `dir` (see [`write_config`]) and waits
    /// until it listens.
    pub fn start(dir: &Path) -> TestServer {
        Self::start_with_env(dir, &[])
    }

    /// As `start`, with `weir serve --config server.toml` run in `dir` (a relative path).
    pub fn start_relative(dir: &Path) -> TestServer {
        Self::spawn(dir, Path::new("server.toml"), &[])
    }

    pub fn start_with_env(dir: &Path, env: &[(&str, &str)]) -> TestServer {
        Self::spawn(dir, &dir.join("server.toml"), env)
    }

    fn spawn(dir: &Path, config: &Path, env: &[(&str, &str)]) -> TestServer {
        let mut child = crate::weir()
            .arg("serve")
            .arg("--config")
            .arg(config)
            .current_dir(dir)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start weir serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = dir.join("server.log");
        std::thread::spawn(move || {
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .ok();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("weir: serving on ") {
                    let _ = tx.send(url.to_owned());
                }
                if let Some(f) = out.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "weir serve did not start; see {}",
                    dir.join("server.log").display()
                )
            });
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(300)))
            .build()
            .into();
        let server = TestServer {
            dir: dir.to_owned(),
            url,
            child,
            agent,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.get("/readyz", None).status == 200 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("weir serve never became ready");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and wait for a clean exit (every worker stopped with a checkpoint).
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        self.child.wait().expect("wait")
    }

    fn answer(result: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
        let mut response = result.expect("the server answers");
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            body,
            retry_after,
        }
    }

    fn with_token<B>(req: ureq::RequestBuilder<B>, token: Option<&str>) -> ureq::RequestBuilder<B> {
        match token {
            Some(t) => req.header("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Answer {
        let req = self.agent.get(&format!("{}{path}", self.url));
        Self::answer(Self::with_token(req, token).call())
    }

    pub fn delete(&self, path: &str, token: Option<&str>) -> Answer {
        let req = self.agent.delete(&format!("{}{path}", self.url));
        Self::answer(Self::with_token(req, token).call())
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &Value) -> Answer {
        let req = self.agent.post(&format!("{}{path}", self.url));
        Self::answer(Self::with_token(req, token).send_json(body))
    }

    pub fn post_empty(&self, path: &str, token: Option<&str>) -> Answer {
        let req = self.agent.post(&format!("{}{path}", self.url));
        Self::answer(Self::with_token(req, token).send_empty())
    }

    pub fn post_bytes(&self, path: &str, token: Option<&str>, bytes: &[u8]) -> Answer {
        self.post_raw(path, token, "application/wasm", bytes)
    }

    /// A POST of `bytes` as `content_type`, whatever they are.
    pub fn post_raw(
        &self,
        path: &str,
        token: Option<&str>,
        content_type: &str,
        bytes: &[u8],
    ) -> Answer {
        let req = self
            .agent
            .post(&format!("{}{path}", self.url))
            .header("Content-Type", content_type);
        Self::answer(Self::with_token(req, token).send(bytes))
    }

    /// Creates tenant `id` (quotas as JSON, or `{}`) and returns a token of it.
    pub fn tenant(&self, id: &str, quotas: Value) -> String {
        let a = self.post(
            "/v1/admin/tenants",
            Some(ADMIN_TOKEN),
            &serde_json::json!({"id": id, "quotas": quotas}),
        );
        assert!(
            a.status == 201 || a.status == 409,
            "create tenant {id}: {a:?}"
        );
        self.token(id)
    }

    /// A new token of tenant `id`.
    pub fn token(&self, id: &str) -> String {
        let a = self.post_empty(&format!("/v1/admin/tenants/{id}/tokens"), Some(ADMIN_TOKEN));
        assert_eq!(a.status, 201, "issue token: {a:?}");
        a.body["token"].as_str().expect("token").to_owned()
    }

    /// Uploads a guest from `build/guests` and returns its module id.
    pub fn push(&self, token: &str, guest: &str) -> String {
        let bytes = std::fs::read(crate::guest(guest)).expect("guest bytes");
        let a = self.post_bytes(&format!("/v1/modules?name={guest}"), Some(token), &bytes);
        assert!(a.status == 201 || a.status == 200, "push {guest}: {a:?}");
        a.body["id"].as_str().expect("id").to_owned()
    }

    /// Polls a pipeline's status until `done` holds of it (or panics after `within`).
    pub fn wait_status(
        &self,
        token: &str,
        name: &str,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let a = self.get(&format!("/v1/pipelines/{name}"), Some(token));
            if a.status == 200 && done(&a.body) {
                return a.body;
            }
            assert!(
                Instant::now() < deadline,
                "pipeline {name} never reached the state wanted; last: {a:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
