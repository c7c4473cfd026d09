package admission_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/admission"
)

// A publisher asks the throttle before each call and tells it how the call ended.
// Here the destination accepts one call in ten; once the window has seen it, the
// throttle refuses about 70 % of calls at once, each refusal saying when the odds
// are next revised.
func ExampleThrottle() {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	th, err := admission.NewThrottle(admission.DefaultThrottlePolicy(), func() time.Time { return now })
	if err != nil {
		panic(err)
	}
	publish := func(i int) error {
		if err := th.Admit(); err != nil {
			return err // refused: nothing was sent, nothing to record
		}
		accepted := i%10 == 0 // the destination's answer
		th.Record(accepted)   // a failure answer or a timeout records false
		if !accepted {
			return errors.New("broker: unavailable")
		}
		return nil
	}
	for i := range 200 {
		_ = publish(i)
	}
	now = now.Add(125 * time.Millisecond) // the throttle revises once per Window/8
	s := th.Stats()
	fmt.Printf("window: %d sent, %d accepted; reject probability %.2f\n", s.Sent, s.Accepted, s.RejectProbability)

	var te *admission.ThrottleError
	for i := 0; ; i++ {
		if err := publish(i); errors.As(err, &te) {
			fmt.Println("refused; odds revised at", te.NotBefore.Format("15:04:05.000"))
			break
		}
	}
	// Output:
	// window: 200 sent, 20 accepted; reject probability 0.70
	// refused; odds revised at 09:00:00.250
}
