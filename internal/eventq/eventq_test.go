package eventq

import (
	"slices"
	"sync"
	"testing"
)

func TestDeliversInOrderToEveryObserver(t *testing.T) {
	var q Queue[int]
	var a, b []int
	q.Observe(func(e int) { a = append(a, e) })
	q.Push(0)
	q.Flush() // delivered before b is added: not replayed to it
	q.Observe(func(e int) { b = append(b, e) })
	q.Push(1)
	q.Push(2)
	q.Flush()
	if !slices.Equal(a, []int{0, 1, 2}) || !slices.Equal(b, []int{1, 2}) {
		t.Fatalf("a = %v, b = %v; want [0 1 2] and [1 2]", a, b)
	}
}

func TestObserveAsReplacesTheSameKey(t *testing.T) {
	var q Queue[int]
	var first, second, other int
	q.ObserveAs("registry", func(int) { first++ })
	q.ObserveAs("registry", func(int) { second++ })
	q.ObserveAs("telemetry", func(int) { other++ })
	q.Push(1)
	q.Flush()
	if first != 0 || second != 1 || other != 1 {
		t.Fatalf("first %d, second %d, other %d; want 0, 1, 1", first, second, other)
	}
}

// An observer that pushes (a circuit called back from its observer) is delivered by the
// flush already running, after the event that caused it; an observer added while events
// are delivered races with nothing (-race checks it).
func TestObserverMayPushAndObserversMayBeAddedMeanwhile(t *testing.T) {
	var q Queue[int]
	var mu sync.Mutex
	var got []int
	q.Observe(func(e int) {
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
		if e == 1 {
			q.Push(2)
			q.Flush() // returns at once: the outer flush delivers 2
		}
	})
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 100 {
			q.Observe(func(int) {})
		}
	})
	q.Push(1)
	q.Flush()
	wg.Wait()
	if !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("got %v, want [1 2]", got)
	}
}

func TestZeroQueueCostsNothing(t *testing.T) {
	var q Queue[int]
	q.Push(1)
	q.Flush()
	if n := testing.AllocsPerRun(100, func() { q.Push(1); q.Flush() }); n != 0 {
		t.Fatalf("a queue without observers allocates %v per event", n)
	}
}
