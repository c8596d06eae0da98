//! The PostgreSQL backend: `tokio-postgres` connections in a `deadpool-postgres` pool,
//! each connection's socket driven by a small runtime the store owns.
//!
//! The store's API is synchronous (its callers are short and run straight from async code,
//! see the crate doc), so a call here waits for its answer on the caller's thread
//! (`futures_executor::block_on`): a client only sends requests to its connection's task
//! and awaits replies, which needs no runtime of its own, while the sockets live on the
//! store's runtime. Entering that runtime's context while waiting lets the pool open a new
//! connection (which spawns its task) from any thread.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use tokio_postgres::{IsolationLevel, NoTls};

use super::{dollar_params, Arg, Conn, DbError, Retry, Row, ToArg, Value, BUSY_TIMEOUT};

/// A write that keeps losing to concurrent ones is given up after this many runs.
const MAX_RUNS: u32 = 20;

/// What a Postgres store connects with.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Connections this process may hold at once.
    pub max_connections: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            max_connections: 16,
        }
    }
}

pub(crate) struct Postgres {
    pool: Pool,
    /// For the connections that `LISTEN` (outside the pool: they stay open).
    config: tokio_postgres::Config,
    /// Drives the connections; `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    /// Write transactions run again after a conflict (for the store's metrics).
    conflicts: AtomicU64,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.pool.close();
        if let Some(runtime) = self.runtime.take() {
            // The store may be dropped on an async thread, where waiting is not allowed.
            runtime.shutdown_background();
        }
    }
}

/// How long the database may leave a connection unanswered before it counts as gone.
const NETWORK_TIMEOUT: Duration = Duration::from_secs(4);

impl Postgres {
    /// Connects to the database `config` names (its password already set), checking that
    /// one connection opens.
    pub(crate) fn connect(
        mut config: tokio_postgres::Config,
        options: &PostgresOptions,
    ) -> Result<Postgres, DbError> {
        // A network that stops carrying the database's packets fails a call within seconds
        // instead of leaving the caller waiting for ever: a node must notice it lost the
        // database before its lease runs out, and its threads must not all hang meanwhile.
        config
            .connect_timeout(NETWORK_TIMEOUT)
            .tcp_user_timeout(NETWORK_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(NETWORK_TIMEOUT)
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("berth-store-pg")
            .enable_all()
            .build()
            .map_err(|_| DbError::Unsupported("cannot start the store's connection thread"))?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = {
            let _context = runtime.enter();
            Pool::builder(manager)
                .max_size(options.max_connections.max(1))
                .wait_timeout(Some(BUSY_TIMEOUT))
                .create_timeout(Some(BUSY_TIMEOUT))
                .runtime(Runtime::Tokio1)
                .build()
                .map_err(|_| DbError::Unsupported("cannot build the connection pool"))?
        };
        let db = Postgres {
            pool,
            config,
            runtime: Some(runtime),
            conflicts: AtomicU64::new(0),
        };
        // One connection now, so a wrong address or password stops the start.
        drop(db.block(db.pool.get()).map_err(DbError::Pool)?);
        Ok(db)
    }

    fn block<F: Future>(&self, future: F) -> F::Output {
        let runtime = self.runtime.as_ref().expect("the runtime lives until drop");
        let _context = runtime.enter();
        futures_executor::block_on(future)
    }

    fn client(&self) -> Result<deadpool_postgres::Object, DbError> {
        self.block(self.pool.get()).map_err(DbError::Pool)
    }

    pub(crate) fn write<T, E: From<DbError> + Retry>(
        &self,
        mut f: impl FnMut(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut client = self.client()?;
        let mut run = 0;
        loop {
            run += 1;
            let tx = self
                .block(
                    client
                        .build_transaction()
                        .isolation_level(IsolationLevel::Serializable)
                        .start(),
                )
                .map_err(DbError::from)?;
            let outcome = match f(&Conn::Postgres(PgConn {
                target: Target::Transaction(&tx),
                db: self,
            })) {
                Ok(value) => self
                    .block(tx.commit())
                    .map(|()| value)
                    .map_err(|e| E::from(DbError::from(e))),
                Err(e) => {
                    // Nothing of it is kept; a failed rollback means a lost connection,
                    // which the pool finds on its next use.
                    let _ = self.block(tx.rollback());
                    Err(e)
                }
            };
            match outcome {
                Err(e) if e.is_conflict() && run < MAX_RUNS => {
                    self.conflicts.fetch_add(1, Ordering::Relaxed);
                    // Spread the runs apart so two conflicting writers do not meet again.
                    std::thread::sleep(Duration::from_micros(
                        200 * u64::from(run) + u64::from(jitter() % 500),
                    ));
                }
                other => return other,
            }
        }
    }

    pub(crate) fn read<T, E: From<DbError>>(
        &self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let client = self.client()?;
        f(&Conn::Postgres(PgConn {
            target: Target::Client(&client),
            db: self,
        }))
    }

    pub(crate) fn snapshot<T, E: From<DbError>>(
        &self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut client = self.client()?;
        let tx = self
            .block(
                client
                    .build_transaction()
                    .isolation_level(IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start(),
            )
            .map_err(DbError::from)?;
        let value = f(&Conn::Postgres(PgConn {
            target: Target::Transaction(&tx),
            db: self,
        }))?;
        self.block(tx.commit()).map_err(DbError::from)?;
        Ok(value)
    }

    /// One pooled connection for a sequence of steps (the migrations).
    pub(crate) fn with_client<T>(
        &self,
        f: impl FnOnce(&mut PgSession<'_>) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        let mut client = self.client()?;
        f(&mut PgSession {
            client: &mut client,
            db: self,
        })
    }

    /// Rings `bell` (adds one) at every notification on `channel` whose payload is
    /// `payload`, from a connection of its own that `LISTEN`s; also when that connection
    /// breaks (so the listener looks for itself) and once it is back. Ends when `bell` has
    /// no receiver left.
    pub(crate) fn listen(
        &self,
        channel: &'static str,
        payload: String,
        bell: tokio::sync::watch::Sender<u64>,
    ) {
        let config = self.config.clone();
        let runtime = self.runtime.as_ref().expect("the runtime lives until drop");
        runtime.spawn(async move {
            let ring = |bell: &tokio::sync::watch::Sender<u64>| bell.send_modify(|n| *n += 1);
            while !bell.is_closed() {
                if let Err(e) = listen_once(&config, channel, &payload, &bell).await {
                    tracing::warn!(channel, error = %e, "LISTEN connection lost; reconnecting");
                }
                ring(&bell);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Write transactions run again after a conflict since the store opened.
    pub(crate) fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
}

/// One `LISTEN` connection's life: until it breaks or nobody listens.
async fn listen_once(
    config: &tokio_postgres::Config,
    channel: &str,
    payload: &str,
    bell: &tokio::sync::watch::Sender<u64>,
) -> Result<(), tokio_postgres::Error> {
    use futures_util::StreamExt;
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<(), tokio_postgres::Error>>(1);
    let forward = {
        let bell = bell.clone();
        let payload = payload.to_owned();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) if n.payload() == payload => {
                        bell.send_modify(|count| *count += 1);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
            let _ = tx.send(Ok(())).await;
        })
    };
    // A channel name is an identifier, never a parameter: only the store's own constants.
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    // Anything queued while the connection was being made is found by the first look.
    bell.send_modify(|count| *count += 1);
    let ended = tokio::select! {
        ended = rx.recv() => ended.unwrap_or(Ok(())),
        () = bell.closed() => Ok(()),
    };
    forward.abort();
    ended
}

fn jitter() -> u16 {
    let mut bytes = [0u8; 2];
    // Only spreads retries apart: a failed read of the random source costs nothing here.
    let _ = getrandom::fill(&mut bytes);
    u16::from_le_bytes(bytes)
}

/// One pooled connection held for a sequence of steps (the migrations).
pub(crate) struct PgSession<'a> {
    client: &'a mut deadpool_postgres::Object,
    db: &'a Postgres,
}

impl PgSession<'_> {
    pub(crate) fn conn(&self) -> Conn<'_> {
        Conn::Postgres(PgConn {
            target: Target::Client(self.client),
            db: self.db,
        })
    }

    /// Runs `f` in one transaction (default isolation), committing on `Ok`.
    pub(crate) fn transaction<T>(
        &mut self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        let db = self.db;
        let tx = db.block(self.client.transaction())?;
        let value = f(&Conn::Postgres(PgConn {
            target: Target::Transaction(&tx),
            db,
        }))?;
        db.block(tx.commit())?;
        Ok(value)
    }
}

enum Target<'a> {
    Client(&'a deadpool_postgres::Object),
    Transaction(&'a deadpool_postgres::Transaction<'a>),
}

/// A [`Conn`] on Postgres.
pub(crate) struct PgConn<'a> {
    target: Target<'a>,
    db: &'a Postgres,
}

impl PgConn<'_> {
    async fn statement(&self, sql: &str) -> Result<tokio_postgres::Statement, DbError> {
        let sql = dollar_params(sql);
        Ok(match self.target {
            Target::Client(client) => client.prepare_cached(&sql).await?,
            Target::Transaction(tx) => tx.prepare_cached(&sql).await?,
        })
    }

    fn client(&self) -> &tokio_postgres::Client {
        match self.target {
            Target::Client(client) => client,
            Target::Transaction(tx) => tx.client(),
        }
    }

    pub(super) fn execute(&self, sql: &str, args: &[&dyn ToArg]) -> Result<usize, DbError> {
        self.db.block(async {
            let statement = self.statement(sql).await?;
            let args = pg_args(args);
            let changed = self.client().execute(&statement, &refs(&args)).await?;
            Ok(usize::try_from(changed).unwrap_or(usize::MAX))
        })
    }

    pub(super) fn query(&self, sql: &str, args: &[&dyn ToArg]) -> Result<Vec<Row>, DbError> {
        self.db.block(async {
            let statement = self.statement(sql).await?;
            let args = pg_args(args);
            let rows = self.client().query(&statement, &refs(&args)).await?;
            rows.iter()
                .map(|row| {
                    (0..row.len())
                        .map(|i| Ok(row.try_get::<_, PgValue>(i)?.0))
                        .collect::<Result<Vec<_>, DbError>>()
                        .map(Row)
                })
                .collect()
        })
    }

    pub(super) fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        self.db
            .block(self.client().batch_execute(sql))
            .map_err(DbError::from)
    }
}

fn pg_args<'a>(args: &'a [&'a dyn ToArg]) -> Vec<PgArg<'a>> {
    args.iter().map(|a| PgArg(a.to_arg())).collect()
}

fn refs<'a>(args: &'a [PgArg<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    args.iter().map(|a| a as &(dyn ToSql + Sync)).collect()
}

/// A parameter, encoded as whatever type the statement gives it (Postgres infers a
/// parameter's type from where it stands: a bigint column, a `LIMIT`, an `int4` sum).
#[derive(Debug)]
struct PgArg<'a>(Arg<'a>);

impl ToSql for PgArg<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (self.0, ty) {
            (Arg::Null, _) => Ok(IsNull::Yes),
            (Arg::Int(v), &Type::INT8) => v.to_sql(ty, out),
            (Arg::Int(v), &Type::INT4) => i32::try_from(v)?.to_sql(ty, out),
            (Arg::Int(v), &Type::INT2) => i16::try_from(v)?.to_sql(ty, out),
            (Arg::Int(v), &Type::FLOAT8) => (v as f64).to_sql(ty, out),
            (Arg::Int(v), &Type::BOOL) => (v != 0).to_sql(ty, out),
            (Arg::Int(v), &Type::TEXT | &Type::VARCHAR) => v.to_string().to_sql(ty, out),
            (Arg::Real(v), &Type::FLOAT8) => v.to_sql(ty, out),
            (Arg::Real(v), &Type::FLOAT4) => (v as f32).to_sql(ty, out),
            (Arg::Text(v), &Type::TEXT | &Type::VARCHAR | &Type::BPCHAR | &Type::NAME) => {
                v.to_sql(ty, out)
            }
            (Arg::Text(v), &Type::UNKNOWN) => v.to_sql(&Type::TEXT, out),
            (Arg::Blob(v), &Type::BYTEA) => v.to_sql(ty, out),
            (arg, ty) => Err(format!("cannot send {arg:?} as a parameter of type {ty}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A column value of any type the schema uses.
struct PgValue(Value);

impl<'a> FromSql<'a> for PgValue {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<PgValue, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgValue(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::BYTEA => Value::Blob(Vec::<u8>::from_sql(ty, raw)?),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                Value::Text(String::from_sql(ty, raw)?)
            }
            // SUM() of a bigint is numeric: the query casts it back (`CAST(… AS BIGINT)`).
            ref other => return Err(format!("a column of type {other} (cast it)").into()),
        }))
    }

    fn from_sql_null(_: &Type) -> Result<PgValue, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgValue(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}
