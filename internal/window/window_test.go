package window

import "testing"

func TestWindowAddsAndExpiresBuckets(t *testing.T) {
	w := New(1000) // ten buckets of 100ns
	w.Record(0, true)
	w.Record(50, false)
	w.Record(150, true)
	if c := w.Totals(150); c != (Counts{Calls: 3, Failures: 2}) {
		t.Fatalf("totals %+v", c)
	}
	// At 1000 the bucket of [0,100) has left; [100,200) stays until 1100.
	if c := w.Totals(1000); c != (Counts{Calls: 1, Failures: 1}) {
		t.Fatalf("after the first bucket expired: %+v", c)
	}
	if c := w.Totals(1100); c != (Counts{}) {
		t.Fatalf("after both expired: %+v", c)
	}
}

func TestWindowJumpsFarAheadAndIgnoresTimeGoingBack(t *testing.T) {
	w := New(1000)
	for i := range 10 {
		w.Record(int64(i*100), true)
	}
	if c := w.Totals(950); c.Failures != 10 {
		t.Fatalf("failures %d", c.Failures)
	}
	w.Record(1_000_000, true) // far ahead: every old bucket cleared at once
	if c := w.Totals(1_000_000); c != (Counts{Calls: 1, Failures: 1}) {
		t.Fatalf("after a jump: %+v", c)
	}
	w.Record(5, true) // earlier than the head: counted in the newest bucket
	if c := w.Totals(1_000_000); c.Failures != 2 {
		t.Fatalf("a record from the past was lost: %+v", c)
	}
	w.Reset(1_000_000)
	if c := w.Totals(1_000_001); c != (Counts{}) {
		t.Fatalf("after Reset: %+v", c)
	}
}
