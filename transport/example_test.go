package transport_test

import (
	"errors"
	"fmt"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

func ExampleParseDestination() {
	d, err := transport.ParseDestination("kafka:orders")
	fmt.Println(d.Broker, d.Name, err)

	_, err = transport.ParseDestination("kafka:")
	fmt.Println(errors.Is(err, transport.ErrInvalidDestination))
	fmt.Println(err)
	// Output:
	// kafka orders <nil>
	// true
	// transport: invalid destination "kafka:": name is empty
}

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
