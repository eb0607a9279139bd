//! Rate-limited refusals counted per identity: the first of a run gets
//! its audit line, the rest are counted and ride on the identity's next
//! line; a count whose identity went quiet is written as a line of its
//! own when the map sweeps, or when the gateway is dropped.

use super::*;

/// An identity's rate-limited refusals since its last audit line: the
/// first of a run is written; the rest only counted, here.
#[derive(Clone, Copy, Debug)]
pub(super) struct Unwritten {
    pub(super) count: u64,
    pub(super) first_ms: i64,
    pub(super) last_ms: i64,
}

impl Unwritten {
    /// Writes the count and its time span onto an audit line.
    pub(super) fn record_on(&self, line: &mut Map<String, Value>) {
        line.insert("rate_limited_since".into(), Value::from(self.count));
        line.insert(
            "rate_limited_first".into(),
            Value::String(rfc3339_ms(self.first_ms)),
        );
        line.insert(
            "rate_limited_last".into(),
            Value::String(rfc3339_ms(self.last_ms)),
        );
    }
}

impl Gateway {
    /// Whether a rate-limited refusal of `identity` is the first since
    /// its last line (and so gets a line of its own); if not, it is
    /// counted for the next one.
    pub(super) fn first_rate_limited(&self, identity: &str) -> bool {
        let now = self.now_ms();
        let mut unwritten = self.unwritten.lock().unwrap_or_else(|p| p.into_inner());
        if !unwritten.map.contains_key(identity) {
            let quiet = unwritten.make_room_taking(now, |u| {
                now.saturating_sub(u.last_ms) < crate::rate::REFILLED_AFTER_MS
            });
            if !quiet.is_empty() {
                drop(unwritten);
                self.write_counts(quiet);
                unwritten = self.unwritten.lock().unwrap_or_else(|p| p.into_inner());
            }
        }
        match unwritten.map.get_mut(identity) {
            Some(u) => {
                if u.count == 0 {
                    u.first_ms = now;
                }
                u.count += 1;
                u.last_ms = u.last_ms.max(now);
                false
            }
            None => {
                unwritten.map.insert(
                    identity.to_string(),
                    Unwritten {
                        count: 0,
                        first_ms: now,
                        last_ms: now,
                    },
                );
                true
            }
        }
    }

    /// Appends a line of `identity`'s, carrying the rate-limited refusals
    /// counted since its last one; after it, the next rate-limited
    /// refusal is written again. If the line cannot be written, the
    /// count is kept for the next.
    pub(super) fn append_for(
        &self,
        identity: &str,
        event: &str,
        mut line: Map<String, Value>,
    ) -> Result<crate::audit::Head, AuditError> {
        let taken = self
            .unwritten
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .remove(identity);
        if let Some(u) = taken.as_ref().filter(|u| u.count > 0) {
            u.record_on(&mut line);
        }
        self.state.audit.append(event, line).inspect_err(|_| {
            if let Some(u) = taken {
                self.keep_count(identity.to_string(), u);
            }
        })
    }
}

impl Drop for Gateway {
    /// Counts of rate-limited refusals no line has carried yet are written
    /// as `rate_limited` events, one per identity.
    fn drop(&mut self) {
        self.write_owed_ends(owed_ends::MAX_OWED_ENDS);
        let left = self.owed_ends();
        if left > 0 {
            tracing::warn!(
                left,
                "stopping with end lines the audit chain could not take: those executions show as unfinished in `airlock audit verify` (`airlock audit close` ends them)"
            );
        }
        let unwritten = std::mem::take(
            &mut self
                .unwritten
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .map,
        );
        self.write_counts(unwritten.into_iter().collect());
    }
}

impl Gateway {
    /// Writes the counts of rate-limited refusals no line has carried,
    /// as `rate_limited` events, one per identity.
    pub(super) fn write_counts(&self, counts: Vec<(String, Unwritten)>) {
        let mut identities: Vec<_> = counts.into_iter().filter(|(_, u)| u.count > 0).collect();
        identities.sort_by(|a, b| a.0.cmp(&b.0));
        let mut failing = false;
        for (identity, u) in identities {
            if failing {
                // The audit refused one already: keep the rest for later
                // rather than ask it again for each.
                self.keep_count(identity, u);
                continue;
            }
            let mut line = Map::new();
            line.insert("identity".into(), Value::String(identity.clone()));
            u.record_on(&mut line);
            if let Err(e) = self.state.audit.append("rate_limited", line) {
                tracing::error!(error = %e, "could not record rate-limited calls in the audit log; the counts are kept for the identities' next lines");
                failing = true;
                self.keep_count(identity, u);
            }
        }
    }

    /// Puts a count no line carried back, for the identity's next line.
    pub(super) fn keep_count(&self, identity: String, u: Unwritten) {
        let mut unwritten = self.unwritten.lock().unwrap_or_else(|p| p.into_inner());
        let kept = unwritten.map.entry(identity).or_insert(Unwritten {
            count: 0,
            first_ms: u.first_ms,
            last_ms: u.last_ms,
        });
        kept.count += u.count;
        kept.first_ms = kept.first_ms.min(u.first_ms);
        kept.last_ms = kept.last_ms.max(u.last_ms);
    }
}
