//! Groups expanded into members: what the launchers start.

use stress_common::contract::{CorrIdAllocator, CorrIdBlock, MemberName};

use super::types::{ClientTemplate, EndpointPorts, Matrix, Protocol, ServerTemplate};

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

/// One existing server: never started, stopped or removed by the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalServer {
    /// `<group>-<index>`, e.g. `staging-0`.
    pub name: MemberName,
    /// The server group it belongs to.
    pub group: String,
    /// Its index in the group's `endpoints`, from 0.
    pub index: u32,
    /// Its addresses (a `HOST:PORT` entry under the protocol of the clients that target it).
    pub ports: EndpointPorts,
    /// Whether the entry is a mapping of ports (then its fields are named by protocol), or a
    /// bare `HOST:PORT`.
    pub by_protocol: bool,
}

impl ExternalServer {
    /// The matrix field of its entry, as diagnostics name it: `server_groups.G.endpoints[I]`.
    pub fn field(&self) -> String {
        format!("server_groups.{}.endpoints[{}]", self.group, self.index)
    }

    /// The matrix field of one of its addresses: `server_groups.G.endpoints[I].grpc` for a
    /// mapping, the entry itself for a bare `HOST:PORT`.
    pub fn port_field(&self, port: &str) -> String {
        if self.by_protocol {
            format!("{}.{port}", self.field())
        } else {
            self.field()
        }
    }

    /// Its addresses in one line, as the store and the report show them:
    /// `grpc=H:P http=H:P metrics=H:P` (those known).
    pub fn address(&self) -> String {
        [
            ("grpc", &self.ports.grpc),
            ("http", &self.ports.http),
            ("metrics", &self.ports.metrics),
        ]
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(" ")
    }
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

/// A fault target that names no server the driver launched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultTargetError {
    #[error(
        "{0:?} names servers that already run (endpoints): the driver injects faults only into \
         servers it launched"
    )]
    External(String),
    /// `launched`: the launched server groups, listed (or "none is defined").
    #[error(
        "unknown target {target:?}: name a launched server group ({launched}), one of its \
         members (`<group>-<index>`), a client group or member (an evict or drain), or `store` (a \
         store-restart) or `api-server` (an api-outage)"
    )]
    Unknown { target: String, launched: String },
}

impl Matrix {
    /// The launched server members a fault's target names: a group's, or the one member, or
    /// workers (an `evict`'s: [`Matrix::client_target_members`]), or
    /// a kind's fixed target itself ([`FaultKind::fixed_to`](super::faults::FaultKind::fixed_to):
    /// the status store, the API server; which kind takes which is validation's rule); the
    /// error says why it names none.
    pub fn fault_target_members(&self, target: &str) -> Result<Vec<String>, FaultTargetError> {
        let m = self;
        if let Some(g) = m.server_groups.get(target) {
            if g.is_external() {
                return Err(FaultTargetError::External(target.to_string()));
            }
            return Ok((0..g.member_count())
                .map(|i| member_name(target, i).to_string())
                .collect());
        }
        for (name, g) in m.server_groups.iter().filter(|(_, g)| !g.is_external()) {
            if (0..g.member_count()).any(|i| member_name(name, i).as_str() == target) {
                return Ok(vec![target.to_string()]);
            }
        }
        if super::faults::FaultKind::fixed_to(target).is_some() {
            return Ok(vec![target.to_string()]);
        }
        if let Some(members) = self.client_target_members(target) {
            return Ok(members);
        }
        let launched: Vec<String> = m
            .server_groups
            .iter()
            .filter(|(_, g)| !g.is_external())
            .map(|(n, _)| n.clone())
            .collect();
        Err(FaultTargetError::Unknown {
            target: target.to_string(),
            launched: if launched.is_empty() {
                "none is defined".to_string()
            } else {
                launched.join(", ")
            },
        })
    }

    /// The workers a fault's target names, when it names a client group or one of its
    /// members (`evict` only: validation's rule); None when it names no client.
    pub fn client_target_members(&self, target: &str) -> Option<Vec<String>> {
        if let Some(g) = self.client_groups.get(target) {
            return Some(
                (0..g.instances)
                    .map(|i| member_name(target, i).to_string())
                    .collect(),
            );
        }
        self.client_groups
            .iter()
            .any(|(name, g)| (0..g.instances).any(|i| member_name(name, i).as_str() == target))
            .then(|| vec![target.to_string()])
    }

    /// Every server member, group by group in file order, then by index.
    ///
    /// # Panics
    ///
    /// If a group names a template that does not exist, which [`super::parse`] and
    /// [`super::load`] never let through.
    /// Servers of `endpoints` groups are not among them: see [`Matrix::external_servers`].
    pub fn servers(&self) -> Vec<ServerMember> {
        let mut members = Vec::new();
        for (group, g) in self.server_groups.iter().filter(|(_, g)| !g.is_external()) {
            let template_name = g
                .template
                .as_ref()
                .unwrap_or_else(|| panic!("server group {group}: no template"));
            let template = self
                .server_templates
                .get(template_name)
                .unwrap_or_else(|| panic!("server group {group}: undefined template"));
            for index in 0..g.member_count() {
                members.push(ServerMember {
                    name: member_name(group, index),
                    group: group.clone(),
                    index,
                    template_name: template_name.clone(),
                    template: template.clone(),
                });
            }
        }
        members
    }

    /// Every existing server (the `endpoints` of server groups), group by group in file order,
    /// then in list order.
    pub fn external_servers(&self) -> Vec<ExternalServer> {
        let mut members = Vec::new();
        for (group, g) in &self.server_groups {
            let protocol = self.client_protocol(group);
            for (index, endpoint) in (0u32..).zip(&g.endpoints) {
                members.push(ExternalServer {
                    name: member_name(group, index),
                    group: group.clone(),
                    index,
                    ports: endpoint.ports(protocol),
                    by_protocol: matches!(endpoint, super::types::Endpoint::Ports(_)),
                });
            }
        }
        members
    }

    /// The protocol of the client groups that target a server group: the first one's (None
    /// when none does). Validation requires one protocol where a bare `HOST:PORT` needs it.
    pub fn client_protocol(&self, server_group: &str) -> Option<Protocol> {
        self.client_groups
            .values()
            .filter(|c| c.target == server_group)
            .find_map(|c| self.client_templates.get(&c.template))
            .map(|t| t.protocol)
    }

    /// `template` with its foreign client's relative paths (words starting `./` or `../`)
    /// resolved against the matrix's directory, as its other local paths are: a committed
    /// matrix names the project's client beside itself.
    fn with_local_client_paths(&self, template: &ClientTemplate) -> ClientTemplate {
        let mut t = template.clone();
        if let Some(client) = &mut t.client {
            client.command = client.command.map_args(|arg| {
                if arg.starts_with("./") || arg.starts_with("../") {
                    self.resolve_local_path(arg).display().to_string()
                } else {
                    arg.to_string()
                }
            });
        }
        t
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
            let targets: Vec<MemberName> = (0..target.member_count())
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
                    template: self.with_local_client_paths(template),
                    target_group: g.target.clone(),
                    targets: targets.clone(),
                    corr_ids: block,
                });
            }
        }
        members
    }
}
