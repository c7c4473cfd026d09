package main

import (
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// svgDoc is the part of the SVG the tests look at: its top-level groups, which are
// the lanes ("lane-" and the topic), the backlog, the time axis and the outage windows.
type svgDoc struct {
	XMLName xml.Name   `xml:"svg"`
	Lanes   []svgGroup `xml:"g"`
}

type svgGroup struct {
	ID    string `xml:"id,attr"`
	Class string `xml:"class,attr"`
	Peak  string `xml:"data-peak,attr"`
	Rects []struct {
		X     float64 `xml:"x,attr"`
		Width float64 `xml:"width,attr"`
		State string  `xml:"data-state,attr"`
		From  string  `xml:"data-from,attr"`
		To    string  `xml:"data-to,attr"`
	} `xml:"rect"`
	Lines []struct {
		Points string `xml:"points,attr"`
		Series string `xml:"data-series,attr"`
	} `xml:"polyline"`
	Areas []struct {
		Points string `xml:"points,attr"`
		Series string `xml:"data-series,attr"`
	} `xml:"polygon"`
	Texts []struct {
		X       float64 `xml:"x,attr"`
		Seconds string  `xml:"data-seconds,attr"`
		Text    string  `xml:",chardata"`
	} `xml:"text"`
}

func parseSVG(t *testing.T, s string) svgDoc {
	t.Helper()
	var doc svgDoc
	if err := xml.Unmarshal([]byte(s), &doc); err != nil {
		t.Fatalf("the SVG does not parse: %v", err)
	}
	return doc
}

// group returns the groups whose id or class is name.
func (d svgDoc) group(name string) []svgGroup {
	var out []svgGroup
	for _, g := range d.Lanes {
		if g.ID == name || g.Class == name {
			out = append(out, g)
		}
	}
	return out
}

// points parses "x,y x,y ..." into pairs.
func points(t *testing.T, s string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(s) {
		var x, y float64
		if _, err := fmt.Sscanf(p, "%g,%g", &x, &y); err != nil {
			t.Fatalf("point %q: %v", p, err)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

// xAt is where the timeline draws time at on a run of length end.
func xAt(at, end time.Duration) float64 {
	return marginLeft + float64(plotWidth)*at.Seconds()/end.Seconds()
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.11 } // coordinates are printed to 0.1

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
	lanes := doc.group("lane-payments<&>")
	if len(lanes) != 1 || len(doc.group("lane-orders")) != 1 {
		t.Fatalf("lanes %+v", doc.Lanes)
	}
	var got []string
	for _, r := range lanes[0].Rects {
		got = append(got, r.State)
	}
	if strings.Join(got, ",") != "closed,open,half-open,closed" {
		t.Fatalf("state bands %v", got)
	}
	if pts := strings.Fields(doc.group("lane-orders")[0].Lines[0].Points); len(pts) != 3 {
		t.Fatalf("throughput points %v", pts)
	}
	if !strings.Contains(out.String(), "peak 100") {
		t.Fatal("the legend does not give the peak rate of 100 msg/s")
	}
}

// The time axis, the outage band and the backlog, on a 3-second run whose payments
// backlog grows to 100 rows during an outage from 1s to 2.5s.
func TestTimelineDrawsAxisOutageAndBacklog(t *testing.T) {
	tl := newTimeline([]string{"orders", "payments"})
	for i, pending := range []int64{0, 40, 100, 0} {
		at := time.Duration(i) * time.Second
		tl.record("orders", sample{at: at, published: int64(i * 100), pending: 2})
		tl.record("payments", sample{at: at, published: int64(i * 10), pending: pending})
	}
	tl.outageStart(time.Second, "outage: kafka:payments")
	tl.outageEnd(2500 * time.Millisecond)
	var out strings.Builder
	if err := tl.writeSVG(&out, "demo"); err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, out.String())
	end := 3 * time.Second

	axis := doc.group("axis")
	if len(axis) != 1 {
		t.Fatalf("%d axes", len(axis))
	}
	var ticks []string
	for _, tx := range axis[0].Texts {
		if tx.Seconds == "" {
			continue
		}
		ticks = append(ticks, tx.Text)
		s, _ := strconv.ParseFloat(tx.Seconds, 64)
		if want := xAt(time.Duration(s*float64(time.Second)), end); !near(tx.X, want) {
			t.Errorf("tick %s at x=%.1f, want %.1f", tx.Text, tx.X, want)
		}
	}
	if got := strings.Join(ticks, " "); got != "0s 0.5s 1s 1.5s 2s 2.5s 3s" {
		t.Errorf("ticks %q, want every half second", got)
	}

	outages := doc.group("outage")
	if len(outages) != 1 || len(outages[0].Rects) != 1 {
		t.Fatalf("outage groups %+v", outages)
	}
	band := outages[0].Rects[0]
	if !near(band.X, xAt(time.Second, end)) || !near(band.X+band.Width, xAt(2500*time.Millisecond, end)) {
		t.Errorf("outage band from x=%.1f to %.1f, want %.1f to %.1f", band.X, band.X+band.Width,
			xAt(time.Second, end), xAt(2500*time.Millisecond, end))
	}
	if !strings.Contains(out.String(), ">outage: kafka:payments<") {
		t.Error("the outage band is not labelled")
	}

	backlog := doc.group("backlog")
	if len(backlog) != 1 || backlog[0].Peak != "102" || len(backlog[0].Areas) != 1 || len(backlog[0].Lines) != 2 {
		t.Fatalf("backlog %+v: want the total's peak 102, one area and a line per topic", backlog)
	}
	total := points(t, backlog[0].Areas[0].Points)
	if len(total) != 4+2 { // a point per instant, closed down to the baseline at both ends
		t.Fatalf("total backlog points %v", total)
	}
	base, top := total[0][1], total[3][1] // the baseline, and the peak at 2s
	for i, p := range total[1:5] {
		if !near(p[0], xAt(time.Duration(i)*time.Second, end)) {
			t.Errorf("total backlog point %d at x=%.1f", i, p[0])
		}
		if p[1] < top || p[1] > base {
			t.Errorf("total backlog point %d at y=%.1f, outside %.1f..%.1f", i, p[1], top, base)
		}
	}
	if total[1][1] >= base || top >= total[2][1] { // 2 rows at 0s, 42 at 1s, 102 at 2s
		t.Errorf("total backlog does not rise: %v", total)
	}
	payments := backlog[0].Lines[1]
	pts := points(t, payments.Points)
	if payments.Series != "payments" || len(pts) != 4 || !near(pts[2][1], top+(base-top)*2/102) || !near(pts[0][1], base) {
		t.Errorf("payments backlog %q: want 100 of 102 rows high at 2s and 0 at 0s (baseline %.1f, peak %.1f)", payments.Points, base, top)
	}
}

// An outage still on when the run ends is drawn to the end.
func TestTimelineOutageUntilTheEnd(t *testing.T) {
	tl := newTimeline([]string{"orders"})
	tl.record("orders", sample{at: 0})
	tl.record("orders", sample{at: 4 * time.Second})
	tl.outageStart(3*time.Second, "outage")
	var out strings.Builder
	if err := tl.writeSVG(&out, "demo"); err != nil {
		t.Fatal(err)
	}
	band := parseSVG(t, out.String()).group("outage")[0].Rects[0]
	if band.To != "4" || !near(band.X+band.Width, xAt(4*time.Second, 4*time.Second)) {
		t.Fatalf("outage band %+v, want it to reach the end at 4s", band)
	}
}

func TestTickStep(t *testing.T) {
	for _, c := range []struct{ end, want time.Duration }{
		{time.Second, 100 * time.Millisecond},
		{4250 * time.Millisecond, 500 * time.Millisecond},
		{20 * time.Second, 2 * time.Second},
		{45 * time.Second, 5 * time.Second},
		{10 * time.Minute, time.Minute},
		{time.Hour, 6 * time.Minute},
	} {
		if got := tickStep(c.end); got != c.want {
			t.Errorf("tickStep(%v) = %v, want %v", c.end, got, c.want)
		}
	}
}

func TestTimelineWithoutSamplesIsAnError(t *testing.T) {
	if err := newTimeline([]string{"x"}).writeSVG(&strings.Builder{}, "t"); err == nil {
		t.Fatal("drew an empty timeline")
	}
}
