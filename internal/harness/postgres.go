package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultDatabaseURL is the DSN used when DATABASE_URL is unset: the machine's server
// with trust authentication and its database "test".
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

const postgresHint = "start it with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` or set DATABASE_URL"

// startPostgresOnce makes the harness try to start the local server at most once per
// test binary.
var startPostgresOnce sync.Once

// Postgres returns the DSN from DATABASE_URL (or DefaultDatabaseURL) once its server
// accepts TCP connections. When DATABASE_URL is unset and the server is down, it tries
// once to start the machine's cluster with pg_ctlcluster and waits up to 30 seconds.
func Postgres() (dsn string, err error) {
	dsn, isDefault := envOr("DATABASE_URL", DefaultDatabaseURL)
	unavailable := func(addr string, err error) (string, error) {
		return "", &UnavailableError{Service: ServicePostgres, Addr: addr, Hint: postgresHint, Err: err}
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return unavailable("", fmt.Errorf("harness: DATABASE_URL: %w", err))
	}
	network, addr := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if strings.HasPrefix(cfg.Host, "/") { // a Unix socket directory
		network, addr = "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	probe := func() error {
		c, err := net.DialTimeout(network, addr, dialTimeout)
		if err != nil {
			return err
		}
		return c.Close()
	}
	if err = probe(); err != nil && isDefault {
		startPostgresOnce.Do(startLocalPostgres)
		deadline := time.Now().Add(30 * time.Second)
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			err = probe()
		}
	}
	if err != nil {
		return unavailable(addr, err)
	}
	return dsn, nil
}

// startLocalPostgres starts the machine's "main" cluster. Failures are ignored: the
// caller's next probe reports whether the server came up.
func startLocalPostgres() {
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		return
	}
	version := versions[len(versions)-1].Name() // the newest installed version
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start").Run()
}

// PostgresSchema creates a schema with a fresh name for this test and returns a DSN
// whose search_path is that schema, so tables the test creates without a schema
// qualifier land there and cannot collide with other tests. The schema and everything
// in it are dropped when the test ends. An unavailable server goes through Require.
func PostgresSchema(t testing.TB) (dsn string) {
	t.Helper()
	base, err := Postgres()
	Require(t, ServicePostgres, err)
	schema := schemaName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := execSQL(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		Require(t, ServicePostgres, &UnavailableError{Service: ServicePostgres, Hint: postgresHint, Err: err})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execSQL(ctx, base, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("harness: drop schema %s: %v", schema, err)
		}
	})
	return withSearchPath(base, schema)
}

// execSQL runs one statement on a connection of its own.
func execSQL(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("harness: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("harness: %s: %w", sql, err)
	}
	return nil
}

// notIdent matches the characters a test name may hold that an unquoted identifier
// should not.
var notIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// schemaName builds a unique, readable schema name from a test name: "t_", up to 40
// characters of the name, and 16 random hex digits (at most 59 bytes; PostgreSQL's
// limit is 63).
func schemaName(testName string) string {
	name := strings.Trim(notIdent.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "t_" + name + "_" + hex.EncodeToString(b[:])
}

// withSearchPath adds search_path to a URL or keyword/value DSN; pgx sends unknown
// parameters to the server as run-time parameters.
func withSearchPath(dsn, schema string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}
