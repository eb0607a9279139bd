//! The catalog kept current: rebuilt when a backend's tools change (a
//! collector that came up or refreshed), each moved tool written to the
//! audit as `tool_renamed`.

use super::*;

impl Gateway {
    /// The catalog as of now: rebuilt first if a backend's tools changed
    /// since it was last built (a collector that came up, or refreshed).
    pub fn catalog(&self) -> Arc<Catalog> {
        let now = generation_of(self.backends.values().map(|(b, _)| b));
        {
            let current = self.catalog.read().unwrap_or_else(|p| p.into_inner());
            if current.1 == now {
                return current.0.clone();
            }
        }
        let mut current = self.catalog.write().unwrap_or_else(|p| p.into_inner());
        let mut moves = Vec::new();
        if current.1 != now {
            match self.rebuild() {
                Ok((catalog, clashes)) => {
                    for c in &clashes {
                        tracing::warn!("tool name clash after a backend refresh: {c}");
                    }
                    moves = Self::report_moves(&current.0, &catalog);
                    tracing::info!(tools = catalog.len(), "tool catalog rebuilt");
                    *current = (Arc::new(catalog), now);
                }
                // Keep serving the last good catalog; a backend's bad list
                // must not take the others down.
                Err(e) => {
                    tracing::warn!(error = %e, "could not rebuild the tool catalog; keeping the previous one");
                    current.1 = now;
                }
            }
        }
        let catalog = current.0.clone();
        drop(current);
        if !moves.is_empty() {
            self.record_moves(moves);
        }
        catalog
    }

    /// Reports every name a refresh moved: a tool (by key) now called
    /// otherwise, and a name that now calls another tool. Policy lists
    /// and approvals follow the tool, not the name (see `policy`), so a
    /// move never widens access; scripts calling the old name reach the
    /// new tool, so it is logged and written to the audit chain.
    fn report_moves(before: &Catalog, after: &Catalog) -> Vec<Map<String, Value>> {
        let mut seen = std::collections::HashSet::new();
        let mut lines = Vec::new();
        for e in after.iter() {
            let key = e.spec.key.as_str();
            if !seen.insert(key) {
                continue;
            }
            let (was, is) = (before.names_of_key(key), after.names_of_key(key));
            if was.is_empty() || was == is {
                continue;
            }
            // What each old name calls now (nothing, or another tool).
            let now_calls: Vec<String> = was
                .iter()
                .filter(|n| !is.contains(n))
                .map(|n| match after.get(n) {
                    Some(other) => format!("`{n}` now calls `{}`", other.spec.key),
                    None => format!("`{n}` calls nothing"),
                })
                .collect();
            tracing::warn!(
                key,
                from = ?was,
                to = ?is,
                "a backend refresh renamed a tool: policy and approvals follow it by its key; {}",
                now_calls.join(", ")
            );
            let mut line = Map::new();
            line.insert("tool_key".into(), audit_fields::tool_key(key));
            let names = |ns: &[&str]| {
                Value::Array(ns.iter().take(8).map(|n| audit_fields::tool(n)).collect())
            };
            line.insert("from".into(), names(&was));
            line.insert("to".into(), names(&is));
            lines.push(line);
        }
        lines
    }

    /// Writes the moves a rebuild found (outside the catalog's lock): at
    /// most [`MAX_MOVE_LINES`] lines per rebuild, then one line counting
    /// the rest, so a backend that renames everything on every refresh
    /// cannot fill the audit chain.
    fn record_moves(&self, moves: Vec<Map<String, Value>>) {
        let total = moves.len();
        for line in moves.into_iter().take(MAX_MOVE_LINES) {
            if let Err(err) = self.state.audit.append("tool_renamed", line) {
                tracing::error!(error = %err, "could not record a renamed tool in the audit log");
                return;
            }
        }
        if total > MAX_MOVE_LINES {
            let mut line = Map::new();
            line.insert("more".into(), Value::from(total - MAX_MOVE_LINES));
            if let Err(err) = self.state.audit.append("tool_renamed", line) {
                tracing::error!(error = %err, "could not record renamed tools in the audit log");
            }
        }
    }

    fn rebuild(&self) -> Result<(Catalog, Vec<Clash>), CatalogError> {
        let sources: Vec<(String, Vec<ToolSpec>)> = self
            .order
            .iter()
            .map(|id| (id.clone(), self.backends[id].0.tools()))
            .collect();
        Catalog::build(sources)
    }
}
