package watermillguard_test

import (
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/watermillguard"
)

// Any Watermill publisher can be guarded; with watermill-kafka, pass "kafka" and
// watermillguard.WithClassifier(wmkafka.Classify).
func ExampleNew() {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 10 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	inner := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	pub, err := watermillguard.New(inner, reg, "gochannel")
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte("o-1")))
	fmt.Println(err)
	for d, s := range reg.Snapshots() {
		fmt.Println(d, s.State)
	}
	// Output:
	// <nil>
	// gochannel:orders closed
}
