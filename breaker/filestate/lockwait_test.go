package filestate_test

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// waitForLockWaiter returns once the kernel lists a process waiting for an flock on
// the file f (a "->" line of /proc/locks), so that a test knows a goroutine is blocked
// on the lock rather than guessing with a sleep. It fails the test after ten seconds.
func waitForLockWaiter(t *testing.T, f *os.File) {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	ino := ":" + strconv.FormatUint(fi.Sys().(*syscall.Stat_t).Ino, 10) + " "
	for deadline := time.Now().Add(10 * time.Second); ; {
		locks, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Skipf("needs /proc/locks to see a lock waiter: %v", err)
		}
		for l := range strings.Lines(string(locks)) {
			if strings.Contains(l, "->") && strings.Contains(l, ino) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting for the completion to wait on the lock")
		}
		runtime.Gosched()
	}
}

// A probe whose completion waited on the file lock while its lease ran out is stale:
// the time that decides is the time the lock was taken, not the time the wait began.
func TestProbeLeaseEndingWhileWaitingForTheLockIsStale(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.ProbeLease = 10 * time.Second
	c := e.circuit("kafka:orders", p)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	e.clock.Advance(time.Minute)
	probe := acquire(t, c)
	if !probe.Probe() {
		t.Fatal("want the probe")
	}

	// Another process holds the circuit's lock.
	lock, err := os.OpenFile(strings.TrimSuffix(e.statePath("kafka:orders"), ".json")+".lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	counted := make(chan bool, 1)
	go func() { counted <- probe.Complete(breaker.Success) }()
	waitForLockWaiter(t, lock)
	e.clock.Advance(11 * time.Second)
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if <-counted {
		t.Fatal("a probe that got the lock after its lease ended counted")
	}
	if s := wantState(t, c, breaker.HalfOpen); s.Probes != 0 {
		t.Fatalf("snapshot %+v, want half-open with the slot freed", s)
	}
}
