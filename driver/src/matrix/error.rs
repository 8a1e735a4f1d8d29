//! Errors of loading a matrix.

use std::fmt;
use std::path::PathBuf;

/// A 1-based line and column in the matrix file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// Line, from 1.
    pub line: u64,
    /// Column (in characters), from 1.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One problem in a matrix file, displayed as `FILE:LINE:COLUMN: FIELD.PATH: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file name as given to [`super::load`] or [`super::parse`].
    pub file: String,
    /// Where the problem is; `None` only when the YAML parser could not tell.
    pub position: Option<Position>,
    /// Field path such as `client_groups.grpc-clients.target`; empty for the whole document.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(p) = self.position {
            write!(f, ":{p}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Why a matrix could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    /// The file could not be read.
    #[error("{}: cannot read the matrix: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file is not a valid matrix. Displayed as one diagnostic per line, in file order.
    #[error("{}", Lines(.0))]
    Invalid(Vec<Diagnostic>),
}

impl MatrixError {
    /// The problems found, in file order (empty for [`MatrixError::Read`]).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            MatrixError::Read { .. } => &[],
            MatrixError::Invalid(d) => d,
        }
    }
}

struct Lines<'a>(&'a [Diagnostic]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}
