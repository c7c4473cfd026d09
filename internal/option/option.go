// Package option applies functional options for the constructors of the library's
// packages, so that each refuses a nil option with an error instead of a panic.
package option

import (
	"errors"
	"fmt"
)

// Apply calls each option on t in order and returns the first error. A nil option is
// refused with an error naming the constructor (who) and the option's position.
func Apply[T any, O ~func(*T) error](who string, t *T, opts []O) error {
	if err := NoNil[T](who, opts); err != nil {
		return err
	}
	for _, o := range opts {
		if err := o(t); err != nil {
			return err
		}
	}
	return nil
}

// ApplyAll is Apply for options that cannot fail.
func ApplyAll[T any, O ~func(*T)](who string, t *T, opts []O) error {
	if err := NoNil[T](who, opts); err != nil {
		return err
	}
	for _, o := range opts {
		o(t)
	}
	return nil
}

// NoNil returns an error naming who and the position (from 1) of the first nil
// option, or nil when there is none.
func NoNil[T any, O ~func(*T) error | ~func(*T)](who string, opts []O) error {
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("%s: option %d of %d is nil", who, i+1, len(opts))
		}
	}
	return nil
}

// Check returns an option that fails with the error text msg when bad is true, and
// otherwise calls set: the shape of most With functions, which refuse a nil or
// out-of-range argument by name.
func Check[T any](bad bool, msg string, set func(*T)) func(*T) error {
	return func(t *T) error {
		if bad {
			return errors.New(msg)
		}
		set(t)
		return nil
	}
}

// Set returns an option that cannot fail: it calls set.
func Set[T any](set func(*T)) func(*T) error {
	return func(t *T) error {
		set(t)
		return nil
	}
}
