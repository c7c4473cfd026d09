package harness

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// flockWait takes a flock on f, polling so that the wait is bounded by five minutes
// rather than by the test binary's timeout.
func flockWait(f *os.File, how int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return fmt.Errorf("harness: lock %s: %w", f.Name(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
