//! The store's conformance suite runs every test on both databases: a real SQLite file in
//! a temporary directory, and a real PostgreSQL server the test starts for itself
//! (`berth_testkit::postgres`, from Debian's binaries), with a database of its own.
//!
//! ```ignore
//! conformance! {
//!     fn a_tenant_is_kept(db) {
//!         let store = db.open();
//!         ...
//!     }
//! }
//! ```
//! defines `a_tenant_is_kept(db: &TestDb)` and two tests, `sqlite::a_tenant_is_kept` and
//! `postgres::a_tenant_is_kept`, so both backends always run the same number of tests.

use berth_testkit::postgres::PgServer;

use crate::{PostgresOptions, Store, DB_FILE};

pub(crate) enum TestDb {
    Sqlite(tempfile::TempDir),
    Postgres { server: PgServer, url: String },
}

impl TestDb {
    pub(crate) fn sqlite() -> TestDb {
        TestDb::Sqlite(tempfile::tempdir().expect("a temporary directory"))
    }

    /// `None` once the test said `SKIPPED: postgres` (no server binaries here).
    pub(crate) fn postgres() -> Option<TestDb> {
        let server = PgServer::start()?;
        let url = server.new_database();
        Some(TestDb::Postgres { server, url })
    }

    /// A new store on this test's database (opening it again is a daemon restart).
    pub(crate) fn open(&self) -> Store {
        match self {
            TestDb::Sqlite(dir) => Store::open(&dir.path().join(DB_FILE)).expect("open SQLite"),
            TestDb::Postgres { server, url } => Store::connect(
                url,
                Some(server.password()),
                &PostgresOptions { max_connections: 4 },
            )
            .expect("connect to Postgres"),
        }
    }
}

macro_rules! conformance {
    ($( $(#[$meta:meta])* fn $name:ident($db:ident) $body:block )*) => {
        $(
            fn $name($db: &$crate::test_db::TestDb) $body
        )*

        mod sqlite {
            $(
                $(#[$meta])*
                #[test]
                fn $name() {
                    super::$name(&$crate::test_db::TestDb::sqlite())
                }
            )*
        }

        mod postgres {
            $(
                $(#[$meta])*
                #[test]
                fn $name() {
                    if let Some(db) = $crate::test_db::TestDb::postgres() {
                        super::$name(&db)
                    }
                }
            )*
        }
    };
}
