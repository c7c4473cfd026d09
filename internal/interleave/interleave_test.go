package interleave

import (
	"errors"
	"testing"
)

// Both operations run once per round, alternating which goes first.
func TestRunAlternates(t *testing.T) {
	var order []string
	res := testing.Benchmark(func(b *testing.B) {
		order = order[:0]
		Run(b, func() error { order = append(order, "r"); return nil }, func() error { order = append(order, "g"); return nil })
	})
	if res.N == 0 || len(order) != 2*res.N {
		t.Fatalf("%d rounds, %d calls", res.N, len(order))
	}
	if len(order) >= 4 && (order[0] != "r" || order[1] != "g" || order[2] != "g" || order[3] != "r") {
		t.Errorf("order %v", order[:4])
	}
	for _, m := range []string{"raw/guarded", "median-raw/guarded", "raw-ns/op", "guarded-ns/op"} {
		if _, ok := res.Extra[m]; !ok {
			t.Errorf("no %s metric: %v", m, res.Extra)
		}
	}
}

func TestRunFailsOnError(t *testing.T) {
	res := testing.Benchmark(func(b *testing.B) {
		Run(b, func() error { return errors.New("down") }, func() error { return nil })
	})
	if res.N != 0 {
		t.Errorf("a failing operation ran %d rounds", res.N)
	}
}
