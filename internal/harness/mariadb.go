package harness

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ServiceMySQL names MySQL or MariaDB in messages and in UnavailableError.Service.
const ServiceMySQL = "MySQL/MariaDB"

// DefaultMySQLDSN is the DSN used when MYSQL_DSN is unset: the machine's MariaDB as
// root without a password, database "test" (go-sql-driver/mysql's DSN form).
const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test"

const mysqlHint = "start it with `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd` (make services installs Debian's mariadb-server) or set MYSQL_DSN"

// startMySQLOnce makes the harness try to start the local server at most once per
// test binary.
var startMySQLOnce sync.Once

// MySQL returns MYSQL_DSN (or DefaultMySQLDSN) once its server answers a ping. When
// MYSQL_DSN is unset and nothing listens on the default address, it tries once to
// start the machine's mariadbd and waits up to 30 seconds.
func MySQL() (dsn string, err error) {
	dsn, isDefault := envOr("MYSQL_DSN", DefaultMySQLDSN)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", &UnavailableError{Service: ServiceMySQL, Hint: mysqlHint, Err: fmt.Errorf("harness: MYSQL_DSN: %w", err)}
	}
	err = pingMySQL(dsn)
	if err != nil && isDefault {
		startMySQLOnce.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = exec.CommandContext(ctx, "start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd").Run()
		})
		for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			err = pingMySQL(dsn)
		}
	}
	if err != nil {
		return "", &UnavailableError{Service: ServiceMySQL, Addr: cfg.Addr, Hint: mysqlHint, Err: err}
	}
	return dsn, nil
}

// pingMySQL connects to dsn and pings the server.
func pingMySQL(dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cfg.Timeout = dialTimeout
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	return db.PingContext(ctx)
}

// MySQLDatabase creates a database with a fresh name for this test on the server
// MySQL returns and returns a DSN for it (interpolateParams on), so that the tables
// the test creates cannot collide with other tests'. The database is dropped when the
// test ends. An unavailable server goes through Require.
func MySQLDatabase(t testing.TB) (dsn string) {
	t.Helper()
	base, err := MySQL()
	Require(t, ServiceMySQL, err)
	return mysqlDatabase(t, base)
}

// mysqlDatabase creates a database for t on the server of base and returns its DSN.
func mysqlDatabase(t testing.TB, base string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	name := "t_" + hex.EncodeToString(b[:])
	run := func(stmt string) error {
		db, err := sql.Open("mysql", base)
		if err != nil {
			return err
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = db.ExecContext(ctx, stmt)
		return err
	}
	if err := run("CREATE DATABASE " + name); err != nil {
		Require(t, ServiceMySQL, &UnavailableError{Service: ServiceMySQL, Addr: cfg.Addr, Hint: mysqlHint, Err: err})
	}
	t.Cleanup(func() {
		if err := run("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Errorf("harness: drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	cfg.InterpolateParams = true
	return cfg.FormatDSN()
}

const mariadbHint = "install Debian's mariadb-server (make services does): NewMariaDB needs /usr/sbin/mariadbd and mariadb-install-db"

// MariaDB is a MariaDB server of the test's own, for faults that must not touch the
// shared server: mariadb-install-db into a temporary directory, its own loopback
// port and socket, root without a password, a database "test", and a user "app"
// (password "app") with every privilege on "test" but none of an administrator's, so
// that SET GLOBAL read_only stops its writes. Stop, Start and Restart keep the port
// and the data. When the test runs as root, the server runs as the mysql user.
type MariaDB struct {
	server
	as *user.User // nil: run as ourselves
}

// NewMariaDB creates and starts a private MariaDB server that is stopped (by its
// process) and removed when the test ends. Without the binaries the test goes
// through Require.
func NewMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	// The server makes a directory of its own, which its mysql user can enter.
	return startForTest(t, ServiceMySQL, func(string) (*MariaDB, error) { return startMariaDB() })
}

func startMariaDB() (*MariaDB, error) {
	unavailable := func(err error) error {
		return &UnavailableError{Service: ServiceMySQL, Hint: mariadbHint, Err: err}
	}
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			return nil, unavailable(err)
		}
	}
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		return nil, unavailable(err)
	}
	var as *user.User
	if os.Geteuid() == 0 {
		if as, err = user.Lookup("mysql"); err != nil {
			return nil, unavailable(fmt.Errorf("running as root and %w", err))
		}
	}
	dir, err := tempDirFor(as, "brokerguard-mariadb-")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	m := &MariaDB{server: server{dir: dir, ownDir: true, log: "mariadb.log"}, as: as}
	m.fail = func(err error) error {
		return &UnavailableError{Service: ServiceMySQL, Addr: m.Addr(), Hint: mariadbHint, Err: err}
	}
	args := []string{"--no-defaults", "--datadir=" + m.data(), "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve"}
	if as != nil {
		args = append(args, "--user="+as.Username)
	}
	if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, unavailable(fmt.Errorf("mariadb-install-db: %v: %s", err, oneLine(string(out))))
	}
	m.command = func() (*exec.Cmd, error) {
		args := []string{"--no-defaults", "--datadir=" + m.data(), "--port=" + strconv.Itoa(m.port),
			"--bind-address=127.0.0.1", "--socket=" + filepath.Join(m.dir, "mariadb.sock"),
			"--pid-file=" + filepath.Join(m.dir, "mariadb.pid"), "--skip-name-resolve", "--skip-log-bin",
			"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2",
			"--max-connections=100"}
		if as != nil {
			args = append(args, "--user="+as.Username)
		}
		return exec.Command(bin, args...), nil
	}
	m.ready = func(addr string) error { return pingMySQL("root@tcp(" + addr + ")/") }
	if err := startServer(&m.server, ""); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := m.setUp(); err != nil {
		_ = m.Close()
		return nil, unavailable(err)
	}
	return m, nil
}

func (m *MariaDB) data() string { return filepath.Join(m.dir, "data") }

// setUp creates the database test and the user app.
func (m *MariaDB) setUp() error {
	db, err := sql.Open("mysql", "root@tcp("+m.Addr()+")/")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, stmt := range []string{
		"CREATE DATABASE IF NOT EXISTS test",
		"CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'app'",
		"GRANT ALL PRIVILEGES ON test.* TO 'app'@'%'",
	} {
		if _, err := db.Exec(stmt); err != nil {
			return fmt.Errorf("harness: %s: %w", stmt, err)
		}
	}
	return nil
}

// Addr is the server's host:port.
func (m *MariaDB) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port)) }

// DSN is a go-sql-driver/mysql DSN for database test as root (interpolateParams on).
func (m *MariaDB) DSN() string { return "root@tcp(" + m.Addr() + ")/test?interpolateParams=true" }

// AppDSN is DSN as the user app, whom SET GLOBAL read_only stops.
func (m *MariaDB) AppDSN() string { return "app:app@tcp(" + m.Addr() + ")/test?interpolateParams=true" }

// Restart stops the server (SIGTERM: a clean shutdown that ends every session) and
// starts it again on the same port with the same data.
func (m *MariaDB) Restart() error {
	if err := m.Stop(); err != nil {
		return err
	}
	return m.Start()
}
