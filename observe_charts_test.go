package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDonutRanksCategoriesAndKeepsColours(t *testing.T) {
	d := newDonut("Calls by tool", map[string]int64{"Alpha": 1, "Beta": 30, "Gamma": 30, "Delta": 0, "Epsilon": 5}, nil)
	var got []string
	colours := map[string]string{}
	for _, s := range d.Segments {
		got = append(got, fmt.Sprintf("%s=%d %s", s.Name, s.Value, s.Percent))
		colours[s.Name] = s.Color
	}
	if want := "Beta=30 45.5%,Gamma=30 45.5%,Epsilon=5 7.6%,Alpha=1 1.5%"; strings.Join(got, ",") != want {
		t.Errorf("got legend %s; want %s (biggest first, ties by name, empty ones left out)", strings.Join(got, ","), want)
	}
	// Colours follow name order, so a category keeps its colour when the
	// ranking changes.
	for i, name := range []string{"Alpha", "Beta", "Epsilon", "Gamma"} {
		if colours[name] != toolPalette[i] {
			t.Errorf("got colour %s for %s; want %s", colours[name], name, toolPalette[i])
		}
	}
}

func TestLineChartAxis(t *testing.T) {
	fx := newObserveFixture(t)
	obs := newTestObserver(t, fx.dir, time.Second)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	byTime := map[int64]int64{}
	for i := int64(0); i < 10; i++ {
		byTime[start+i*3600] = 12 * i
	}
	c := obs.newLineChart("Calls over time", byTime, 3600, auditFilter{}, time.Unix(start+9*3600, 0))
	if got := strings.Join(c.YLabels, " "); got != "125 100 75 50 25 0" {
		t.Errorf("got y labels %s; want a nice axis just above the maximum of 108, top first", got)
	}
	if len(c.XTicks) != 5 || c.XTicks[0].Label != "01-01 00:00" || c.XTicks[4].Label != "01-01 09:00" {
		t.Errorf("got x ticks %+v; want five, from the first to the last bucket", c.XTicks)
	}
	first, last := c.Points[0], c.Points[len(c.Points)-1]
	if first.X != "0.0" || first.Y != "200.0" || last.X != "1000.0" || last.Y != "27.2" {
		t.Errorf("got points %+v .. %+v; want the plot spanning 0..1000 by 200..0", first, last)
	}
}

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct {
		max       int64
		top, step int64
	}{
		{0, 1, 1}, {3, 3, 1}, {5, 5, 1}, {7, 8, 2}, {9, 10, 2}, {11, 15, 5}, {123, 125, 25}, {250, 250, 50}, {361, 400, 100}, {1001, 1250, 250},
	} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			top, step := niceScale(tc.max, 5)
			if top != tc.top || step != tc.step {
				t.Errorf("niceScale(%d) = %d, %d; want %d, %d", tc.max, top, step, tc.top, tc.step)
			}
		})
	}
}

func TestNewTopList(t *testing.T) {
	counts := map[string]int64{"b": 5, "a": 5, "zeta": 123, "none": 0}
	for i := 0; i < 33; i++ {
		counts[fmt.Sprintf("tail-%02d", i)] = 1
	}
	l := newTopList("Calls by caller", "calls", counts)
	if l.Total != 166 {
		t.Errorf("got total %d; want 166", l.Total)
	}
	if len(l.Rows) != maxTopRows {
		t.Fatalf("got %d rows; want %d", len(l.Rows), maxTopRows)
	}
	var names []string
	for _, r := range l.Rows[:4] {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "zeta,a,b,tail-00" {
		t.Errorf("got order %s; want biggest first, ties by name", got)
	}
	last := l.Rows[len(l.Rows)-1]
	if last.Other != 12 || last.Value != 12 || last.Name != "Other (12 more)" {
		t.Errorf("got last row %+v; want the 12 smallest summed into Other", last)
	}
	if strings.Join(l.Ticks, " ") != "0 25 50 75 100 125" || l.Rows[0].Width != "98.40" || l.Rows[0].Percent != "74.1%" {
		t.Errorf("got ticks %v, first row %+v; want an axis to 125 and a 98.4%% bar", l.Ticks, l.Rows[0])
	}
}
