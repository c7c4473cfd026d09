package registry

import (
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
)

// Policy is what a registry applies to one destination: its circuit, the admission
// control of this process's calls to it, and the deadline rule that judges them.
// Start from DefaultPolicy and change what you need.
//
// The zero Policy is refused by New and WithOverride: its circuit would never open
// without saying so. A destination that must never be refused gets
// Policy{Circuit: breaker.DisabledPolicy()}, which also leaves admission off.
type Policy struct {
	// Circuit is the destination's circuit breaker: whether the destination is up.
	// Shared-circuit factories (WithCircuitFactory) receive it alone.
	Circuit breaker.Policy
	// Admission bounds what this process sends to the destination while it is up
	// (package admission). The zero value admits every call the circuit admits.
	// Admission is kept per process, also for shared circuits.
	Admission admission.Policy
	// MinCallBudget is the time a call's context must leave it, when the call starts,
	// for a deadline that ends the call to count against the destination: the broker
	// had a fair chance to answer and did not. A call that starts with less is made
	// all the same, but its deadline says nothing about the broker to any judge: the
	// circuit takes it as Neutral and admission as Ignored. Calls whose context has
	// no deadline are not concerned. 0 means DefaultMinCallBudget.
	MinCallBudget time.Duration
}

// DefaultMinCallBudget is the MinCallBudget of a policy that leaves it 0: short enough
// that callers with deadlines of 200ms or more let a hung broker open its circuit,
// long enough to be far above a healthy broker's answer time.
const DefaultMinCallBudget = 100 * time.Millisecond

// DefaultPolicy returns the policy brokerguard recommends for a publisher's
// destination, every default written out:
//
//   - breaker.DefaultPolicy's circuit: open after 5 failures in a row, then a probe
//     every 550ms, so that a return is seen within about a second. While the
//     destination accepts at least 1 in 20 of a trailing second's calls (20 or more),
//     and did not fail every call of the last eighth of a second (20 or more), its
//     error answers are left to the throttle and do not count against the circuit
//     (see admission.Throttle.Accepting): the circuit is for a destination that accepts
//     nothing, or that is called too rarely to fill the window.
//   - admission.DefaultPolicy's adaptive limit: calls in flight follow the
//     destination's latency, bulk work such as the outbox yields to online calls, and
//     a deadline missed while the destination is busy with this process's own bulk
//     work, or in a cold process's first wave, is not held against the broker.
//   - admission.DefaultPolicy's adaptive throttle: calls are refused with probability
//     max(0, (sent - 3*accepted) / (sent + 1)) over the trailing second, so that a
//     brownout keeps the goodput the destination gives and sheds the rest at once.
//   - DefaultMinCallBudget.
func DefaultPolicy() Policy {
	return Policy{Circuit: breaker.DefaultPolicy(), Admission: admission.DefaultPolicy(), MinCallBudget: DefaultMinCallBudget}
}

// Validate reports the first part of the policy that is wrong, naming the field: the
// circuit's (a *breaker.PolicyError), also when it would never open without saying
// so (Disabled), the admission's (an *admission.PolicyError), or MinCallBudget.
func (p Policy) Validate() error {
	if err := p.Circuit.Validate(); err != nil {
		return fmt.Errorf("Circuit: %w", err)
	}
	if p.Circuit.FailureThreshold == 0 && !p.Circuit.Disabled {
		return fmt.Errorf("Circuit: %w", &breaker.PolicyError{Field: "FailureThreshold",
			Reason: "is 0, so the circuit would never open: start from registry.DefaultPolicy(), " +
				"or set FailureThreshold and BreakDuration, or use breaker.DisabledPolicy() (Disabled: true) to turn the circuit off on purpose"})
	}
	if err := p.Admission.Validate(); err != nil {
		return fmt.Errorf("Admission: %w", err)
	}
	if p.MinCallBudget < 0 {
		return fmt.Errorf("MinCallBudget must not be negative (got %v)", p.MinCallBudget)
	}
	return nil
}

// minCallBudget is the policy's MinCallBudget with its default written out.
func (p Policy) minCallBudget() time.Duration {
	if p.MinCallBudget == 0 {
		return DefaultMinCallBudget
	}
	return p.MinCallBudget
}
