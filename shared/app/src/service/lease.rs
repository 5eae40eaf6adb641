//! The scheduler lease: at most one cycle at a time, in the common case, with a fencing token.
//!
//! In AWS the scheduler function runs with reserved concurrency 1, but Lambda may still overlap
//! two invocations (a retry of a timed-out one, a deployment switching versions). Before a cycle
//! the function takes the lease named after the work (`"scheduler"`); while another holder has
//! it the invocation returns at once: the holder's cycle will see whatever woke this one.
//!
//! A lease is a [`Document`] of kind `"lease"`, so it lives in the same store as everything else
//! and is taken with one version-checked [`SchedulingStore::commit`]: two takers that read the same state
//! cannot both win, because the second commit names a version that is no longer there.
//!
//! # Why the cycle is safe even without it
//!
//! The lease is an optimisation, not the guarantee. A holder can pause past its expiry (a GC-free
//! process still stalls on the network) while another takes over, so two cycles can run at once
//! whatever a lease does. Correctness comes from the commits (see
//! [`scheduling`](crate::service::scheduling)): each dispatch moves the job and the environment's
//! usage document in one atomic commit checked against the versions the cycle read, so a cycle
//! planning from a stale snapshot fails to commit instead of launching a job twice or handing out
//! an instance twice. The lease saves the work (and the conflicts) of duelling cycles, and its
//! fencing [`Lease::token`], which grows each time the lease changes hands, stops a stale holder:
//! each dispatch records the token in the environment's usage document
//! ([`Fence`](crate::ports::Fence)), and a cycle whose lease is older than one recorded there and
//! still live dispatches and preempts nothing more. The token also goes into the holder's logs,
//! so that overlapping cycles can be told apart after the fact.

use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::ports::{Document, EventSink, SchedulingStore, StoreError, Versioned, Write};
use crate::service::Service;

/// A named lease and who holds it until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// What the lease guards (`"scheduler"`).
    pub name: String,
    /// Who holds it: an invocation or process id, unique per taker.
    pub holder: String,
    /// The fencing token: 1 when first taken, plus one each time the lease changes hands (or is
    /// taken again after it lapsed); renewing a live lease keeps it.
    pub token: u64,
    /// When the lease lapses (epoch ms); from then on anyone may take it.
    pub expires_at_ms: i64,
}

impl Lease {
    /// Whether the lease is still held at `now_ms`.
    pub fn is_live(&self, now_ms: i64) -> bool {
        now_ms < self.expires_at_ms
    }
}

impl Document for Lease {
    const KIND: &'static str = "lease";
    fn key(&self) -> String {
        self.name.clone()
    }
}

/// The lease `holder` would hold after taking `current` at `now_ms` for `ttl_ms`, or `None`
/// while someone else holds it. Pure: the store step only makes it atomic.
fn take(
    current: Option<&Lease>,
    name: &str,
    holder: &str,
    now_ms: i64,
    ttl_ms: i64,
) -> Option<Lease> {
    let token = match current {
        None => 1,
        // A renewal: the same holder, still live, keeps its token so its fenced work stays valid.
        Some(lease) if lease.is_live(now_ms) && lease.holder == holder => lease.token,
        Some(lease) if lease.is_live(now_ms) => return None,
        // Lapsed (or released): whoever takes it now, even the last holder, starts a new term,
        // since someone else may have held it in between as far as any observer can tell.
        Some(lease) => lease.token + 1,
    };
    Some(Lease {
        name: name.to_owned(),
        holder: holder.to_owned(),
        token,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
    })
}

impl<S: SchedulingStore, E: EventSink> Service<S, E> {
    /// Takes the lease if free, expired, or already ours; None while someone else holds it.
    ///
    /// One read and one version-checked commit; losing a race to another taker is `None`, not
    /// an error. `ttl_ms` must be positive: it should exceed the longest cycle, since a holder
    /// that outlives its lease may overlap the next one (harmless, see the module docs).
    pub async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Option<Lease>, AppError> {
        if ttl_ms <= 0 {
            return Err(AppError::Invalid(format!(
                "lease ttl must be positive, got {ttl_ms} ms"
            )));
        }
        let now = self.now_ms();
        let current: Option<Versioned<Lease>> = self.store().get_document(name).await?;
        let version = current.as_ref().map_or(0, |c| c.version);
        let Some(lease) = take(
            current.as_ref().map(|c| &c.value),
            name,
            holder,
            now,
            ttl_ms,
        ) else {
            return Ok(None);
        };
        match self
            .store()
            .commit(&[Write::document(&lease, version)?])
            .await
        {
            Ok(()) => Ok(Some(lease)),
            // Another taker committed between our read and our write: it holds the lease now.
            Err(StoreError::Conflict) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives it back early (only if still ours at that token); a stale holder changes nothing.
    ///
    /// The lease is marked lapsed (expiring now) rather than deleted, so its token keeps growing
    /// for the next holder.
    pub async fn release_lease(&self, lease: &Lease) -> Result<(), AppError> {
        let now = self.now_ms();
        let Some(current) = self.store().get_document::<Lease>(&lease.name).await? else {
            return Ok(());
        };
        let ours = current.value.holder == lease.holder && current.value.token == lease.token;
        if !ours || !current.value.is_live(now) {
            return Ok(());
        }
        let released = Lease {
            expires_at_ms: now,
            ..current.value
        };
        match self
            .store()
            .commit(&[Write::document(&released, current.version)?])
            .await
        {
            // A conflict means someone else took it (it had lapsed): theirs now, leave it be.
            Ok(()) | Err(StoreError::Conflict) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ports::Store;
    use std::sync::Arc;

    use trainyard_domain::arn::ArnContext;

    use super::*;
    use crate::memory::MemoryStore;
    use crate::ports::NoEvents;
    use crate::ports::{ManualClock, SequentialIds};
    use crate::testing::Interleaving;

    const TTL_MS: i64 = 30_000;

    fn service<S: Store>(store: S) -> (Service<S, NoEvents>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let service = Service::new(
            store,
            NoEvents,
            clock.clone(),
            Arc::new(SequentialIds::default()),
            ArnContext::default(),
        );
        (service, clock)
    }

    fn lease(holder: &str, token: u64, expires_at_ms: i64) -> Lease {
        Lease {
            name: "scheduler".into(),
            holder: holder.into(),
            token,
            expires_at_ms,
        }
    }

    #[test]
    fn taking_follows_holder_liveness_and_term() {
        // (case, current lease, taker, expected token or None)
        let now = 100;
        let cases = [
            ("a free lease starts the first term", None, "a", Some(1)),
            (
                "a live lease of another holder is refused",
                Some(lease("b", 4, now + 1)),
                "a",
                None,
            ),
            (
                "renewing a live lease keeps its token",
                Some(lease("a", 4, now + 1)),
                "a",
                Some(4),
            ),
            (
                "a lapsed lease changes hands with the next token",
                Some(lease("b", 4, now)),
                "a",
                Some(5),
            ),
            (
                "taking back one's own lapsed lease is a new term",
                Some(lease("a", 4, now - 1)),
                "a",
                Some(5),
            ),
        ];
        for (case, current, taker, expected) in cases {
            let got = take(current.as_ref(), "scheduler", taker, now, 10);
            assert_eq!(got.as_ref().map(|l| l.token), expected, "{case}");
            if let Some(got) = got {
                assert_eq!(got.holder, taker, "{case}");
                assert_eq!(got.expires_at_ms, now + 10, "{case}");
            }
        }
    }

    #[tokio::test]
    async fn a_held_lease_is_exclusive_until_it_expires_then_changes_hands() {
        let (service, clock) = service(MemoryStore::new());
        let a = service
            .acquire_lease("scheduler", "a", TTL_MS)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(a.token, 1);
        assert_eq!(a.expires_at_ms, 1_000_000 + TTL_MS);

        clock.advance(TTL_MS - 1);
        let b = service
            .acquire_lease("scheduler", "b", TTL_MS)
            .await
            .unwrap();
        assert_eq!(b, None, "held one millisecond before expiry");

        clock.advance(1);
        let b = service
            .acquire_lease("scheduler", "b", TTL_MS)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((b.holder.as_str(), b.token), ("b", 2));
        let a_again = service
            .acquire_lease("scheduler", "a", TTL_MS)
            .await
            .unwrap();
        assert_eq!(
            a_again, None,
            "the old holder cannot take it back while b holds it"
        );
    }

    #[tokio::test]
    async fn renewing_keeps_the_token_and_extends_the_expiry() {
        let (service, clock) = service(MemoryStore::new());
        let first = service
            .acquire_lease("scheduler", "a", TTL_MS)
            .await
            .unwrap()
            .unwrap();
        clock.advance(TTL_MS / 2);
        let renewed = service
            .acquire_lease("scheduler", "a", TTL_MS)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(renewed.token, first.token);
        assert_eq!(renewed.expires_at_ms, first.expires_at_ms + TTL_MS / 2);
    }

    #[tokio::test]
    async fn release_frees_the_lease_but_a_stale_release_changes_nothing() {
        let (service, clock) = service(MemoryStore::new());
        let a = service
            .acquire_lease("scheduler", "a", TTL_MS)
            .await
            .unwrap()
            .unwrap();
        service.release_lease(&a).await.unwrap();
        let b = service
            .acquire_lease("scheduler", "b", TTL_MS)
            .await
            .unwrap()
            .expect("released early, so free at once");
        assert_eq!(b.token, 2);

        // a's release arrives late (its token is stale): b keeps the lease.
        service.release_lease(&a).await.unwrap();
        // Same holder name, wrong token: a restarted process reusing an id is stale too.
        service
            .release_lease(&Lease {
                holder: "b".into(),
                token: 1,
                ..b.clone()
            })
            .await
            .unwrap();
        clock.advance(1);
        let c = service
            .acquire_lease("scheduler", "c", TTL_MS)
            .await
            .unwrap();
        assert_eq!(c, None, "b still holds it after stale releases");
        let stored = service
            .store()
            .get_document::<Lease>("scheduler")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.value, b);
    }

    #[tokio::test]
    async fn two_concurrent_takers_exactly_one_wins() {
        // (case, whether a previous holder's lapsed lease exists)
        for (case, lapsed_first) in [("free lease", false), ("lapsed lease", true)] {
            let (service, clock) = service(Interleaving::new(MemoryStore::new()));
            if lapsed_first {
                service
                    .acquire_lease("scheduler", "old", TTL_MS)
                    .await
                    .unwrap()
                    .unwrap();
                clock.advance(TTL_MS);
            }
            let (a, b) = tokio::join!(
                service.acquire_lease("scheduler", "a", TTL_MS),
                service.acquire_lease("scheduler", "b", TTL_MS),
            );
            let winners: Vec<Lease> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
            assert_eq!(winners.len(), 1, "{case}: {winners:?}");
            let stored = service
                .store()
                .get_document::<Lease>("scheduler")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                stored.value, winners[0],
                "{case}: the winner is what is stored"
            );
            assert_eq!(
                stored.value.token,
                if lapsed_first { 2 } else { 1 },
                "{case}"
            );
        }
    }

    #[tokio::test]
    async fn a_ttl_that_is_not_positive_is_refused() {
        let (service, _) = service(MemoryStore::new());
        for ttl in [0, -1] {
            let err = service.acquire_lease("scheduler", "a", ttl).await;
            assert!(matches!(err, Err(AppError::Invalid(_))), "{ttl}: {err:?}");
        }
    }
}
