//! `compare:`: an A/B of two server templates (Triton versions, images, flags, model configs)
//! under the same clients, run in interleaved blocks (A, B, A, B, …) so that a drift of the
//! machine falls on both sides alike; each block is a run of its own with fresh servers.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompareSettings {
    /// The server group whose template alternates (default: the matrix's only server group).
    pub server_group: Option<String>,
    /// The server template of side A (the baseline).
    pub a: String,
    /// The server template of side B, compared with A.
    pub b: String,
    /// Runs of each side, interleaved A, B, A, B, … (default 3, from 2 to 50): the change of
    /// each metric is judged on the spread between them.
    #[serde(
        default = "default_repeats",
        deserialize_with = "super::checked::compare_repeats"
    )]
    pub repeats: u32,
}

pub(super) fn default_repeats() -> u32 {
    3
}
