package transport_test

import (
	"errors"
	"fmt"

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
