//! The HTTP client of `weir module` and `weir pipeline`: one typed call per route of
//! `weir serve`'s API (`crate::server::wire` is the contract both sides compile against).
//!
//! Invariants:
//! - Every failure is one line ([`ClientError`]): an answer that is not a success is the
//!   server's own reason and the status, `<reason> (HTTP <status>)`; a server that cannot
//!   be reached is named by its URL. The token is sent only as a bearer header and never
//!   appears in an error, a `Debug` rendering or any output.
//! - Every successful answer is kept as the JSON the server sent ([`Reply::json`]), so
//!   `--json` prints it as is, next to its typed value for the tables.
//! - A module upload is streamed from its file (`Content-Length` from the file's size,
//!   `Expect: 100-continue`, so a server that refuses it early, over quota, answers before
//!   any byte of the body is sent): it is never read whole into memory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::connector::error::io_reason;
use crate::server::wire::{CreatePipeline, ErrorBody, Module, PipelineStatus, UpgradePipeline};

/// The variable `--server` defaults to.
pub const SERVER_ENV: &str = "WEIR_SERVER";
/// The variable `--token` defaults to.
pub const TOKEN_ENV: &str = "WEIR_TOKEN";

/// Longest wait for a TCP connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a whole request: the server's own limit per request (a compile or a
/// stop's final checkpoint may take that long) and a minute's margin.
const REQUEST_TIMEOUT: Duration =
    Duration::from_secs(crate::server::api::REQUEST_TIMEOUT.as_secs() + 60);
/// Longest error answer read back (an error is one line; anything longer is cut).
const MAX_ERROR_CHARS: usize = 1000;

/// How to reach the server: shared by `weir module` and `weir pipeline`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerArgs {
    /// The server's URL, e.g. http://127.0.0.1:8080
    #[arg(long, global = true, value_name = "URL", env = SERVER_ENV)]
    pub server: Option<String>,
    /// Your API token (prefer the variable: other users of the machine can read a
    /// command line; its value is never shown in --help)
    #[arg(long, global = true, value_name = "TOKEN", env = TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// Print the server's JSON answer (pretty) instead of a table
    #[arg(long, global = true)]
    pub json: bool,
    /// Trust this CA (PEM) for an https:// server, instead of the public roots
    #[arg(long, global = true, value_name = "FILE", env = CA_CERT_ENV)]
    pub ca_cert: Option<PathBuf>,
}

/// Environment variable naming the CA file of an https:// server.
pub const CA_CERT_ENV: &str = "WEIR_CA_CERT";

/// The certificates of a PEM file.
fn read_ca(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, ClientError> {
    let bad = |reason: String| ClientError::File {
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// Why a call to the server failed: always one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("no server given: pass --server URL or set {SERVER_ENV}")]
    NoServer,
    #[error("no token given: pass --token TOKEN or set {TOKEN_ENV}")]
    NoToken,
    #[error("the token has spaces or control characters in it: copy it again")]
    BadToken,
    #[error("server URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot reach the server at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The server refused: its reason, as it said it.
    #[error("{reason} (HTTP {status})")]
    Refused { status: u16, reason: String },
    #[error("unexpected answer from {url} (HTTP {status}): {reason}")]
    BadAnswer {
        url: String,
        status: u16,
        reason: String,
    },
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
}

/// A successful answer: its status, the JSON as sent (`Null` for an empty body) and
/// its typed value.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    pub status: u16,
    pub json: Value,
    pub value: T,
}

/// A client of one server, as one tenant.
pub struct ServerClient {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl std::fmt::Debug for ServerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// `value` unless it is empty or blank.
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.trim().is_empty())
}

/// `url` without its trailing slashes, if it is an `http://` or `https://` URL.
pub fn base_url(url: &str) -> Result<String, ClientError> {
    let url = url.trim();
    let bad = |reason: &str| ClientError::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| bad("use http://HOST:PORT (or https://)"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(bad("no host"));
    }
    if url.contains(['?', '#']) || url.chars().any(|c| c.is_control() || c == ' ') {
        return Err(bad(
            "a server URL has no query, fragment, spaces or control characters",
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// `text` as one URL path segment: everything but unreserved characters percent-encoded.
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `text` on one line: line breaks, other control characters and bidirectional
/// controls escaped, at most
/// `max` characters (then `...`).
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.trim().chars().enumerate() {
        if i == max {
            out.push_str("...");
            break;
        }
        if c.is_control() || is_bidi_control(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The Unicode bidirectional controls (embeddings, overrides, isolates and marks): a
/// name holding a right-to-left override would print reversed, making a row lie.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

impl ServerClient {
    /// A client for `args` (clap took each from its flag, else its variable); a value
    /// that is empty or blank counts as none.
    pub fn from_args(args: &ServerArgs) -> Result<Self, ClientError> {
        let server = given(&args.server).ok_or(ClientError::NoServer)?;
        let token = given(&args.token).ok_or(ClientError::NoToken)?;
        let ca = args
            .ca_cert
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty());
        Self::with_ca(server, token, ca)
    }

    pub fn new(server: &str, token: &str) -> Result<Self, ClientError> {
        Self::with_ca(server, token, None)
    }

    /// A client that trusts `ca` (PEM) instead of the public roots for https.
    pub fn with_ca(server: &str, token: &str, ca: Option<&Path>) -> Result<Self, ClientError> {
        let base = base_url(server)?;
        let token = token.trim();
        if token.chars().any(|c| c.is_control() || c == ' ') {
            return Err(ClientError::BadToken);
        }
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(ca) = ca {
            tls = tls.root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(
                read_ca(ca)?,
            )));
        }
        let agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .into();
        Ok(ServerClient {
            base,
            token: token.to_owned(),
            agent,
        })
    }

    /// The server's URL, as the client uses it.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<Reply<T>, ClientError> {
        let url = self.url(path);
        let sent = self
            .agent
            .get(&url)
            .header("Authorization", &self.bearer())
            .call();
        finish(&url, sent)
    }

    fn delete(&self, path: &str) -> Result<Reply<()>, ClientError> {
        let url = self.url(path);
        let sent = self
            .agent
            .delete(&url)
            .header("Authorization", &self.bearer())
            .call();
        finish(&url, sent)
    }

    fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<&impl serde::Serialize>,
    ) -> Result<Reply<T>, ClientError> {
        let url = self.url(path);
        let request = self
            .agent
            .post(&url)
            .header("Authorization", &self.bearer());
        let sent = match body {
            Some(b) => request.send_json(b),
            None => request.send_empty(),
        };
        finish(&url, sent)
    }

    /// `GET /v1/modules`.
    pub fn modules(&self) -> Result<Reply<Vec<Module>>, ClientError> {
        self.get("/v1/modules")
    }

    /// `POST /v1/modules?name=NAME` with the bytes of `file`, streamed. Status 201 for a
    /// new module, 200 for bytes already uploaded.
    pub fn push_module(&self, file: &Path, name: &str) -> Result<Reply<Module>, ClientError> {
        let shown = file.display().to_string();
        let opened = File::open(file).map_err(|e| ClientError::File {
            path: shown.clone(),
            reason: io_reason(&e),
        })?;
        let metadata = opened.metadata().map_err(|e| ClientError::File {
            path: shown.clone(),
            reason: io_reason(&e),
        })?;
        if !metadata.is_file() {
            return Err(ClientError::File {
                path: shown,
                reason: "not a regular file".into(),
            });
        }
        let url = self.url("/v1/modules");
        let sent = self
            .agent
            .post(&url)
            .query("name", name)
            .header("Authorization", &self.bearer())
            .header("Content-Type", "application/wasm")
            .header("Expect", "100-continue")
            .send(opened);
        finish(&url, sent)
    }

    /// `DELETE /v1/modules/{id}`.
    pub fn delete_module(&self, id: &str) -> Result<Reply<()>, ClientError> {
        self.delete(&format!("/v1/modules/{}", path_segment(id)))
    }

    /// `POST /v1/pipelines`.
    pub fn create_pipeline(
        &self,
        body: &CreatePipeline,
    ) -> Result<Reply<PipelineStatus>, ClientError> {
        self.post("/v1/pipelines", Some(body))
    }

    /// `GET /v1/pipelines`.
    pub fn pipelines(&self) -> Result<Reply<Vec<PipelineStatus>>, ClientError> {
        self.get("/v1/pipelines")
    }

    /// `GET /v1/pipelines/{name}`.
    pub fn pipeline(&self, name: &str) -> Result<Reply<PipelineStatus>, ClientError> {
        self.get(&format!("/v1/pipelines/{}", path_segment(name)))
    }

    /// `POST /v1/pipelines/{name}/{action}` for `start`, `stop` and `savepoint`.
    pub fn pipeline_action(
        &self,
        name: &str,
        action: PipelineAction,
    ) -> Result<Reply<PipelineStatus>, ClientError> {
        let path = format!("/v1/pipelines/{}/{}", path_segment(name), action.as_str());
        self.post(&path, None::<&Value>)
    }

    /// `POST /v1/pipelines/{name}/upgrade`.
    pub fn upgrade_pipeline(
        &self,
        name: &str,
        body: &UpgradePipeline,
    ) -> Result<Reply<PipelineStatus>, ClientError> {
        self.post(
            &format!("/v1/pipelines/{}/upgrade", path_segment(name)),
            Some(body),
        )
    }

    /// `DELETE /v1/pipelines/{name}`.
    pub fn delete_pipeline(&self, name: &str) -> Result<Reply<()>, ClientError> {
        self.delete(&format!("/v1/pipelines/{}", path_segment(name)))
    }
}

/// The body-less pipeline actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineAction {
    Start,
    Stop,
    Savepoint,
}

impl PipelineAction {
    fn as_str(self) -> &'static str {
        match self {
            PipelineAction::Start => "start",
            PipelineAction::Stop => "stop",
            PipelineAction::Savepoint => "savepoint",
        }
    }
}

/// The answer to a request to `url`: a success decoded as `T`, anything else one line.
fn finish<T: DeserializeOwned>(
    url: &str,
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<Reply<T>, ClientError> {
    let mut response = sent.map_err(|e| ClientError::Unreachable {
        url: url.to_owned(),
        reason: one_line(&e.to_string(), MAX_ERROR_CHARS),
    })?;
    let status = response.status();
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| ClientError::Unreachable {
            url: url.to_owned(),
            reason: one_line(&format!("reading the answer: {e}"), MAX_ERROR_CHARS),
        })?;
    if !status.is_success() {
        return Err(refusal(status, &text));
    }
    decode(url, status.as_u16(), &text)
}

/// A refusal's one line: the server's `error`, else the body's start, else the status's
/// canonical reason.
pub fn refusal(status: ureq::http::StatusCode, text: &str) -> ClientError {
    let reason = match serde_json::from_str::<ErrorBody>(text) {
        Ok(body) => body.error,
        Err(_) if !text.trim().is_empty() => text.to_owned(),
        Err(_) => status
            .canonical_reason()
            .unwrap_or("no reason given")
            .to_owned(),
    };
    ClientError::Refused {
        status: status.as_u16(),
        reason: one_line(&reason, MAX_ERROR_CHARS),
    }
}

fn decode<T: DeserializeOwned>(
    url: &str,
    status: u16,
    text: &str,
) -> Result<Reply<T>, ClientError> {
    let bad = |reason: String| ClientError::BadAnswer {
        url: url.to_owned(),
        status,
        reason: one_line(&reason, MAX_ERROR_CHARS),
    };
    let json = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?
    };
    let value = serde_json::from_value(json.clone()).map_err(|e| bad(e.to_string()))?;
    Ok(Reply {
        status,
        json,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        server: ServerArgs,
    }

    #[test]
    fn each_flag_falls_back_to_its_variable_and_the_token_is_never_shown() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let arg = |id: &str| {
            cli.get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("--{id}"))
        };
        for (id, env) in [
            ("server", SERVER_ENV),
            ("token", TOKEN_ENV),
            ("ca_cert", CA_CERT_ENV),
        ] {
            assert_eq!(arg(id).get_env(), Some(std::ffi::OsStr::new(env)), "{id}");
        }
        assert!(arg("token").is_hide_env_values_set());
    }

    #[test]
    fn a_blank_server_or_token_is_none() {
        let args = |server: &str, token: &str| ServerArgs {
            server: Some(server.into()),
            token: Some(token.into()),
            ..ServerArgs::default()
        };
        let no_server = ServerClient::from_args(&args(" ", "t")).expect_err("blank server");
        assert!(matches!(no_server, ClientError::NoServer), "{no_server}");
        let no_token = ServerClient::from_args(&args("http://h:1", "")).expect_err("empty token");
        assert!(matches!(no_token, ClientError::NoToken), "{no_token}");
    }

    #[test]
    fn base_url_takes_http_and_drops_trailing_slashes() {
        assert_eq!(
            base_url("http://127.0.0.1:8080/").expect("a value"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            base_url(" https://weir.example ").expect("a value"),
            "https://weir.example"
        );
        let e = base_url("127.0.0.1:8080").expect_err("an error");
        assert_eq!(
            e.to_string(),
            "server URL \"127.0.0.1:8080\": use http://HOST:PORT (or https://)"
        );
        assert!(base_url("http://").is_err());
        assert!(base_url("http://h/?x").is_err());
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(path_segment("word-count_2"), "word-count_2");
        assert_eq!(path_segment("../a b/?"), "..%2Fa%20b%2F%3F");
    }

    #[test]
    fn a_refusal_is_the_servers_reason_and_status() {
        let e = refusal(
            ureq::http::StatusCode::BAD_REQUEST,
            r#"{"error":"spec field sources[0].group: the server chooses it; remove it"}"#,
        );
        assert_eq!(
            e.to_string(),
            "spec field sources[0].group: the server chooses it; remove it (HTTP 400)"
        );
        let e = refusal(ureq::http::StatusCode::BAD_GATEWAY, "");
        assert_eq!(e.to_string(), "Bad Gateway (HTTP 502)");
        let e = refusal(ureq::http::StatusCode::NOT_FOUND, "no such\nthing");
        assert_eq!(e.to_string(), "no such\\nthing (HTTP 404)");
    }

    #[test]
    fn one_line_escapes_and_shortens() {
        assert_eq!(one_line("a\r\nb\u{1b}[31m", 100), "a\\r\\nb\\u{1b}[31m");
        assert_eq!(one_line("abcdef", 3), "abc...");
        assert_eq!(
            one_line("evil\u{202E}gpj.exe", 100),
            "evil\\u{202e}gpj.exe",
            "a right-to-left override is shown, not obeyed"
        );
    }

    #[test]
    fn debug_never_shows_the_token() {
        let client =
            ServerClient::new("http://127.0.0.1:1", "secret-token-value").expect("a value");
        assert!(!format!("{client:?}").contains("secret-token-value"));
    }

    #[test]
    fn an_empty_success_decodes_as_unit_and_json_is_kept() {
        let r: Reply<()> = decode("u", 204, "").expect("a value");
        assert_eq!(r.json, Value::Null);
        let r: Reply<Vec<u32>> = decode("u", 200, "[1, 2]").expect("a value");
        assert_eq!(r.value, vec![1, 2]);
        assert_eq!(r.json, serde_json::json!([1, 2]));
        assert!(decode::<Vec<u32>>("u", 200, "{}").is_err());
    }
}
