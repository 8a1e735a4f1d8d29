//! [`StoreError`]: every error names the operation and the store's URL (password masked).

/// An error of the status store. Its message says which operation failed on which store, e.g.
/// `status store postgres://stress:***@db:5432/stress: record_event: error returned from
/// database: ...`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is neither `sqlite:` nor `postgres:`/`postgresql:`.
    #[error(
        "status store {url}: unsupported URL (expected sqlite://PATH or postgres://USER@HOST/DB)"
    )]
    UnsupportedUrl { url: String },

    /// The database refused or failed an operation.
    #[error("status store {url}: {op}: {error}")]
    Database {
        op: &'static str,
        url: String,
        error: sqlx::Error,
    },

    /// A row that this code did not write the way it reads it (an unknown event kind or role,
    /// diagnostics that are not JSON).
    #[error("status store {url}: {op}: {message}")]
    Corrupt {
        op: &'static str,
        url: String,
        message: String,
    },

    /// The row to update does not exist (e.g. `finish_run` of an unknown run).
    #[error("status store {url}: {op}: {what} not found")]
    NotFound {
        op: &'static str,
        url: String,
        what: String,
    },

    /// A migration that was applied to this database differs from the one in this build.
    #[error("status store {url}: migrate: {message}")]
    Migration { url: String, message: String },

    /// Opened read-only, the database has no store schema: no run has written it yet (or it
    /// is not a status store).
    #[error("status store {url}: no run has written it yet (no store schema)")]
    Unwritten { url: String },

    /// Anything else around the database (e.g. creating the directory of a SQLite file).
    #[error("status store {url}: {op}: {message}")]
    Other {
        op: &'static str,
        url: String,
        message: String,
    },
}

impl StoreError {
    /// A stable name of the kind of failure, for logs and metrics labels (never changes with the
    /// message's wording).
    pub fn label(&self) -> &'static str {
        match self {
            StoreError::UnsupportedUrl { .. } => "unsupported_url",
            StoreError::Database { .. } => "database",
            StoreError::Corrupt { .. } => "corrupt",
            StoreError::NotFound { .. } => "not_found",
            StoreError::Migration { .. } => "migration",
            StoreError::Unwritten { .. } => "unwritten",
            StoreError::Other { .. } => "other",
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// `url` with its password replaced by `***`, both in the user info (`postgres://u:pw@h/db`) and
/// in a `password=` query parameter. Everything else stays as it was, so the message still says
/// which database it was.
pub fn mask_url(url: &str) -> String {
    let (without_fragment, fragment) = match url.find('#') {
        Some(i) => url.split_at(i),
        None => (url, ""),
    };
    let (base, query) = match without_fragment.find('?') {
        Some(i) => (&without_fragment[..i], Some(&without_fragment[i + 1..])),
        None => (without_fragment, None),
    };

    let mut out = String::with_capacity(url.len());
    match base.find("://") {
        Some(scheme_end) => {
            let after = scheme_end + 3;
            let authority_end = base[after..]
                .find('/')
                .map(|i| after + i)
                .unwrap_or(base.len());
            let authority = &base[after..authority_end];
            out.push_str(&base[..after]);
            match authority.rfind('@') {
                Some(at) => {
                    let userinfo = &authority[..at];
                    match userinfo.find(':') {
                        Some(colon) => {
                            out.push_str(&userinfo[..colon]);
                            out.push_str(":***");
                        }
                        None => out.push_str(userinfo),
                    }
                    out.push_str(&authority[at..]);
                }
                None => out.push_str(authority),
            }
            out.push_str(&base[authority_end..]);
        }
        None => out.push_str(base),
    }

    if let Some(query) = query {
        out.push('?');
        let masked: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push_str(&masked.join("&"));
    }
    out.push_str(fragment);
    out
}

#[cfg(test)]
mod tests {
    use super::mask_url;

    #[test]
    fn masks_passwords() {
        assert_eq!(
            mask_url("postgres://stress:s3cr%40t@db:5432/stress"),
            "postgres://stress:***@db:5432/stress"
        );
        assert_eq!(
            mask_url("postgres://a:b:c@d@host/db?sslmode=disable&password=x&user=u"),
            "postgres://a:***@host/db?sslmode=disable&password=***&user=u"
        );
        assert_eq!(
            mask_url("postgres://stress@db/stress"),
            "postgres://stress@db/stress"
        );
        assert_eq!(
            mask_url("postgresql://localhost?password=pw"),
            "postgresql://localhost?password=***"
        );
        assert_eq!(
            mask_url("sqlite:///tmp/run/status.sqlite?mode=rwc"),
            "sqlite:///tmp/run/status.sqlite?mode=rwc"
        );
        assert_eq!(mask_url("sqlite::memory:"), "sqlite::memory:");
    }
}
