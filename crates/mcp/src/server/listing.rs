//! How a server's tools are read: the listing that puts them in the registry (and says
//! once what is not offered), and the subscription through which a stateless server tells
//! of changes.

use std::sync::Arc;

use rmcp::model::SubscriptionFilter;
use rmcp::service::Subscription;
use rmcp::{Peer, RoleClient};

use super::{Server, ServerState, tracing_note};
use crate::naming;
use crate::tool::{Listed, McpTool, Remote};
use crate::wire::{Book, SkippedTool};

impl Server {
    /// A subscription to the server's tool-list changes (`subscriptions/listen`), or `None`
    /// (said once) when the server refuses or does not answer in time.
    pub(super) async fn subscribe(&self, peer: &Peer<RoleClient>) -> Option<Subscription> {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        match tokio::time::timeout(self.config.startup_timeout(), peer.listen(filter)).await {
            Ok(Ok(subscription)) => Some(subscription),
            Ok(Err(error)) => {
                tracing_note(
                    &self.name,
                    &format!(
                        "no subscription to tool changes ({error}); its tools are listed once"
                    ),
                );
                None
            }
            Err(_) => {
                tracing_note(
                    &self.name,
                    "no answer to the subscription to tool changes; its tools are listed once",
                );
                None
            }
        }
    }

    /// Lists the server's tools and puts the offered ones in the registry in place of the
    /// ones it had there; a tool that cannot be read or registered is skipped and named.
    pub(super) async fn list_and_register(
        self: &Arc<Self>,
        peer: &Peer<RoleClient>,
        book: &Book,
        version: &str,
        protocol: &str,
    ) -> Result<(), String> {
        drop(book.take_skipped());
        let tools = tokio::time::timeout(self.config.startup_timeout(), peer.list_all_tools())
            .await
            .map_err(|_| "listing its tools timed out".to_owned())?
            .map_err(|error| format!("listing its tools failed: {error}"))?;
        let mut skipped = book.take_skipped();
        // Each offered tool with its registry name, worked out once.
        let named: Vec<(String, Listed)> = tools
            .iter()
            .filter_map(|tool| serde_json::to_value(tool).ok())
            .filter_map(|tool| Listed::from_wire(&tool))
            .filter(|tool| self.config.offers(&tool.name))
            .map(|tool| (naming::name_of(&self.name, &tool.name), tool))
            .collect();
        let server = Arc::clone(self);
        let made = self.registry.replace_source(&self.source(), |_taken| {
            named
                .iter()
                .map(|(name, tool)| {
                    Arc::new(McpTool::new(
                        name.clone(),
                        tool,
                        Arc::clone(&server) as Arc<dyn Remote>,
                        version,
                        server.config.parallel,
                        server.config.trust_annotations,
                    )) as Arc<dyn toolrail_tools_core::Tool>
                })
                .collect()
        });
        let registered = match made {
            Ok((registered, refused)) => {
                for warning in refused {
                    let name = named
                        .iter()
                        .find(|(registered, _)| *registered == warning.name)
                        .map_or_else(|| warning.name.clone(), |(_, tool)| tool.name.clone());
                    skipped.push(SkippedTool {
                        name,
                        why: warning.message,
                    });
                }
                registered
            }
            Err(error) => return Err(format!("its tools could not be registered: {error}")),
        };
        // Said once per change, not at every reading of the list.
        let said = matches!(&*self.state.lock(), ServerState::Running { skipped: before, .. } if *before == skipped);
        if !said {
            for tool in &skipped {
                tracing_note(
                    &self.name,
                    &format!("tool `{}` is not offered: {}", tool.name, tool.why),
                );
            }
        }
        self.set_state(ServerState::Running {
            version: version.to_owned(),
            protocol: protocol.to_owned(),
            tools: registered,
            skipped,
        });
        Ok(())
    }
}
