package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// servicePgBouncer names PgBouncer in messages and in UnavailableError.Service.
const servicePgBouncer = "PgBouncer"

const pgBinHint = "install PostgreSQL's server binaries (apt-get install -y postgresql); they are looked for under /usr/lib/postgresql/*/bin"

// PostgresCluster is a PostgreSQL cluster of the test's own, for faults that must not
// touch the shared server: initdb into a temporary directory, trust authentication,
// its own loopback port and socket directory, started and restarted with pg_ctl
// from the newest Debian server binaries (/usr/lib/postgresql/*/bin). When the test
// runs as root, the cluster runs as the postgres user. Fsync is off: the cluster's
// data is thrown away with it.
type PostgresCluster struct {
	bin  string // directory of pg_ctl, initdb
	dir  string // the temporary directory: data/, the socket, log
	port int
	as   *user.User // nil: run as ourselves
}

// NewPostgresCluster creates and starts a cluster that is stopped (by the pid in its
// postmaster.pid if pg_ctl cannot) and removed when the test ends. Without server
// binaries the test goes through Require.
func NewPostgresCluster(t testing.TB) *PostgresCluster {
	t.Helper()
	c, err := newPostgresCluster()
	Require(t, ServicePostgres, err)
	t.Cleanup(func() {
		if err := c.close(); err != nil {
			t.Errorf("harness: stopping the PostgreSQL cluster: %v", err)
		}
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// pgBin returns the newest /usr/lib/postgresql/*/bin that has pg_ctl.
func pgBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", &UnavailableError{Service: ServicePostgres, Hint: pgBinHint, Err: errors.New("no pg_ctl under /usr/lib/postgresql/*/bin")}
}

func pgVersion(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

// serviceUser is the postgres user when running as root (PostgreSQL and PgBouncer
// refuse to run as root), else nil.
func serviceUser() (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, &UnavailableError{Service: ServicePostgres, Hint: pgBinHint, Err: fmt.Errorf("running as root and %w", err)}
	}
	return u, nil
}

// tempDirFor makes a temporary directory owned by u (nil: ourselves).
func tempDirFor(u *user.User, pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil || u == nil {
		return dir, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return dir, os.Chown(dir, uid, gid)
}

// command runs name as u, if any.
func command(u *user.User, name string, args ...string) *exec.Cmd {
	if u == nil {
		return exec.Command(name, args...)
	}
	return exec.Command("runuser", append([]string{"-u", u.Username, "--", name}, args...)...)
}

func newPostgresCluster() (*PostgresCluster, error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	as, port, dir, err := privatePlace("brokerguard-pg-")
	if err != nil {
		return nil, err
	}
	c := &PostgresCluster{bin: bin, dir: dir, port: port, as: as}
	out, err := command(as, filepath.Join(bin, "initdb"), "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("harness: initdb: %v: %s", err, oneLine(string(out)))
	}
	return c, nil
}

func (c *PostgresCluster) data() string { return filepath.Join(c.dir, "data") }

// Addr is the cluster's host:port.
func (c *PostgresCluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// Port is the cluster's port.
func (c *PostgresCluster) Port() int { return c.port }

// DSN is a URL for database postgres as user postgres.
func (c *PostgresCluster) DSN() string {
	return "postgres://postgres@" + c.Addr() + "/postgres?sslmode=disable"
}

func (c *PostgresCluster) pgCtl(args ...string) error {
	opts := "-p " + strconv.Itoa(c.port) + " -k " + c.dir + " -c listen_addresses=127.0.0.1 -c fsync=off -c shared_buffers=16MB -c max_connections=50"
	args = append([]string{"-D", c.data(), "-w", "-t", "60", "-l", filepath.Join(c.dir, "postgres.log"), "-o", opts}, args...)
	out, err := command(c.as, filepath.Join(c.bin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("harness: pg_ctl %s: %v: %s (log: %s)", args[len(args)-1], err, oneLine(string(out)), filepath.Join(c.dir, "postgres.log"))
	}
	return nil
}

// Start starts the cluster and waits until it accepts connections.
func (c *PostgresCluster) Start() error { return c.pgCtl("start") }

// Stop stops the cluster (fast shutdown: sessions are ended).
func (c *PostgresCluster) Stop() error { return c.pgCtl("-m", "fast", "stop") }

// Restart is pg_ctl restart -m fast: sessions are ended and the cluster comes back on
// the same port with the same data.
func (c *PostgresCluster) Restart() error { return c.pgCtl("-m", "fast", "restart") }

// close stops the cluster, by the postmaster's pid when pg_ctl fails, and removes its
// directory.
func (c *PostgresCluster) close() error {
	var err error
	if _, serr := os.Stat(filepath.Join(c.data(), "postmaster.pid")); serr == nil {
		if err = c.pgCtl("-m", "immediate", "stop"); err != nil {
			err = errors.Join(err, killPidFile(filepath.Join(c.data(), "postmaster.pid")))
		}
	}
	return errors.Join(err, os.RemoveAll(c.dir))
}

// killPidFile kills the process whose pid is the first line of path and waits up to
// ten seconds for it to go.
func killPidFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("harness: %s: %w", path, err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
	}
	return fmt.Errorf("harness: pid %d still running", pid)
}

// privatePlace is what a private server needs before it starts: the user it runs as
// (nil: ourselves; see serviceUser), a free loopback port, and a temporary directory
// named from prefix that this user may write.
func privatePlace(prefix string) (as *user.User, port int, dir string, err error) {
	if as, err = serviceUser(); err != nil {
		return nil, 0, "", err
	}
	if port, err = freePort(); err != nil {
		return nil, 0, "", err
	}
	if dir, err = tempDirFor(as, prefix); err != nil {
		return nil, 0, "", fmt.Errorf("harness: %w", err)
	}
	return as, port, dir, nil
}
