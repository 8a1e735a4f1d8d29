//! Groups expanded into members: what the launchers start.

use stress_common::contract::{CorrIdAllocator, CorrIdBlock, MemberName};

use super::types::{ClientTemplate, Matrix, ServerTemplate};

/// One Triton server to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerMember {
    /// `<group>-<index>`, e.g. `triton-0`.
    pub name: MemberName,
    /// The server group it belongs to.
    pub group: String,
    /// Its index in the group, from 0.
    pub index: u32,
    /// The name of its template.
    pub template_name: String,
    /// Its template.
    pub template: ServerTemplate,
}

/// One stress client (worker) to start.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientMember {
    /// `<group>-<index>`, e.g. `grpc-clients-0`.
    pub name: MemberName,
    /// The client group it belongs to.
    pub group: String,
    /// Its index in the group, from 0.
    pub index: u32,
    /// The name of its template.
    pub template_name: String,
    /// Its template.
    pub template: ClientTemplate,
    /// The server group it targets.
    pub target_group: String,
    /// The member names of every server it talks to (every member of `target_group`).
    pub targets: Vec<MemberName>,
    /// Its block of correlation ids (ids start at 1; 0 means "no sequence" to Triton).
    pub corr_ids: CorrIdBlock,
}

/// `<group>-<index>`.
pub fn member_name(group: &str, index: u32) -> MemberName {
    MemberName::new(format!("{group}-{index}"))
}

impl Matrix {
    /// Every server member, group by group in file order, then by index.
    ///
    /// # Panics
    ///
    /// If a group names a template that does not exist, which [`super::parse`] and
    /// [`super::load`] never let through.
    pub fn servers(&self) -> Vec<ServerMember> {
        let mut members = Vec::new();
        for (group, g) in &self.server_groups {
            let template = self
                .server_templates
                .get(&g.template)
                .unwrap_or_else(|| panic!("server group {group}: undefined template"));
            for index in 0..g.instances {
                members.push(ServerMember {
                    name: member_name(group, index),
                    group: group.clone(),
                    index,
                    template_name: g.template.clone(),
                    template: template.clone(),
                });
            }
        }
        members
    }

    /// Every client member, group by group in file order, then by index. Correlation-id
    /// blocks are handed out in that order: the k-th client's block starts right after the
    /// (k-1)-th's, the first at 1, so blocks never overlap (with one block size for all,
    /// client k gets `1 + k * block_size`).
    ///
    /// # Panics
    ///
    /// If a group names a template or target that does not exist, or if the blocks overflow
    /// 64 bits, which [`super::parse`] and [`super::load`] never let through.
    pub fn clients(&self) -> Vec<ClientMember> {
        let mut members = Vec::new();
        let mut corr_ids = CorrIdAllocator::default();
        for (group, g) in &self.client_groups {
            let template = self
                .client_templates
                .get(&g.template)
                .unwrap_or_else(|| panic!("client group {group}: undefined template"));
            let target = self
                .server_groups
                .get(&g.target)
                .unwrap_or_else(|| panic!("client group {group}: undefined target"));
            let targets: Vec<MemberName> = (0..target.instances)
                .map(|i| member_name(&g.target, i))
                .collect();
            for index in 0..g.instances {
                let block = corr_ids
                    .take(g.corr_id_block_size)
                    .expect("correlation-id blocks overflow u64");
                members.push(ClientMember {
                    name: member_name(group, index),
                    group: group.clone(),
                    index,
                    template_name: g.template.clone(),
                    template: template.clone(),
                    target_group: g.target.clone(),
                    targets: targets.clone(),
                    corr_ids: block,
                });
            }
        }
        members
    }
}
