package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

const pgBouncerHint = "install it with `apt-get install -y pgbouncer` (make services does)"

// PgBouncer is a pgbouncer of the test's own in front of a PostgreSQL server: its
// own port, and its config, pid file and log in a temporary directory. It is stopped
// by its process (group) id when the test ends.
type PgBouncer struct {
	dir  string
	port int
	run  *child
}

// StartPgBouncer starts pgbouncer in poolMode ("transaction", "session") for the
// server at upstream (host:port): every database name of a client is the server's
// database of that name; the user postgres is let in without a password (trust). Without pgbouncer the test goes through Require.
func StartPgBouncer(t testing.TB, upstream, poolMode string) *PgBouncer {
	t.Helper()
	b, err := startPgBouncer(upstream, poolMode)
	Require(t, servicePgBouncer, err)
	t.Cleanup(func() {
		if err := b.run.stop(serverTermWait); err != nil {
			t.Errorf("harness: stopping pgbouncer: %v", err)
		}
		_ = os.RemoveAll(b.dir)
	})
	return b
}

func startPgBouncer(upstream, poolMode string) (*PgBouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/pgbouncer"); err != nil {
			return nil, &UnavailableError{Service: servicePgBouncer, Hint: pgBouncerHint, Err: err}
		}
	}
	host, port, err := net.SplitHostPort(upstream)
	if err != nil {
		return nil, fmt.Errorf("harness: pgbouncer upstream: %w", err)
	}
	as, listen, dir, err := privatePlace("brokerguard-pgbouncer-")
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{dir: dir, port: listen}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
pidfile = %s
logfile = %s
max_client_conn = 200
default_pool_size = 8
ignore_startup_parameters = extra_float_digits
`, host, port, listen, filepath.Join(dir, "userlist.txt"), poolMode, filepath.Join(dir, "pgbouncer.pid"), filepath.Join(dir, "pgbouncer.log"))
	conf := filepath.Join(dir, "pgbouncer.ini")
	err = os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(`"postgres" ""`+"\n"), 0o644)
	if err == nil {
		err = os.WriteFile(conf, []byte(ini), 0o644)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("harness: %w", err)
	}
	b.run, err = startChild(command(as, bin, conf), filepath.Join(dir, "stdout.log"), b.Addr(), serverUpWait, serverTermWait)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		_ = os.RemoveAll(dir)
		return nil, errors.Join(err, fmt.Errorf("pgbouncer.log: %s", oneLine(string(log))))
	}
	return b, nil
}

// Addr is pgbouncer's host:port.
func (b *PgBouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// Log returns what pgbouncer logged so far.
func (b *PgBouncer) Log() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	return string(out)
}
