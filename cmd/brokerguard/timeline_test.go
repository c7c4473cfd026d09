package main

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// svgDoc is the part of the SVG the tests look at.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	Lanes   []struct {
		ID    string `xml:"id,attr"`
		Rects []struct {
			State string `xml:"data-state,attr"`
		} `xml:"rect"`
		Lines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	} `xml:"g"`
}

func parseSVG(t *testing.T, s string) svgDoc {
	t.Helper()
	var doc svgDoc
	if err := xml.Unmarshal([]byte(s), &doc); err != nil {
		t.Fatalf("the SVG does not parse: %v", err)
	}
	return doc
}

func TestTimelineDrawsStatesAndRates(t *testing.T) {
	tl := newTimeline([]string{"orders", "payments<&>"})
	for i := range 4 {
		tl.record("orders", sample{at: time.Duration(i) * time.Second, published: int64(i * 100)})
		tl.record("payments<&>", sample{at: time.Duration(i) * time.Second, published: int64(i * 10)})
	}
	tl.transition("payments<&>", change{at: 1 * time.Second, state: breaker.Open})
	tl.transition("payments<&>", change{at: 2 * time.Second, state: breaker.HalfOpen})
	tl.transition("payments<&>", change{at: 2*time.Second + time.Millisecond, state: breaker.Closed}) // brief: still drawn
	var out strings.Builder
	if err := tl.writeSVG(&out, "demo"); err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, out.String())
	if len(doc.Lanes) != 2 || doc.Lanes[1].ID != "lane-payments<&>" {
		t.Fatalf("lanes %+v", doc.Lanes)
	}
	var got []string
	for _, r := range doc.Lanes[1].Rects {
		got = append(got, r.State)
	}
	if strings.Join(got, ",") != "closed,open,half-open,closed" {
		t.Fatalf("state bands %v", got)
	}
	if pts := strings.Fields(doc.Lanes[0].Lines[0].Points); len(pts) != 3 {
		t.Fatalf("throughput points %v", pts)
	}
	if !strings.Contains(out.String(), "peak 100") {
		t.Fatal("the legend does not give the peak rate of 100 msg/s")
	}
}

func TestTimelineWithoutSamplesIsAnError(t *testing.T) {
	if err := newTimeline([]string{"x"}).writeSVG(&strings.Builder{}, "t"); err == nil {
		t.Fatal("drew an empty timeline")
	}
}
