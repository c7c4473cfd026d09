package transport

import "github.com/brokerguard/brokerguard/breaker"

// Worst is the outcome of a publish whose messages' errors had outcomes os: a
// Failure if any is one (the broker is unhealthy); else Rejected if any message was
// (the others are worth sending alone, so that the rejected one ends alone); else
// Unusable if any was (the destination refuses them); else Neutral. Classifiers of
// errors that hold several (a batch, a joined error) use it, through WorstOf.
func Worst(os ...breaker.Outcome) breaker.Outcome {
	var w worst
	for _, o := range os {
		w.add(o)
	}
	return w.outcome()
}

// WorstOf classifies each non-nil error of errs with classify and returns their
// Worst outcome.
func WorstOf(errs []error, classify Classifier) breaker.Outcome {
	var w worst
	for _, e := range errs {
		if e != nil {
			w.add(classify(e))
		}
	}
	return w.outcome()
}

type worst struct{ failure, rejected, unusable bool }

func (w *worst) add(o breaker.Outcome) {
	switch o {
	case breaker.Failure:
		w.failure = true
	case breaker.Rejected:
		w.rejected = true
	case breaker.Unusable:
		w.unusable = true
	}
}

func (w worst) outcome() breaker.Outcome {
	switch {
	case w.failure:
		return breaker.Failure
	case w.rejected:
		return breaker.Rejected
	case w.unusable:
		return breaker.Unusable
	}
	return breaker.Neutral
}
