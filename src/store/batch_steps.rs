//! The group commit's batch insert: every batch of the group gets a fresh id (increasing in the
//! order the requests came) and is inserted unless its input already stored its
//! `source_request_id`. A batch needs its own answer (stored, or a duplicate) and `RETURNING`
//! promises no order, so each batch's id is known before its row is inserted, and the ids that
//! come back are the batches stored.
//!
//! Each backend does it in as few statements as it can: on PostgreSQL every statement is a round
//! trip that wakes a backend and the writer, and where the node, the server and the load share
//! two cores those wake-ups were a large part of the CPU per event. (SQLite's writer runs its
//! statements on its own thread, `direct`; through sqlx each was a round trip to the
//! connection's thread.) So on PostgreSQL the insert also carries the group's profile upsert
//! and its new users' writes ([`insert_batches_with_profiles`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::QueryAs;

use super::backend::{Arg, Sql, Tx, json};
use super::identity_read::Row;
use super::identity_steps::{Guessed, Writing, write_postgres_ctes};
use super::queue::NewBatch;
use super::steps::{self, ProfileRow};
use crate::model::ids::{BatchId, Mpid};

/// Inserts `batches`; returns the id given to each, in order (increasing), and the ids stored
/// (a batch whose `source_request_id` its input already used, before or earlier in the same
/// call, is not).
pub(super) async fn insert_batches(
    tx: &mut Tx<'_>,
    batches: &[&NewBatch],
) -> Result<(Vec<BatchId>, HashSet<BatchId>), sqlx::Error> {
    if batches.is_empty() {
        return Ok((Vec::new(), HashSet::new()));
    }
    if tx.is_sqlite() {
        // One writer: no lock order to keep.
        sqlite_insert(tx, batches).await
    } else {
        postgres_insert(tx, batches).await
    }
}

/// The group's user writes, to go with its batches where the backend can (see
/// [`insert_batches_with_profiles`]).
pub(super) struct ProfilesAlong<'a> {
    /// One row per known user, as the group's batches give them if every batch is stored.
    pub(super) rows: &'a [ProfileRow],
    /// The new users' writes, likewise ([`Writing`]), if the group made or changed any.
    pub(super) new_users: Option<Writing<'a>>,
    /// The read the group was decided without, guessed instead (PostgreSQL lanes only): the
    /// insert reads it and stores nothing unless it finds what was guessed.
    pub(super) guessed: Option<&'a Guessed>,
    pub(super) now: i64,
    /// Whether the users' consent is answered as stored.
    pub(super) consent: bool,
}

impl ProfilesAlong<'_> {
    fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.new_users.is_none()
    }
}

/// What [`insert_batches_with_profiles`] did.
pub(super) struct Inserted {
    /// The id given to each batch, in order.
    pub(super) ids: Vec<BatchId>,
    /// The ids stored.
    pub(super) stored: HashSet<BatchId>,
    /// Whether the users' writes went too (or there were none), and then their users' consent
    /// if asked (else empty). `None`: they are still to be written, as the stored batches
    /// give them.
    pub(super) written: Option<HashMap<Mpid, Arc<serde_json::Value>>>,
    /// A guess the insert found wrong (so it stored nothing), with the rows it read instead.
    pub(super) found_instead: Option<Vec<Row>>,
}

/// [`insert_batches`], and on PostgreSQL the user writes `along` (the known users' profile
/// upsert, the new users' rows, identities and devices) in the same statement when every batch
/// turns out stored: up to two round trips fewer a group (a group's statements bound the rate a
/// lane commits at, issue 16 items 2 and 4). SQLite has no round trip to save (`direct`), so
/// there the writes are always left to the caller. A group decided against a guess of its
/// identity read is checked here first (see `insert_guessed_ctes!`).
pub(super) async fn insert_batches_with_profiles(
    tx: &mut Tx<'_>,
    batches: &[&NewBatch],
    along: ProfilesAlong<'_>,
) -> Result<Inserted, sqlx::Error> {
    let guessed = along.guessed.filter(|_| !batches.is_empty());
    if guessed.is_none() && (tx.is_sqlite() || batches.is_empty() || along.is_empty()) {
        let (ids, stored) = insert_batches(tx, batches).await?;
        let written = along.is_empty().then(HashMap::new);
        return Ok(Inserted {
            ids,
            stored,
            written,
            found_instead: None,
        });
    }
    let text = match (guessed, &along.new_users) {
        (Some(_), Some(_)) => INSERT_GUESSED_USERS_POSTGRES,
        (Some(_), None) => INSERT_GUESSED_PROFILES_POSTGRES,
        (None, Some(_)) => INSERT_WITH_USERS_POSTGRES,
        (None, None) => INSERT_WITH_PROFILES_POSTGRES,
    };
    let query = sqlx::query_as::<Postgres, AnswerRow>(text);
    let query = Columns::of(batches)
        .bind(query)
        .bind(json(along.rows))
        .bind(along.now)
        .bind(along.consent);
    let query = match along.new_users {
        Some(writing) => writing.bind(query),
        None if guessed.is_some() => Writing::bind_none(query),
        None => query,
    };
    let query = match guessed {
        Some(guessed) => bind_guess(guessed, query),
        None => query,
    };
    let answer = Answer::read(tx.fetch_all_postgres(query).await?)?;
    check_answered(batches.len(), answer.ids.len())?;
    let found_instead = (answer.guessed == Some(false)).then_some(answer.found);
    Ok(Inserted {
        ids: answer.ids,
        stored: answer.stored,
        written: answer.whole.then(|| steps::consents_of(answer.consents)),
        found_instead,
    })
}

/// Binds what a guessed group's insert reads (`$16` to `$20`, see
/// [`super::identity_read::Asked::bind`]) and the rows
/// it must find (`$21` to `$25`, a column each).
fn bind_guess<'q, O>(
    guessed: &'q Guessed,
    query: QueryAs<'q, Postgres, O, PgArguments>,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    let found = &guessed.found;
    guessed
        .asked
        .bind(query)
        .bind(&found.kinds)
        .bind(&found.a)
        .bind(&found.b)
        .bind(&found.mpids)
        .bind(&found.logged_in)
}

/// One row of the answer of the statements that write users with the batches: a kind, then
/// two numbers, two flags and two texts, whose meaning the kind gives:
/// - `b`, a batch: its place and id, whether it was stored and whether every batch was;
/// - `c`, a user written: its MPID and its consent;
/// - `g`, a guessed group's check: whether the read found what was guessed;
/// - `o` or `d`, a row that read found when it was not (an identity's owner or a device's
///   user: see [`super::identity_read`]): the MPID, whether it has a login, the identity's
///   type and value or the device.
type AnswerRow = (
    String,
    Option<i64>,
    Option<i64>,
    Option<bool>,
    Option<bool>,
    Option<String>,
    Option<String>,
);

/// The answer's rows, read.
#[derive(Default)]
struct Answer {
    ids: Vec<BatchId>,
    stored: HashSet<BatchId>,
    /// Whether every batch was stored, so the users were written.
    whole: bool,
    consents: Vec<(Mpid, String)>,
    /// A guessed group's check.
    guessed: Option<bool>,
    found: Vec<Row>,
}

impl Answer {
    fn read(rows: Vec<AnswerRow>) -> Result<Self, sqlx::Error> {
        let mut answer = Self {
            ids: Vec::with_capacity(rows.len()),
            stored: HashSet::with_capacity(rows.len()),
            ..Self::default()
        };
        for row in rows {
            match row {
                (kind, Some(_), Some(id), Some(kept), Some(whole), None, None) if kind == "b" => {
                    let id = BatchId::new(id);
                    answer.ids.push(id);
                    answer.whole = whole;
                    if kept {
                        answer.stored.insert(id);
                    }
                }
                (kind, Some(mpid), None, None, None, Some(consent), None) if kind == "c" => {
                    answer.consents.push((Mpid::new(mpid), consent));
                }
                (kind, None, None, Some(right), None, None, None) if kind == "g" => {
                    answer.guessed = Some(right);
                }
                (kind, Some(mpid), None, Some(logged_in), None, Some(a), b)
                    if kind == "o" || kind == "d" =>
                {
                    answer
                        .found
                        .push((kind, a, b, Some(Mpid::new(mpid)), logged_in));
                }
                _ => {
                    return Err(sqlx::Error::Protocol(
                        "a batch insert answered a row it does not make".into(),
                    ));
                }
            }
        }
        Ok(answer)
    }
}

/// The order in which a group's batches take their unique keys (input, `source_request_id`) on
/// PostgreSQL: key order, so two nodes (or lanes) storing the same retried requests wait for
/// each other instead of deadlocking. Indices into `batches`.
pub(super) fn lock_order(batches: &[&NewBatch]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..batches.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (batches[a], batches[b]);
        (&a.input_id, &a.source_request_id).cmp(&(&b.input_id, &b.source_request_id))
    });
    order
}

/// PostgreSQL's batch insert (see [`INSERT_POSTGRES`]), up to its answer: `$before`, parts to
/// run first (or nothing), and `$filter`, whether the rows go in at all (a `WHERE`, or
/// nothing).
macro_rules! insert_postgres_ctes {
    ($before:expr, $filter:expr) => {
        concat!(
            "WITH ",
            $before,
            "fresh AS MATERIALIZED ( \
             SELECT row_number() OVER (ORDER BY id) AS place, id FROM ( \
             SELECT nextval(s.sequence) AS id \
             FROM (SELECT pg_get_serial_sequence('batches', 'id') AS sequence) AS s, \
             generate_series(1, cardinality($6::int8[]))) AS drawn), \
             stored AS (INSERT INTO batches \
             (id, input_id, source_request_id, received_at, event_count, body) OVERRIDING SYSTEM VALUE \
             SELECT fresh.id, r.input_id, r.source_request_id, r.received_at, r.event_count, r.body \
             FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::bytea[], $6::int8[]) \
             WITH ORDINALITY AS r(input_id, source_request_id, received_at, event_count, body, place, k) \
             JOIN fresh ON fresh.place = r.place ",
            $filter,
            " ORDER BY r.k \
             ON CONFLICT (input_id, source_request_id) DO NOTHING RETURNING id)"
        )
    };
}
/// PostgreSQL: the whole group in one statement, whatever its size. The rows travel as one
/// array per column, in lock order ([`lock_order`]), with each row's place among the requests
/// (`$6`, from 1). `fresh` draws one id per row from the table's sequence and gives the k-th
/// smallest to the k-th request, so ids increase in the order the requests came whatever order
/// `nextval` ran in; the insert takes the rows in lock order; the answer is every id in request
/// order, and whether its row was stored. (It replaced an id allocation and power-of-two chunks
/// of `VALUES` rows: 5 round trips for a group of 45 batches, now one.)
const INSERT_POSTGRES: &str = concat!(
    insert_postgres_ctes!("", ""),
    " SELECT fresh.id, fresh.id IN (SELECT id FROM stored) FROM fresh ORDER BY fresh.place"
);
/// The condition on which the user writes go with the insert: every batch stored.
macro_rules! every_batch_stored {
    () => {
        "(SELECT count(*) FROM stored) = cardinality($6::int8[])"
    };
}
/// The user writes' filter: [`every_batch_stored`].
macro_rules! if_every_batch_stored {
    () => {
        concat!("WHERE ", every_batch_stored!())
    };
}
/// The profile upsert's part, on the same condition (`$7` its rows, `$8` now).
macro_rules! profiled {
    () => {
        concat!(
            ", profiled AS (",
            super::steps::upsert_profiles_postgres!("$7", "$8", if_every_batch_stored!()),
            " RETURNING mpid, consent)"
        )
    };
}
/// The answer's batch rows and, if `$9`, the consent of the users the profile upsert wrote (see
/// [`AnswerRow`]).
macro_rules! answer_batches {
    () => {
        concat!(
            " SELECT 'b', fresh.place, fresh.id, fresh.id IN (SELECT id FROM stored), ",
            every_batch_stored!(),
            ", NULL::text, NULL::text FROM fresh \
             UNION ALL SELECT 'c', mpid, NULL, NULL, NULL, consent, NULL FROM profiled WHERE $9"
        )
    };
}
/// The consent of the new users the group wrote, if `$9` (see [`AnswerRow`]).
macro_rules! answer_made {
    () => {
        " UNION ALL SELECT 'c', mpid, NULL, NULL, NULL, consent, NULL FROM made WHERE $9"
    };
}
/// The new users' writes' part (`$10` to `$15` as [`Writing::bind`] binds them), on the same
/// condition, and their consent for the answer.
macro_rules! new_users {
    () => {
        concat!(
            ", ",
            write_postgres_ctes!(
                "$10",
                "$11",
                "$12",
                "$13",
                "$14",
                "$15",
                "$8",
                if_every_batch_stored!()
            )
        )
    };
}
/// The same with the group's profile upsert, whose users are answered after the batches' rows,
/// with their consent, if `$9`: one round trip where there were two. The upsert runs only if
/// every batch was stored, as nearly always, and each batch's row says whether it ran; a group
/// holding a resend upserts its stored batches' profiles on its own after (a resend's
/// attributes must not be merged again over later ones). Counting `stored` first also keeps the
/// lock order of the group (batch keys, then profiles: see [`super::group`]): the upsert takes
/// no row before every batch's key is taken.
const INSERT_WITH_PROFILES_POSTGRES: &str = concat!(
    insert_postgres_ctes!("", ""),
    profiled!(),
    answer_batches!(),
    " ORDER BY 1, 2"
);
/// The same with the new users' writes too ([`write_postgres_ctes`]): one round trip fewer for
/// a group that made users or gave identities. The new users' rows and identities wait for
/// nobody (nobody else can hold a new MPID's row, and the group holds each identity's and
/// device's advisory lock), so where they go in the statement changes no lock order.
const INSERT_WITH_USERS_POSTGRES: &str = concat!(
    insert_postgres_ctes!("", ""),
    profiled!(),
    new_users!(),
    answer_batches!(),
    answer_made!(),
    " ORDER BY 1, 2"
);
/// The batch insert's parts for a group decided against a guess of its identity read
/// ([`Guessed`]): first the read itself (`found`: `boson_group_identities` with `$16` to `$20`,
/// taking the identities' advisory locks and reading after them, as [`super::identity_read`]
/// does), then the check that it found exactly the rows guessed (`$21` to `$25`), and the
/// batches go in only if it did; the users' writes follow them as above. A wrong guess stores
/// nothing and answers the rows read, against which the group is decided again: the read's
/// round trip saved when the guess is right, none added when it is wrong (but the insert's work
/// done twice, so a lane whose guesses are often wrong reads first: see
/// [`super::identity_known`]). The check runs before
/// any batch key is taken, so the group's lock order is kept (identities, batch keys,
/// profiles).
macro_rules! insert_guessed_ctes {
    () => {
        insert_postgres_ctes!(
            "found AS MATERIALIZED (SELECT kind, a, b, mpid, logged_in FROM boson_group_identities( \
             $16::text[], '{}'::text[], '{}'::text[], $17::text[], $18::text[], $19::text[], $20::text)), \
             expected AS MATERIALIZED (SELECT * FROM unnest($21::text[], $22::text[], $23::text[], \
             $24::int8[], $25::bool[]) AS e(kind, a, b, mpid, logged_in)), \
             guessed AS MATERIALIZED (SELECT NOT EXISTS (SELECT * FROM found EXCEPT SELECT * FROM expected) \
             AND NOT EXISTS (SELECT * FROM expected EXCEPT SELECT * FROM found) AS held), ",
            "WHERE (SELECT held FROM guessed)"
        )
    };
}
/// A guessed group's check and, if it failed, the rows read.
macro_rules! answer_guess {
    () => {
        " UNION ALL SELECT 'g', NULL, NULL, held, NULL, NULL, NULL FROM guessed \
         UNION ALL SELECT kind, mpid, NULL, logged_in, NULL, a, b FROM found \
         WHERE NOT (SELECT held FROM guessed) \
         ORDER BY 1, 2"
    };
}
/// `insert_guessed_ctes!` for a group whose decisions write nothing (its users all known):
/// `$10` to `$15` are bound but not read.
const INSERT_GUESSED_PROFILES_POSTGRES: &str = concat!(
    insert_guessed_ctes!(),
    profiled!(),
    answer_batches!(),
    answer_guess!()
);
/// `insert_guessed_ctes!` for a group whose decisions made users or gave identities.
const INSERT_GUESSED_USERS_POSTGRES: &str = concat!(
    insert_guessed_ctes!(),
    profiled!(),
    new_users!(),
    answer_batches!(),
    answer_made!(),
    answer_guess!()
);

/// A group's batches as PostgreSQL's insert binds them: one array per column, in lock order,
/// with each row's place among the requests (from 1).
struct Columns<'a> {
    input_ids: Vec<&'a str>,
    requests: Vec<Option<&'a str>>,
    received: Vec<i64>,
    events: Vec<i64>,
    bodies: Vec<&'a [u8]>,
    places: Vec<i64>,
}

impl<'a> Columns<'a> {
    fn of(batches: &[&'a NewBatch]) -> Self {
        let order = lock_order(batches);
        let mut columns = Self {
            input_ids: Vec::with_capacity(order.len()),
            requests: Vec::with_capacity(order.len()),
            received: Vec::with_capacity(order.len()),
            events: Vec::with_capacity(order.len()),
            bodies: Vec::with_capacity(order.len()),
            places: Vec::with_capacity(order.len()),
        };
        for &index in &order {
            let batch = batches[index];
            columns.input_ids.push(batch.input_id.as_str());
            columns.requests.push(batch.source_request_id.as_deref());
            columns.received.push(batch.received_at);
            columns.events.push(batch.event_count);
            columns.bodies.push(&*batch.body);
            columns
                .places
                .push(i64::try_from(index).unwrap_or(i64::MAX) + 1);
        }
        columns
    }

    /// Binds `$1` to `$6`.
    fn bind<R>(
        self,
        query: sqlx::query::QueryAs<'a, Postgres, R, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'a, Postgres, R, sqlx::postgres::PgArguments> {
        query
            .bind(self.input_ids)
            .bind(self.requests)
            .bind(self.received)
            .bind(self.events)
            .bind(self.bodies)
            .bind(self.places)
    }
}

/// A batch insert answers one id per batch.
fn check_answered(batches: usize, ids: usize) -> Result<(), sqlx::Error> {
    if ids == batches {
        return Ok(());
    }
    Err(sqlx::Error::Protocol(format!(
        "inserted {batches} batches, got {ids} ids"
    )))
}

async fn postgres_insert(
    tx: &mut Tx<'_>,
    batches: &[&NewBatch],
) -> Result<(Vec<BatchId>, HashSet<BatchId>), sqlx::Error> {
    let query = sqlx::query_as::<Postgres, (BatchId, bool)>(INSERT_POSTGRES);
    let rows = tx
        .fetch_all_postgres(Columns::of(batches).bind(query))
        .await?;
    check_answered(batches.len(), rows.len())?;
    let stored = rows
        .iter()
        .filter(|(_, stored)| *stored)
        .map(|(id, _)| *id)
        .collect();
    Ok((rows.into_iter().map(|(id, _)| id).collect(), stored))
}

/// The most rows one SQLite insert takes. A chunk's statement has a power-of-two number of rows
/// (1 to this), the chunk's rows and then empty ones the statement skips, so a handful of
/// distinct statements (each prepared once per connection) cover every group size, and a group
/// of up to this many batches is inserted in one statement. (Chunks of the size's binary digits
/// without empty rows took up to 6 statements for one group; a group of 45 took 4.)
const MAX_INSERT_ROWS: usize = 64;
/// Parameters per row of SQLite's insert.
const SQLITE_COLUMNS: usize = 5;

/// SQLite: inserts batches in the order given, each chunk allocating its own ids in the same
/// text (when the writer's statements went through sqlx, a separate allocation was a round trip
/// of its own to the connection's thread per group). See [`sqlite_allocating_inserts`].
async fn sqlite_insert(
    tx: &mut Tx<'_>,
    batches: &[&NewBatch],
) -> Result<(Vec<BatchId>, HashSet<BatchId>), sqlx::Error> {
    let mut ids = Vec::with_capacity(batches.len());
    let mut stored = HashSet::with_capacity(batches.len());
    for chunk in batches.chunks(MAX_INSERT_ROWS) {
        let slots = statement_rows(chunk.len());
        let mut values: Vec<Arg<'_>> = Vec::with_capacity(slots * SQLITE_COLUMNS);
        for batch in chunk {
            values.extend([
                Arg::from(&batch.input_id),
                Arg::OptText(batch.source_request_id.as_deref()),
                Arg::Int(batch.received_at),
                Arg::Int(batch.event_count),
                Arg::Bytes(&batch.body),
            ]);
        }
        // The statement's rows past the chunk: all NULL, which the insert skips.
        values.resize(slots * SQLITE_COLUMNS, Arg::OptInt(None));
        let statement = sqlite_allocating_inserts()[slots.trailing_zeros() as usize];
        let answered: Vec<i64> = tx.fetch_ids(statement, &values).await?;
        let Some((&base, inserted)) = answered.split_first() else {
            return Err(sqlx::Error::Protocol(
                "no id base for a batch insert".into(),
            ));
        };
        ids.extend((1..).take(chunk.len()).map(|k: i64| BatchId::new(base + k)));
        stored.extend(inserted.iter().copied().map(BatchId::new));
    }
    Ok((ids, stored))
}

/// The rows of the statement that inserts a chunk of `rows` batches (at most
/// [`MAX_INSERT_ROWS`]): the next power of two.
fn statement_rows(rows: usize) -> usize {
    rows.next_power_of_two().min(MAX_INSERT_ROWS)
}

/// For each statement size (a power of two up to [`MAX_INSERT_ROWS`]), two statements sent as
/// one query: the largest batch id ever used (the chunk's base; AUTOINCREMENT keeps it in
/// `sqlite_sequence`, also for explicit ids), then the insert, which gives the chunk's k-th row
/// the id base + k and returns the ids it stored. The insert reads the same base: SQLite writes
/// `sqlite_sequence` only at the end of the statement, and the writer's `BEGIN IMMEDIATE` keeps
/// every other connection from committing in between. The next chunk's base is then the
/// largest id this one tried: SQLite raises `sqlite_sequence` for a row `ON CONFLICT DO
/// NOTHING` skipped too, so a duplicate's id is never given to the next chunk's first batch (a
/// test covers a duplicate at a chunk's end). Rows past the chunk's (every column NULL) are
/// left out by the `WHERE`, before they take an id; `input_id` is never NULL in a real row. A
/// `WHERE` also keeps SQLite from reading `ON CONFLICT` as a join constraint.
fn sqlite_allocating_inserts() -> &'static [Sql] {
    const BASE: &str = "COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'batches'), 0)";
    static STATEMENTS: std::sync::OnceLock<Vec<Sql>> = std::sync::OnceLock::new();
    STATEMENTS.get_or_init(|| {
        (0..=MAX_INSERT_ROWS.trailing_zeros())
            .map(|bit| {
                let rows: Vec<String> = (1..=1usize << bit)
                    .map(|k| format!("({k}, ?, ?, ?, ?, ?)"))
                    .collect();
                let text = format!(
                    "SELECT {BASE}; \
                     INSERT INTO batches \
                     (id, input_id, source_request_id, received_at, event_count, body) \
                     SELECT {BASE} + v.column1, v.column2, v.column3, v.column4, v.column5, \
                     v.column6 FROM (VALUES {}) AS v WHERE v.column2 IS NOT NULL \
                     ON CONFLICT (input_id, source_request_id) DO NOTHING RETURNING id",
                    rows.join(", ")
                );
                Sql::sqlite_only(text.leak())
            })
            .collect()
    })
}

#[cfg(test)]
#[path = "batch_steps_tests.rs"]
mod tests;
