//! A real server through its whole life: start, a database, a query, a
//! crash-like stop and a restart, and nothing left after drop.

use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use airlock_testkit::TempPostgres;

fn accepts_tcp(port: u16) -> bool {
    TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_secs(2)).is_ok()
}

#[test]
fn start_query_stop_restart_and_drop() {
    let pg = TempPostgres::start().unwrap();
    let port = pg.port();
    assert!(accepts_tcp(port));

    assert_eq!(pg.password().len(), 32);
    let meta = std::fs::metadata(pg.password_file()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // SAFETY: geteuid has no preconditions.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() });
    assert_eq!(
        std::fs::read_to_string(pg.password_file()).unwrap(),
        pg.password()
    );

    let url = pg.create_database("life").unwrap();
    assert_eq!(url, format!("postgres://airlock@127.0.0.1:{port}/life"));
    assert_eq!(
        pg.url_with_password("life"),
        format!("postgres://airlock:{}@127.0.0.1:{port}/life", pg.password())
    );
    assert_eq!(pg.psql("life", "SELECT 1").unwrap(), "1");
    pg.psql(
        "life",
        "CREATE TABLE t (n int); INSERT INTO t VALUES (1), (2)",
    )
    .unwrap();

    pg.stop_now().unwrap();
    assert!(!accepts_tcp(port));
    let err = pg.psql("life", "SELECT 1").unwrap_err();
    assert!(err.contains("psql"), "{err}");

    pg.restart().unwrap();
    assert_eq!(pg.port(), port);
    // Committed rows survive the immediate stop.
    assert_eq!(
        pg.psql("life", "SELECT n FROM t ORDER BY n").unwrap(),
        "1\n2"
    );

    let dir = pg.password_file().parent().unwrap().to_path_buf();
    drop(pg);
    assert!(!accepts_tcp(port), "the postmaster still listens on {port}");
    assert!(!dir.exists(), "{} was left behind", dir.display());
}
