package main

import (
	"fmt"
	"sort"
	"strings"
)

// topList is a ranked horizontal bar chart ("top list"): one row per
// category, biggest first, with its exact count, on an axis that ends at a
// round number just above the largest value. Labels are HTML, so they stay
// readable at any width; each bar is a tiny SVG because the page's CSP
// allows no inline styles.
type topList struct {
	Label string
	Noun  string // what is counted, for the hover text: "calls"
	Total int64
	Rows  []topRow
	Ticks []string // evenly spaced axis labels from 0 to the axis maximum
	Grid  []string // x of each inner tick in the 0–100 bar coordinates
}

// topRow is one ranked category.
type topRow struct {
	Name    string
	Value   int64
	Percent string
	Width   string // bar length in percent of the axis, for an SVG width
	Other   int    // how many categories an "Other" row sums; 0 otherwise
}

// maxTopRows bounds a top list; the tail is summed into one "Other" row so
// that every category is either shown or counted in plain sight. It is high
// enough that a busy deployment's callers (two dozen in review) all show.
const maxTopRows = 25

// newTopList ranks counts (ties by name) and scales the bars to a nice axis.
func newTopList(label, noun string, counts map[string]int64) topList {
	l := topList{Label: label, Noun: noun}
	for name, n := range counts {
		if n > 0 {
			l.Rows = append(l.Rows, topRow{Name: name, Value: n})
			l.Total += n
		}
	}
	sort.Slice(l.Rows, func(i, j int) bool {
		if l.Rows[i].Value != l.Rows[j].Value {
			return l.Rows[i].Value > l.Rows[j].Value
		}
		return strings.ToLower(l.Rows[i].Name) < strings.ToLower(l.Rows[j].Name)
	})
	if len(l.Rows) > maxTopRows {
		other := topRow{Other: len(l.Rows) - (maxTopRows - 1)}
		for _, r := range l.Rows[maxTopRows-1:] {
			other.Value += r.Value
		}
		other.Name = fmt.Sprintf("Other (%d more)", other.Other)
		l.Rows = append(l.Rows[:maxTopRows-1], other)
	}
	var most int64
	for _, r := range l.Rows {
		most = max(most, r.Value)
	}
	top, step := niceScale(most, 5)
	for v := int64(0); v <= top; v += step {
		l.Ticks = append(l.Ticks, fmt.Sprint(v))
		if v > 0 && v < top {
			l.Grid = append(l.Grid, fmt.Sprintf("%.2f", float64(v)*100/float64(top)))
		}
	}
	for i := range l.Rows {
		r := &l.Rows[i]
		r.Percent = trimPercent(float64(r.Value) * 100 / float64(l.Total))
		r.Width = fmt.Sprintf("%.2f", float64(r.Value)*100/float64(top))
	}
	return l
}

// niceScale returns the smallest round axis maximum at or above maxV and
// its step, using at most maxTicks steps of 1, 2, 2.5 or 5 times a power of
// ten: 123 gives 125 in steps of 25, not 250.
func niceScale(maxV int64, maxTicks int) (top, step int64) {
	if maxV < 1 {
		maxV = 1
	}
	for pow := int64(1); ; pow *= 10 {
		for _, m := range []int64{10, 20, 25, 50} {
			s := pow * m / 10
			if s == 0 || pow*m%10 != 0 {
				continue
			}
			if n := (maxV + s - 1) / s; n <= int64(maxTicks) {
				return n * s, s
			}
		}
	}
}
