//! A throwaway Postgres server for the tests: initdb + pg_ctl from Debian's `postgresql`
//! package in a temp dir, started once per test binary on first use, a fresh database per
//! test, and stopped when the test process exits for any reason (a watchdog child reads a pipe
//! only this process holds; when the pipe closes, on exit, panic or kill -9, it stops the
//! server and deletes its directory).
//!
//! A second server, [`tls_server`], started only by the tests that ask for it, has `ssl = on`
//! with a certificate for 127.0.0.1 and localhost signed by a CA made for it (rcgen), and takes
//! TCP connections over TLS only; the harness reaches it through its Unix socket. The same CA
//! signed a client certificate for [`CERT_ROLE`], which logs in with it (`cert` in
//! `pg_hba.conf`) and nothing else.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a test sees when the server cannot be had: one line naming what to install.
pub const MISSING: &str = "install Debian package postgresql";

/// The role with a password (scram over TCP) for the wrong-credentials tests.
pub const PASSWORD_ROLE: &str = "toolq_pw";
/// Its password, which no error message may show.
pub const PASSWORD: &str = "s3cret-Pa55word";

/// On the TLS server: the role that logs in with a client certificate only (a superuser, so
/// it can create the schema in any test's database).
pub const CERT_ROLE: &str = "toolq_cert";

/// The running server: superuser `postgres` (trust) on 127.0.0.1:`port`.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    pub bin: PathBuf,
    /// On the TLS server: the CA certificate (PEM) that signed the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// On the TLS server: [`CERT_ROLE`]'s client certificate and its private key (PEM).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// The watchdog's stdin: dropped only when the process exits.
    _watchdog: std::process::ChildStdin,
}

impl Server {
    /// A URL for database `db` as the superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A URL for the harness's own connections (no TLS): TCP on the plain server, the Unix
    /// socket on the TLS one, which takes TCP connections over TLS only.
    pub fn admin_url(&self, db: &str) -> String {
        if self.ca_file.is_none() {
            return self.url(db);
        }
        let socket_dir = self.dir.display().to_string().replace('/', "%2F");
        format!("postgres://postgres@{socket_dir}:{}/{db}", self.port)
    }
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static TLS_SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

/// The shared server, started on first use; fails the calling test when it cannot start.
pub fn server() -> &'static Server {
    match SERVER.get_or_init(|| start(false)) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

/// The shared TLS server (see the module doc), started on first use.
pub fn tls_server() -> &'static Server {
    match TLS_SERVER.get_or_init(|| start(true)) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

/// The newest `/usr/lib/postgresql/N/bin` holding initdb, else the directory of `initdb` on
/// PATH.
fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// initdb and postgres refuse to run as root: as root they run as this system user.
fn service_user() -> &'static str {
    let has = |u: &str| {
        Command::new("id")
            .arg("-u")
            .arg(u)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has("postgres") {
        "postgres"
    } else {
        "nobody"
    }
}

/// `bin/tool args` as the service user when we are root.
fn pg_command(bin: &Path, tool: &str, cwd: &Path) -> Command {
    let mut c = if is_root() {
        let mut c = Command::new("runuser");
        c.arg("-u")
            .arg(service_user())
            .arg("--")
            .arg(bin.join(tool));
        c
    } else {
        Command::new(bin.join(tool))
    };
    // The service user may not be able to enter the test's working directory.
    c.current_dir(cwd).env_remove("PGDATA").env_remove("PGPORT");
    c
}

fn run(mut c: Command, what: &str) -> Result<(), String> {
    let o = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

const HBA: &str = "\
local all all trust
host all toolq_pw 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
";

/// The TLS server's: TCP without TLS matches no line, so it is refused; the certificate
/// role needs its client certificate.
const TLS_HBA: &str = "\
local all all trust
hostssl all toolq_cert 127.0.0.1/32 cert
hostssl all all 127.0.0.1/32 trust
";

/// What [`certificates`] wrote: the server's `-c` options, the CA file, and the client
/// certificate and key.
type Certificates = (String, PathBuf, (PathBuf, PathBuf));

/// Writes a CA certificate (`ca.crt`), a server certificate and key it signed for 127.0.0.1
/// and localhost, and a client certificate and key for [`CERT_ROLE`], into `dir`.
fn certificates(dir: &Path) -> Result<Certificates, String> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let e = |what: &'static str| move |e: rcgen::Error| format!("{what}: {e}");
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e("CA params"))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "toolq test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(e("CA key"))?)
        .map_err(e("CA certificate"))?;
    let key = KeyPair::generate().map_err(e("server key"))?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
        .map_err(e("server params"))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "127.0.0.1");
    let cert = params
        .signed_by(&key, &ca)
        .map_err(e("server certificate"))?;
    let (ca_file, crt, key_file) = (
        dir.join("ca.crt"),
        dir.join("server.crt"),
        dir.join("server.key"),
    );
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write(&ca_file, &ca.pem())?;
    write(&crt, &cert.pem())?;
    write(&key_file, &key.serialize_pem())?;
    // The server refuses a key others may read, or (as another user) one it does not own.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod server.key: {e}"))?;
    if is_root() {
        let mut c = Command::new("chown");
        c.arg(service_user()).arg(&crt).arg(&key_file);
        run(c, "chown")?;
    }
    let client_key = KeyPair::generate().map_err(e("client key"))?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(e("client params"))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, CERT_ROLE);
    let client = params
        .signed_by(&client_key, &ca)
        .map_err(e("client certificate"))?;
    let (client_crt, client_key_file) = (dir.join("client.crt"), dir.join("client.key"));
    write(&client_crt, &client.pem())?;
    write(&client_key_file, &client_key.serialize_pem())?;
    std::fs::set_permissions(&client_key_file, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod client.key: {e}"))?;
    // ssl_ca_file: the CA the server checks client certificates against.
    let opts = format!(
        " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={}",
        crt.display(),
        key_file.display(),
        ca_file.display()
    );
    Ok((opts, ca_file, (client_crt, client_key_file)))
}

fn start(tls: bool) -> Result<Server, String> {
    let Some(bin) = bin_dir() else {
        return Err(MISSING.into());
    };
    // As root the server runs as another user, who must reach the directory: /tmp, not a
    // TMPDIR below root's home.
    let parent = if is_root() {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("toolq-pg-")
        .tempdir_in(&parent)
        .map_err(|e| format!("temp dir in {}: {e}", parent.display()))?
        .keep();
    // From here on the watchdog owns the directory: it deletes it when we exit.
    let mut watchdog = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("toolq-pg-watchdog")
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("watchdog: {e}"))?;
    let watchdog_stdin = watchdog.stdin.take().ok_or("watchdog stdin")?;
    if is_root() {
        let mut c = Command::new("chown");
        c.arg(service_user()).arg(&dir);
        run(c, "chown")?;
    }
    let data = dir.join("data");
    let mut c = pg_command(&bin, "initdb", &dir);
    c.arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
        .args(["--locale=C"]);
    run(c, "initdb")?;
    let hba = if tls { TLS_HBA } else { HBA };
    std::fs::write(data.join("pg_hba.conf"), hba).map_err(|e| format!("pg_hba.conf: {e}"))?;
    let (ssl_opts, ca_file, client_cert) = if tls {
        let (opts, ca, client) = certificates(&dir)?;
        (opts, Some(ca), Some(client))
    } else {
        (String::new(), None, None)
    };
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port();
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=300{ssl_opts}",
            dir.display()
        );
        let mut c = pg_command(&bin, "pg_ctl", &dir);
        c.arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &opts, "start"]);
        match run(c, "pg_ctl start") {
            Ok(()) => {
                let server = Server {
                    port,
                    dir: dir.clone(),
                    bin: bin.clone(),
                    ca_file: ca_file.clone(),
                    client_cert: client_cert.clone(),
                    _watchdog: watchdog_stdin,
                };
                admin(
                    &server,
                    &format!("CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'"),
                )?;
                if tls {
                    admin(&server, &format!("CREATE ROLE {CERT_ROLE} LOGIN SUPERUSER"))?;
                }
                return Ok(server);
            }
            Err(e) => {
                let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                last = format!("{e}\n{log}");
            }
        }
    }
    Err(format!("postgres did not start: {last}"))
}

/// Stops the server (immediate shutdown: nothing in it is kept) and deletes its directory
/// once its parent, the test process, has closed the pipe: at exit, on panic or on kill -9.
const WATCHDOG: &str = r#"
trap '' INT TERM HUP
cat >/dev/null
pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ]; then
  kill -QUIT "$pid" 2>/dev/null
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$1"
"#;

/// Runs SQL in a fresh connection on its own thread (the tests call this from inside tokio
/// runtimes, which may not block on another runtime).
pub fn with_client<T: Send>(
    url: &str,
    f: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T, tokio_postgres::Error> + Send,
) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| format!("connect {url}: {}", describe(&e)))?;
                let conn = tokio::spawn(conn);
                let r = f(&client).await.map_err(|e| describe(&e));
                drop(client);
                let _ = conn.await;
                r
            })
        })
        .join()
        .map_err(|_| "SQL thread panicked".to_string())?
    })
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// Runs one statement on the `postgres` database as the superuser.
pub fn admin(server: &Server, sql: &str) -> Result<(), String> {
    let sql = sql.to_string();
    with_client(&server.admin_url("postgres"), async move |c| {
        c.batch_execute(&sql).await
    })
}

static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

/// Rows as text, NULL as None.
pub type Rows = Vec<Vec<Option<String>>>;

type Job = (String, std::sync::mpsc::Sender<Result<Rows, String>>);

/// A fresh, empty database with one connection kept open on its own thread for the test's
/// reads (so a sampler polling every millisecond does not connect every time); dropped with
/// the last handle.
pub struct Database {
    pub name: String,
    /// The URL toolq connects to.
    pub url: String,
    /// The URL of the test's own connection (see [`Server::admin_url`]).
    admin_url: String,
    server: &'static Server,
    conn: std::sync::Mutex<Option<std::sync::mpsc::Sender<Job>>>,
}

impl Database {
    /// Creates a database on the shared server.
    pub fn create() -> Database {
        Database::create_on(server())
    }

    /// Creates a database on `server` ([`server`] or [`tls_server`]).
    pub fn create_on(server: &'static Server) -> Database {
        let name = format!("t{}", NEXT_DB.fetch_add(1, Ordering::Relaxed));
        admin(server, &format!("CREATE DATABASE {name}")).unwrap_or_else(|e| panic!("{e}"));
        Database {
            url: server.url(&name),
            admin_url: server.admin_url(&name),
            name,
            server,
            conn: std::sync::Mutex::new(None),
        }
    }

    /// The rows of `sql` (several statements allowed; rows of all of them), every value as
    /// text (the simple protocol).
    pub fn rows(&self, sql: &str) -> Result<Rows, String> {
        let tx = {
            let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            conn.get_or_insert_with(|| connection(self.admin_url.clone()))
                .clone()
        };
        let (reply, answer) = std::sync::mpsc::channel();
        tx.send((sql.to_string(), reply))
            .map_err(|_| "the SQL connection thread ended".to_string())?;
        answer
            .recv()
            .map_err(|_| "the SQL connection thread ended".to_string())?
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // Close our connection first; FORCE ends those toolq left (a killed worker's).
        drop(self.conn.lock().unwrap_or_else(|e| e.into_inner()).take());
        let _ = admin(
            self.server,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// A thread holding one connection to `url`, answering queries sent to it until every sender
/// is gone (a lost connection is opened again on the next query).
fn connection(url: String) -> std::sync::mpsc::Sender<Job> {
    let (tx, jobs) = std::sync::mpsc::channel::<Job>();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let mut client: Option<tokio_postgres::Client> = None;
            while let Ok((sql, reply)) = jobs.recv() {
                if client.as_ref().is_none_or(|c| c.is_closed()) {
                    match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                        Ok((c, conn)) => {
                            tokio::spawn(conn);
                            client = Some(c);
                        }
                        Err(e) => {
                            let _ = reply.send(Err(format!("connect {url}: {}", describe(&e))));
                            continue;
                        }
                    }
                }
                let Some(c) = client.as_ref() else { continue };
                let _ = reply.send(simple(c, &sql).await.map_err(|e| describe(&e)));
            }
        });
    });
    tx
}

async fn simple(c: &tokio_postgres::Client, sql: &str) -> Result<Rows, tokio_postgres::Error> {
    Ok(c.simple_query(sql)
        .await?
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect())
}

/// Rows of `sql` on a one-off connection to `url` (any database or role).
pub fn rows(url: &str, sql: &str) -> Result<Rows, String> {
    let sql = sql.to_string();
    with_client(url, async move |c| simple(c, &sql).await)
}
