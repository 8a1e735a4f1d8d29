//! `StoreOptions::slow_statement` is the threshold of sqlx's slow-statement warning, on both
//! backends: at zero every statement is one, at an hour none is (`driver report` raises it, as
//! reading a long run may take seconds). Its own test binary: SQLite's statements run on sqlx's
//! worker thread, so the warnings are counted by a process-wide subscriber, which no other test
//! may share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use stress_common::store::testing::TestPostgres;
use stress_common::store::{Store, StoreOptions};

/// Counts the WARN events sqlx logs (a slow statement is one).
struct SqlxWarnings(Arc<AtomicU64>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SqlxWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() == tracing::Level::WARN && meta.target().starts_with("sqlx") {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The process's warning count (the subscriber is installed once).
fn warnings() -> &'static AtomicU64 {
    static COUNT: std::sync::OnceLock<Arc<AtomicU64>> = std::sync::OnceLock::new();
    COUNT.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        let count = Arc::new(AtomicU64::new(0));
        let subscriber = tracing_subscriber::registry().with(SqlxWarnings(count.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        count
    })
}

/// Long enough for a statement's log to follow its result (no timing is asserted).
const SETTLE: Duration = Duration::from_millis(300);

/// The tests take turns: the count is the process's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn slow_statement_warnings(url: &str) {
    let _turn = ONE_AT_A_TIME.lock().await;
    for (threshold, warned) in [(Duration::ZERO, true), (Duration::from_secs(3600), false)] {
        let options = StoreOptions {
            slow_statement: threshold,
            ..Default::default()
        };
        let store = Store::connect_with(url, &options).await.unwrap();
        // SQLite's statements are logged on sqlx's worker thread, after their results are
        // handed back: the connect's own come in for a moment after it returns.
        tokio::time::sleep(SETTLE).await;
        let before = warnings().load(Ordering::Relaxed);
        store.latest_run_id().await.unwrap();
        tokio::time::sleep(SETTLE).await;
        let seen = warnings().load(Ordering::Relaxed) - before;
        assert_eq!(seen > 0, warned, "threshold {threshold:?}: {seen} warnings");
    }
}

#[tokio::test]
async fn sqlite_slow_statement_warnings() {
    let dir = tempfile::tempdir().unwrap();
    slow_statement_warnings(&Store::sqlite_url(&dir.path().join("status.sqlite"))).await;
}

#[tokio::test]
async fn postgres_slow_statement_warnings() {
    let Some(pg) = TestPostgres::from_env().unwrap_or_else(|e| panic!("{e}")) else {
        return;
    };
    slow_statement_warnings(pg.url()).await;
}
