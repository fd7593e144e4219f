//! `security = { ... }` of a Kafka source or sink: how every client of the connector
//! authenticates to the broker and whether it speaks TLS (librdkafka's
//! `security.protocol`, `sasl.mechanisms`, `sasl.username`, `sasl.password`,
//! `ssl.ca.location`).
//!
//! ```toml
//! security = { protocol = "sasl_ssl", mechanism = "SCRAM-SHA-512", username = "a",
//!              password_env = "WEIR_KAFKA_PASSWORD", ca = "ca.pem" }
//! ```
//!
//! Invariants:
//! - After `validate`: a SASL protocol has a mechanism, a non-empty username and exactly
//!   one of `password_env` / `password_file`; a protocol without SASL has none of them;
//!   `ca` only comes with TLS (`ssl`, `sasl_ssl`). Each refusal is one line naming the
//!   field.
//! - The spec never holds a password, only where to read it. It is read when the
//!   connector opens ([`SecurityConfig::resolve`]), kept in a [`Password`] whose `Debug`
//!   is redacted, and handed to librdkafka only (whose `ClientConfig` Debug drops
//!   `sasl.password`). No error, log line or Debug output of this module contains it.
//! - The resolved [`ClientSecurity`] is applied by `client::client_config` itself, the
//!   one constructor of Weir's Kafka clients, so no consumer, producer, marker reader,
//!   metadata probe or admin client of the connector connects without it.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use rdkafka::ClientConfig;
use serde::Deserialize;

use crate::connector::kafka::error::KafkaError;
use crate::field::InvalidField;

/// A password file larger than this is not a password (and a FIFO or device is refused).
const MAX_PASSWORD_FILE_BYTES: u64 = 64 << 10; // 64 KiB

/// librdkafka's `security.protocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    fn librdkafka_name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

/// librdkafka's `sasl.mechanisms` (one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// The `security` table of a Kafka source or sink, as written in the spec.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityConfig {
    pub protocol: SecurityProtocol,
    #[serde(default)]
    pub mechanism: Option<SaslMechanism>,
    #[serde(default)]
    pub username: Option<String>,
    /// Name of the environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// File holding the password (one trailing line break is dropped); relative to the
    /// spec's directory.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// PEM file of the CA certificates to trust (TLS only); default: the system's.
    /// Relative to the spec's directory.
    #[serde(default)]
    pub ca: Option<PathBuf>,
}

impl SecurityConfig {
    /// The cross-field rules of the module docs; the error names `security.<field>`.
    pub fn validate(&self) -> Result<(), InvalidField> {
        let refuse = |message: String| Err(InvalidField::new("security", message));
        let protocol = self.protocol.librdkafka_name();
        if self.protocol.uses_sasl() {
            if self.mechanism.is_none() {
                return refuse(format!(
                    "security.mechanism is required with protocol {protocol}: \"PLAIN\", \"SCRAM-SHA-256\" or \"SCRAM-SHA-512\""
                ));
            }
            if self.username.as_deref().is_none_or(str::is_empty) {
                return refuse(format!(
                    "security.username is required (and not empty) with protocol {protocol}"
                ));
            }
            match (&self.password_env, &self.password_file) {
                (Some(_), Some(_)) | (None, None) => {
                    return refuse(format!(
                        "security.password_env: give exactly one of password_env and password_file with protocol {protocol}"
                    ));
                }
                (Some(env), None) if env.is_empty() || env.contains('=') => {
                    return refuse(
                        "security.password_env must name an environment variable".into(),
                    );
                }
                _ => {}
            }
        } else if let Some(field) = self.sasl_field() {
            return refuse(format!(
                "security.{field} is only for protocol sasl_plaintext or sasl_ssl, not {protocol}"
            ));
        }
        if self.ca.is_some() && !self.protocol.uses_tls() {
            return refuse(format!(
                "security.ca is only for protocol ssl or sasl_ssl, not {protocol}"
            ));
        }
        Ok(())
    }

    /// The first SASL field given, if any.
    fn sasl_field(&self) -> Option<&'static str> {
        if self.mechanism.is_some() {
            Some("mechanism")
        } else if self.username.is_some() {
            Some("username")
        } else if self.password_env.is_some() {
            Some("password_env")
        } else if self.password_file.is_some() {
            Some("password_file")
        } else {
            None
        }
    }

    /// Makes relative `password_file` and `ca` paths relative to the spec's directory.
    pub fn resolve_paths(&mut self, base_dir: &Path) {
        for path in [&mut self.password_file, &mut self.ca]
            .into_iter()
            .flatten()
        {
            *path = base_dir.join(&*path);
        }
    }

    /// The settings to connect with: reads the password now, from the environment or
    /// the file. `what` names the connector in errors ("kafka source").
    pub fn resolve(&self, what: &'static str) -> Result<ClientSecurity, KafkaError> {
        self.resolve_with(what, |var| std::env::var(var))
    }

    /// `resolve`, with `env` standing for the process environment.
    fn resolve_with(
        &self,
        what: &'static str,
        env: impl Fn(&str) -> Result<String, std::env::VarError>,
    ) -> Result<ClientSecurity, KafkaError> {
        let sasl = match (self.mechanism, &self.username) {
            (Some(mechanism), Some(username)) if self.protocol.uses_sasl() => Some(Sasl {
                mechanism,
                username: username.clone(),
                password: self.read_password(what, env)?,
            }),
            _ => None,
        };
        Ok(ClientSecurity {
            protocol: self.protocol,
            sasl,
            ca: self.ca.clone(),
        })
    }

    fn read_password(
        &self,
        what: &'static str,
        env: impl Fn(&str) -> Result<String, std::env::VarError>,
    ) -> Result<Password, KafkaError> {
        let refused = |reason: String| KafkaError::Credentials { what, reason };
        if let Some(var) = &self.password_env {
            return match env(var) {
                Ok(p) if !p.is_empty() => Ok(Password(p)),
                Ok(_) => Err(refused(format!("security.password_env: {var} is empty"))),
                Err(std::env::VarError::NotPresent) => {
                    Err(refused(format!("security.password_env: {var} is not set")))
                }
                Err(std::env::VarError::NotUnicode(_)) => Err(refused(format!(
                    "security.password_env: {var} is not valid UTF-8"
                ))),
            };
        }
        let Some(path) = &self.password_file else {
            return Err(refused("security: no password_env or password_file".into()));
        };
        read_password_file(path).map_err(|reason| {
            refused(format!(
                "security.password_file {}: {reason}",
                path.display()
            ))
        })
    }
}

/// The password in `path`: a regular file of at most `MAX_PASSWORD_FILE_BYTES`, UTF-8,
/// one trailing `\n` or `\r\n` dropped, not empty. Errors never quote the content.
fn read_password_file(path: &Path) -> Result<Password, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_PASSWORD_FILE_BYTES {
        return Err(format!(
            "larger than {MAX_PASSWORD_FILE_BYTES} bytes: not a password file"
        ));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PASSWORD_FILE_BYTES).read_to_string(&mut text))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => "not valid UTF-8".to_owned(),
            _ => e.to_string(),
        })?;
    let trimmed = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if trimmed.is_empty() {
        return Err("empty".into());
    }
    Ok(Password(trimmed.to_owned()))
}

/// A password read for a connector. Its `Debug` never shows it; it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Sasl {
    mechanism: SaslMechanism,
    username: String,
    password: Password,
}

/// The resolved security settings of a connector's clients (`Default`: plaintext, no
/// authentication, as without a `security` table).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientSecurity {
    protocol: SecurityProtocol,
    sasl: Option<Sasl>,
    ca: Option<PathBuf>,
}

impl ClientSecurity {
    /// Sets librdkafka's security properties on `config`.
    pub fn apply(&self, config: &mut ClientConfig) {
        config.set("security.protocol", self.protocol.librdkafka_name());
        if let Some(sasl) = &self.sasl {
            config
                .set("sasl.mechanisms", sasl.mechanism.name())
                .set("sasl.username", &sasl.username)
                .set("sasl.password", &sasl.password.0);
        }
        if let Some(ca) = &self.ca {
            config.set("ssl.ca.location", ca.to_string_lossy());
        }
    }

    /// Whether the clients authenticate with SASL.
    pub fn uses_sasl(&self) -> bool {
        self.sasl.is_some()
    }

    /// "user a with SCRAM-SHA-256", for error messages (never the password).
    pub fn principal(&self) -> String {
        match &self.sasl {
            Some(s) => format!("user {} with {}", s.username, s.mechanism.name()),
            None => format!("no SASL user ({})", self.protocol.librdkafka_name()),
        }
    }
}

#[cfg(test)]
#[path = "security_tests.rs"]
mod tests;
