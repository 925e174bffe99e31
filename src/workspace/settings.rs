//! What a Feature says about its repository, validated before any git process runs.

use std::fmt;

/// Problems with the repository settings, each naming the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "workspace.git.url `{url}` is not a git URL: {reason} (use https://host/path, ssh://user@host/path, user@host:path or git://host/path)"
    )]
    BadUrl { url: String, reason: &'static str },
    #[error(
        "workspace.git.url contains credentials: remove the user and password from the URL and put them in the credentials Secret instead"
    )]
    CredentialsInUrl,
    #[error("workspace.git.{field} is empty: name a branch, e.g. `main`")]
    EmptyRef { field: &'static str },
    #[error(
        "workspace.git.{field} `{name}` is not a valid git branch name: {reason} (see `git check-ref-format --branch`)"
    )]
    BadRefName {
        field: &'static str,
        name: String,
        reason: &'static str,
    },
    #[error("{what} is empty: {fix}")]
    MissingValue {
        what: &'static str,
        fix: &'static str,
    },
    #[error(
        "{kind} credentials cannot be used with `{url}`: use an https:// URL for a username and token, an ssh URL for an SSH key"
    )]
    CredentialsDoNotFitUrl { kind: &'static str, url: String },
}

/// How git reaches the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Https,
    /// Plain `http://`: only sensible on a trusted network (tests, in-cluster mirrors).
    Http,
    Ssh,
    /// The unauthenticated `git://` protocol (`git daemon`).
    Git,
    /// A repository on disk (`file://` or an absolute path).
    File,
}

/// The person the task commits are attributed to.
#[derive(Clone, PartialEq, Eq)]
pub struct CommitAuthor {
    pub name: String,
    pub email: String,
}

impl Default for CommitAuthor {
    fn default() -> Self {
        Self {
            name: "ralph".to_owned(),
            email: "ralph@ralph.dev".to_owned(),
        }
    }
}

impl fmt::Debug for CommitAuthor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} <{}>", self.name, self.email)
    }
}

/// Secrets that let git fetch and push. Never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// HTTPS Basic auth: a username and a token (or password).
    Https { username: String, token: String },
    /// An SSH private key (OpenSSH format) and the `known_hosts` lines of the server.
    Ssh {
        private_key: String,
        known_hosts: String,
    },
}

impl Credentials {
    /// A name for the kind of credential, safe to show in messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Https { .. } => "HTTPS username/token",
            Self::Ssh { .. } => "SSH key",
        }
    }

    /// A description safe to show: the kind and, for HTTPS, the username.
    pub fn describe(&self) -> String {
        match self {
            Self::Https { username, .. } => format!("HTTPS token of user `{username}`"),
            Self::Ssh { .. } => "SSH private key".to_owned(),
        }
    }

    fn validate(&self) -> Result<(), SettingsError> {
        match self {
            Self::Https { username, token } => {
                required(
                    username,
                    "the HTTPS username",
                    "set `username` in the credentials Secret",
                )?;
                required(
                    token,
                    "the HTTPS token",
                    "set `token` (or `password`) in the credentials Secret",
                )?;
            }
            Self::Ssh {
                private_key,
                known_hosts,
            } => {
                required(
                    private_key,
                    "the SSH private key",
                    "set `ssh-privatekey` in the credentials Secret",
                )?;
                required(
                    known_hosts,
                    "the SSH known_hosts",
                    "set `known_hosts` in the credentials Secret (`ssh-keyscan HOST`), host keys are always checked",
                )?;
            }
        }
        Ok(())
    }
}

/// [`SettingsError::MissingValue`] naming `what` and its `fix` when `value` is blank.
fn required(value: &str, what: &'static str, fix: &'static str) -> Result<(), SettingsError> {
    if value.trim().is_empty() {
        return Err(SettingsError::MissingValue { what, fix });
    }
    Ok(())
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credentials({})", self.describe())
    }
}

/// The repository a Feature works in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoSettings {
    /// Clone URL, without credentials.
    pub url: String,
    /// The branch the feature branch is created from the first time.
    pub base_ref: String,
    /// The branch that collects the Feature's work; `None` means `ralph/<feature>`.
    pub feature_branch: Option<String>,
    pub credentials: Option<Credentials>,
    pub author: CommitAuthor,
}

impl RepoSettings {
    /// Settings with the default feature branch, no credentials and the default author.
    pub fn new(url: impl Into<String>, base_ref: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            base_ref: base_ref.into(),
            feature_branch: None,
            credentials: None,
            author: CommitAuthor::default(),
        }
    }

    /// The feature branch for `feature`: the configured one or `ralph/<feature>`.
    pub fn feature_branch_for(&self, feature: &str) -> String {
        self.feature_branch
            .clone()
            .unwrap_or_else(|| default_feature_branch(feature))
    }

    /// Checks every field; the first problem is returned.
    pub fn validate(&self, feature: &str) -> Result<Transport, SettingsError> {
        let transport = validate_url(&self.url)?;
        validate_branch_name("baseRef", &self.base_ref)?;
        validate_branch_name("featureBranch", &self.feature_branch_for(feature))?;
        if let Some(credentials) = &self.credentials {
            credentials.validate()?;
            let fits = matches!(
                (credentials, transport),
                (
                    Credentials::Https { .. },
                    Transport::Https | Transport::Http
                ) | (Credentials::Ssh { .. }, Transport::Ssh)
            );
            if !fits {
                return Err(SettingsError::CredentialsDoNotFitUrl {
                    kind: credentials.kind(),
                    url: self.url.clone(),
                });
            }
        }
        if self.author.name.trim().is_empty() || self.author.email.trim().is_empty() {
            return Err(SettingsError::MissingValue {
                what: "the commit author",
                fix: "set both `author.name` and `author.email`",
            });
        }
        Ok(transport)
    }
}

/// `ralph/<feature>`.
pub fn default_feature_branch(feature: &str) -> String {
    format!("ralph/{feature}")
}

/// Checks a clone URL and tells which transport it uses.
pub fn validate_url(url: &str) -> Result<Transport, SettingsError> {
    let bad = |reason| SettingsError::BadUrl {
        url: url.to_owned(),
        reason,
    };
    if url.trim().is_empty() {
        return Err(bad("it is empty"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it contains whitespace or control characters"));
    }
    if url.starts_with('-') {
        return Err(bad("it starts with `-`"));
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        let transport = match scheme {
            "https" => Transport::Https,
            "http" => Transport::Http,
            "ssh" | "git+ssh" | "ssh+git" => Transport::Ssh,
            "git" => Transport::Git,
            "file" => return Ok(Transport::File),
            _ => {
                return Err(bad(
                    "unknown scheme (https, http, ssh, git and file are supported)",
                ));
            }
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let host = match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                if transport != Transport::Ssh || userinfo.contains(':') {
                    return Err(SettingsError::CredentialsInUrl);
                }
                host
            }
            None => authority,
        };
        if host.is_empty() || host.starts_with(':') {
            return Err(bad("it names no host"));
        }
        if rest[authority.len()..].trim_matches('/').is_empty() {
            return Err(bad("it names no repository path"));
        }
        return Ok(transport);
    }
    if url.starts_with('/') {
        return Ok(Transport::File);
    }
    // scp-like syntax: [user@]host:path
    match url.split_once(':') {
        Some((host, path)) if !host.is_empty() && !path.is_empty() && !host.contains('/') => {
            Ok(Transport::Ssh)
        }
        _ => Err(bad("it has no scheme")),
    }
}

/// The rules of `git check-ref-format --branch`, without running git.
pub fn validate_branch_name(field: &'static str, name: &str) -> Result<(), SettingsError> {
    let bad = |reason| SettingsError::BadRefName {
        field,
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(SettingsError::EmptyRef { field });
    }
    if name == "@" {
        return Err(bad("it is `@`"));
    }
    if name.starts_with('-') {
        return Err(bad("it starts with `-`"));
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Err(bad("it starts or ends with `/` or contains `//`"));
    }
    if name.ends_with('.') {
        return Err(bad("it ends with `.`"));
    }
    if name.contains("..") {
        return Err(bad("it contains `..`"));
    }
    if name.contains("@{") {
        return Err(bad("it contains `@{`"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_ascii_control() || " ~^:?*[\\".contains(*c))
    {
        return Err(if c.is_ascii_control() {
            bad("it contains a control character")
        } else {
            bad("it contains one of space ~ ^ : ? * [ \\")
        });
    }
    for component in name.split('/') {
        if component.starts_with('.') {
            return Err(bad("a component starts with `.`"));
        }
        if component.ends_with(".lock") {
            return Err(bad("a component ends with `.lock`"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_usual_url_forms() {
        for (url, transport) in [
            ("https://github.com/org/repo.git", Transport::Https),
            ("http://127.0.0.1:8080/repo.git", Transport::Http),
            ("ssh://git@github.com/org/repo.git", Transport::Ssh),
            ("git@github.com:org/repo.git", Transport::Ssh),
            ("git://127.0.0.1:9418/repo.git", Transport::Git),
            ("file:///srv/repo.git", Transport::File),
            ("/srv/repo.git", Transport::File),
        ] {
            assert_eq!(validate_url(url), Ok(transport), "{url}");
        }
    }

    #[test]
    fn rejects_a_url_with_a_password_or_token() {
        assert_eq!(
            validate_url("https://user:ghp_secret@github.com/org/repo.git"),
            Err(SettingsError::CredentialsInUrl)
        );
        assert_eq!(
            validate_url("https://ghp_secret@github.com/org/repo.git"),
            Err(SettingsError::CredentialsInUrl)
        );
    }

    #[test]
    fn rejects_urls_that_are_not_git_urls() {
        for url in [
            "",
            "repo",
            "ftp://host/repo",
            "https:///repo",
            "https://host",
            "-upload-pack=x",
        ] {
            assert!(
                matches!(validate_url(url), Err(SettingsError::BadUrl { .. })),
                "{url}"
            );
        }
    }

    #[test]
    fn an_empty_base_ref_is_named() {
        let settings = RepoSettings::new("https://host/repo.git", "");
        assert_eq!(
            settings.validate("f"),
            Err(SettingsError::EmptyRef { field: "baseRef" })
        );
    }

    #[test]
    fn branch_names_follow_check_ref_format() {
        for name in ["main", "ralph/f", "ralph/f/t-1", "release-1.2", "a@b"] {
            assert_eq!(
                validate_branch_name("featureBranch", name),
                Ok(()),
                "{name}"
            );
        }
        for name in [
            "a..b",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[b",
            "a\\b",
            "/a",
            "a/",
            "a//b",
            "a.",
            ".a",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "@",
            "a@{1}",
            "-a",
            "a\u{7f}",
        ] {
            assert!(
                matches!(
                    validate_branch_name("featureBranch", name),
                    Err(SettingsError::BadRefName { .. })
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn the_feature_branch_defaults_to_ralph_slash_feature() {
        let settings = RepoSettings::new("https://host/repo.git", "main");
        assert_eq!(settings.feature_branch_for("login"), "ralph/login");
    }

    #[test]
    fn a_feature_name_that_makes_a_bad_branch_is_rejected() {
        let settings = RepoSettings::new("https://host/repo.git", "main");
        assert!(matches!(
            settings.validate("bad name"),
            Err(SettingsError::BadRefName {
                field: "featureBranch",
                ..
            })
        ));
    }

    /// Validates the settings of `url` with SSH credentials that know `known_hosts`.
    fn validate_with_ssh(url: &str, known_hosts: &str) -> Result<Transport, SettingsError> {
        let mut settings = RepoSettings::new(url, "main");
        settings.credentials = Some(Credentials::Ssh {
            private_key: "key".into(),
            known_hosts: known_hosts.into(),
        });
        settings.validate("f")
    }

    #[test]
    fn ssh_credentials_do_not_fit_an_https_url() {
        assert!(matches!(
            validate_with_ssh("https://host/repo.git", "host ssh-ed25519 AAAA"),
            Err(SettingsError::CredentialsDoNotFitUrl { .. })
        ));
    }

    #[test]
    fn ssh_credentials_need_known_hosts() {
        assert!(matches!(
            validate_with_ssh("git@host:repo.git", " "),
            Err(SettingsError::MissingValue { .. })
        ));
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let credentials = Credentials::Https {
            username: "bot".into(),
            token: "ghp_secret".into(),
        };
        assert!(!format!("{credentials:?}").contains("ghp_secret"));
    }
}
