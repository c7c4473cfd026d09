package kfakeproduce

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestFailedAnswersEveryPartition(t *testing.T) {
	req := kmsg.NewPtrProduceRequest()
	for _, name := range []string{"a", "b"} {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = name
		rt.TopicID = [16]byte{name[0]}
		for p := range int32(3) {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp := Failed(req, NotLeaderForPartition)
	n := 0
	for i, rt := range resp.Topics {
		if rt.Topic != req.Topics[i].Topic || rt.TopicID != req.Topics[i].TopicID {
			t.Fatalf("topic %q, want %q", rt.Topic, req.Topics[i].Topic)
		}
		for j, p := range rt.Partitions {
			if p.Partition != int32(j) || p.ErrorCode != NotLeaderForPartition {
				t.Fatalf("%s/%d: %+v", rt.Topic, j, p)
			}
			n++
		}
	}
	if n != 6 {
		t.Fatalf("%d partitions answered, want 6", n)
	}
}
