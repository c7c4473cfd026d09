package filestate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// The conformance suite on real files; each replica is a store of its own, as another
// process would open.
func TestConformance(t *testing.T) {
	var root string
	circuittest.Run(t, circuittest.Backend{
		Scope:        breaker.SingleHost,
		Shared:       true,
		MaxStaleness: filestate.DefaultMaxStaleness,
		// A directory where the record should be: every read fails, as with a
		// file that cannot be opened (which chmod cannot cause for root).
		Break: func(broken bool) {
			matches, _ := filepath.Glob(filepath.Join(root, "*.json"))
			for _, m := range matches {
				if broken {
					_ = os.Rename(m, m+".away")
					_ = os.Mkdir(m, 0o700)
				}
			}
			if !broken {
				away, _ := filepath.Glob(filepath.Join(root, "*.json.away"))
				for _, a := range away {
					m := a[:len(a)-len(".away")]
					_ = os.Remove(m)
					_ = os.Rename(a, m)
				}
			}
		},
		// A directory in place of each lock file: every write fails to take its lock,
		// while reads (which take none) go on, as on a disk that refuses writes.
		RefuseWrites: func(refuse bool) {
			if refuse {
				locks, _ := filepath.Glob(filepath.Join(root, "*.lock"))
				for _, l := range locks {
					_ = os.Rename(l, l+".away")
					_ = os.Mkdir(l, 0o700)
				}
				return
			}
			away, _ := filepath.Glob(filepath.Join(root, "*.lock.away"))
			for _, a := range away {
				l := a[:len(a)-len(".away")]
				_ = os.Remove(l)
				_ = os.Rename(a, l)
			}
		},
		Forget: func() {
			matches, _ := filepath.Glob(filepath.Join(root, "*.json"))
			for _, m := range matches {
				_ = os.Remove(m)
			}
		},
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			root = filepath.Join(t.TempDir(), "circuits")
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				opts := []filestate.Option{sharedstate.WithClock(cfg.Clock)}
				if cfg.Observer != nil {
					opts = append(opts, sharedstate.WithObserver(cfg.Observer))
				}
				s, err := filestate.Open(root, opts...)
				if err != nil {
					return nil, err
				}
				return s.Circuit("conformance", cfg.Policy)
			}
		},
	})
}

func TestDriverContract(t *testing.T) {
	circuittest.TestDriver(t, func(t *testing.T) sharedstate.Driver {
		s, err := filestate.Open(filepath.Join(t.TempDir(), "circuits"))
		if err != nil {
			t.Fatal(err)
		}
		return s.Driver()
	})
}
