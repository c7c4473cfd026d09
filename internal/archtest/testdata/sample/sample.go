// Package sample is measured by metrics_test.go: its figures are counted by hand in the
// comments.
package sample

// Exported names: T, I, I.Do, C, V, F, T.M = 7 (t, t.m, unexported and the field X
// are not counted).
type T struct{ X int }

type t struct{}

// I is an interface.
type I interface {
	Do()
	do()
}

// C and V are a constant and a variable.
const C = 1

var V, v = 1, 2

// F has complexity 1 + if + for + range + 2 cases + && + || + select case = 9.
func F(xs []int, ch chan int) int {
	n := 0
	if len(xs) > 0 && xs[0] > 0 || n < 0 {
		n++
	}
	for i := 0; i < 3; i++ {
		n += i
	}
	for _, x := range xs {
		switch x {
		case 1:
			n++
		case 2:
			n--
		default:
		}
	}
	select {
	case n = <-ch:
	default:
	}
	return n
}

// M is a method of an exported type.
func (T) M() {}

func (t) m() {}
