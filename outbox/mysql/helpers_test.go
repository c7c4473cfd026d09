package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
)

// testDSN is the server the package's tests use: MYSQL_DSN, else the machine's
// MariaDB as root without a password.
func testDSN() string {
	if dsn := os.Getenv("MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/test"
}

// testDB returns a pool on a database of the test's own, dropped when the test ends,
// with no table yet. It skips the test in one line when the server cannot be
// reached, unless CI=true. Each parameter of params is set on the DSN.
func testDB(t testing.TB, params ...string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testDSN())
	if err != nil {
		t.Fatalf("MYSQL_DSN: %v", err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err == nil {
		err = admin.Ping()
	}
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("MySQL/MariaDB is required under CI=true: %v", err)
		}
		t.Skipf("MySQL/MariaDB unreachable at MYSQL_DSN (%s): %v; start it with `make services`", cfg.Addr, err)
	}
	defer admin.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "bgtest_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := sql.Open("mysql", cfg.FormatDSN())
		if err == nil {
			_, err = c.Exec("DROP DATABASE " + name)
			c.Close()
		}
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return openDB(t, name, params...)
}

// openDB returns a pool on the database name of the test server, closed when the
// test ends, with interpolateParams on and each parameter of params set.
func openDB(t testing.TB, name string, params ...string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	for i := 0; i+1 < len(params); i += 2 {
		switch params[i] {
		case "parseTime":
			cfg.ParseTime = params[i+1] == "true"
		case "loc":
			loc, err := time.LoadLocation(params[i+1])
			if err != nil {
				t.Fatal(err)
			}
			cfg.Loc = loc
		default:
			cfg.Params[params[i]] = params[i+1]
		}
	}
	cfg.InterpolateParams = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// testStore returns a Store on migrated tables in a database of the test's own.
func testStore(t testing.TB, opts ...bgmysql.Option) (*bgmysql.Store, *sql.DB) {
	t.Helper()
	db := testDB(t)
	if err := bgmysql.Migrate(context.Background(), db, opts...); err != nil {
		t.Fatal(err)
	}
	s, err := bgmysql.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

// openDBLike returns another pool on the database of db.
func openDBLike(t testing.TB, db *sql.DB) *sql.DB {
	t.Helper()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return openDB(t, name)
}
