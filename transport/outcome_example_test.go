package transport_test

import (
	"fmt"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// A publish of several messages is judged by its worst message: one Failure says the
// broker is unhealthy; else a Rejected message is worth sending the others alone;
// else the destination refused them all.
func ExampleWorst() {
	fmt.Println(transport.Worst(breaker.Unusable, breaker.Failure))
	fmt.Println(transport.Worst(breaker.Unusable, breaker.Rejected, breaker.Neutral))
	fmt.Println(transport.Worst(breaker.Unusable, breaker.Unusable))
	fmt.Println(transport.Worst())
	// Output:
	// failure
	// rejected
	// unusable
	// neutral
}
