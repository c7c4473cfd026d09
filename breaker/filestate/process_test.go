package filestate_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// The multi-process tests start this test binary again; the environment variable
// childRole makes TestMain play a child instead of running the tests. Children read the
// time from childNow, so parent and children share a fake clock without sleeping.
const (
	childRole      = "FILESTATE_TEST_ROLE"      // "acquire" or "hold-lock"
	childRoot      = "FILESTATE_TEST_ROOT"      // the store's root
	childNow       = "FILESTATE_TEST_NOW"       // the clock, in Unix nanoseconds
	childThreshold = "FILESTATE_TEST_THRESHOLD" // the policy's FailureThreshold
	childComplete  = "FILESTATE_TEST_COMPLETE"  // "success" or "failure": complete the permit so
	childHold      = "FILESTATE_TEST_HOLD"      // "1": after reporting, wait until killed or stdin closes
	childLockPath  = "FILESTATE_TEST_LOCK"      // hold-lock: the lock file to hold
)

const procID = "kafka:orders"

// procPolicy gives probes a 10s lease and tells siblings to come back when it ends.
func procPolicy(threshold int) breaker.Policy {
	return breaker.Policy{
		FailureThreshold: threshold, BreakDuration: time.Minute,
		ProbeLease: 10 * time.Second, HalfOpenRetryDelay: time.Millisecond,
		Scope: breaker.SingleHost,
	}
}

func TestMain(m *testing.M) {
	if role := os.Getenv(childRole); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// runChild plays one role and reports on stdout, one line per event.
func runChild(role string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 2 }
	stdin := bufio.NewReader(os.Stdin)
	switch role {
	case "hold-lock":
		f, err := os.OpenFile(os.Getenv(childLockPath), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fail(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			return fail(err)
		}
		fmt.Println("locked")
		io.Copy(io.Discard, stdin) // until killed
		return 0
	case "acquire":
	default:
		return fail(fmt.Errorf("unknown role %q", role))
	}
	now, err := strconv.ParseInt(os.Getenv(childNow), 10, 64)
	if err != nil {
		return fail(err)
	}
	threshold, err := strconv.Atoi(os.Getenv(childThreshold))
	if err != nil {
		return fail(err)
	}
	s, err := filestate.Open(os.Getenv(childRoot), sharedstate.WithClock(fakeclock.New(time.Unix(0, now))))
	if err != nil {
		return fail(err)
	}
	c, err := s.Circuit(procID, procPolicy(threshold))
	if err != nil {
		return fail(err)
	}
	// Wait for the parent's start line, so that the children race each other.
	if _, err := stdin.ReadString('\n'); err != nil {
		return fail(err)
	}
	p, err := c.Acquire(context.Background())
	var oe *breaker.OpenError
	switch {
	case errors.As(err, &oe):
		fmt.Println("rejected", oe.NotBefore.UnixNano())
	case err != nil:
		return fail(err)
	default:
		line := fmt.Sprintf("admitted probe=%v generation=%d", p.Probe(), p.Generation())
		switch os.Getenv(childComplete) {
		case "success":
			line += fmt.Sprintf(" counted=%v", p.Complete(breaker.Success))
		case "failure":
			line += fmt.Sprintf(" counted=%v", p.Complete(breaker.Failure))
		}
		fmt.Println(line)
	}
	if os.Getenv(childHold) == "1" {
		io.Copy(io.Discard, stdin) // until killed
	}
	return 0
}

type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
}

// startChild runs this test binary as a child in role with the given environment.
// The child is killed and reaped when the test ends, whatever happens.
func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	c := &child{t: t, cmd: exec.Command(os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(append(os.Environ(), childRole+"="+role), env...)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.out = bufio.NewReader(stdout)
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	return c
}

// acquirer starts an "acquire" child whose clock reads now.
func acquirer(t *testing.T, e *env, now time.Time, threshold int, extra ...string) *child {
	return startChild(t, "acquire", append([]string{
		childRoot + "=" + e.root,
		childNow + "=" + strconv.FormatInt(now.UnixNano(), 10),
		childThreshold + "=" + strconv.Itoa(threshold),
	}, extra...)...)
}

func (c *child) start() {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
		c.t.Fatalf("starting child: %v", err)
	}
}

// line returns the child's next report.
func (c *child) line() string {
	c.t.Helper()
	s, err := c.out.ReadString('\n')
	if err != nil {
		c.cmd.Wait()
		c.t.Fatalf("child report: %v; stderr: %s", err, c.stderr.String())
	}
	return strings.TrimSpace(s)
}

// exited waits for a child that reports and leaves.
func (c *child) exited() {
	c.t.Helper()
	c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		c.t.Fatalf("child: %v; stderr: %s", err, c.stderr.String())
	}
}

// kill9 sends SIGKILL, so the child gets no chance to clean up, and reaps it.
func (c *child) kill9() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	c.cmd.Wait()
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		c.t.Fatalf("child ended with %v, want SIGKILL", c.cmd.ProcessState)
	}
}

// openCircuit opens procID's circuit in the parent at t0, for one minute.
func openCircuit(t *testing.T, e *env) *filestate.Circuit {
	t.Helper()
	c := e.circuit(procID, procPolicy(1))
	call(t, c, breaker.Failure)
	wantState(t, c, breaker.Open)
	return c
}

func TestExactlyOneProbeAcrossProcesses(t *testing.T) {
	const n = 6
	e := newEnv(t)
	openCircuit(t, e)
	e.clock.Advance(2 * time.Minute) // the break is over for everybody

	kids := make([]*child, n)
	for i := range kids {
		kids[i] = acquirer(t, e, e.clock.Now(), 1)
	}
	for _, k := range kids {
		k.start()
	}
	probes, lines := 0, []string{}
	leaseEnd := strconv.FormatInt(e.clock.Now().Add(10*time.Second).UnixNano(), 10)
	for _, k := range kids {
		l := k.line()
		lines = append(lines, l)
		switch {
		case strings.HasPrefix(l, "admitted probe=true"):
			probes++
		case l != "rejected "+leaseEnd:
			t.Errorf("unexpected report %q (want a probe or a rejection until the lease ends, %s)", l, leaseEnd)
		}
		k.exited()
	}
	if probes != 1 {
		t.Fatalf("%d probes across %d processes, want exactly 1: %q", probes, n, lines)
	}
	if s := wantState(t, e.circuit(procID, procPolicy(1)), breaker.HalfOpen); s.Probes != 1 {
		t.Fatalf("the record holds %d probes, want 1", s.Probes)
	}
}

func TestKilledProberIsTakenOverAfterItsLease(t *testing.T) {
	e := newEnv(t)
	openCircuit(t, e)
	e.clock.Advance(2 * time.Minute)
	probeAt := e.clock.Now()

	prober := acquirer(t, e, probeAt, 1, childHold+"=1")
	prober.start()
	if l := prober.line(); !strings.HasPrefix(l, "admitted probe=true") {
		t.Fatalf("the first process got %q, want the probe", l)
	}
	prober.kill9()

	// Until the lease runs out, the dead process's probe still holds the slot.
	e.clock.Set(probeAt.Add(5 * time.Second))
	if oe := rejected(t, e.circuit(procID, procPolicy(1))); !oe.NotBefore.Equal(probeAt.Add(10 * time.Second)) {
		t.Fatalf("NotBefore %v, want the lease expiry %v", oe.NotBefore, probeAt.Add(10*time.Second))
	}
	e.clock.Set(probeAt.Add(10*time.Second - time.Nanosecond))
	rejected(t, e.circuit(procID, procPolicy(1)))
	// Then another process takes it over, and its success closes the circuit.
	taker := acquirer(t, e, probeAt.Add(10*time.Second), 1, childComplete+"=success")
	taker.start()
	if l := taker.line(); !strings.HasPrefix(l, "admitted probe=true") || !strings.HasSuffix(l, "counted=true") {
		t.Fatalf("the second process got %q, want a probe whose success counted", l)
	}
	taker.exited()
	e.clock.Set(probeAt.Add(10 * time.Second))
	wantState(t, e.circuit(procID, procPolicy(1)), breaker.Closed)
}

func TestKilledLockHolderLeavesNothingLocked(t *testing.T) {
	e := newEnv(t)
	c := e.circuit(procID, procPolicy(1))
	call(t, c, breaker.Success) // creates the root and the files
	lockPath := strings.TrimSuffix(e.statePath(procID), ".json") + ".lock"

	holder := startChild(t, "hold-lock", childLockPath+"="+lockPath)
	if l := holder.line(); l != "locked" {
		t.Fatalf("holder reported %q", l)
	}
	f, err := os.Open(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock while the child holds it: %v, want EWOULDBLOCK", err)
	}
	holder.kill9()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock after the holder was killed: %v", err)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if !acquire(t, c).Complete(breaker.Failure) {
		t.Fatal("a failure after the holder died was not recorded")
	}
}

func TestConcurrentFailuresOfProcessesAreAllCounted(t *testing.T) {
	const n = 5
	e := newEnv(t)
	kids := make([]*child, n)
	for i := range kids {
		kids[i] = acquirer(t, e, e.clock.Now(), n, childComplete+"=failure")
	}
	for _, k := range kids {
		k.start()
	}
	for _, k := range kids {
		if l := k.line(); !strings.HasPrefix(l, "admitted probe=false") || !strings.HasSuffix(l, "counted=true") {
			t.Errorf("child reported %q, want a counted failure", l)
		}
		k.exited()
	}
	// No read-modify-write lost another's failure: the n-th opened the circuit.
	if s := wantState(t, e.circuit(procID, procPolicy(n)), breaker.Open); s.Failures != n {
		t.Fatalf("failures %d, want %d", s.Failures, n)
	}
}
