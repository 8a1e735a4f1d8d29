//! What can end a run before its verdict: bad input (exit code 2) or a failure around it (the
//! store, the report, the run directory; exit code 1), each with a stable label.

use std::path::PathBuf;

use crate::matrix::MatrixError;
use stress_common::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Bad matrix or options (exit code 2).
    #[error("{0}")]
    Matrix(#[from] MatrixError),
    #[error("{0}")]
    Config(String),
    #[error("status store: {0}")]
    Store(#[from] StoreError),
    #[error("report: {0}")]
    Report(#[from] crate::report::ReportError),
    /// The sweep's launcher could not be made (a kube run's objects not applied).
    #[error("launcher: {0}")]
    Launch(crate::launcher::LaunchError),
    /// The sweep's launcher could not read the swept models' configs.
    #[error("reading the swept models' configs: {0}")]
    ReadConfigs(crate::launcher::ReadConfigsError),
    #[error("run directory {path}: {error}")]
    RunDir {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A sweep's verdict not recorded, or its report not read back, within the store outage
    /// limit: the store's failure, not bad input (exit code 1, as [`DriverError::Store`]).
    #[error(transparent)]
    Finish(#[from] stress_common::retry::RetryError),
}

impl DriverError {
    /// A stable name of the kind of failure, for logs and metrics labels: `bad_matrix` and
    /// `bad_input` (exit code 2), `store.KIND`, `report`, `launch`, `read_configs`, `run_dir`, `store_outage` (exit 1).
    pub fn label(&self) -> String {
        match self {
            DriverError::Matrix(_) => "bad_matrix".into(),
            DriverError::Config(_) => "bad_input".into(),
            DriverError::Store(e) => format!("store.{}", e.label()),
            DriverError::Report(_) => "report".into(),
            DriverError::Launch(_) => "launch".into(),
            DriverError::ReadConfigs(_) => "read_configs".into(),
            DriverError::RunDir { .. } => "run_dir".into(),
            DriverError::Finish(_) => "store_outage".into(),
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            DriverError::Matrix(_) | DriverError::Config(_) => 2,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_error_kind_has_its_label_and_exit_code() {
        let store = DriverError::Store(StoreError::Unwritten {
            url: "sqlite://x".into(),
        });
        let outage = DriverError::Finish(stress_common::retry::RetryError {
            what: "finish_run".into(),
            attempts: 3,
            elapsed: Duration::from_secs(60),
            last: "the status store did not answer within 5s".into(),
        });
        let bad = DriverError::Config("sweep.parameters: no such field".into());
        let cases = [
            (&store, "store.unwritten", 1),
            (&outage, "store_outage", 1),
            (&bad, "bad_input", 2),
        ];
        for (error, label, code) in cases {
            assert_eq!(
                (error.label().as_str(), error.exit_code()),
                (label, code),
                "{error}"
            );
        }
    }
}
