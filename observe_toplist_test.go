package main

import (
	"fmt"
	"strings"
	"testing"
)

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
