//! Documents a run keeps for its report: diagnostics, trace summaries, capacity phases, SLO
//! verdicts, the baseline comparison, log excerpts, ... Each kind is a serde type owned by the
//! crate that writes it (the driver), marked [`Document`] with its stable kind name; the store
//! keeps its JSON in one table by (run, kind, key) and never needs to know its shape.

use super::{Result, Store};
use crate::contract::RunId;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A kind of document a run keeps.
pub trait Document: Serialize + DeserializeOwned {
    /// The kind's name in the store: stable, since stored rows name it.
    const KIND: &'static str;

    /// The document a stored JSON value holds. By default strict: a value of another shape is
    /// corrupt. A kind that older drivers stored in other shapes may read them leniently.
    fn from_stored(value: serde_json::Value) -> std::result::Result<Self, serde_json::Error> {
        serde_json::from_value(value)
    }
}

impl Store {
    /// Saves (replaces) the run's document of kind `D` under `key`.
    pub async fn save_document<D: Document>(
        &self,
        run_id: &RunId,
        key: &str,
        doc: &D,
    ) -> Result<()> {
        self.upsert_document(&self.pool, run_id, key, doc).await
    }

    /// [`Store::save_document`] through `db`: the pool, or a transaction it is part of.
    pub(super) async fn upsert_document<'e, D: Document>(
        &self,
        db: impl sqlx::Executor<'e, Database = sqlx::Any>,
        run_id: &RunId,
        key: &str,
        doc: &D,
    ) -> Result<()> {
        let details = serde_json::to_string(doc).map_err(|e| {
            self.corrupt(
                "save_document",
                format!("a {} does not serialise: {e}", D::KIND),
            )
        })?;
        sqlx::query(
            "INSERT INTO documents (run_id, kind, doc_key, details, updated_at_ms)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, kind, doc_key) DO UPDATE SET
                 details = excluded.details, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(run_id.as_str())
        .bind(D::KIND)
        .bind(key)
        .bind(details)
        .bind(crate::now_ms())
        .execute(db)
        .await
        .map_err(self.db("save_document"))?;
        Ok(())
    }

    /// Replaces every document of kind `D` of the run with `docs`, in one transaction (a set
    /// that is judged again as a whole, like the SLO verdicts).
    pub async fn replace_documents<D: Document>(
        &self,
        run_id: &RunId,
        docs: &[(String, D)],
    ) -> Result<()> {
        const OP: &str = "replace_documents";
        let mut tx = self.begin_write(OP).await?;
        sqlx::query("DELETE FROM documents WHERE run_id = $1 AND kind = $2")
            .bind(run_id.as_str())
            .bind(D::KIND)
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        let now = crate::now_ms();
        for (key, doc) in docs {
            let details = serde_json::to_string(doc)
                .map_err(|e| self.corrupt(OP, format!("a {} does not serialise: {e}", D::KIND)))?;
            sqlx::query(
                "INSERT INTO documents (run_id, kind, doc_key, details, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(run_id.as_str())
            .bind(D::KIND)
            .bind(key)
            .bind(details)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        }
        tx.commit().await.map_err(self.db(OP))?;
        Ok(())
    }

    /// The run's documents of kind `D`, by key.
    pub async fn documents<D: Document>(&self, run_id: &RunId) -> Result<Vec<(String, D)>> {
        const OP: &str = "documents";
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT doc_key, details FROM documents WHERE run_id = $1 AND kind = $2
             ORDER BY doc_key",
        )
        .bind(run_id.as_str())
        .bind(D::KIND)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;
        rows.into_iter()
            .map(|(key, text)| Ok((key.clone(), self.decode_document::<D>(OP, &key, &text)?)))
            .collect()
    }

    /// The run's document of kind `D` under `key`, if there is one.
    pub async fn document<D: Document>(&self, run_id: &RunId, key: &str) -> Result<Option<D>> {
        const OP: &str = "document";
        let text: Option<String> = sqlx::query_scalar(
            "SELECT details FROM documents WHERE run_id = $1 AND kind = $2 AND doc_key = $3",
        )
        .bind(run_id.as_str())
        .bind(D::KIND)
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db(OP))?;
        text.map(|t| self.decode_document::<D>(OP, key, &t))
            .transpose()
    }

    fn decode_document<D: Document>(&self, op: &'static str, key: &str, text: &str) -> Result<D> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| self.corrupt(op, format!("{} {key:?} is not JSON: {e}", D::KIND)))?;
        D::from_stored(value)
            .map_err(|e| self.corrupt(op, format!("{} {key:?} does not read: {e}", D::KIND)))
    }

    /// The newest `limit` documents of kind `D` across every run of the store, newest first:
    /// (run id, document). A dashboard lists runs by their summaries this way.
    pub async fn latest_documents<D: Document>(&self, limit: u32) -> Result<Vec<(String, D)>> {
        const OP: &str = "latest_documents";
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT run_id, doc_key, details FROM documents WHERE kind = $1
             ORDER BY updated_at_ms DESC, run_id DESC LIMIT $2",
        )
        .bind(D::KIND)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;
        rows.into_iter()
            .map(|(run, key, text)| Ok((run, self.decode_document::<D>(OP, &key, &text)?)))
            .collect()
    }
}
