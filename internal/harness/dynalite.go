package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

const dynamoHint = "run scripts/services.sh (installs dynalite with npm; needs Node.js 20) or set DYNAMODB_ENDPOINT"

// npmTimeout bounds installing dynalite.
const npmTimeout = 5 * time.Minute

// DynamoDB returns DYNAMODB_ENDPOINT once its host accepts TCP connections, or "", nil
// when the variable is unset: the caller then starts dynalite (see Dynalite).
func DynamoDB() (endpoint string, err error) {
	return endpointFromEnv(ServiceDynamoDB, "DYNAMODB_ENDPOINT", dynamoHint)
}

// Dynalite returns DYNAMODB_ENDPOINT for a test when it is set and reachable. Otherwise
// it starts a dynalite server for the test (see NewDynalite) and returns its endpoint.
// An unavailable server goes through Require.
func Dynalite(t testing.TB) (endpoint string) {
	t.Helper()
	endpoint, err := DynamoDB()
	Require(t, ServiceDynamoDB, err)
	if endpoint != "" {
		return endpoint
	}
	return NewDynalite(t).Endpoint()
}

// NewDynalite starts a dynalite server that keeps its tables in a temporary directory of
// the test and stops it when the test ends, whatever DYNAMODB_ENDPOINT says; use it for
// tests that stop and restart DynamoDB. Errors go through Require.
func NewDynalite(t testing.TB) *DynaliteServer {
	t.Helper()
	return startForTest(t, ServiceDynamoDB, StartDynalite)
}

// DynaliteServer is a dynalite child process on a fixed loopback port. Its tables live in
// a LevelDB directory on disk, so Stop followed by Start brings back the same server with
// the same tables on the same endpoint. While the process runs, one goroutine of the
// server waits for it to exit; Stop and Close end both. Create one with StartDynalite or
// NewDynalite; the zero value is not usable.
type DynaliteServer struct{ server }

// StartDynalite installs dynalite with npm if integration/dynalite/node_modules is
// missing, then starts it on a free loopback port with its store in dir (a new
// temporary directory, removed by Close, when dir is empty) and waits until it accepts
// connections. It suits TestMain, which cannot skip: keep the error and hand it to
// Require in each test.
//
//	var dynamo *harness.DynaliteServer
//	var dynamoErr error
//
//	func TestMain(m *testing.M) {
//		dynamo, dynamoErr = harness.StartDynalite("")
//		code := m.Run()
//		if dynamo != nil {
//			dynamo.Close()
//		}
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) {
//		harness.Require(t, harness.ServiceDynamoDB, dynamoErr)
//		endpoint := dynamo.Endpoint()
//		...
//	}
func StartDynalite(dir string) (*DynaliteServer, error) {
	s := &DynaliteServer{server{dir: dir, log: "dynalite.log"}}
	s.fail = func(err error) error {
		return &UnavailableError{Service: ServiceDynamoDB, Addr: s.addr(), Hint: dynamoHint, Err: err}
	}
	s.command = func() (*exec.Cmd, error) {
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, err
		}
		cli, err := installDynalite()
		if err != nil {
			return nil, err
		}
		return exec.Command(node, cli,
			"--host", "127.0.0.1", "--port", strconv.Itoa(s.port),
			"--path", filepath.Join(s.dir, "db"),
			// Tables become ACTIVE at once instead of after half a second.
			"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"), nil
	}
	if err := startServer(&s.server, "dynalite-"); err != nil {
		return nil, err
	}
	return s, nil
}

// Endpoint returns the server's URL, for the SDK's BaseEndpoint.
func (s *DynaliteServer) Endpoint() string {
	return "http://" + s.addr()
}

// dynaliteDir returns the directory of dynalite's package.json and package-lock.json
// (integration/dynalite in this repository).
func dynaliteDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "integration", "dynalite")
}

// installMu keeps the test binary's own goroutines from installing at once; a flock on
// install.lock (the one scripts/services.sh takes) does the same across processes.
var installMu sync.Mutex

// installDynalite runs `npm ci` in dynaliteDir unless dynalite is installed there, and
// returns the path of dynalite's command-line script.
func installDynalite() (cli string, err error) {
	dir := dynaliteDir()
	cli = filepath.Join(dir, "node_modules", "dynalite", "cli.js")
	installed := func() bool {
		// npm writes node_modules/.package-lock.json last, so a half-done install lacks it.
		_, errCLI := os.Stat(cli)
		_, errLock := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
		return errCLI == nil && errLock == nil
	}
	if installed() {
		return cli, nil
	}
	installMu.Lock()
	defer installMu.Unlock()
	lock, err := os.OpenFile(filepath.Join(dir, "install.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	defer lock.Close() // drops the flock
	if err := flockWait(lock, syscall.LOCK_EX); err != nil {
		return "", err
	}
	if installed() { // another process installed it while we waited
		return cli, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("harness: install dynalite: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), npmTimeout)
	defer cancel()
	// --ignore-scripts: classic-level ships prebuilt binaries, so nothing needs building.
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("harness: npm ci in %s: %w: %s", dir, err, oneLine(string(out)))
	}
	return cli, nil
}
